package registry

import (
	"context"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/admission"
)

// The store's calls of its Admission (WithAdmission), where kube-apiserver
// calls its admission chain: mutating after decoding, defaulting and
// managedFields (before uid, creationTimestamp and a generated name on a
// create, as kube's handler admits before the store fills them), then the
// strategy's validation, then validating, then the etcd transaction. Each
// attempt of a write loop admits its own state again, as kube's
// GuaranteedUpdate does.

// admissionRequest is a write of obj (nil for a delete) over old (nil for
// a create) as admission sees it.
func (s *Store) admissionRequest(op admission.Operation, namespace, name string, obj, old Object, opts WriteOptions) *AdmissionRequest {
	req := &AdmissionRequest{
		Operation:   op,
		Resource:    s.Resource,
		Subresource: opts.subresource(),
		Namespace:   namespace,
		Name:        name,
		Object:      obj,
		DryRun:      opts.DryRun,
	}
	switch {
	case s.Resource.IsNamespace:
		req.Namespace = name // as kube's handlers name a Namespace's
	case !s.Resource.Namespaced:
		req.Namespace = ""
	}
	if old != nil {
		req.OldObject = copyObject(old) // the stored state may be shared
	}
	var dryRun []string
	if opts.DryRun {
		dryRun = []string{metav1.DryRunAll}
	}
	switch op {
	case admission.Create:
		o := &metav1.CreateOptions{DryRun: dryRun, FieldManager: opts.FieldManager}
		o.SetGroupVersionKind(metav1.SchemeGroupVersion.WithKind("CreateOptions"))
		req.Options = o
	case admission.Update:
		o := &metav1.UpdateOptions{DryRun: dryRun, FieldManager: opts.FieldManager}
		o.SetGroupVersionKind(metav1.SchemeGroupVersion.WithKind("UpdateOptions"))
		req.Options = o
	}
	return req
}

// subresource is the subresource a write with opts goes through, as
// admission names it.
func (opts WriteOptions) subresource() string {
	switch {
	case opts.status:
		return "status"
	case opts.finalize:
		return "finalize"
	case opts.Scale:
		return "scale"
	}
	return ""
}

// mutate runs the mutating step on obj, a write over old, and returns the
// object it left. It may not change the object's name, namespace or uid:
// refused as kube's metadata update validation refuses them (422, field is
// immutable); an update's object without a uid may be given old's.
func (s *Store) mutate(ctx context.Context, op admission.Operation, namespace, name string, obj, old Object, opts WriteOptions) (Object, error) {
	if s.admitter == nil {
		return obj, nil
	}
	return s.mutateRequest(ctx, s.admissionRequest(op, namespace, name, obj, old, opts), old)
}

func (s *Store) mutateRequest(ctx context.Context, req *AdmissionRequest, old Object) (Object, error) {
	var name, namespace, uid, oldUID string
	if req.Object != nil {
		before := req.Object.(Object)
		name, namespace, uid = before.GetName(), before.GetNamespace(), string(before.GetUID())
	}
	if old != nil {
		oldUID = string(old.GetUID())
	}
	if err := s.admitter.Mutate(ctx, req); err != nil {
		return nil, admissionError(err)
	}
	if req.Object == nil {
		return nil, nil
	}
	obj, ok := req.Object.(Object)
	if !ok {
		return nil, apierrors.NewInternalError(fmt.Errorf("registry: mutating admission of %s made a %T", s.Resource.GroupResource(), req.Object))
	}
	meta := field.NewPath("metadata")
	var errs field.ErrorList
	errs = append(errs, apivalidation.ValidateImmutableField(obj.GetName(), name, meta.Child("name"))...)
	errs = append(errs, apivalidation.ValidateImmutableField(obj.GetNamespace(), namespace, meta.Child("namespace"))...)
	if got := string(obj.GetUID()); got != uid && (uid != "" || got != oldUID) {
		errs = append(errs, apivalidation.ValidateImmutableField(got, uid, meta.Child("uid"))...)
	}
	if len(errs) > 0 {
		return nil, apierrors.NewInvalid(s.Resource.GroupVersionKind().GroupKind(), name, errs)
	}
	return obj, nil
}

// validateAdmission runs the validating step on obj, a write over old.
func (s *Store) validateAdmission(ctx context.Context, op admission.Operation, namespace, name string, obj, old Object, opts WriteOptions) error {
	if s.admitter == nil {
		return nil
	}
	return admissionError(s.admitter.Validate(ctx, s.admissionRequest(op, namespace, name, obj, old, opts)))
}

// admitDelete runs both steps for a delete of old with opts, as kube's
// delete admission does within the store (Object nil, OldObject the
// stored object). A delete of a collection admits each object without a
// name, as kube's deletecollection.
func (s *Store) admitDelete(ctx context.Context, old Object, opts *metav1.DeleteOptions, conds WriteOptions) error {
	if s.admitter == nil {
		return nil
	}
	name := old.GetName()
	if conds.collection {
		name = ""
	}
	req := s.admissionRequest(admission.Delete, old.GetNamespace(), name, nil, old, conds)
	o := &metav1.DeleteOptions{}
	if opts != nil {
		o = opts.DeepCopy()
	}
	o.SetGroupVersionKind(metav1.SchemeGroupVersion.WithKind("DeleteOptions"))
	if conds.DryRun && len(o.DryRun) == 0 {
		o.DryRun = []string{metav1.DryRunAll}
	}
	req.Options = o
	if _, err := s.mutateRequest(ctx, req, old); err != nil {
		return err
	}
	return admissionError(s.admitter.Validate(ctx, req))
}

// admissionError is err as a write answers it: a Status as it is,
// anything else a 500.
func admissionError(err error) error {
	if err == nil {
		return nil
	}
	if status := apierrors.APIStatus(nil); errors.As(err, &status) {
		return err
	}
	return apierrors.NewInternalError(err)
}

// confirmed reports whether a write that ended without writing, decided on
// the remembered state at rev (recent.go), may be answered as decided:
// with an Admission, whose webhooks kube calls once per decision, a read
// confirming rev is current replaces deciding again. Without one the write
// is decided again, as before.
func (s *Store) confirmed(ctx context.Context, namespace, name string, rev int64) bool {
	if s.admitter == nil {
		return false
	}
	stored, _, _, err := s.readForWrite(ctx, namespace, name, false)
	return err == nil && stored.Revision == rev
}
