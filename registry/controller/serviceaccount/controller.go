// Package serviceaccount gives every namespace a "default" ServiceAccount,
// as kube-controller-manager's ServiceAccounts controller does: it creates
// the missing one in every active namespace, the existing namespaces at
// its start included, and creates it again when it is deleted. It never
// writes to a terminating namespace (it checks the namespace's phase, and
// the store refuses a create in a namespace that started terminating).
// It is driven by two watches, of Namespaces and of ServiceAccounts (the
// deletions of those named default); one replica runs it at a time (a
// Lease, cmd/concord).
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
	"k8s.io/apimachinery/pkg/watch"

	"github.com/concord-dev/concord/registry"
	"github.com/concord-dev/concord/registry/controller"
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
	// One worker; a failed namespace is synced again after retryDelay.
	q := controller.NewQueue[string](controller.QueueOptions{Name: "serviceaccounts controller", Log: c.log, MinRetry: retryDelay, MaxRetry: retryDelay})
	opts := controller.WatchOptions{Name: "serviceaccounts controller", Log: c.log, RewatchDelay: rewatchDelay}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		q.Run(ctx, 1, func(ctx context.Context, namespace string) (bool, error) {
			return true, c.sync(ctx, namespace)
		})
	}()
	// Every namespace from its current state (each is queued, so every
	// start or restart syncs them all), then each one created or changed.
	go func() {
		defer wg.Done()
		controller.Watch(ctx, c.namespaces, opts, controller.Handler[*corev1.Namespace]{
			Event: func(_ context.Context, typ watch.EventType, ns *corev1.Namespace, _ bool) error {
				if typ == watch.Added || typ == watch.Modified {
					q.Add(ns.Name)
				}
				return nil
			},
		})
	}()
	// A deleted default ServiceAccount queues its namespace. One deleted
	// while no watch of them ran is not seen: every namespace is queued
	// each time the watch opens.
	controller.Watch(ctx, c.serviceAccounts, opts, controller.Handler[*corev1.ServiceAccount]{
		Event: func(_ context.Context, typ watch.EventType, sa *corev1.ServiceAccount, _ bool) error {
			if typ == watch.Deleted && sa.Name == DefaultName {
				q.Add(sa.Namespace)
			}
			return nil
		},
		Synced: func(ctx context.Context, _ int64) error {
			list, err := c.namespaces.List(ctx, "", &metainternalversion.ListOptions{})
			if err != nil {
				return fmt.Errorf("list namespaces: %w", err)
			}
			for _, ns := range list.(*corev1.NamespaceList).Items {
				q.Add(ns.Name)
			}
			return nil
		},
	})
	wg.Wait()
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
