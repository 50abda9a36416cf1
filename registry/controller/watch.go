package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/concord-dev/concord/registry"
)

// DefaultRewatchDelay is the pause before a watch that ended is opened
// again.
const DefaultRewatchDelay = 500 * time.Millisecond

// Handler is what a controller does with the objects of a store, of type
// T (a concrete type such as *corev1.Namespace, or registry.Object for
// any). Nil funcs are skipped.
type Handler[T any] struct {
	// Opened is called each time the watch opens, before its first
	// object: a handler that keeps state of one opening starts it anew.
	Opened func(ctx context.Context) error
	// Event is called for each object present when the watch opens (type
	// Added, initial true) and then for every change (Added, Modified,
	// Deleted; initial false). A Deleted event carries the object's last
	// state.
	Event func(ctx context.Context, typ watch.EventType, obj T, initial bool) error
	// Synced is called when every object present when the watch opened has
	// been handed to Event: the handler has seen the store as it was at
	// revision rev. A handler that keeps state replaces it with what it
	// saw since the watch opened: an object deleted while no watch ran was
	// not among it. Called again after every reopening.
	Synced func(ctx context.Context, rev int64) error
	// Progress is called for each bookmark after Synced: every change up to
	// revision rev has been handed to Event.
	Progress func(ctx context.Context, rev int64) error
}

// WatchOptions name the watch in logs and pace its reopening.
type WatchOptions struct {
	// Name says whose watch it is in logs ("namespace controller").
	Name string
	Log  *slog.Logger
	// RewatchDelay is the pause before reopening; zero is
	// DefaultRewatchDelay.
	RewatchDelay time.Duration
}

// Watch hands the objects of store and their changes to h until ctx ends
// or the store's watches are stopped. An error from h ends the watch, which
// is opened again (from the current state, so nothing is missed) after
// RewatchDelay, as when etcd ends it.
func Watch[T any](ctx context.Context, store *registry.Store, opts WatchOptions, h Handler[T]) {
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.RewatchDelay <= 0 {
		opts.RewatchDelay = DefaultRewatchDelay
	}
	for ctx.Err() == nil && !store.WatchesStopped() {
		if err := WatchOnce(ctx, store, h); err != nil && ctx.Err() == nil && !store.WatchesStopped() {
			opts.Log.Warn(opts.Name+": the watch ended; watching again", "resource", store.Resource.GroupResource().String(), "err", err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(opts.RewatchDelay):
		}
	}
}

// WatchOnce is one watch of Watch: it returns when the watch ends, with
// why (nil when ctx ended or the store stopped its watches).
func WatchOnce[T any](ctx context.Context, store *registry.Store, h Handler[T]) error {
	yes := true
	w, err := store.Watch(ctx, "", &metainternalversion.ListOptions{
		Watch: true, SendInitialEvents: &yes, AllowWatchBookmarks: true,
		ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan,
	})
	if err != nil {
		return fmt.Errorf("watch %s: %w", store.Resource.GroupResource(), err)
	}
	if h.Opened != nil {
		if err := h.Opened(ctx); err != nil {
			w.Stop()
			return err
		}
	}
	initial := true
	return w.Run(ctx, func(ev watch.Event, _ *registry.Encodings) error {
		switch ev.Type {
		case watch.Error:
			return fmt.Errorf("watch of %s: %w", store.Resource.GroupResource(), apierrors.FromObject(ev.Object))
		case watch.Bookmark:
			rev, err := revisionOf(ev.Object)
			if err != nil {
				return fmt.Errorf("watch of %s: bookmark: %w", store.Resource.GroupResource(), err)
			}
			if initial {
				initial = false
				return call(h.Synced, ctx, rev)
			}
			return call(h.Progress, ctx, rev)
		}
		obj, ok := ev.Object.(T)
		if !ok {
			return fmt.Errorf("watch of %s sent a %T", store.Resource.GroupResource(), ev.Object)
		}
		if h.Event == nil {
			return nil
		}
		return h.Event(ctx, ev.Type, obj, initial)
	})
}

func call(f func(context.Context, int64) error, ctx context.Context, rev int64) error {
	if f == nil {
		return nil
	}
	return f(ctx, rev)
}

// revisionOf is the etcd revision an object's resourceVersion names.
func revisionOf(obj any) (int64, error) {
	m, err := meta.Accessor(obj)
	if err != nil {
		return 0, err
	}
	rev, err := strconv.ParseInt(m.GetResourceVersion(), 10, 64)
	if err != nil {
		return 0, errors.New("resourceVersion " + strconv.Quote(m.GetResourceVersion()) + " is not a revision")
	}
	return rev, nil
}
