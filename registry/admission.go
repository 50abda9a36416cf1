package registry

import (
	"context"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/admission"
)

// Admission decides writes beyond a resource's own strategy, as
// kube-apiserver's admission webhooks do: Mutate may change the object
// before it is validated, Validate may refuse it. The store calls it on
// every write (defined here, where it is used; apiserver/admission
// implements it).
type Admission interface {
	// Mutate runs the mutating step on req.Object (nil for a delete),
	// which it may change in place. An error refuses the write; it is a
	// Status error (apierrors) or becomes a 500.
	Mutate(ctx context.Context, req *AdmissionRequest) error
	// Validate runs the validating step; an error refuses the write.
	Validate(ctx context.Context, req *AdmissionRequest) error
}

// AdmissionRequest is one write as admission sees it.
type AdmissionRequest struct {
	// Operation is admission.Create, admission.Update or admission.Delete.
	Operation admission.Operation
	// Resource is the served declaration written through (its
	// GroupVersionResource, kind and scope); Subresource is "", "status"
	// or "scale".
	Resource    *Resource
	Subresource string
	Namespace   string
	Name        string
	// Object is the object to be stored (nil for a delete); OldObject the
	// stored one (an update or delete; nil for a create).
	Object, OldObject runtime.Object
	// Options are the write's options as kube passes them to admission:
	// *metav1.CreateOptions, *metav1.UpdateOptions (also for a patch and
	// an apply that updates) or *metav1.DeleteOptions.
	Options runtime.Object
	DryRun  bool
}

// WithAdmission makes the stores call a on every write, as
// kube-apiserver calls its admission chain; nil calls none.
func WithAdmission(a Admission) StoreOption {
	return func(s *Store) { s.admitter = a }
}

// MutationChecker is implemented by an Admission that can say when its
// mutating step cannot change a write of res (no mutating webhook is
// configured): the store then refuses an invalid replacement before it
// reads etcd, as it does without admission, so bad input is answered 422
// whatever etcd is doing. An Admission without it may always mutate.
type MutationChecker interface {
	MayMutate(res *Resource) bool
}

// mayMutate says whether a's mutating step may change a write of res.
func mayMutate(a Admission, res *Resource) bool {
	c, ok := a.(MutationChecker)
	return !ok || c.MayMutate(res)
}
