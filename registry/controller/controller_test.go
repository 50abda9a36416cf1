package controller_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/concord-dev/concord/etcdstore"
	"github.com/concord-dev/concord/etcdstore/etcdtest"
	"github.com/concord-dev/concord/registry"
	"github.com/concord-dev/concord/registry/controller"
)

// recorder keeps what a Handler was handed, as lines.
type recorder struct {
	mu    sync.Mutex
	lines []string
}

func (r *recorder) add(s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lines = append(r.lines, s)
}

func (r *recorder) snapshot() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.lines)
}

// await waits (10 s at most) until the recorded lines end with want.
func (r *recorder) await(t *testing.T, want ...string) {
	t.Helper()
	var got []string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if got = r.snapshot(); len(got) >= len(want) && slices.Equal(got[len(got)-len(want):], want) {
			return
		}
	}
	t.Fatalf("handled %q; want it to end with %q", got, want)
}

// configMaps is the ConfigMap store over a real etcd of the test's, with
// the system namespaces, and a create of a ConfigMap name in default.
func configMaps(t *testing.T, ctx context.Context) (*registry.Store, func(name string)) {
	t.Helper()
	e := etcdtest.Start(t)
	stores := registry.NewStores(etcdstore.New(e.Client, "/registry"), registry.DefaultWatchConfig())
	cms, _ := registry.NewCatalog(stores).Lookup("", "v1", "configmaps")
	if err := registry.EnsureSystemNamespaces(ctx, stores); err != nil {
		t.Fatal(err)
	}
	return cms, func(name string) {
		t.Helper()
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}}
		if _, err := cms.Create(ctx, "default", cm, registry.WriteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestWatch: the objects present first, then Synced, then every change; a
// handler error ends the watch, which opens again from the current state
// (Synced again, after the objects as they are then).
func TestWatch(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cms, create := configMaps(t, ctx)
	create("a")
	create("b")

	var rec recorder
	var failOnce atomic.Bool
	failOnce.Store(true)
	var synced atomic.Int64
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		controller.Watch(runCtx, cms, controller.WatchOptions{Name: "test", RewatchDelay: 10 * time.Millisecond}, controller.Handler[*corev1.ConfigMap]{
			Event: func(_ context.Context, typ watch.EventType, cm *corev1.ConfigMap, initial bool) error {
				if cm.Name == "fail" && failOnce.Swap(false) {
					return errors.New("handler failed")
				}
				prefix := ""
				if initial {
					prefix = "initial "
				}
				rec.add(prefix + string(typ) + " " + cm.Name)
				return nil
			},
			Synced: func(_ context.Context, rev int64) error {
				if rev <= 0 {
					t.Errorf("Synced at revision %d", rev)
				}
				synced.Store(rev)
				rec.add("synced")
				return nil
			},
		})
	}()
	rec.await(t, "initial ADDED a", "initial ADDED b", "synced")
	create("c")
	rec.await(t, "ADDED c")
	if _, err := cms.Delete(ctx, "default", "a", &metav1.DeleteOptions{}, registry.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	rec.await(t, "DELETED a")
	// The handler fails on "fail": the watch opens again and hands over
	// the store as it is now, "fail" included.
	create("fail")
	rec.await(t, "initial ADDED b", "initial ADDED c", "initial ADDED fail", "synced")
	stop()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Watch did not return after its context ended")
	}
}

