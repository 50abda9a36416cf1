package controller_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/concord-dev/concord/registry/controller"
)

// TestWatchOpened: Opened comes before the objects of every opening, the
// first and each reopening after the watch ended.
func TestWatchOpened(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cms, create := configMaps(t, ctx)
	create("a")

	var rec recorder
	var failOnce atomic.Bool
	failOnce.Store(true)
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		controller.Watch(runCtx, cms, controller.WatchOptions{Name: "test", RewatchDelay: 10 * time.Millisecond}, controller.Handler[*corev1.ConfigMap]{
			Opened: func(context.Context) error {
				rec.add("opened")
				return nil
			},
			Event: func(_ context.Context, typ watch.EventType, cm *corev1.ConfigMap, initial bool) error {
				if cm.Name == "fail" && failOnce.Swap(false) {
					return errors.New("handler failed")
				}
				if initial {
					rec.add("initial " + cm.Name)
				}
				return nil
			},
			Synced: func(context.Context, int64) error {
				rec.add("synced")
				return nil
			},
		})
	}()
	rec.await(t, "opened", "initial a", "synced")
	create("fail")
	rec.await(t, "opened", "initial a", "synced", "opened", "initial a", "initial fail", "synced")
	stop()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Watch did not return after its context ended")
	}
}
