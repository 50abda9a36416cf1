// Package namespace deletes what is in a namespace being deleted,
// then lets the namespace go, as kube-controller-manager's namespace
// controller does. A DELETE of a namespace only marks it (deletionTimestamp,
// phase Terminating; the registry refuses new content from then on); this
// controller deletes the objects of every namespaced store the catalog
// serves, custom resources included, through the stores' own deletes (so
// their finalizers hold them, and the garbage collector's propagation
// applies), looks again until none is left, and then removes the
// "kubernetes" finalizer from spec.finalizers, a write that deletes the
// namespace when no other finalizer holds it. It is driven by a watch of
// Namespaces and retries with a bounded back-off while content remains;
// one replica runs it at a time (a Lease, cmd/concord).
package namespace

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/concord-dev/concord/registry"
)

// fieldManager is who the controller's writes name in managedFields, as
// kube's controller runs in kube-controller-manager.
const fieldManager = "kube-controller-manager"

// workers is how many namespaces are worked on at once.
const workers = 4

// Pauses: before a watch is opened again, and the first and the longest
// before a namespace whose content remains (or failed) is looked at again.
const (
	rewatchDelay = 500 * time.Millisecond
	minRetry     = 100 * time.Millisecond
	maxRetry     = 5 * time.Second
)

// Controller deletes the content of terminating namespaces.
type Controller struct {
	namespaces *registry.Store
	catalog    *registry.Catalog
	log        *slog.Logger
}

// New returns the controller over the Namespace store and the catalog,
// whose namespaced stores hold the content it deletes.
func New(namespaces *registry.Store, catalog *registry.Catalog, log *slog.Logger) *Controller {
	return &Controller{namespaces: namespaces, catalog: catalog, log: log}
}

// Run works until ctx ends.
func (c *Controller) Run(ctx context.Context) {
	q := newQueue()
	stop := context.AfterFunc(ctx, q.close)
	defer stop()
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.work(ctx, q)
		}()
	}
	for ctx.Err() == nil {
		if err := c.watchOnce(ctx, q); err != nil && ctx.Err() == nil {
			c.log.Warn("namespace controller: the watch of namespaces ended; watching again", "err", err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(rewatchDelay):
		}
	}
	q.close()
	wg.Wait()
}

// watchOnce watches every namespace from its current state (so a start or
// restart finds those left terminating) and queues each one being deleted,
// until the watch ends.
func (c *Controller) watchOnce(ctx context.Context, q *queue) error {
	yes := true
	w, err := c.namespaces.Watch(ctx, "", &metainternalversion.ListOptions{
		Watch: true, SendInitialEvents: &yes, ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan,
	})
	if err != nil {
		return fmt.Errorf("watch namespaces: %w", err)
	}
	return w.Run(ctx, func(ev watch.Event, _ *registry.Encodings) error {
		if ns, ok := ev.Object.(*corev1.Namespace); ok && ev.Type != watch.Deleted && ns.DeletionTimestamp != nil {
			q.add(ns.Name)
		}
		return nil
	})
}

// work syncs queued namespaces until the queue closes; one not done is
// looked at again after a back-off that doubles up to maxRetry, or sooner
// when the watch sees it change.
func (c *Controller) work(ctx context.Context, q *queue) {
	for {
		name, ok := q.next()
		if !ok {
			return
		}
		done, err := c.sync(ctx, name)
		switch {
		case ctx.Err() != nil:
		case err != nil:
			c.log.Warn("namespace controller: could not finish deleting a namespace; will retry", "namespace", name, "err", err)
			q.retry(name)
		case !done:
			q.retry(name)
		default:
			q.forget(name)
		}
		q.done(name)
	}
}

