package apiserver_test

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/concord-dev/concord/registry"
)

// smallHistory keeps two events in memory, so older revisions come from etcd.
func smallHistory() registry.WatchConfig {
	cfg := registry.DefaultWatchConfig()
	cfg.HistorySize = 2
	return cfg
}

func TestWatchFromRevisionOlderThanHistoryReadsEtcd(t *testing.T) {
	s := startServerWith(t, smallHistory())
	first := s.create(t, "default", "cm-0", nil)
	// Start the fan-out, then push first out of its two-event history.
	s.watch(t, nsPath, url.Values{"watch": {"1"}, "resourceVersion": {first.ResourceVersion}}).expect(t)
	for i := 1; i <= 5; i++ {
		s.create(t, "default", "cm-"+strconv.Itoa(i), nil)
	}
	w := s.watch(t, nsPath, url.Values{"watch": {"1"}, "resourceVersion": {first.ResourceVersion}})
	w.expect(t, "ADDED default/cm-1", "ADDED default/cm-2", "ADDED default/cm-3", "ADDED default/cm-4", "ADDED default/cm-5")
	s.create(t, "default", "cm-6", nil)
	w.expect(t, "ADDED default/cm-6")
}

func TestWatchFromCompactedRevisionIsExpired(t *testing.T) {
	s := startServerWith(t, smallHistory())
	first := s.create(t, "default", "cm-0", nil)
	for i := 1; i <= 5; i++ {
		s.create(t, "default", "cm-"+strconv.Itoa(i), nil)
	}
	s.compact(t)
	w := s.watch(t, nsPath, url.Values{"watch": {"1"}, "resourceVersion": {first.ResourceVersion}})
	ev, ok := w.next(t, 10*time.Second)
	if !ok || ev.Type != "ERROR" || ev.Status.Code != http.StatusGone || ev.Status.Reason != metav1.StatusReasonExpired ||
		ev.Status.Message != "The resourceVersion for the provided watch is too old." || ev.Status.Kind != "Status" {
		t.Fatalf("watch from a compacted revision: %v %+v; want an ERROR event with 410 Expired", ok, ev)
	}
	if ev, ok := w.next(t, 10*time.Second); ok {
		t.Errorf("after the ERROR event got %s; want the stream to end", ev)
	}
}

func TestWatchInitialEventsThenChanges(t *testing.T) {
	s := startServer(t)
	s.create(t, "default", "a", nil)
	s.create(t, "default", "b", map[string]string{"skip": "yes"})
	_, list := s.list(t, nsPath, nil)

	// client-go's streaming list: the state, an end bookmark, then changes.
	w := s.watch(t, nsPath, url.Values{"watch": {"1"}, "sendInitialEvents": {"true"}, "resourceVersionMatch": {"NotOlderThan"},
		"allowWatchBookmarks": {"true"}, "labelSelector": {"!skip"}})
	w.expect(t, "ADDED default/a")
	end, _ := w.next(t, 10*time.Second)
	if end.Type != "BOOKMARK" || end.Object.Annotations[metav1.InitialEventsAnnotationKey] != "true" || end.Object.ResourceVersion != list.ResourceVersion {
		t.Fatalf("after the initial events got %s %v; want a BOOKMARK annotated %s at %s", end, end.Object.Annotations, metav1.InitialEventsAnnotationKey, list.ResourceVersion)
	}
	s.create(t, "default", "c", nil)
	w.expect(t, "ADDED default/c")

	// A plain watch without a resourceVersion starts with the state too, and
	// sends no bookmark unless asked.
	plain := s.watch(t, nsPath, url.Values{"watch": {"1"}})
	plain.expect(t, "ADDED default/a", "ADDED default/b", "ADDED default/c")
	plain.quiet(t)

	// sendInitialEvents=false starts at the current revision.
	none := s.watch(t, nsPath, url.Values{"watch": {"1"}, "sendInitialEvents": {"false"}, "resourceVersionMatch": {"NotOlderThan"}})
	none.quiet(t)
	s.remove(t, "default", "a")
	none.expect(t, "DELETED default/a")

	// The validation kube-apiserver applies to watches.
	resp := s.do(t, http.MethodGet, nsPath+"?watch=1&sendInitialEvents=true", nil)
	if st := resp.status(t); resp.Code != http.StatusUnprocessableEntity || !strings.Contains(st.Message, "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan") {
		t.Errorf("sendInitialEvents without NotOlderThan: %d %q; want 422", resp.Code, st.Message)
	}
}

