package e2e

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/concord-dev/concord/etcdstore/etcdtest"
)

// Bounds of the informer test.
const (
	informerTestTimeout = 90 * time.Second
	informerWait        = 30 * time.Second
	informerPoll        = 50 * time.Millisecond
	// liveWatchAge: a watch open this long was not ended by the server
	// at once.
	liveWatchAge = time.Second
)

// cmState is what the test compares of a ConfigMap.
type cmState struct {
	RV   string
	Data map[string]string
}

// informerEvent is one call of the informer's event handler.
type informerEvent struct {
	Type string // add, update or delete
	Name string
	RV   string
	Data map[string]string
}

func (e informerEvent) String() string {
	return fmt.Sprintf("%s %s rv=%s data=%v", e.Type, e.Name, e.RV, e.Data)
}

// eventRecorder keeps every event the handler saw.
type eventRecorder struct {
	mu     sync.Mutex
	events []informerEvent
}

func (r *eventRecorder) record(typ string, obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	e := informerEvent{Type: typ}
	if cm, ok := obj.(*corev1.ConfigMap); ok {
		e.Name, e.RV, e.Data = cm.Name, cm.ResourceVersion, maps.Clone(cm.Data)
	} else {
		e.Name = fmt.Sprintf("<%T>", obj)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
}

func (r *eventRecorder) has(want informerEvent) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range r.events {
		if e.Type == want.Type && e.Name == want.Name && e.RV == want.RV && cmp.Equal(e.Data, want.Data) {
			return true
		}
	}
	return false
}

func (r *eventRecorder) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	lines := make([]string, len(r.events))
	for i, e := range r.events {
		lines[i] = fmt.Sprintf("  %3d %s", i, e)
	}
	return strings.Join(lines, "\n")
}

// requestRecorder notes every request client-go sends, how it was answered
// and when its body was closed, so that a failure says what the informer
// did, and the test can tell whether the informer holds a live watch. It
// changes nothing about the requests.
type requestRecorder struct {
	start    time.Time
	next     http.RoundTripper
	mu       sync.Mutex
	requests []*recordedRequest
}

type recordedRequest struct {
	sent     time.Time
	line     string // method and URI
	watch    bool
	err      error
	code     int
	closed   bool
	closedAt time.Time
}

func (r *requestRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	rec := &recordedRequest{
		sent:  time.Now(),
		line:  req.Method + " " + req.URL.RequestURI(),
		watch: req.URL.Query().Get("watch") == "true",
	}
	resp, err := r.next.RoundTrip(req)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.requests = append(r.requests, rec)
	if err != nil {
		rec.err = err
		return resp, err
	}
	rec.code = resp.StatusCode
	resp.Body = &closeNotingBody{ReadCloser: resp.Body, onClose: func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		rec.closed, rec.closedAt = true, time.Now()
	}}
	return resp, nil
}

// openWatches are the watch requests whose response is still being read.
func (r *requestRecorder) openWatches() []recordedRequest {
	r.mu.Lock()
	defer r.mu.Unlock()
	var open []recordedRequest
	for _, rec := range r.requests {
		if rec.watch && rec.err == nil && !rec.closed {
			open = append(open, *rec)
		}
	}
	return open
}

func (r *requestRecorder) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	lines := make([]string, len(r.requests))
	for i, rec := range r.requests {
		line := fmt.Sprintf("%7.3fs %s", rec.sent.Sub(r.start).Seconds(), rec.line)
		switch {
		case rec.err != nil:
			line += " -> " + rec.err.Error()
		case rec.closed:
			line += fmt.Sprintf(" -> %d, body closed at %.3fs", rec.code, rec.closedAt.Sub(r.start).Seconds())
		default:
			line += fmt.Sprintf(" -> %d, still open", rec.code)
		}
		lines[i] = "  " + line
	}
	return strings.Join(lines, "\n")
}

type closeNotingBody struct {
	io.ReadCloser
	once    sync.Once
	onClose func()
}

