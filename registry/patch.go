package registry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

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
		if err := CheckJSONPatch(patch); err != nil {
			return nil, err
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

// jsonPatchOps are RFC 6902's operations, and whether each needs a value
// (add, replace, test) or a from (move, copy).
var jsonPatchOps = map[string]struct{ value, from bool }{
	"add": {value: true}, "remove": {}, "replace": {value: true},
	"move": {from: true}, "copy": {from: true}, "test": {value: true},
}

// CheckJSONPatch checks what is wrong with a JSON patch whatever it is
// applied to, so that it is refused before any etcd read: it must be an
// array of at most 10,000 operations (400, 413 as kube-apiserver), each a
// known op with a path, a value or a from as RFC 6902 requires, the paths
// JSON pointers (422, the code kube-apiserver answers once it fails to
// apply such an operation; it applies an add without a value as null, and
// a path without a leading "/" from the document's second level).
func CheckJSONPatch(patch []byte) error {
	ops, err := jsonpatch.DecodePatch(patch)
	if err != nil {
		return apierrors.NewBadRequest(err.Error())
	}
	if len(ops) > maxJSONPatchOperations {
		return apierrors.NewRequestEntityTooLargeError(fmt.Sprintf("The allowed maximum operations in a JSON patch is %d, got %d", maxJSONPatchOperations, len(ops)))
	}
	for i, op := range ops {
		if err := checkJSONPatchOp(op); err != nil {
			return &apierrors.StatusError{ErrStatus: metav1.Status{
				Status:  metav1.StatusFailure,
				Code:    http.StatusUnprocessableEntity,
				Reason:  metav1.StatusReasonInvalid,
				Message: fmt.Sprintf("the JSON patch is malformed: operation %d: %v", i+1, err),
			}}
		}
	}
	return nil
}

// checkJSONPatchOp checks one operation of a JSON patch.
func checkJSONPatchOp(op jsonpatch.Operation) error {
	const known = `"add", "remove", "replace", "move", "copy", "test"`
	var kind string
	if raw := op["op"]; raw == nil || json.Unmarshal(*raw, &kind) != nil {
		return errors.New(`"op" is missing or not a string; it must be one of ` + known)
	}
	needs, ok := jsonPatchOps[kind]
	if !ok {
		return fmt.Errorf(`"op" is %q; it must be one of %s`, kind, known)
	}
	fields := []string{"path"}
	if needs.from {
		fields = append(fields, "from")
	}
	for _, field := range fields {
		if err := checkJSONPointer(op, field); err != nil {
			return fmt.Errorf("%s: %w", kind, err)
		}
	}
	if _, ok := op["value"]; needs.value && !ok {
		return fmt.Errorf(`%s: "value" is missing`, kind)
	}
	return nil
}

// checkJSONPointer checks that field of op is a JSON pointer (RFC 6901):
// empty, or "/" and the reference tokens, in which "~" is "~0" or "~1".
func checkJSONPointer(op jsonpatch.Operation, field string) error {
	raw, ok := op[field]
	if !ok || raw == nil {
		return fmt.Errorf("%q is missing", field)
	}
	var pointer string
	if err := json.Unmarshal(*raw, &pointer); err != nil {
		return fmt.Errorf("%q is not a string", field)
	}
	if pointer != "" && !strings.HasPrefix(pointer, "/") {
		return fmt.Errorf(`%q %q is not a JSON pointer: it must be empty or begin with "/"`, field, pointer)
	}
	for rest := pointer; ; {
		i := strings.IndexByte(rest, '~')
		if i < 0 {
			return nil
		}
		if i+1 == len(rest) || (rest[i+1] != '0' && rest[i+1] != '1') {
			return fmt.Errorf(`%q %q is not a JSON pointer: "~" must be followed by 0 or 1`, field, pointer)
		}
		rest = rest[i+2:]
	}
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