func TestWatchTimeoutSecondsEndsTheStream(t *testing.T) {
	s := startServer(t)
	c := s.create(t, "default", "a", nil)
	start := time.Now()
	w := s.watch(t, nsPath, url.Values{"watch": {"1"}, "resourceVersion": {c.ResourceVersion}, "timeoutSeconds": {"1"}})
	if ev, ok := w.next(t, 10*time.Second); ok {
		t.Fatalf("got %s; want the stream to end", ev)
	}
	if d := time.Since(start); d < time.Second || d > 5*time.Second {
		t.Errorf("stream ended after %s; want about 1s", d)
	}
}

func TestWatchBookmarksFromEtcdProgress(t *testing.T) {
	cfg := registry.DefaultWatchConfig()
	cfg.BookmarkInterval = 50 * time.Millisecond
	s := startServerWith(t, cfg)
	s.namespace(t, "elsewhere")
	c := s.create(t, "default", "a", nil)
	other := s.create(t, "elsewhere", "x", nil) // advances the revision past c
	w := s.watch(t, nsPath, url.Values{"watch": {"1"}, "resourceVersion": {c.ResourceVersion}, "allowWatchBookmarks": {"true"}})
	ev, _ := w.next(t, 10*time.Second)
	if ev.Type != "BOOKMARK" || ev.Object.Name != "" {
		t.Fatalf("got %s; want a BOOKMARK (only a resourceVersion)", ev)
	}
	if rv, _ := strconv.Atoi(ev.Object.ResourceVersion); strconv.Itoa(rv) != ev.Object.ResourceVersion || rv < mustAtoi(t, other.ResourceVersion) {
		t.Errorf("bookmark at %q; want at least %s, the store's revision", ev.Object.ResourceVersion, other.ResourceVersion)
	}
	// Without allowWatchBookmarks, none arrive.
	s.watch(t, nsPath, url.Values{"watch": {"1"}, "resourceVersion": {c.ResourceVersion}}).quiet(t)
}

// TestSlowWatcherIsClosedOthersContinue: a watcher that does not read is
// cut off once its queue fills; a watcher that reads gets every event.
func TestSlowWatcherIsClosedOthersContinue(t *testing.T) {
	cfg := registry.DefaultWatchConfig()
	cfg.BufferSize = 4
	s := startServerWith(t, cfg)
	c := s.create(t, "default", "big", nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.URL+nsPath+"?watch=1&resourceVersion="+c.ResourceVersion, nil)
	slow, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Body.Close()
	fast := s.watch(t, nsPath, url.Values{"watch": {"1"}, "resourceVersion": {c.ResourceVersion}})

	// 40 updates of 512 KiB: far more than the socket buffers hold. The
	// writer waits for the reading watcher after each, so only the other
	// one can fall behind.
	const updates = 40
	value := strings.Repeat("x", 512<<10)
	cur := c
	for i := range updates {
		cur.Data = map[string]string{"v": value, "i": strconv.Itoa(i)}
		cur = s.put(t, cur)
		ev, ok := fast.next(t, 10*time.Second)
		if !ok || ev.Type != "MODIFIED" || ev.Object.ResourceVersion != cur.ResourceVersion {
			t.Fatalf("update %d: the reading watcher got %v %s; want MODIFIED at %s", i, ok, ev, cur.ResourceVersion)
		}
	}
	// The slow watcher's stream ends short of the 40 updates (20 MiB).
	n, err := readAllBytes(slow)
	if err != nil {
		t.Fatalf("reading the slow watch: %v", err)
	}
	if n >= updates*len(value) {
		t.Errorf("the slow watcher received %d bytes, every update; want it cut off", n)
	}
}

func readAllBytes(resp *http.Response) (int, error) {
	buf := make([]byte, 64<<10)
	total := 0
	for {
		n, err := resp.Body.Read(buf)
		total += n
		if err != nil {
			if err.Error() == "EOF" {
				return total, nil
			}
			return total, err
		}
	}
}

