package registry

import (
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// validateDeleteOptions is kube's check of a delete's options (an unknown
// propagationPolicy, both it and orphanDependents, a bad dryRun): 422
// Invalid on kind DeleteOptions, as rest.BeforeDelete answers it.
func validateDeleteOptions(opts *metav1.DeleteOptions) error {
	if opts == nil {
		return nil
	}
	if errs := metav1validation.ValidateDeleteOptions(opts); len(errs) > 0 {
		return apierrors.NewInvalid(schema.GroupKind{Group: metav1.GroupName, Kind: "DeleteOptions"}, "", errs)
	}
	return nil
}

// gcFinalizers are the finalizers obj should have once opts' deletion of it
// starts, and whether they differ from its own: kube's generic store's
// deletionFinalizersForGarbageCollection, for a resource whose default
// policy is Background (every resource Concord serves). The options decide
// first, then the GC finalizer the object has already; Orphan adds
// "orphan", Foreground "foregroundDeletion", Background neither, and each
// removes the other.
func gcFinalizers(obj Object, opts *metav1.DeleteOptions) (changed bool, finalizers []string) {
	orphan, foreground := false, false
	switch {
	case opts != nil && opts.OrphanDependents != nil: // deprecated, still honoured as kube does
		orphan = *opts.OrphanDependents
	case opts != nil && opts.PropagationPolicy != nil:
		orphan = *opts.PropagationPolicy == metav1.DeletePropagationOrphan
		foreground = *opts.PropagationPolicy == metav1.DeletePropagationForeground
	default:
		// Validation refuses an object with both, so the first one decides.
		for _, f := range obj.GetFinalizers() {
			if f == metav1.FinalizerOrphanDependents || f == metav1.FinalizerDeleteDependents {
				orphan, foreground = f == metav1.FinalizerOrphanDependents, f == metav1.FinalizerDeleteDependents
				break
			}
		}
	}
	old := obj.GetFinalizers()
	finalizers = make([]string, 0, len(old)+1)
	for _, f := range old {
		if f != metav1.FinalizerOrphanDependents && f != metav1.FinalizerDeleteDependents {
			finalizers = append(finalizers, f)
		}
	}
	if orphan {
		finalizers = append(finalizers, metav1.FinalizerOrphanDependents)
	}
	if foreground {
		finalizers = append(finalizers, metav1.FinalizerDeleteDependents)
	}
	return !sameSet(old, finalizers), finalizers
}

// sameSet reports whether a and b hold the same strings, as kube compares
// finalizer lists (sets.String.Equal).
func sameSet(a, b []string) bool {
	for _, s := range a {
		if !slices.Contains(b, s) {
			return false
		}
	}
	for _, s := range b {
		if !slices.Contains(a, s) {
			return false
		}
	}
	return true
}