// sync works on one namespace: done when it is gone, not being deleted, or
// finalized by this controller.
func (c *Controller) sync(ctx context.Context, name string) (done bool, _ error) {
	obj, err := c.namespaces.Get(ctx, "", name)
	if apierrors.IsNotFound(err) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	ns := obj.(*corev1.Namespace)
	if ns.DeletionTimestamp == nil {
		return true, nil
	}
	kubernetes := slices.Contains(ns.Spec.Finalizers, corev1.FinalizerKubernetes)
	if !kubernetes && len(ns.Spec.Finalizers) > 0 {
		return true, nil // another finalizer holds it; not this controller's
	}
	remaining, err := c.deleteContent(ctx, name)
	if err != nil {
		return false, err
	}
	if remaining > 0 {
		c.log.Debug("namespace controller: content remains", "namespace", name, "objects", remaining)
		return false, nil
	}
	if !kubernetes {
		// Stored by a Concord that did not add kube's finalizer: deleted as
		// kube deletes a finalized namespace.
		uid := ns.UID
		_, err := c.namespaces.Delete(ctx, "", name, &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}}, registry.WriteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return false, err
		}
		return true, nil
	}
	ns = ns.DeepCopy()
	ns.Spec.Finalizers = slices.DeleteFunc(ns.Spec.Finalizers, func(f corev1.FinalizerName) bool { return f == corev1.FinalizerKubernetes })
	// Guarded by the resourceVersion read: a namespace changed meanwhile
	// (409) is looked at again.
	if _, err := c.namespaces.Finalize(ctx, name, ns, registry.WriteOptions{FieldManager: fieldManager}); err != nil && !apierrors.IsNotFound(err) {
		return false, err
	}
	c.log.Info("namespace controller: deleted the content of a namespace", "namespace", name)
	return true, nil
}

// deleteContent deletes the objects of namespace in every namespaced store
// the catalog serves, in the background as kube's controller does, and
// returns how many are left (held by finalizers, or still going). What is
// there is read by linearizable lists (at a revision after the namespace
// was seen deleting), never from a watch that may lag, and no object can
// be created in it since: "none left" misses nothing.
func (c *Controller) deleteContent(ctx context.Context, namespace string) (remaining int, _ error) {
	background := metav1.DeletePropagationBackground
	var errs []error
	for _, s := range c.catalog.Stores() {
		res := s.Resource
		// A resource served in another version of stored objects holds
		// none of its own; a create-only one stores nothing.
		if !res.Namespaced || res.Storage != nil || res.CreateOnly {
			continue
		}
		deleted, err := s.DeleteCollection(ctx, namespace, &metainternalversion.ListOptions{}, &metav1.DeleteOptions{PropagationPolicy: &background}, registry.WriteOptions{FieldManager: fieldManager})
		if err != nil {
			errs = append(errs, fmt.Errorf("delete %s: %w", res.GroupResource(), err))
			continue
		}
		if meta.LenList(deleted) == 0 {
			continue // none was there, and none can be created
		}
		left, err := s.List(ctx, namespace, &metainternalversion.ListOptions{})
		if err != nil {
			errs = append(errs, fmt.Errorf("list %s: %w", res.GroupResource(), err))
			continue
		}
		remaining += meta.LenList(left)
	}
	return remaining, errors.Join(errs...)
}

// queue is a set of namespaces to sync: one queued twice is synced once,
// and one queued while a worker has it is synced again after.
type queue struct {
	mu       sync.Mutex
	cond     *sync.Cond
	pending  []string
	queued   map[string]bool
	active   map[string]bool
	dirty    map[string]bool
	attempts map[string]int
	closed   bool
}

func newQueue() *queue {
	q := &queue{queued: map[string]bool{}, active: map[string]bool{}, dirty: map[string]bool{}, attempts: map[string]int{}}
	q.cond = sync.NewCond(&q.mu)
	return q
}

func (q *queue) add(name string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	switch {
	case q.closed || q.queued[name]:
	case q.active[name]:
		q.dirty[name] = true
	default:
		q.queued[name] = true
		q.pending = append(q.pending, name)
		q.cond.Signal()
	}
}

// next waits for a namespace to sync; ok is false once the queue closed.
func (q *queue) next() (_ string, ok bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.pending) == 0 && !q.closed {
		q.cond.Wait()
	}
	if q.closed {
		return "", false
	}
	name := q.pending[0]
	q.pending = q.pending[1:]
	delete(q.queued, name)
	q.active[name] = true
	return name, true
}

// done ends a worker's sync of name; queued meanwhile, it is queued now.
func (q *queue) done(name string) {
	q.mu.Lock()
	delete(q.active, name)
	again := q.dirty[name]
	delete(q.dirty, name)
	q.mu.Unlock()
	if again {
		q.add(name)
	}
}

// retry queues name again after its next back-off.
func (q *queue) retry(name string) {
	q.mu.Lock()
	n := q.attempts[name]
	q.attempts[name] = n + 1
	q.mu.Unlock()
	delay := maxRetry
	if n < 10 && minRetry<<n < maxRetry {
		delay = minRetry << n
	}
	time.AfterFunc(delay, func() { q.add(name) })
}

// forget resets name's back-off.
func (q *queue) forget(name string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	delete(q.attempts, name)
}

func (q *queue) close() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.closed = true
	q.cond.Broadcast()
}
