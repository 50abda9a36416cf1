// Package crdcleanup deletes the custom objects of a CRD that is being
// deleted, then lets the CRD go, as kube-apiserver's CRD finalizer
// controller does: a CRD's delete only marks it (registry's DeleteMarker
// adds the customresourcecleanup finalizer and the Terminating condition);
// this deletes every object of its resource through the registry (their
// watchers see each one DELETED), and removes the finalizer once none is
// left, which deletes the CRD. Every replica runs it, as every
// kube-apiserver does: the deletes and the status writes are guarded, so
// replicas that race only repeat each other's work.
package crdcleanup

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/concord-dev/concord/registry"
)

// interval is how often the CRDs being deleted are looked for.
const interval = 500 * time.Millisecond

// NewStore makes a store of a custom resource over storage, as the served
// ones are made.
type NewStore func(storage registry.Storage, res *registry.Resource) *registry.Store

// Controller cleans up deleted CRDs.
type Controller struct {
	crds     *registry.Store
	storage  registry.Storage
	newStore NewStore
	log      *slog.Logger
}

// New returns the cleanup of the CRDs in crds, whose objects are in
// storage.
func New(crds *registry.Store, storage registry.Storage, newStore NewStore, log *slog.Logger) *Controller {
	return &Controller{crds: crds, storage: storage, newStore: newStore, log: log}
}

// Run works until ctx ends.
func (c *Controller) Run(ctx context.Context) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		list, err := c.crds.List(ctx, "", &metainternalversion.ListOptions{})
		if err != nil {
			continue // etcd is unavailable: the next round tries again
		}
		items, _ := meta.ExtractList(list)
		for _, item := range items {
			crd := item.(*apiextensionsv1.CustomResourceDefinition)
			if crd.DeletionTimestamp == nil || !slices.Contains(crd.Finalizers, registry.CustomResourceCleanupFinalizer) {
				continue
			}
			if err := c.cleanup(ctx, crd); err != nil && ctx.Err() == nil {
				c.log.Warn("CRD cleanup: will try again", "crd", crd.Name, "err", err)
			}
		}
	}
}

// cleanup deletes crd's objects and, when none is left, its finalizer.
func (c *Controller) cleanup(ctx context.Context, crd *apiextensionsv1.CustomResourceDefinition) error {
	remaining, err := c.deleteObjects(ctx, crd)
	next := crd.DeepCopy()
	switch {
	case err != nil:
		registry.SetCRDCondition(next, condition("InstanceDeletionFailed", fmt.Sprintf("could not issue all deletes: %v", err)), time.Now())
	case remaining > 0:
		// Objects with finalizers of their own: they go when those do.
		registry.SetCRDCondition(next, condition("InstanceDeletionInProgress", "CustomResource deletion is in progress"), time.Now())
	default:
		registry.SetCRDCondition(next, condition("InstanceDeletionCompleted", "removed all instances"), time.Now())
		next.Finalizers = slices.DeleteFunc(next.Finalizers, func(f string) bool { return f == registry.CustomResourceCleanupFinalizer })
	}
	if _, werr := c.crds.UpdateStatus(ctx, "", crd.Name, next, registry.WriteOptions{FieldManager: registry.ServerFieldManager}); werr != nil && !apierrors.IsConflict(werr) && !apierrors.IsNotFound(werr) {
		return werr
	}
	if err == nil && remaining == 0 {
		c.log.Info("CRD deleted with all its custom objects", "crd", crd.Name)
	}
	return err
}

// deleteObjects deletes every object of crd's resource and returns how
// many are still there (held by finalizers).
func (c *Controller) deleteObjects(ctx context.Context, crd *apiextensionsv1.CustomResourceDefinition) (remaining int, _ error) {
	version := ""
	for _, v := range crd.Spec.Versions {
		if v.Storage {
			version = v.Name
		}
	}
	res, err := registry.CustomResource(crd, version)
	if err != nil {
		return 0, err
	}
	store := c.newStore(c.storage, res)
	defer store.StopWatches()
	list, err := store.List(ctx, "", &metainternalversion.ListOptions{})
	if err != nil {
		return 0, err
	}
	items, err := meta.ExtractList(list)
	if err != nil {
		return 0, err
	}
	for _, item := range items {
		obj := item.(registry.Object)
		if obj.GetDeletionTimestamp() != nil {
			remaining++
			continue
		}
		uid := obj.GetUID()
		_, err := store.Delete(ctx, obj.GetNamespace(), obj.GetName(), &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}}, registry.WriteOptions{})
		switch {
		case err == nil:
			if len(obj.GetFinalizers()) > 0 {
				remaining++
			}
		case apierrors.IsNotFound(err), apierrors.IsConflict(err):
			// Gone already, or replaced by another object of its name:
			// the next round sees it.
		default:
			return remaining, err
		}
	}
	return remaining, nil
}

func condition(reason, message string) apiextensionsv1.CustomResourceDefinitionCondition {
	return apiextensionsv1.CustomResourceDefinitionCondition{Type: apiextensionsv1.Terminating, Status: apiextensionsv1.ConditionTrue, Reason: reason, Message: message}
}