// TestQueue: an item added while queued is worked on once, one not done is
// worked on again after its back-off, and no two workers hold one item.
func TestQueue(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	q := controller.NewQueue[string](controller.QueueOptions{Name: "test", MinRetry: time.Millisecond, MaxRetry: 10 * time.Millisecond})
	var mu sync.Mutex
	counts := map[string]int{}
	holding := map[string]bool{}
	allDone := make(chan struct{})
	for _, item := range []string{"x", "y", "x", "x", "retry"} {
		q.Add(item)
	}
	runCtx, stop := context.WithCancel(ctx)
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		q.Run(runCtx, 4, func(_ context.Context, item string) (bool, error) {
			mu.Lock()
			if holding[item] {
				t.Errorf("two workers hold %q", item)
			}
			holding[item] = true
			counts[item]++
			n := counts[item]
			mu.Unlock()
			time.Sleep(time.Millisecond)
			mu.Lock()
			holding[item] = false
			mu.Unlock()
			if item == "retry" && n < 3 {
				if n == 1 {
					return false, errors.New("failed once")
				}
				return false, nil
			}
			if item == "retry" {
				close(allDone)
			}
			return true, nil
		})
	}()
	select {
	case <-allDone:
	case <-ctx.Done():
		t.Fatal("the item not done was not worked on again")
	}
	stop()
	select {
	case <-finished:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
	mu.Lock()
	defer mu.Unlock()
	if counts["x"] != 1 || counts["y"] != 1 || counts["retry"] != 3 {
		t.Errorf("worked on %v; want x and y once, retry 3 times", counts)
	}
}

// TestWatchPrefix: the keys under a prefix in pages, then Synced at their
// revision, changes in batches (a deletion's value nil), progress reports
// asked for, and after a watch ended (Ended) every key again.
func TestWatchPrefix(t *testing.T) {
	e := etcdtest.Start(t)
	storage := etcdstore.New(e.Client, "/registry")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	put := func(name string) int64 {
		t.Helper()
		rev, err := storage.Create(ctx, etcdstore.Ref{Resource: "things", Name: name}, []byte("v-"+name))
		if err != nil {
			t.Fatal(err)
		}
		return rev
	}
	put("a")
	last := put("b")

	var rec recorder
	var failOnce atomic.Bool
	failOnce.Store(true)
	watches := make(chan *controller.PrefixWatch, 10)
	var synced atomic.Int64
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		controller.WatchPrefix(runCtx, storage, "things", controller.WatchOptions{Name: "test", RewatchDelay: 10 * time.Millisecond}, controller.PrefixHandler{
			Event: func(_ context.Context, kvs []controller.KV, initial bool) error {
				for _, kv := range kvs {
					if kv.Key == "fail" && failOnce.Swap(false) {
						return errors.New("handler failed")
					}
					prefix := ""
					if initial {
						prefix = "initial "
					}
					rec.add(fmt.Sprintf("%s%s=%s@%d", prefix, kv.Key, kv.Value, kv.Revision))
				}
				return nil
			},
			Synced: func(_ context.Context, rev int64, w *controller.PrefixWatch) error {
				synced.Store(rev)
				watches <- w
				rec.add("synced")
				return nil
			},
			Progress: func(_ context.Context, rev int64) error {
				rec.add(fmt.Sprintf("progress %d", rev))
				return nil
			},
			Ended: func(err error) { rec.add(fmt.Sprintf("ended: %v", err)) },
		})
	}()
	rec.await(t, "initial a=v-a@"+strconv.FormatInt(last-1, 10), "initial b=v-b@"+strconv.FormatInt(last, 10), "synced")
	if got := synced.Load(); got != last {
		t.Errorf("Synced at revision %d; want %d", got, last)
	}
	c := put("c")
	rec.await(t, "c=v-c@"+strconv.FormatInt(c, 10))
	del, err := storage.Delete(ctx, etcdstore.Ref{Resource: "things", Name: "a"}, last-1)
	if err != nil {
		t.Fatal(err)
	}
	rec.await(t, "a=@"+strconv.FormatInt(del, 10))
	if err := (<-watches).RequestProgress(); err != nil {
		t.Fatal(err)
	}
	rec.await(t, "progress "+strconv.FormatInt(del, 10))
	// The handler fails on "fail": every key is read again.
	f := put("fail")
	rec.await(t, "ended: handler failed", "initial b=v-b@"+strconv.FormatInt(last, 10), "initial c=v-c@"+strconv.FormatInt(c, 10),
		"initial fail=v-fail@"+strconv.FormatInt(f, 10), "synced")
	stop()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("WatchPrefix did not return after its context ended")
	}
}
