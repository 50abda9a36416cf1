package registry

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/concord-dev/concord/etcdstore"
)

// createIn stores a new object. A namespaced object is created only while
// its namespace exists and is active: the create transaction is guarded by
// the namespace's revision, so a namespace that starts terminating at the
// same moment cannot be left with new content.
// With dryRun it checks all that and that the name is free, and writes
// nothing.
func (s *Store) createIn(ctx context.Context, namespace, name string, value []byte, dryRun bool) (int64, error) {
	gr := s.Resource.GroupResource()
	if dryRun {
		_, err := s.storage.Get(ctx, s.ref(namespace, name), 0)
		if err == nil {
			return 0, apierrors.NewAlreadyExists(gr, name)
		}
		if !errors.Is(err, etcdstore.ErrNotFound) {
			return 0, toStatus(err, gr, name)
		}
	}
	if !s.Resource.Namespaced {
		if dryRun {
			return 0, nil
		}
		rev, err := s.storage.Create(ctx, s.ref("", name), value)
		if err != nil {
			return 0, toStatus(err, gr, name)
		}
		return rev, nil
	}
	nsRef := etcdstore.Ref{Resource: Namespaces.Plural, Name: namespace}
	for attempt := range maxWriteAttempts {
		// The namespace's remembered state may guard the first attempt: if
		// it is stale, the guarded transaction fails and etcd is read.
		stored, obj, remembered, err := s.namespaces.readForWrite(ctx, "", namespace, attempt == 0)
		if err != nil {
			return 0, toStatus(err, Namespaces.GroupResource(), namespace)
		}
		if ns := obj.(*corev1.Namespace); ns.Status.Phase == corev1.NamespaceTerminating || ns.DeletionTimestamp != nil {
			if remembered {
				continue
			}
			return 0, apierrors.NewForbidden(gr, name, fmt.Errorf("unable to create new content in namespace %s because it is being terminated", namespace))
		}
		if dryRun {
			return 0, nil
		}
		rev, err := s.storage.Create(ctx, s.ref(namespace, name), value, etcdstore.Guard{Ref: nsRef, Revision: stored.Revision})
		if errors.Is(err, etcdstore.ErrConflict) {
			continue // the namespace changed: look at it again
		}
		if err != nil {
			return 0, toStatus(err, gr, name)
		}
		return rev, nil
	}
	return 0, apierrors.NewConflict(gr, name, errors.New(OptimisticLockErrorMsg))
}

// EnsureSystemNamespaces creates default, kube-system, kube-public and
// kube-node-lease if they are missing; every replica runs it at start-up.
func EnsureSystemNamespaces(ctx context.Context, stores []*Store) error {
	for _, s := range stores {
		if !s.Resource.IsNamespace {
			continue
		}
		for _, name := range SystemNamespaces {
			ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
			if _, err := s.Create(ctx, "", ns, WriteOptions{FieldManager: ServerFieldManager}); err != nil && !apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("create namespace %s: %w", name, err)
			}
		}
	}
	return nil
}

// deleteNamespace marks the namespace Terminating (new content is refused
// from then on), deletes every object in it, then deletes the namespace. A
// DELETE that is interrupted leaves it Terminating; the next DELETE resumes.
func (s *Store) deleteNamespace(ctx context.Context, name string, opts *metav1.DeleteOptions, conds WriteOptions) (runtime.Object, error) {
	gr := s.Resource.GroupResource()
	if slices.Contains([]string{metav1.NamespaceDefault, metav1.NamespaceSystem, metav1.NamespacePublic}, name) {
		return nil, apierrors.NewForbidden(gr, name, errors.New("this namespace may not be deleted"))
	}
	var uid string
	var rev int64
	for attempt := 0; ; attempt++ {
		if attempt == maxWriteAttempts {
			return nil, apierrors.NewConflict(gr, name, errors.New(OptimisticLockErrorMsg))
		}
		stored, err := s.storage.Get(ctx, s.ref("", name), 0)
		if err != nil {
			return nil, toStatus(err, gr, name)
		}
		obj, err := s.decode(s.keyOf("", name), stored)
		if err != nil {
			return nil, err
		}
		if err := s.checkDelete(stored, obj, opts, conds); err != nil {
			return nil, err
		}
		ns := obj.(*corev1.Namespace)
		uid = string(ns.UID)
		if conds.DryRun {
			break // answered as the deletion would be, having done nothing
		}
		if ns.Status.Phase == corev1.NamespaceTerminating {
			rev = stored.Revision
			break
		}
		now := metav1.NewTime(time.Now().Truncate(time.Second))
		ns.DeletionTimestamp = &now
		ns.Status.Phase = corev1.NamespaceTerminating
		value, err := s.encode(s.keyOf("", name), ns)
		if err != nil {
			return nil, err
		}
		rev, err = s.storage.Update(ctx, s.ref("", name), value, stored.Revision)
		if errors.Is(err, etcdstore.ErrConflict) {
			continue
		}
		if err != nil {
			return nil, toStatus(err, gr, name)
		}
		break
	}
	if !conds.DryRun {
		var contents []*Store
		if s.contents != nil {
			contents = s.contents()
		}
		for _, content := range contents {
			if err := content.deleteAll(ctx, name); err != nil {
				return nil, err
			}
		}
		if _, err := s.storage.Delete(ctx, s.ref("", name), rev); err != nil {
			return nil, toStatus(err, gr, name)
		}
	}
	return &metav1.Status{Status: metav1.StatusSuccess, Details: &metav1.StatusDetails{Name: name, Kind: gr.Resource, UID: types.UID(uid)}}, nil
}

// deleteAll deletes every object of this resource in namespace, reading
// again until none is left (bounded).
func (s *Store) deleteAll(ctx context.Context, namespace string) error {
	for range maxWriteAttempts {
		res, err := s.storage.List(ctx, s.Resource.storagePrefix(), namespace, etcdstore.ListOptions{})
		if err != nil {
			return toStatus(err, s.Resource.GroupResource(), "")
		}
		if len(res.Objects) == 0 {
			return nil
		}
		for _, o := range res.Objects {
			_, err := s.storage.Delete(ctx, s.ref(namespace, o.Key), o.Revision)
			if err != nil && !errors.Is(err, etcdstore.ErrConflict) && !errors.Is(err, etcdstore.ErrNotFound) {
				return toStatus(err, s.Resource.GroupResource(), "")
			}
		}
	}
	return apierrors.NewConflict(s.Resource.GroupResource(), "", fmt.Errorf("objects in namespace %s kept changing while it was being deleted; delete it again", namespace))
}
