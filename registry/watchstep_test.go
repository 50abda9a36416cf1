package registry

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

// TestWatchStepReadyStop: a caller that waits on Ready itself and calls
// Step gets every change in order; Stop wakes it, Step then reports the
// end, and the watch has left the fan-out. A watch stopped without ever
// running leaves it too.
func TestWatchStepReadyStop(t *testing.T) {
	f := newCatalogFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	namespaces, _ := f.catalog.Lookup("", "v1", "namespaces")
	if _, err := namespaces.Create(ctx, "", &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	cms, _ := f.catalog.Lookup("", "v1", "configmaps")
	subscribers := func() int {
		cms.watch.mu.Lock()
		defer cms.watch.mu.Unlock()
		return len(cms.watch.subs)
	}
	w, err := cms.Watch(ctx, "default", &metainternalversion.ListOptions{ResourceVersion: "0"})
	if err != nil {
		t.Fatal(err)
	}
	idle, err := cms.Watch(ctx, "default", &metainternalversion.ListOptions{ResourceVersion: "0"})
	if err != nil {
		t.Fatal(err)
	}
	if n := subscribers(); n != 2 {
		t.Fatalf("%d subscribers; want 2", n)
	}
	idle.Stop()
	if n := subscribers(); n != 1 {
		t.Fatalf("%d subscribers after a Stop before any Run; want 1", n)
	}

	const n = 10
	for i := range n {
		if _, err := cms.Create(ctx, "default", &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%d", i)}}, WriteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	send := func(ev watch.Event, _ *Encodings) error {
		if ev.Type == watch.Added {
			got = append(got, ev.Object.(*corev1.ConfigMap).Name)
		}
		return nil
	}
	for len(got) < n {
		more, err := w.Step(ctx, send)
		if !more || err != nil {
			t.Fatalf("Step = %v, %v after %d events; want more", more, err, len(got))
		}
		if len(got) < n {
			select {
			case <-w.Ready():
			case <-ctx.Done():
				t.Fatalf("got %v; want %d events", got, n)
			}
		}
	}
	for i, name := range got {
		if want := fmt.Sprintf("cm-%d", i); name != want {
			t.Fatalf("events %v; want cm-0 … cm-%d in order", got, n-1)
		}
	}

	woke := make(chan struct{})
	go func() {
		<-w.Ready()
		close(woke)
	}()
	w.Stop()
	select {
	case <-woke:
	case <-ctx.Done():
		t.Fatal("Stop did not wake the waiter on Ready")
	}
	if more, err := w.Step(ctx, send); more || err != nil {
		t.Errorf("Step after Stop = %v, %v; want the end", more, err)
	}
	if n := subscribers(); n != 0 {
		t.Errorf("%d subscribers after Stop; want 0", n)
	}
}
