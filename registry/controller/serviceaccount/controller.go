// Package serviceaccount gives every namespace a "default" ServiceAccount,
// as kube-controller-manager's ServiceAccounts controller does: it creates
// the missing one in every active namespace, the existing namespaces at
// its start included, and creates it again when it is deleted. It never
// writes to a terminating namespace (it checks the namespace's phase, and
// the store refuses a create in a namespace that started terminating).
// It is driven by two watches, of Namespaces and of the ServiceAccounts
// named default; one replica runs it at a time (a Lease, cmd/concord).
package serviceaccount

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/concord-dev/concord/registry"
)

// DefaultName is the ServiceAccount every namespace gets.
const DefaultName = "default"

// fieldManager is who the created ServiceAccounts' managedFields name, as
// kube's controller runs in kube-controller-manager.
const fieldManager = "kube-controller-manager"

// Pauses before a watch is opened again and before a failed namespace is
// synced again.
const (
	rewatchDelay = 500 * time.Millisecond
	retryDelay   = time.Second
)

// Controller keeps the default ServiceAccounts.
type Controller struct {
	namespaces, serviceAccounts *registry.Store
	log                         *slog.Logger
}

// New returns the controller over the Namespace and ServiceAccount stores.
func New(namespaces, serviceAccounts *registry.Store, log *slog.Logger) *Controller {
	return &Controller{namespaces: namespaces, serviceAccounts: serviceAccounts, log: log}
}

// Run works until ctx ends.
func (c *Controller) Run(ctx context.Context) {
	q := newQueue()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		c.work(ctx, q)
	}()
	for ctx.Err() == nil {
		if err := c.watchOnce(ctx, q); err != nil && ctx.Err() == nil {
			c.log.Warn("serviceaccounts controller: a watch ended; watching again", "err", err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(rewatchDelay):
		}
	}
	wg.Wait()
}

// watchOnce watches the default ServiceAccounts (from now: a deletion
// queues its namespace) and then every namespace (from its current state:
// each is queued, so every start or restart syncs them all), until one of
// the watches ends.
func (c *Controller) watchOnce(ctx context.Context, q *queue) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	no, yes := false, true
	saWatch, err := c.serviceAccounts.Watch(ctx, "", &metainternalversion.ListOptions{
		Watch: true, SendInitialEvents: &no, ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan,
		FieldSelector: fields.OneTermEqualSelector("metadata.name", DefaultName),
	})
	if err != nil {
		return fmt.Errorf("watch serviceaccounts: %w", err)
	}
	nsWatch, err := c.namespaces.Watch(ctx, "", &metainternalversion.ListOptions{
		Watch: true, SendInitialEvents: &yes, ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan,
	})
	if err != nil {
		return fmt.Errorf("watch namespaces: %w", err)
	}
	errs := make(chan error, 2)
	go func() {
		errs <- saWatch.Run(ctx, func(ev watch.Event, _ *registry.Encodings) error {
			if sa, ok := ev.Object.(*corev1.ServiceAccount); ok && ev.Type == watch.Deleted {
				q.add(sa.Namespace)
			}
			return nil
		})
	}()
	go func() {
		errs <- nsWatch.Run(ctx, func(ev watch.Event, _ *registry.Encodings) error {
			if ns, ok := ev.Object.(*corev1.Namespace); ok && (ev.Type == watch.Added || ev.Type == watch.Modified) {
				q.add(ns.Name)
			}
			return nil
		})
	}()
	err = <-errs
	cancel()
	<-errs
	return err
}

// work syncs the queued namespaces one at a time until ctx ends; a failed
// one is queued again after retryDelay.
func (c *Controller) work(ctx context.Context, q *queue) {
	for {
		name, ok := q.next(ctx)
		if !ok {
			return
		}
		if err := c.sync(ctx, name); err != nil && ctx.Err() == nil {
			c.log.Warn("serviceaccounts controller: could not create the default ServiceAccount; will retry", "namespace", name, "err", err)
			time.AfterFunc(retryDelay, func() { q.add(name) })
		}
	}
}

// sync creates the default ServiceAccount of namespace if it is missing
// and the namespace is active.
func (c *Controller) sync(ctx context.Context, namespace string) error {
	obj, err := c.namespaces.Get(ctx, "", namespace)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if ns := obj.(*corev1.Namespace); ns.DeletionTimestamp != nil || ns.Status.Phase != corev1.NamespaceActive {
		return nil
	}
	_, err = c.serviceAccounts.Get(ctx, namespace, DefaultName)
	if err == nil {
		return nil
	}
	if !apierrors.IsNotFound(err) {
		return err
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: DefaultName, Namespace: namespace}}
	_, err = c.serviceAccounts.Create(ctx, namespace, sa, registry.WriteOptions{FieldManager: fieldManager})
	switch {
	case err == nil:
		c.log.Info("created the default ServiceAccount", "namespace", namespace)
		return nil
	// Created meanwhile; or the namespace started terminating or is gone.
	case apierrors.IsAlreadyExists(err), apierrors.IsForbidden(err), apierrors.IsNotFound(err):
		return nil
	}
	return err
}

// queue is a set of namespaces to sync: one queued twice is synced once.
type queue struct {
	mu      sync.Mutex
	pending []string
	queued  map[string]bool
	signal  chan struct{}
}

func newQueue() *queue {
	return &queue{queued: map[string]bool{}, signal: make(chan struct{}, 1)}
}

func (q *queue) add(name string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.queued[name] {
		return
	}
	q.queued[name] = true
	q.pending = append(q.pending, name)
	select {
	case q.signal <- struct{}{}:
	default:
	}
}

// next waits for a namespace to sync; ok is false when ctx ended.
func (q *queue) next(ctx context.Context) (string, bool) {
	for {
		q.mu.Lock()
		if len(q.pending) > 0 {
			name := q.pending[0]
			q.pending = q.pending[1:]
			delete(q.queued, name)
			q.mu.Unlock()
			return name, true
		}
		q.mu.Unlock()
		select {
		case <-ctx.Done():
			return "", false
		case <-q.signal:
		}
	}
}
