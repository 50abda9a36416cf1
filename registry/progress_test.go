package registry

import (
	"context"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/concord-dev/concord/etcdstore"
	"github.com/concord-dev/concord/etcdstore/etcdtest"
)

// TestRequestWatchProgress: a watcher of Secrets that allows bookmarks
// gets, once RequestWatchProgress is called, a BOOKMARK at a revision at
// least that of a later write to another resource (ConfigMaps), well
// before the periodic bookmark (a minute).
func TestRequestWatchProgress(t *testing.T) {
	e := etcdtest.Start(t)
	stores := NewStores(etcdstore.New(e.Client, "/registry"), DefaultWatchConfig())
	for _, s := range stores {
		t.Cleanup(s.StopWatches)
	}
	ctx := testCtx(t)
	if err := EnsureSystemNamespaces(ctx, stores); err != nil {
		t.Fatal(err)
	}
	var secrets, configMaps *Store
	for _, s := range stores {
		switch s.Resource {
		case Secrets:
			secrets = s
		case ConfigMaps:
			configMaps = s
		}
	}
	yes := true
	w, err := secrets.Watch(ctx, "", &metainternalversion.ListOptions{Watch: true, SendInitialEvents: &yes, ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan, AllowWatchBookmarks: true})
	if err != nil {
		t.Fatal(err)
	}
	bookmarks := make(chan int64, 16)
	wctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = w.Run(wctx, func(ev watch.Event, _ *Encodings) error {
			if ev.Type == watch.Bookmark {
				obj, _ := meta.Accessor(ev.Object)
				rev, _ := strconv.ParseInt(obj.GetResourceVersion(), 10, 64)
				bookmarks <- rev
			}
			return nil
		})
	}()
	t.Cleanup(func() { stop(); <-done })
	initialEnd := <-bookmarks

	cm, err := configMaps.Create(ctx, "default", &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "elsewhere"}}, WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	written, _ := strconv.ParseInt(cm.GetResourceVersion(), 10, 64)
	if written <= initialEnd {
		t.Fatalf("the ConfigMap's revision %d is not after the watch's start %d", written, initialEnd)
	}
	deadline := time.After(10 * time.Second)
	ask := time.NewTicker(100 * time.Millisecond)
	defer ask.Stop()
	for {
		if err := secrets.RequestWatchProgress(); err != nil {
			t.Fatalf("RequestWatchProgress: %v", err)
		}
		select {
		case rev := <-bookmarks:
			if rev >= written {
				return
			}
		case <-ask.C:
		case <-deadline:
			t.Fatalf("no BOOKMARK at revision %d or later within 10s of asking for progress", written)
		}
	}
}
