package apiserver_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// watchEvent is one decoded line of a JSON watch stream.
type watchEvent struct {
	Type   string
	Object corev1.ConfigMap
	Status metav1.Status
}

func (e watchEvent) String() string {
	return e.Type + " " + e.Object.Namespace + "/" + e.Object.Name + "@" + e.Object.ResourceVersion
}

// watchStream reads a watch response in the background; events arrive on
// a channel that closes when the server ends the stream.
type watchStream struct {
	events <-chan watchEvent
	cancel context.CancelFunc
}

func (s *testServer) watch(t *testing.T, path string, query url.Values) *watchStream {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.URL+path+"?"+query.Encode(), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("watch %s: %v", path, err)
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/json" {
		resp.Body.Close()
		t.Fatalf("watch %s?%s: %d %q; want 200 application/json", path, query.Encode(), resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	return &watchStream{events: watchLines(resp.Body, 10000), cancel: cancel}
}

// watchLines reads a JSON watch stream in the background: each event's type
// and object (or Status), on a channel of buffer events that closes when
// the stream ends.
func watchLines(body io.ReadCloser, buffer int) <-chan watchEvent {
	events := make(chan watchEvent, buffer)
	go func() {
		defer close(events)
		defer body.Close()
		dec := json.NewDecoder(bufio.NewReader(body))
		for {
			var raw struct {
				Type   string          `json:"type"`
				Object json.RawMessage `json:"object"`
			}
			if err := dec.Decode(&raw); err != nil {
				return
			}
			ev := watchEvent{Type: raw.Type}
			target := any(&ev.Object)
			if raw.Type == "ERROR" {
				target = &ev.Status
			}
			if json.Unmarshal(raw.Object, target) != nil {
				return
			}
			events <- ev
		}
	}()
	return events
}

// next returns the next event; ok is false if the stream ended. It fails the
// test if nothing arrives within timeout.
func (w *watchStream) next(t *testing.T, timeout time.Duration) (ev watchEvent, ok bool) {
	t.Helper()
	select {
	case ev, ok = <-w.events:
		return ev, ok
	case <-time.After(timeout):
		t.Fatalf("no watch event within %s", timeout)
		return watchEvent{}, false
	}
}

// expect reads len(want) events and compares their "TYPE ns/name".
func (w *watchStream) expect(t *testing.T, want ...string) []watchEvent {
	t.Helper()
	var got []watchEvent
	var gotNames []string
	for range want {
		ev, ok := w.next(t, 10*time.Second)
		if !ok {
			t.Fatalf("stream ended after %v; want %v", gotNames, want)
		}
		got = append(got, ev)
		gotNames = append(gotNames, ev.Type+" "+ev.Object.Namespace+"/"+ev.Object.Name)
	}
	if diff := cmp.Diff(gotNames, want); diff != "" {
		t.Fatalf("events (-got +want):\n%s", diff)
	}
	return got
}

// quiet asserts that no event arrives for a short while.
func (w *watchStream) quiet(t *testing.T) {
	t.Helper()
	select {
	case ev, ok := <-w.events:
		if ok {
			t.Fatalf("unexpected event %s", ev)
		}
	case <-time.After(300 * time.Millisecond):
	}
}

func (s *testServer) put(t *testing.T, cm corev1.ConfigMap) corev1.ConfigMap {
	t.Helper()
	resp := s.do(t, http.MethodPut, "/api/v1/namespaces/"+cm.Namespace+"/configmaps/"+cm.Name, &cm)
	if resp.Code != http.StatusOK {
		t.Fatalf("PUT %s: %d %s", cm.Name, resp.Code, resp.Body)
	}
	var out corev1.ConfigMap
	resp.decode(t, &out)
	return out
}

func (s *testServer) remove(t *testing.T, namespace, name string) {
	t.Helper()
	if resp := s.do(t, http.MethodDelete, "/api/v1/namespaces/"+namespace+"/configmaps/"+name, nil); resp.Code != http.StatusOK {
		t.Fatalf("DELETE %s: %d %s", name, resp.Code, resp.Body)
	}
}

func (s *testServer) revision(t *testing.T) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := s.Etcd.Client.Get(ctx, "/")
	if err != nil {
		t.Fatal(err)
	}
	return resp.Header.Revision
}

