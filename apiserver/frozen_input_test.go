package apiserver_test

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/concord-dev/concord/etcdstore"
	"github.com/concord-dev/concord/registry"
)

// frozenStorage, once frozen, answers no request until the caller gives up,
// as an etcd member stopped with SIGSTOP does; it counts the requests.
type frozenStorage struct {
	*etcdstore.Store
	frozen atomic.Bool
	calls  atomic.Int32
}

func (s *frozenStorage) wait(ctx context.Context) error {
	if !s.frozen.Load() {
		return nil
	}
	s.calls.Add(1)
	<-ctx.Done()
	return ctx.Err()
}

func (s *frozenStorage) Get(ctx context.Context, ref etcdstore.Ref, revision int64) (etcdstore.Object, error) {
	if err := s.wait(ctx); err != nil {
		return etcdstore.Object{}, err
	}
	return s.Store.Get(ctx, ref, revision)
}

func (s *frozenStorage) Create(ctx context.Context, ref etcdstore.Ref, value []byte, guards ...etcdstore.Guard) (int64, error) {
	if err := s.wait(ctx); err != nil {
		return 0, err
	}
	return s.Store.Create(ctx, ref, value, guards...)
}

func (s *frozenStorage) Update(ctx context.Context, ref etcdstore.Ref, value []byte, revision int64, guards ...etcdstore.Guard) (int64, error) {
	if err := s.wait(ctx); err != nil {
		return 0, err
	}
	return s.Store.Update(ctx, ref, value, revision, guards...)
}

func (s *frozenStorage) Delete(ctx context.Context, ref etcdstore.Ref, revision int64, guards ...etcdstore.Guard) (int64, error) {
	if err := s.wait(ctx); err != nil {
		return 0, err
	}
	return s.Store.Delete(ctx, ref, revision, guards...)
}

func (s *frozenStorage) CurrentRevision(ctx context.Context) (int64, error) {
	if err := s.wait(ctx); err != nil {
		return 0, err
	}
	return s.Store.CurrentRevision(ctx)
}

// TestBadInputIsRefusedWithoutEtcd: input that is wrong whatever is stored
// gets its 4xx at once while etcd answers nothing, and nothing asks etcd.
func TestBadInputIsRefusedWithoutEtcd(t *testing.T) {
	storage := &frozenStorage{}
	s := startServerWithOptions(t, serverOptions{requestTimeout: 10 * time.Second, wrap: func(st *etcdstore.Store) registry.Storage {
		storage.Store = st
		return storage
	}})
	const cms = "/api/v1/namespaces/default/configmaps"
	existing := s.create(t, "default", "existing", nil)
	longLabel := strings.Repeat("x", 64)
	put := func(meta, rest string) string {
		return `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"existing","resourceVersion":"` + existing.ResourceVersion + `"` + meta + `}` + rest + `}`
	}
	mergePatch := []string{"Content-Type", "application/merge-patch+json"}
	cases := []struct {
		name         string
		method, path string
		body         string
		header       []string
		code         int
		reason       metav1.StatusReason
	}{
		{"PUT with a too-long label value", http.MethodPut, cms + "/existing", put(`,"labels":{"a":"`+longLabel+`"}`, ""), nil, 422, metav1.StatusReasonInvalid},
		{"PUT with an invalid label key", http.MethodPut, cms + "/existing", put(`,"labels":{"a b":"c"}`, ""), nil, 422, metav1.StatusReasonInvalid},
		{"PUT with an invalid annotation key", http.MethodPut, cms + "/existing", put(`,"annotations":{"-x":"c"}`, ""), nil, 422, metav1.StatusReasonInvalid},
		{"PUT with an invalid data key", http.MethodPut, cms + "/existing", put("", `,"data":{"a/b":"c"}`), nil, 422, metav1.StatusReasonInvalid},
		{"PUT with data over 1 MiB", http.MethodPut, cms + "/existing", put("", `,"data":{"a":"`+strings.Repeat("x", 1<<20+1)+`"}`), nil, 422, metav1.StatusReasonInvalid},
		{"PUT with a name other than the URL's", http.MethodPut, cms + "/other", put("", ""), nil, 400, metav1.StatusReasonBadRequest},
		{"PUT with a namespace other than the URL's", http.MethodPut, cms + "/existing", put(`,"namespace":"elsewhere"`, ""), nil, 400, metav1.StatusReasonBadRequest},
		{"PUT with a malformed resourceVersion", http.MethodPut, cms + "/existing", `{"metadata":{"name":"existing","resourceVersion":"abc"}}`, nil, 400, metav1.StatusReasonBadRequest},
		{"POST with a too-long label value", http.MethodPost, cms, `{"metadata":{"name":"new","labels":{"a":"` + longLabel + `"}}}`, nil, 422, metav1.StatusReasonInvalid},
		{"POST with an invalid name", http.MethodPost, cms, `{"metadata":{"name":"Not_A_Name"}}`, nil, 422, metav1.StatusReasonInvalid},
		{"POST of a Namespace with an invalid name", http.MethodPost, "/api/v1/namespaces", `{"metadata":{"name":"a.b"}}`, nil, 422, metav1.StatusReasonInvalid},
		{"PATCH (merge) that is not JSON", http.MethodPatch, cms + "/existing", `{"data":`, mergePatch, 400, metav1.StatusReasonBadRequest},
		{"PATCH (strategic) that is not JSON", http.MethodPatch, cms + "/existing", `{"data":`, []string{"Content-Type", "application/strategic-merge-patch+json"}, 400, metav1.StatusReasonBadRequest},
		{"PATCH (JSON) that is not a patch", http.MethodPatch, cms + "/existing", `{"op":"add"}`, []string{"Content-Type", "application/json-patch+json"}, 400, metav1.StatusReasonBadRequest},
		{"DELETE with a malformed body", http.MethodDelete, cms + "/existing", `{"preconditions":`, nil, 400, metav1.StatusReasonBadRequest},
	}
	storage.frozen.Store(true)
	defer storage.frozen.Store(false)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := storage.calls.Load()
			start := time.Now()
			resp := s.do(t, tc.method, tc.path, tc.body, tc.header...)
			took := time.Since(start)
			if resp.Code != tc.code {
				t.Fatalf("%s %s with etcd frozen: %d after %s %s; want %d", tc.method, tc.path, resp.Code, took, resp.Body, tc.code)
			}
			if st := resp.status(t); st.Reason != tc.reason {
				t.Errorf("reason %q (%s); want %q", st.Reason, st.Message, tc.reason)
			}
			if n := storage.calls.Load() - before; n != 0 {
				t.Errorf("%d etcd requests for input that is wrong whatever is stored; want none", n)
			}
			if took > 2*time.Second {
				t.Errorf("answered after %s; want at once", took)
			}
		})
	}
}
