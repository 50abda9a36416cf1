package apiserver_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/concord-dev/concord/etcdstore"
	"github.com/concord-dev/concord/registry"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// committedThenLostStorage applies every write to etcd and then, while
// armed, answers as the etcd client does when the connection to the leader
// is lost after the transaction was sent: an error of unknown outcome. It is
// what a SIGKILLed etcd leader does to a write it had already committed.
type committedThenLostStorage struct {
	*etcdstore.Store
	armed atomic.Bool
	// writes counts the writes that reached etcd while armed.
	writes atomic.Int32
}

func (s *committedThenLostStorage) lost(op string, ref etcdstore.Ref, err error) error {
	if err != nil || !s.armed.Load() {
		return err
	}
	s.writes.Add(1)
	eof := status.Error(codes.Unavailable, "error reading from server: EOF")
	return fmt.Errorf("%s %s/%s: %w: %w: %w", op, ref.Resource, ref.Name, etcdstore.ErrUnknownOutcome, etcdstore.ErrUnavailable, eof)
}

func (s *committedThenLostStorage) Create(ctx context.Context, ref etcdstore.Ref, value []byte, guards ...etcdstore.Guard) (int64, error) {
	rev, err := s.Store.Create(ctx, ref, value, guards...)
	return rev, s.lost("create", ref, err)
}

func (s *committedThenLostStorage) Update(ctx context.Context, ref etcdstore.Ref, value []byte, revision int64, guards ...etcdstore.Guard) (int64, error) {
	rev, err := s.Store.Update(ctx, ref, value, revision, guards...)
	return rev, s.lost("update", ref, err)
}

func (s *committedThenLostStorage) Delete(ctx context.Context, ref etcdstore.Ref, revision int64, guards ...etcdstore.Guard) (int64, error) {
	rev, err := s.Store.Delete(ctx, ref, revision, guards...)
	return rev, s.lost("delete", ref, err)
}

