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
	"github.com/concord-dev/concord/registry/controller"
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
	q := controller.NewQueue[string](controller.QueueOptions{Name: "namespace controller", Log: c.log, MinRetry: minRetry, MaxRetry: maxRetry})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		q.Run(ctx, workers, c.sync)
	}()
	// Every namespace from its current state, so a start or restart finds
	// those left terminating; a namespace not done is looked at again
	// after its back-off, or sooner when the watch sees it change.
	controller.Watch(ctx, c.namespaces, controller.WatchOptions{Name: "namespace controller", Log: c.log, RewatchDelay: rewatchDelay}, controller.Handler[*corev1.Namespace]{
		Event: func(_ context.Context, typ watch.EventType, ns *corev1.Namespace, _ bool) error {
			if typ != watch.Deleted && ns.DeletionTimestamp != nil {
				q.Add(ns.Name)
			}
			return nil
		},
	})
	wg.Wait()
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
