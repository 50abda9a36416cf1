package registry

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

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
			return 0, StatusError(err, gr, name)
		}
	}
	if !s.Resource.Namespaced {
		if dryRun {
			return 0, nil
		}
		rev, err := s.storage.Create(ctx, s.ref("", name), value)
		if errors.Is(err, ErrAdmissionChanged) {
			return 0, err // admitted again by Create
		}
		if err != nil {
			return 0, StatusError(err, gr, name)
		}
		return rev, nil
	}
	nsRef := etcdstore.Ref{Resource: Namespaces.Plural, Name: namespace}
	for attempt := range maxWriteAttempts {
		// The namespace's remembered state may guard the first attempt: if
		// it is stale, the guarded transaction fails and etcd is read.
		stored, obj, remembered, err := s.namespaces.readForWrite(ctx, "", namespace, attempt == 0)
		if err != nil {
			return 0, StatusError(err, Namespaces.GroupResource(), namespace)
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
		if errors.Is(err, ErrAdmissionChanged) {
			return 0, err // admitted again by Create
		}
		if errors.Is(err, etcdstore.ErrConflict) {
			continue // the namespace changed: look at it again
		}
		if err != nil {
			return 0, StatusError(err, gr, name)
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

// deleteNamespace is kube's namespace Delete: the first DELETE marks the
// namespace (deletionTimestamp, phase Terminating, the GC finalizers the
// options ask for) in one guarded write and answers it; new content is
// refused from then on, and the namespace controller deletes what is in it,
// then removes the "kubernetes" finalizer (Finalize). Until then a DELETE
// answers the namespace as it is; one that finds it finalized deletes it as
// any object, its metadata finalizers deciding.
func (s *Store) deleteNamespace(ctx context.Context, name string, opts *metav1.DeleteOptions, conds WriteOptions) (runtime.Object, error) {
	gr := s.Resource.GroupResource()
	if slices.Contains([]string{metav1.NamespaceDefault, metav1.NamespaceSystem, metav1.NamespacePublic}, name) {
		return nil, apierrors.NewForbidden(gr, name, errors.New("this namespace may not be deleted"))
	}
	for attempt := range maxWriteAttempts {
		// As in Delete: a remembered state may only end in a confirmed
		// write or an unknown outcome; any other is decided again from etcd.
		stored, shared, remembered, err := s.readForWrite(ctx, "", name, attempt == 0 && !conds.DryRun)
		if err != nil {
			return nil, StatusError(err, gr, name)
		}
		var out runtime.Object
		var wrote bool
		if ns := shared.(*corev1.Namespace); ns.DeletionTimestamp != nil && len(ns.Spec.Finalizers) == 0 {
			out, wrote, err = s.deleteFrom(ctx, "", name, opts, conds, stored, shared)
		} else {
			out, wrote, err = s.markNamespace(ctx, name, opts, conds, stored, shared)
		}
		if errors.Is(err, errRaced) || (remembered && !wrote && !isOutcomeUnknown(err) && !s.confirmed(ctx, "", name, stored.Revision)) {
			continue
		}
		return out, err
	}
	return nil, apierrors.NewConflict(gr, name, errors.New(OptimisticLockErrorMsg))
}

// markNamespace starts the deletion of a namespace that still has spec
// finalizers, with a transaction guarded by stored's revision, and answers
// the namespace; one marked already is answered as it is.
func (s *Store) markNamespace(ctx context.Context, name string, opts *metav1.DeleteOptions, conds WriteOptions, stored etcdstore.Object, shared Object) (_ runtime.Object, wrote bool, _ error) {
	if err := s.checkDelete(stored, shared, opts, conds); err != nil {
		return nil, false, err
	}
	if err := s.admitDelete(ctx, shared, opts, conds); err != nil {
		return nil, false, err
	}
	ns := copyObject(shared).(*corev1.Namespace)
	if ns.DeletionTimestamp != nil {
		return ns, false, nil
	}
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	ns.DeletionTimestamp = &now
	ns.Status.Phase = corev1.NamespaceTerminating
	if changed, finalizers := gcFinalizers(ns, opts); changed {
		ns.Finalizers = finalizers
	}
	if conds.DryRun {
		return ns, false, nil // what the marking would store
	}
	value, err := s.encode(s.keyOf("", name), ns)
	if err != nil {
		return nil, false, err
	}
	rev, err := s.storage.Update(ctx, s.ref("", name), value, stored.Revision)
	if err != nil {
		return nil, false, s.writeError(err, name)
	}
	ns.SetResourceVersion(formatRevision(rev))
	s.recent.putWritten(s.recentKey("", name), etcdstore.Object{Value: value, Revision: rev}, copyObject(ns), true)
	return ns, true, nil
}

// finalized reports whether nothing holds obj once it is being deleted:
// no metadata finalizers and, for a Namespace, no spec finalizers (kube's
// ShouldDeleteNamespaceDuringUpdate).
func finalized(obj Object) bool {
	if ns, ok := obj.(*corev1.Namespace); ok && len(ns.Spec.Finalizers) > 0 {
		return false
	}
	return len(obj.GetFinalizers()) == 0
}

// Finalize replaces the spec.finalizers and metadata of the Namespace name
// with obj's, its status kept: kube's namespaces/{name}/finalize, which
// the namespace controller writes once a namespace's content is gone. As
// UpdateStatus it is conditional (obj's resourceVersion: 409 when stale;
// conds.IfMatch: 412; neither: 428) and never creates; a write that leaves
// a namespace being deleted with no finalizer deletes it. Other resources
// answer 405.
func (s *Store) Finalize(ctx context.Context, name string, obj Object, conds WriteOptions) (Object, error) {
	if !s.Resource.IsNamespace {
		return nil, apierrors.NewMethodNotSupported(s.Resource.GroupResource(), "finalize")
	}
	if obj.GetName() != name {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("the name of the object (%s) does not match the name on the URL (%s)", obj.GetName(), name))
	}
	if err := s.checkNamespace("", obj); err != nil {
		return nil, err
	}
	if v := obj.GetResourceVersion(); v != "" {
		if rev, err := strconv.ParseInt(v, 10, 64); err != nil || rev <= 0 {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("invalid resourceVersion %q: send the value read from the server unchanged", v))
		}
	} else if conds.IfMatch == nil && !conds.CreateOnly {
		return nil, s.versionRequired(obj, nil)
	}
	conds.Decoded = true
	conds.finalize = true
	out, _, err := s.replace(ctx, "", name, conds, func(Object) (Object, error) { return obj, nil })
	return out, err
}
