package apiserver_test

import (
	"context"
	"net/http"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/concord-dev/concord/etcdstore"
	"github.com/concord-dev/concord/registry"
)

func (s *testServer) patch(t *testing.T, name, contentType, patch string, header ...string) (response, corev1.ConfigMap) {
	t.Helper()
	resp := s.do(t, http.MethodPatch, nsPath+"/"+name, patch, append([]string{"Content-Type", contentType}, header...)...)
	var cm corev1.ConfigMap
	if resp.Code == http.StatusOK {
		resp.decode(t, &cm)
	}
	return resp, cm
}

func TestPatchTypes(t *testing.T) {
	s := startServer(t)
	c := s.create(t, "default", "flags", map[string]string{"app": "demo"})
	tests := []struct {
		name, contentType, patch string
		data                     map[string]string
		labels                   map[string]string
	}{
		{"merge adds and removes", "application/merge-patch+json", `{"data":{"k":null,"mode":"blue"},"metadata":{"labels":{"tier":"web"}}}`,
			map[string]string{"mode": "blue"}, map[string]string{"app": "demo", "tier": "web"}},
		{"JSON patch with a passing test", "application/json-patch+json",
			`[{"op":"test","path":"/data/mode","value":"blue"},{"op":"replace","path":"/data/mode","value":"green"},{"op":"add","path":"/data/rollout","value":"10"}]`,
			map[string]string{"mode": "green", "rollout": "10"}, map[string]string{"app": "demo", "tier": "web"}},
		{"strategic merge", "application/strategic-merge-patch+json", `{"data":{"rollout":"50"},"metadata":{"labels":{"app":null}}}`,
			map[string]string{"mode": "green", "rollout": "50"}, map[string]string{"tier": "web"}},
		{"strategic merge replacing the map", "application/strategic-merge-patch+json", `{"data":{"$patch":"replace","only":"this"}}`,
			map[string]string{"only": "this"}, map[string]string{"tier": "web"}},
	}
	last := c.ResourceVersion
	for _, tc := range tests {
		resp, got := s.patch(t, "flags", tc.contentType, tc.patch)
		if resp.Code != http.StatusOK {
			t.Fatalf("%s: %d %s", tc.name, resp.Code, resp.Body)
		}
		if got.ResourceVersion == last || resp.Header.Get("ETag") != quoted(got.ResourceVersion) || got.UID != c.UID {
			t.Errorf("%s: rv %s (was %s), ETag %q, uid %s; want a new version, its ETag, the same uid", tc.name, got.ResourceVersion, last, resp.Header.Get("ETag"), got.UID)
		}
		last = got.ResourceVersion
		stored, _ := s.storedConfigMap(t, flagsKey)
		if diff := cmp.Diff(stored.Data, tc.data); diff != "" {
			t.Errorf("%s: stored data (-got +want):\n%s", tc.name, diff)
		}
		if diff := cmp.Diff(stored.Labels, tc.labels); diff != "" {
			t.Errorf("%s: stored labels (-got +want):\n%s", tc.name, diff)
		}
	}
}

func TestPatchPreconditions(t *testing.T) {
	s := startServer(t)
	c := s.create(t, "default", "flags", nil)
	resp, _ := s.patch(t, "flags", "application/merge-patch+json", `{"data":{"a":"1"}}`, "If-Match", `"1"`)
	if st := resp.status(t); resp.Code != http.StatusPreconditionFailed || st.Reason != registry.StatusReasonPreconditionFailed {
		t.Errorf("PATCH with a stale If-Match: %d %s; want 412", resp.Code, st.Reason)
	}
	resp, got := s.patch(t, "flags", "application/merge-patch+json", `{"data":{"a":"1"}}`, "If-Match", quoted(c.ResourceVersion))
	if resp.Code != http.StatusOK || got.Data["a"] != "1" {
		t.Fatalf("PATCH with the current If-Match: %d %s", resp.Code, resp.Body)
	}
	resp, _ = s.patch(t, "flags", "application/merge-patch+json", `{"metadata":{"resourceVersion":"`+c.ResourceVersion+`"},"data":{"a":"2"}}`)
	if st := resp.status(t); resp.Code != http.StatusConflict || st.Reason != metav1.StatusReasonConflict {
		t.Errorf("PATCH carrying a stale resourceVersion: %d %s; want 409 Conflict", resp.Code, st.Reason)
	}
	resp, got = s.patch(t, "flags", "application/merge-patch+json", `{"metadata":{"resourceVersion":"`+got.ResourceVersion+`"},"data":{"a":"3"}}`)
	if resp.Code != http.StatusOK || got.Data["a"] != "3" {
		t.Errorf("PATCH carrying the current resourceVersion: %d %s", resp.Code, resp.Body)
	}
}

// interferingStorage makes one competing write just before the first
// update reaches etcd, so that update's transaction fails.
type interferingStorage struct {
	*etcdstore.Store
	once sync.Once
}

func (s *interferingStorage) Update(ctx context.Context, ref etcdstore.Ref, value []byte, revision int64, guards ...etcdstore.Guard) (int64, error) {
	var err error
	s.once.Do(func() {
		competing := []byte(`{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"flags","namespace":"default","uid":"u1","creationTimestamp":"2026-01-01T00:00:00Z"},"data":{"other":"writer"}}`)
		_, err = s.Store.Update(ctx, ref, competing, revision)
	})
	if err != nil {
		return 0, err
	}
	return s.Store.Update(ctx, ref, value, revision, guards...)
}

// TestPatchIsReappliedAfterACompetingWrite: a patch without a
// resourceVersion is applied to whatever is current; when a write lands
// between its read and its transaction, it is applied again to the new state.
func TestPatchIsReappliedAfterACompetingWrite(t *testing.T) {
	interfering := &interferingStorage{}
	s := startServerOn(t, registry.DefaultWatchConfig(), func(st *etcdstore.Store) registry.Storage {
		interfering.Store = st
		return interfering
	})
	resp := s.do(t, http.MethodPost, nsPath, configMap("flags", "", map[string]string{"mine": "old"}))
	if resp.Code != http.StatusCreated {
		t.Fatalf("create: %d", resp.Code)
	}
	resp, got := s.patch(t, "flags", "application/merge-patch+json", `{"data":{"mine":"patched"}}`)
	if resp.Code != http.StatusOK {
		t.Fatalf("PATCH: %d %s", resp.Code, resp.Body)
	}
	want := map[string]string{"other": "writer", "mine": "patched"}
	if diff := cmp.Diff(got.Data, want); diff != "" {
		t.Errorf("PATCH answer data (-got +want):\n%s", diff)
	}
	stored, _ := s.storedConfigMap(t, flagsKey)
	if diff := cmp.Diff(stored.Data, want); diff != "" {
		t.Errorf("stored data: the competing write or the patch was lost (-got +want):\n%s", diff)
	}
}