// TestWatchMatchesEtcdUnderConcurrentWriters compares Concord's watch with
// etcd's own history of the same keys: every change, in order, none twice,
// none skipped, with the right type and revision.
func TestWatchMatchesEtcdUnderConcurrentWriters(t *testing.T) {
	s := startServer(t)
	s.create(t, "default", "seed", nil)
	_, list := s.list(t, nsPath, nil)
	from, _ := strconv.ParseInt(list.ResourceVersion, 10, 64)
	w := s.watch(t, nsPath, url.Values{"watch": {"true"}, "resourceVersion": {list.ResourceVersion}})

	const writers, rounds = 4, 10
	var wg sync.WaitGroup
	for i := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range rounds {
				name := "w" + strconv.Itoa(i) + "-" + strconv.Itoa(r)
				body, _ := json.Marshal(configMap(name, "", map[string]string{"n": "0"}))
				doRaw(http.MethodPost, s.URL+nsPath, body)
				doRaw(http.MethodDelete, s.URL+nsPath+"/"+name, nil)
			}
		}()
	}
	wg.Wait()
	s.create(t, "default", "last", nil)
	last := s.revision(t)

	// etcd's own record of the same changes is the oracle.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var want []string
	for resp := range s.Etcd.Client.Watch(ctx, "/registry/configmaps/default/", clientv3.WithPrefix(), clientv3.WithRev(from+1), clientv3.WithPrevKV()) {
		for _, ev := range resp.Events {
			typ := "DELETED"
			if ev.Type == clientv3.EventTypePut {
				typ = "MODIFIED"
				if ev.IsCreate() {
					typ = "ADDED"
				}
			}
			want = append(want, typ+" default/"+strings.TrimPrefix(string(ev.Kv.Key), "/registry/configmaps/default/")+"@"+strconv.FormatInt(ev.Kv.ModRevision, 10))
		}
		if resp.Header.Revision >= last && len(want) > 0 && strings.HasSuffix(want[len(want)-1], "@"+strconv.FormatInt(last, 10)) {
			break
		}
	}
	var got []string
	for len(got) < len(want) {
		ev, ok := w.next(t, 10*time.Second)
		if !ok {
			break
		}
		got = append(got, ev.String())
	}
	if diff := cmp.Diff(got, want); diff != "" {
		t.Errorf("watch differs from etcd's history (-got +want):\n%s", diff)
	}
	if len(want) != 2*writers*rounds+1 {
		t.Errorf("etcd recorded %d changes; want %d", len(want), 2*writers*rounds+1)
	}
	w.quiet(t)
}

func TestWatchEventsCarryTheRightState(t *testing.T) {
	s := startServer(t)
	s.namespace(t, "other")
	a := s.create(t, "default", "a", map[string]string{"app": "x"})
	w := s.watch(t, nsPath, url.Values{"watch": {"1"}, "resourceVersion": {a.ResourceVersion}})
	all := s.watch(t, "/api/v1/configmaps", url.Values{"watch": {"1"}, "resourceVersion": {a.ResourceVersion}})
	sel := s.watch(t, nsPath, url.Values{"watch": {"1"}, "resourceVersion": {a.ResourceVersion}, "labelSelector": {"app=x"}})
	single := s.watch(t, "/api/v1/watch/namespaces/default/configmaps/b", url.Values{"resourceVersion": {a.ResourceVersion}})

	s.create(t, "other", "elsewhere", map[string]string{"app": "x"})
	b := s.create(t, "default", "b", map[string]string{"app": "y"})
	a.Labels = map[string]string{"app": "y"}
	a = s.put(t, a) // leaves app=x
	b.Labels = map[string]string{"app": "x"}
	b = s.put(t, b) // enters app=x
	s.remove(t, "default", "b")
	deleteRev := s.revision(t)

	events := w.expect(t, "ADDED default/b", "MODIFIED default/a", "MODIFIED default/b", "DELETED default/b")
	if del := events[3].Object; del.ResourceVersion != strconv.FormatInt(deleteRev, 10) || del.Labels["app"] != "x" || del.UID != b.UID {
		t.Errorf("DELETED object: rv %s labels %v uid %s; want the last state (app=x, uid %s) at the delete revision %d", del.ResourceVersion, del.Labels, del.UID, b.UID, deleteRev)
	}
	if events[1].Object.ResourceVersion != a.ResourceVersion {
		t.Errorf("MODIFIED rv %s; want the PUT's %s", events[1].Object.ResourceVersion, a.ResourceVersion)
	}
	all.expect(t, "ADDED other/elsewhere", "ADDED default/b", "MODIFIED default/a", "MODIFIED default/b", "DELETED default/b")
	left := sel.expect(t, "DELETED default/a", "ADDED default/b", "DELETED default/b")
	if left[0].Object.Labels["app"] != "x" || left[0].Object.ResourceVersion != a.ResourceVersion {
		t.Errorf("leaving the selector: DELETED with labels %v at rv %s; want the state that matched (app=x) at the change's revision %s", left[0].Object.Labels, left[0].Object.ResourceVersion, a.ResourceVersion)
	}
	single.expect(t, "ADDED default/b", "MODIFIED default/b", "DELETED default/b")
	w.quiet(t)
}