// TestWriteOfUnknownOutcomeIsNeverAnsweredAsRefused: every write that etcd
// applied but whose answer was lost is answered 504 Timeout without
// Retry-After — never 409, 404 or AlreadyExists from a re-read that finds
// the write's own result — and the write is in etcd. Each write runs twice:
// with the object remembered from a read just before (the first attempt
// then starts from memory, where the old code read again after the lost
// answer) and cold (another replica rewrote it, so the write reads etcd).
func TestWriteOfUnknownOutcomeIsNeverAnsweredAsRefused(t *testing.T) {
	storage := &committedThenLostStorage{}
	s := startServerOn(t, registry.DefaultWatchConfig(), func(st *etcdstore.Store) registry.Storage {
		storage.Store = st
		return storage
	})
	const cms = "/api/v1/namespaces/default/configmaps"
	type write struct {
		name string
		// setup makes the object the write starts from (the server is not
		// armed then) and returns what the write needs to know of it.
		setup func(t *testing.T, name string) metav1.ObjectMeta
		// method, path and body of the write.
		send func(name string, old metav1.ObjectMeta) (method, path string, body any, header []string)
		// applied reports whether etcd holds the write's result.
		applied func(t *testing.T, name string) bool
	}
	createCM := func(t *testing.T, name string) metav1.ObjectMeta {
		return s.create(t, "default", name, nil).ObjectMeta
	}
	createWithFinalizer := func(t *testing.T, name string) metav1.ObjectMeta {
		body := map[string]any{"metadata": map[string]any{"name": name, "finalizers": []string{"example.com/hold"}}}
		resp := s.do(t, http.MethodPost, cms, body)
		if resp.Code != http.StatusCreated {
			t.Fatalf("create %s: %d %s", name, resp.Code, resp.Body)
		}
		var cm metav1.PartialObjectMetadata
		resp.decode(t, &cm)
		return cm.ObjectMeta
	}
	hasData := func(want string) func(t *testing.T, name string) bool {
		return func(t *testing.T, name string) bool {
			cm, _ := s.storedConfigMap(t, "/registry/configmaps/default/"+name)
			return cm != nil && cm.Data["v"] == want
		}
	}
	gone := func(t *testing.T, name string) bool {
		return len(s.storedKeys(t, "/registry/configmaps/default/"+name)) == 0
	}
	marked := func(t *testing.T, name string) bool {
		cm, _ := s.storedConfigMap(t, "/registry/configmaps/default/"+name)
		return cm != nil && cm.DeletionTimestamp != nil
	}
	nsGone := func(t *testing.T, name string) bool {
		return len(s.storedKeys(t, "/registry/namespaces/"+name)) == 0
	}
	writes := []write{
		{"POST create", nil, func(name string, _ metav1.ObjectMeta) (string, string, any, []string) {
			return http.MethodPost, cms, map[string]any{"metadata": map[string]string{"name": name}, "data": map[string]string{"v": "new"}}, nil
		}, hasData("new")},
		{"POST create of a namespace", nil, func(name string, _ metav1.ObjectMeta) (string, string, any, []string) {
			return http.MethodPost, "/api/v1/namespaces", map[string]any{"metadata": map[string]string{"name": name}}, nil
		}, func(t *testing.T, name string) bool { return !nsGone(t, name) }},
		{"PUT create-only (If-None-Match: *)", nil, func(name string, _ metav1.ObjectMeta) (string, string, any, []string) {
			return http.MethodPut, cms + "/" + name, map[string]any{"metadata": map[string]string{"name": name}, "data": map[string]string{"v": "new"}}, []string{"If-None-Match", "*"}
		}, hasData("new")},
		{"PUT with resourceVersion", createCM, func(name string, old metav1.ObjectMeta) (string, string, any, []string) {
			return http.MethodPut, cms + "/" + name, map[string]any{"metadata": map[string]string{"name": name, "resourceVersion": old.ResourceVersion}, "data": map[string]string{"v": "2"}}, nil
		}, hasData("2")},
		{"PUT with If-Match", createCM, func(name string, old metav1.ObjectMeta) (string, string, any, []string) {
			return http.MethodPut, cms + "/" + name, map[string]any{"metadata": map[string]string{"name": name}, "data": map[string]string{"v": "2"}}, []string{"If-Match", quoted(old.ResourceVersion)}
		}, hasData("2")},
		{"PATCH merge with resourceVersion", createCM, func(name string, old metav1.ObjectMeta) (string, string, any, []string) {
			return http.MethodPatch, cms + "/" + name, `{"metadata":{"resourceVersion":"` + old.ResourceVersion + `"},"data":{"v":"2"}}`, []string{"Content-Type", "application/merge-patch+json"}
		}, hasData("2")},
		{"PATCH merge unconditional", createCM, func(name string, _ metav1.ObjectMeta) (string, string, any, []string) {
			return http.MethodPatch, cms + "/" + name, `{"data":{"v":"2"}}`, []string{"Content-Type", "application/merge-patch+json"}
		}, hasData("2")},
		{"PUT removing the last finalizer of an object being deleted", func(t *testing.T, name string) metav1.ObjectMeta {
			createWithFinalizer(t, name)
			if resp := s.do(t, http.MethodDelete, cms+"/"+name, nil); resp.Code != http.StatusOK {
				t.Fatalf("delete %s: %d %s", name, resp.Code, resp.Body)
			}
			cm, rev := s.storedConfigMap(t, "/registry/configmaps/default/"+name)
			meta := cm.ObjectMeta
			meta.ResourceVersion = fmt.Sprint(rev)
			return meta
		}, func(name string, old metav1.ObjectMeta) (string, string, any, []string) {
			return http.MethodPut, cms + "/" + name, map[string]any{"metadata": map[string]any{"name": name, "resourceVersion": old.ResourceVersion, "finalizers": []string{}}}, nil
		}, gone},
		{"DELETE", createCM, func(name string, _ metav1.ObjectMeta) (string, string, any, []string) {
			return http.MethodDelete, cms + "/" + name, nil, nil
		}, gone},
		{"DELETE with a resourceVersion precondition", createCM, func(name string, old metav1.ObjectMeta) (string, string, any, []string) {
			return http.MethodDelete, cms + "/" + name, map[string]any{"preconditions": map[string]string{"resourceVersion": old.ResourceVersion}}, nil
		}, gone},
		{"DELETE with If-Match", createCM, func(name string, old metav1.ObjectMeta) (string, string, any, []string) {
			return http.MethodDelete, cms + "/" + name, nil, []string{"If-Match", quoted(old.ResourceVersion)}
		}, gone},
		{"DELETE of an object with a finalizer (marks it)", createWithFinalizer, func(name string, _ metav1.ObjectMeta) (string, string, any, []string) {
			return http.MethodDelete, cms + "/" + name, nil, nil
		}, marked},
		{"DELETE collection", func(t *testing.T, name string) metav1.ObjectMeta {
			body := map[string]any{"metadata": map[string]any{"name": name, "labels": map[string]string{"set": name}}}
			if resp := s.do(t, http.MethodPost, cms, body); resp.Code != http.StatusCreated {
				t.Fatalf("create %s: %d %s", name, resp.Code, resp.Body)
			}
			return metav1.ObjectMeta{}
		}, func(name string, _ metav1.ObjectMeta) (string, string, any, []string) {
			return http.MethodDelete, cms + "?labelSelector=set%3D" + name, nil, nil
		}, gone},
		{"DELETE of a namespace", func(t *testing.T, name string) metav1.ObjectMeta {
			s.namespace(t, name)
			return metav1.ObjectMeta{}
		}, func(name string, _ metav1.ObjectMeta) (string, string, any, []string) {
			return http.MethodDelete, "/api/v1/namespaces/" + name, nil, nil
		}, func(t *testing.T, name string) bool {
			// The first write (marking it Terminating) is the one whose answer is lost.
			ns := s.storedKeys(t, "/registry/namespaces/"+name)
			return len(ns) == 1 && strings.Contains(ns["/registry/namespaces/"+name], `"Terminating"`)
		}},
	}
	for i, w := range writes {
		for _, warm := range []bool{true, false} {
			name := fmt.Sprintf("w%d-cold", i)
			if warm {
				name = fmt.Sprintf("w%d-warm", i)
			}
			t.Run(w.name+"/"+name, func(t *testing.T) {
				var old metav1.ObjectMeta
				if w.setup != nil {
					old = w.setup(t, name)
					if warm && old.Name != "" {
						// A read remembers the object: the write starts from it.
						if resp := s.do(t, http.MethodGet, cms+"/"+name, nil); resp.Code != http.StatusOK {
							t.Fatalf("GET %s: %d", name, resp.Code)
						}
					}
				}
				if !warm && old.Name != "" {
					// Another replica rewrites the object: what this one
					// remembers is stale, so the write reads etcd again.
					key := "/registry/configmaps/default/" + name
					value := s.storedKeys(t, key)[key]
					put, err := s.Etcd.Client.Put(t.Context(), key, value)
					if err != nil {
						t.Fatalf("etcd put %s: %v", key, err)
					}
					old.ResourceVersion = fmt.Sprint(put.Header.Revision)
				}
				method, path, body, header := w.send(name, old)
				storage.writes.Store(0)
				storage.armed.Store(true)
				resp := s.do(t, method, path, body, header...)
				storage.armed.Store(false)
				if storage.writes.Load() == 0 {
					t.Fatalf("%s %s: no write reached etcd (%d %s)", method, path, resp.Code, resp.Body)
				}
				checkOutcomeUnknown(t, method+" "+path+" after etcd applied it and the answer was lost", resp)
				if !w.applied(t, name) {
					t.Errorf("etcd does not hold the result of the write")
				}
			})
		}
	}
}

// checkOutcomeUnknown asserts the answer to a write whose outcome is
// unknown: 504 Timeout, a message that says so, and no Retry-After.
func checkOutcomeUnknown(t *testing.T, what string, resp response) {
	t.Helper()
	if resp.Code != http.StatusGatewayTimeout {
		t.Errorf("%s: %d %s; want 504 (the outcome is unknown)", what, resp.Code, resp.Body)
		return
	}
	st := resp.status(t)
	if st.Reason != metav1.StatusReasonTimeout || !strings.Contains(st.Message, "the outcome of the write is unknown") || !strings.Contains(st.Message, "read the object again") {
		t.Errorf("%s: Status %s %q; want reason Timeout and a message saying the outcome is unknown", what, st.Reason, st.Message)
	}
	if ra := resp.Header.Get("Retry-After"); ra != "" || (st.Details != nil && st.Details.RetryAfterSeconds != 0) {
		t.Errorf("%s: Retry-After %q, details %+v; want none (client-go would re-send the applied write)", what, ra, st.Details)
	}
}