// TestClientGoWatchProtobuf: client-go's typed Watch negotiates protobuf
// frames and sees every change.
func TestClientGoWatchProtobuf(t *testing.T) {
	s := startServer(t)
	client, err := kubernetes.NewForConfig(&rest.Config{Host: s.URL})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cms := client.CoreV1().ConfigMaps("default")
	created, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "a"}, Data: map[string]string{"k": "1"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := cms.Watch(ctx, metav1.ListOptions{ResourceVersion: created.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	created.Data["k"] = "2"
	updated, err := cms.Update(ctx, created, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := cms.Delete(ctx, "a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []watch.EventType{watch.Modified, watch.Deleted} {
		select {
		case ev := <-w.ResultChan():
			cm, ok := ev.Object.(*corev1.ConfigMap)
			if ev.Type != want || !ok || cm.Name != "a" || cm.Data["k"] != "2" {
				t.Fatalf("got %s %#v; want %s of a with k=2", ev.Type, ev.Object, want)
			}
			if want == watch.Modified && cm.ResourceVersion != updated.ResourceVersion {
				t.Errorf("MODIFIED at %s; want %s", cm.ResourceVersion, updated.ResourceVersion)
			}
		case <-ctx.Done():
			t.Fatalf("no %s event", want)
		}
	}
}

func TestStopWatchesEndsStreams(t *testing.T) {
	s := startServer(t)
	w := s.watch(t, nsPath, url.Values{"watch": {"1"}})
	w.quiet(t)
	for _, st := range s.Stores {
		st.StopWatches()
	}
	if ev, ok := w.next(t, 10*time.Second); ok {
		t.Fatalf("got %s; want the stream to end at shutdown", ev)
	}
	resp := s.do(t, http.MethodGet, nsPath+"?watch=1", nil)
	if st := resp.status(t); resp.Code != http.StatusServiceUnavailable || st.Reason != metav1.StatusReasonServiceUnavailable {
		t.Errorf("watch after shutdown began: %d %s; want 503 ServiceUnavailable", resp.Code, st.Reason)
	}
}

// TestFirstWatchAfterCompactionOnAFreshServer: a replica whose first watch
// comes after a compaction (few revisions, so the fan-out's replay would
// start below it) still answers an old revision with 410 and serves a
// current one.
func TestFirstWatchAfterCompactionOnAFreshServer(t *testing.T) {
	s := startServer(t)
	old := s.create(t, "default", "a", nil)
	s.create(t, "default", "b", nil)
	s.create(t, "default", "c", nil)
	s.compact(t) // the change right after old (b) is gone
	expired := s.watch(t, nsPath, url.Values{"watch": {"1"}, "resourceVersion": {old.ResourceVersion}})
	if ev, ok := expired.next(t, 10*time.Second); !ok || ev.Type != "ERROR" || ev.Status.Reason != metav1.StatusReasonExpired {
		t.Fatalf("watch from a compacted revision: %v %s %+v; want an ERROR event with 410 Expired", ok, ev, ev.Status)
	}
	_, list := s.list(t, nsPath, nil)
	live := s.watch(t, nsPath, url.Values{"watch": {"1"}, "resourceVersion": {list.ResourceVersion}})
	s.create(t, "default", "d", nil)
	live.expect(t, "ADDED default/d")
}

// TestFirstWatchOnAReplicaWithHistory: a replica's fan-out starts by
// replaying recent history; the first watches must not be cut off by that
// burst (150 changes, more than a watcher's queue holds).
func TestFirstWatchOnAReplicaWithHistory(t *testing.T) {
	s := startServer(t)
	c := s.create(t, "default", "busy", nil)
	for i := range 150 {
		c.Data = map[string]string{"i": strconv.Itoa(i)}
		c = s.put(t, c)
	}
	w := s.watch(t, nsPath, url.Values{"watch": {"1"}, "resourceVersion": {c.ResourceVersion}})
	from := s.watch(t, nsPath, url.Values{"watch": {"1"}, "resourceVersion": {strconv.Itoa(mustAtoi(t, c.ResourceVersion) - 120)}})
	c.Data = map[string]string{"i": "last"}
	last := s.put(t, c)
	if got := w.expect(t, "MODIFIED default/busy"); got[0].Object.ResourceVersion != last.ResourceVersion {
		t.Errorf("first watch got rv %s; want %s", got[0].Object.ResourceVersion, last.ResourceVersion)
	}
	n := 0
	for {
		ev, ok := from.next(t, 10*time.Second)
		if !ok {
			t.Fatalf("the watch from 120 changes back ended after %d events; want all 121", n)
		}
		n++
		if ev.Object.ResourceVersion == last.ResourceVersion {
			break
		}
	}
	if n != 121 {
		t.Errorf("watch from 120 changes back: %d events; want 121", n)
	}
}
