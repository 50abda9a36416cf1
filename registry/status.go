package registry

import (
	"context"
	"fmt"
	"strconv"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// UpdateStrategy is the update half of a Strategy: what a replace or patch
// carries over from the stored object, and how it is checked against it.
// A resource's StatusStrategy is one: the write path of its status
// subresource.
type UpdateStrategy interface {
	// PrepareForUpdate carries over from old what the write may not change.
	PrepareForUpdate(obj, old Object)
	// ValidateUpdate checks the prepared object against the stored one.
	ValidateUpdate(obj, old Object) field.ErrorList
}

var _ UpdateStrategy = Strategy(nil)

// contextUpdateValidator is an UpdateStrategy whose update validation
// adds warnings to the request's context (k8s.io/apiserver/pkg/warning), as
// kube's CEL validation of custom resources does when ratcheting lets a
// failing rule pass.
type contextUpdateValidator interface {
	validateUpdateContext(ctx context.Context, obj, old Object) field.ErrorList
}

// UpdateStatus replaces the status of namespace/name with obj's: the
// resource's StatusStrategy carries everything else over from the stored
// object (kube's status strategies: spec and metadata stay as stored), so a
// client that owns the status cannot change the spec, and the main
// resource's Strategy, which keeps the stored status, is not used. It is
// the write behind PUT .../<name>/status.
//
// As Update, the replace must be conditional — obj's resourceVersion (409
// when stale) or conds.IfMatch (412), else 428 — and is one etcd
// transaction guarded by the revision it was checked against. No status is
// replaced unconditionally (kube's status strategies refuse it too), and a
// status write never creates the object: a missing one is 404, and with
// conds.CreateOnly an existing one 412. A resource without a
// StatusStrategy answers 405.
func (s *Store) UpdateStatus(ctx context.Context, namespace, name string, obj Object, conds WriteOptions) (Object, error) {
	if err := s.checkStatus(); err != nil {
		return nil, err
	}
	if obj.GetName() != name {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("the name of the object (%s) does not match the name on the URL (%s)", obj.GetName(), name))
	}
	if err := s.checkNamespace(namespace, obj); err != nil {
		return nil, err
	}
	if v := obj.GetResourceVersion(); v != "" {
		if rev, err := strconv.ParseInt(v, 10, 64); err != nil || rev <= 0 {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("invalid resourceVersion %q: send the value read from the server unchanged", v))
		}
	} else if conds.IfMatch == nil && !conds.CreateOnly {
		return nil, s.versionRequiredOf(ctx, namespace, name, obj, true)
	}
	if err := s.decodeRequest(obj, conds); err != nil {
		return nil, err
	}
	conds.Decoded = true
	conds.status = true
	out, _, err := s.replace(ctx, namespace, name, conds, func(Object) (Object, error) { return obj, nil })
	return out, err
}

// PatchStatus applies a JSON, merge or strategic-merge patch to the stored
// object, as Patch does, and writes only the status of the result (the
// write behind PATCH .../<name>/status): what the StatusStrategy carries
// over is the stored object's whatever the patch says. Like Patch it is
// conditional only if the patch sets metadata.resourceVersion or conds
// carry If-Match, and it is applied again to the new state when another
// write lands first. A resource without a StatusStrategy answers 405.
func (s *Store) PatchStatus(ctx context.Context, namespace, name string, pt types.PatchType, patch []byte, opts WriteOptions) (Object, error) {
	if err := s.checkStatus(); err != nil {
		return nil, err
	}
	opts.status = true
	return s.Patch(ctx, namespace, name, pt, patch, opts)
}

// checkStatus refuses the status writes of a resource without a status
// subresource.
func (s *Store) checkStatus() error {
	if s.Resource.StatusStrategy == nil {
		return apierrors.NewMethodNotSupported(s.Resource.GroupResource(), "update status")
	}
	return nil
}

// updateStrategy is the strategy a replace or patch is prepared and
// checked with: the status subresource's for a status write, kube's
// finalize strategy for a Namespace's finalize.
func (s *Store) updateStrategy(opts WriteOptions) UpdateStrategy {
	if opts.finalize {
		return namespaceFinalizeStrategy{}
	}
	if opts.status {
		return s.Resource.StatusStrategy
	}
	return s.Resource.Strategy
}