func (b *closeNotingBody) Close() error {
	b.once.Do(b.onClose)
	return b.ReadCloser.Close()
}

// freeLoopbackPort returns a port that was free on 127.0.0.1 a moment ago.
func freeLoopbackPort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("pick a free port: %v", err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	if err := ln.Close(); err != nil {
		t.Fatalf("pick a free port: close: %v", err)
	}
	return port
}

// TestInformerSurvivesCompactionAndRestart runs a client-go shared informer,
// with client-go's defaults (protobuf, streaming list), against the real
// binary, and checks that its cache follows every change through an etcd
// compaction and a restart of the server, including a relist after its
// resourceVersion was compacted away while the server was down (which the
// server must answer 410 Expired), and that afterwards it holds a watch the
// server keeps open.
func TestInformerSurvivesCompactionAndRestart(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), informerTestTimeout)
	defer cancel()

	etcd := etcdtest.Start(t)
	port := freeLoopbackPort(t)
	wantURL := "http://127.0.0.1:" + strconv.Itoa(port)
	args := []string{"--etcd-servers", etcd.Endpoint, "--port", strconv.Itoa(port), "--etcd-compaction-interval", "0"}
	srv := startConcord(t, "concord", t.TempDir(), args...)
	if srv.url != wantURL {
		t.Fatalf("ready line url = %q; want %q", srv.url, wantURL)
	}

	requests := &requestRecorder{start: time.Now()}
	client, err := kubernetes.NewForConfig(&rest.Config{Host: wantURL, WrapTransport: func(rt http.RoundTripper) http.RoundTripper {
		requests.next = rt
		return requests
	}})
	if err != nil {
		t.Fatalf("clientset: %v", err)
	}
	cms := client.CoreV1().ConfigMaps("default")

	events := &eventRecorder{}
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace("default"))
	cmInformer := factory.Core().V1().ConfigMaps()
	informer, lister := cmInformer.Informer(), cmInformer.Lister().ConfigMaps("default")
	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { events.record("add", obj) },
		UpdateFunc: func(_, obj any) { events.record("update", obj) },
		DeleteFunc: func(obj any) { events.record("delete", obj) },
	}); err != nil {
		t.Fatalf("AddEventHandler: %v", err)
	}
	stop := make(chan struct{})
	var stopOnce sync.Once
	stopInformers := func() {
		stopOnce.Do(func() {
			close(stop)
			factory.Shutdown()
		})
	}
	defer stopInformers()
	defer func() {
		if t.Failed() {
			t.Logf("informer events:\n%s", events)
		}
		t.Logf("client-go requests:\n%s", requests)
	}()
	factory.Start(stop)
	syncCtx, syncCancel := context.WithTimeout(ctx, informerWait)
	synced := cache.WaitForCacheSync(syncCtx.Done(), informer.HasSynced)
	syncCancel()
	if !synced {
		t.Fatalf("informer cache not synced within %s", informerWait)
	}

	// want is what the server holds, from its answers to the writes.
	want := map[string]cmState{}
	create := func(name string, data map[string]string) *corev1.ConfigMap {
		t.Helper()
		cm, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: data}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("Create %s: %v", name, err)
		}
		want[name] = cmState{RV: cm.ResourceVersion, Data: maps.Clone(cm.Data)}
		return cm
	}
	update := func(name string, data map[string]string) *corev1.ConfigMap {
		t.Helper()
		cm, err := cms.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("Get %s: %v", name, err)
		}
		cm.Data = data
		cm, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
		if err != nil {
			t.Fatalf("Update %s: %v", name, err)
		}
		want[name] = cmState{RV: cm.ResourceVersion, Data: maps.Clone(cm.Data)}
		return cm
	}
	remove := func(name string) {
		t.Helper()
		if err := cms.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatalf("Delete %s: %v", name, err)
		}
		delete(want, name)
	}

	// poll polls cond for at most informerWait and says, if it never
	// became true, what was last wrong; cond says why it is not yet true.
	poll := func(what string, cond func() (bool, string)) string {
		var why string
		err := wait.PollUntilContextTimeout(ctx, informerPoll, informerWait, true, func(context.Context) (bool, error) {
			var ok bool
			ok, why = cond()
			return ok, nil
		})
		if err != nil {
			return fmt.Sprintf("%s: not within %s (%v): %s", what, informerWait, err, why)
		}
		return ""
	}
	waitFor := func(what string, cond func() (bool, string)) {
		t.Helper()
		if msg := poll(what, cond); msg != "" {
			t.Fatal(msg)
		}
	}
	listerState := func() (map[string]cmState, error) {
		objs, err := lister.List(labels.Everything())
		if err != nil {
			return nil, err
		}
		got := map[string]cmState{}
		for _, cm := range objs {
			got[cm.Name] = cmState{RV: cm.ResourceVersion, Data: cm.Data}
		}
		return got, nil
	}
	waitForCache := func(what string) {
		t.Helper()
		expected := maps.Clone(want)
		waitFor("informer cache "+what, func() (bool, string) {
			got, err := listerState()
			if err != nil {
				return false, fmt.Sprintf("lister: %v", err)
			}
			if diff := cmp.Diff(expected, got); diff != "" {
				return false, fmt.Sprintf("lister (-want +got):\n%s", diff)
			}
			return true, ""
		})
	}
	waitForEvent := func(e informerEvent) {
		t.Helper()
		waitFor("informer event "+e.String(), func() (bool, string) {
			return events.has(e), "not seen"
		})
	}
	// compact compacts etcd at its current revision, after bumping it by
	// bump writes outside concord's prefix (so that the informer's last
	// resourceVersion is compacted away too).
	compact := func(why string, bump int) int64 {
		t.Helper()
		for i := range bump {
			if _, err := etcd.Client.Put(ctx, "/e2e-informer-test/bump", strconv.Itoa(i)); err != nil {
				t.Fatalf("compaction %s: bump etcd revision: %v", why, err)
			}
		}
		resp, err := etcd.Client.Get(ctx, "/e2e-informer-test/bump")
		if err != nil {
			t.Fatalf("compaction %s: etcd revision: %v", why, err)
		}
		rev := resp.Header.Revision
		if _, err := etcd.Client.Compact(ctx, rev); err != nil {
			t.Fatalf("compaction %s: Compact(%d): %v", why, rev, err)
		}
		t.Logf("compacted etcd at revision %d (%s)", rev, why)
		return rev
	}

	// 1. Adds, an update and a delete.
	for _, c := range []struct {
		name string
		data map[string]string
	}{
		{"alpha", map[string]string{"k": "a1"}},
		{"bravo", map[string]string{"k": "b1"}},
		{"charlie", map[string]string{"k": "c1"}},
	} {
		create(c.name, c.data)
	}
	waitForCache("after 3 creates")
	for _, name := range []string{"alpha", "bravo", "charlie"} {
		waitForEvent(informerEvent{Type: "add", Name: name, RV: want[name].RV, Data: want[name].Data})
	}
	bravo := update("bravo", map[string]string{"k": "b2", "extra": "x"})
	if bravo.ResourceVersion == "" {
		t.Fatal("Update bravo: empty resourceVersion")
	}
	waitForEvent(informerEvent{Type: "update", Name: "bravo", RV: bravo.ResourceVersion, Data: map[string]string{"k": "b2", "extra": "x"}})
	charlieRV := want["charlie"].RV
	remove("charlie")
	waitFor("informer delete event for charlie", func() (bool, string) {
		events.mu.Lock()
		defer events.mu.Unlock()
		for _, e := range events.events {
			if e.Type == "delete" && e.Name == "charlie" {
				return true, ""
			}
		}
		return false, "not seen (charlie was at resourceVersion " + charlieRV + ")"
	})
	waitForCache("after update and delete")

	// 2. Compaction under a running watch, then more changes.
	compact("under a running watch", 0)
	create("delta", map[string]string{"k": "d1"})
	create("echo", map[string]string{"k": "e1"})
	update("alpha", map[string]string{"k": "a2"})
	waitForCache("after compaction and changes")
	lastRVBeforeRestart := want["alpha"].RV

	// 3. Restart on the same port. While the server is down, the history
	// the informer would resume from is compacted away, so that its
	// reconnect must be told 410 Expired and relist.
	srv.stopCleanly(t)
	if t.Failed() {
		t.FailNow()
	}
	compact("while the server is down", 2)
	srv = startConcord(t, "concord (restarted)", t.TempDir(), args...)
	if srv.url != wantURL {
		t.Fatalf("restarted: ready line url = %q; want %q", srv.url, wantURL)
	}
	compact("right after the restart", 2)
	create("foxtrot", map[string]string{"k": "f1"})
	remove("delta")
	update("echo", map[string]string{"k": "e2"})
	waitForCache("after restart, compaction and changes")

	// It reconnected by itself: the informer holds one watch, and the
	// server keeps it open (a watch that ends at once, with no event, is
	// retried by client-go only after a growing back-off).
	if msg := poll("informer holding a live watch after the restart", func() (bool, string) {
		open := requests.openWatches()
		if len(open) != 1 {
			return false, fmt.Sprintf("%d watch requests open; want 1 (see the requests below)", len(open))
		}
		if age := time.Since(open[0].sent); age < liveWatchAge {
			return false, fmt.Sprintf("the open watch (%s) is %s old; want it open for %s", open[0].line, age, liveWatchAge)
		}
		return true, ""
	}); msg != "" {
		t.Error(msg)
	}

	// 4. The cache equals a fresh list.
	list, err := cms.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	listed := map[string]cmState{}
	for _, cm := range list.Items {
		listed[cm.Name] = cmState{RV: cm.ResourceVersion, Data: cm.Data}
	}
	cached, err := listerState()
	if err != nil {
		t.Fatalf("lister: %v", err)
	}
	if diff := cmp.Diff(listed, cached); diff != "" {
		t.Errorf("informer cache differs from a fresh List (-listed +cached):\n%s", diff)
	}
	if diff := cmp.Diff(want, listed); diff != "" {
		t.Errorf("fresh List differs from the writes' answers (-want +listed):\n%s", diff)
	}

	// 5. What the informer's reconnect depended on: a watch from a
	// resourceVersion older than the compaction is answered 410 Expired.
	wctx, wcancel := context.WithTimeout(ctx, informerWait)
	defer wcancel()
	w, err := cms.Watch(wctx, metav1.ListOptions{ResourceVersion: lastRVBeforeRestart})
	switch {
	case apierrors.IsResourceExpired(err) || apierrors.IsGone(err):
	case err != nil:
		t.Errorf("Watch from compacted resourceVersion %s: %v; want 410 Expired", lastRVBeforeRestart, err)
	default:
		select {
		case ev, ok := <-w.ResultChan():
			switch {
			case !ok:
				t.Errorf("Watch from compacted resourceVersion %s: the stream ended without an event; want an ERROR event with 410 Expired", lastRVBeforeRestart)
			case ev.Type != watch.Error:
				t.Errorf("Watch from compacted resourceVersion %s: first event %s %v; want an ERROR event with 410 Expired", lastRVBeforeRestart, ev.Type, ev.Object)
			default:
				if err := apierrors.FromObject(ev.Object); !apierrors.IsResourceExpired(err) && !apierrors.IsGone(err) {
					t.Errorf("Watch from compacted resourceVersion %s: ERROR event %v; want 410 Expired", lastRVBeforeRestart, err)
				}
			}
		case <-wctx.Done():
			t.Errorf("Watch from compacted resourceVersion %s: no event within %s; want an ERROR event with 410 Expired", lastRVBeforeRestart, informerWait)
		}
		w.Stop()
	}

	stopInformers()
	srv.stopCleanly(t)
}
