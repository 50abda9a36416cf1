package registry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	kjson "sigs.k8s.io/json"
)

// maxJSONPatchOperations is kube-apiserver's limit.
const maxJSONPatchOperations = 10000

// Patch applies a JSON, merge or strategic-merge patch to the stored object
// on the server (a server-side apply is Apply). It runs in the same write loop as Update: if another write
// lands first, the patch is applied again to the new state. The patch is
// conditional only if it sets metadata.resourceVersion (409 when stale) or
// conds carry If-Match (412).
func (s *Store) Patch(ctx context.Context, namespace, name string, pt types.PatchType, patch []byte, opts WriteOptions) (Object, error) {
	gr := s.Resource.GroupResource()
	_, decodes := s.Resource.Strategy.(RequestDecoder)
	if pt == types.StrategicMergePatchType && decodes {
		// Custom objects have no Go type to merge by: kube-apiserver does
		// not offer strategic merge patches for them (415).
		return nil, &apierrors.StatusError{ErrStatus: metav1.Status{
			Status:  metav1.StatusFailure,
			Code:    http.StatusUnsupportedMediaType,
			Reason:  metav1.StatusReasonUnsupportedMediaType,
			Message: "the body of the request was in an unknown format - accepted media types include: " + string(types.JSONPatchType) + ", " + string(types.MergePatchType) + ", " + string(types.ApplyYAMLPatchType),
		}}
	}
	if pt == types.JSONPatchType {
		ops, err := jsonpatch.DecodePatch(patch)
		if err != nil {
			return nil, apierrors.NewBadRequest(err.Error())
		}
		if len(ops) > maxJSONPatchOperations {
			return nil, apierrors.NewRequestEntityTooLargeError(fmt.Sprintf("The allowed maximum operations in a JSON patch is %d, got %d", maxJSONPatchOperations, len(ops)))
		}
	}
	if !json.Valid(patch) {
		// Malformed whatever it is applied to: answer before any etcd
		// call, with the error applying it would give.
		_, err := s.applyPatch(pt, []byte("{}"), patch)
		if err == nil {
			err = apierrors.NewBadRequest("the patch is not valid JSON")
		}
		return nil, err
	}
	obj, _, err := s.replace(ctx, namespace, name, opts, func(old Object) (Object, error) {
		current, err := json.Marshal(old)
		if err != nil {
			return nil, fmt.Errorf("encode %s for patching: %w", gr, err)
		}
		patched, err := s.applyPatch(pt, current, patch)
		if err != nil {
			return nil, err
		}
		out := s.Resource.New()
		strictErrs, err := kjson.UnmarshalStrict(patched, out)
		if err != nil {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("the patched object is not a valid %s: %v", s.Resource.Kind, err))
		}
		if d, ok := s.Resource.Strategy.(RequestDecoder); ok {
			// A custom object decodes into a map, which knows no field:
			// what its schema prunes is what is unknown.
			pruned, err := d.DecodeRequest(out)
			if err != nil {
				return nil, err
			}
			for _, path := range pruned {
				strictErrs = append(strictErrs, fmt.Errorf("unknown field %q", path))
			}
		}
		if opts.StrictFields && len(strictErrs) > 0 {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("strict decoding error: %v", errors.Join(strictErrs...)))
		}
		if opts.Warnings != nil {
			warnings := make([]string, len(strictErrs))
			for i, e := range strictErrs {
				warnings[i] = e.Error()
			}
			opts.Warnings(warnings)
		}
		if gvk := out.GetObjectKind().GroupVersionKind(); gvk != (schema.GroupVersionKind{}) && gvk != s.Resource.GroupVersionKind() {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("a patch cannot change apiVersion or kind (to %s)", gvk))
		}
		return out, nil
	})
	return obj, err
}

func (s *Store) applyPatch(pt types.PatchType, current, patch []byte) ([]byte, error) {
	switch pt {
	case types.JSONPatchType:
		ops, err := jsonpatch.DecodePatch(patch)
		if err != nil {
			return nil, apierrors.NewBadRequest(err.Error())
		}
		patched, err := ops.Apply(current)
		if err != nil {
			// A failed "test" or a path that is not there: the patch is
			// well-formed but does not apply (kube-apiserver: 422).
			return nil, &apierrors.StatusError{ErrStatus: metav1.Status{
				Status:  metav1.StatusFailure,
				Code:    http.StatusUnprocessableEntity,
				Reason:  metav1.StatusReasonInvalid,
				Message: "the JSON patch does not apply: " + err.Error(),
			}}
		}
		return patched, nil
	case types.MergePatchType:
		patched, err := jsonpatch.MergePatch(current, patch)
		if err != nil {
			return nil, apierrors.NewBadRequest(err.Error())
		}
		return patched, nil
	case types.StrategicMergePatchType:
		patched, err := strategicpatch.StrategicMergePatch(current, patch, s.Resource.New())
		if err != nil {
			return nil, apierrors.NewBadRequest(err.Error())
		}
		return patched, nil
	}
	return nil, errors.New("registry: unsupported patch type " + string(pt))
}
