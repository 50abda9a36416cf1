package apiserver

import (
	"context"
	"mime"
	"net/http"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/concord-dev/concord/registry"
)

// The patch formats served, in the order kube-apiserver lists them: a
// built-in resource's, and a custom resource's, which has no Go type to
// merge strategically by. Server-side apply (application/apply-patch+yaml)
// is both's; kube 1.37 accepts application/apply-patch+cbor only with its
// CBORServingAndStorage alpha feature, off by default, so neither does
// Concord.
var (
	patchTypes       = []types.PatchType{types.JSONPatchType, types.MergePatchType, types.StrategicMergePatchType, types.ApplyYAMLPatchType}
	customPatchTypes = []types.PatchType{types.JSONPatchType, types.MergePatchType, types.ApplyYAMLPatchType}
)

// patchWrite writes a PATCH of pt with body; created reports an apply that
// created the object.
type patchWrite func(ctx context.Context, pt types.PatchType, body []byte, conds registry.WriteOptions) (_ registry.Object, created bool, _ error)

// patch answers a PATCH of an object: JSON, merge, strategic merge or
// server-side apply.
func (h *resourceHandler) patch(w http.ResponseWriter, r *http.Request, namespace, name string) {
	h.servePatch(w, r, func(ctx context.Context, pt types.PatchType, body []byte, conds registry.WriteOptions) (registry.Object, bool, error) {
		if pt == types.ApplyYAMLPatchType {
			return h.store.Apply(ctx, namespace, name, body, conds)
		}
		obj, err := h.store.Patch(ctx, namespace, name, pt, body, conds)
		return obj, false, err
	})
}

// servePatch reads a PATCH — its format, options and body — has write
// write it, and answers the result with fieldValidation=Warn's warnings:
// the PATCH of an object and of its status.
func (h *resourceHandler) servePatch(w http.ResponseWriter, r *http.Request, write patchWrite) {
	pt, err := patchType(r, h.patchTypes())
	if err != nil {
		writeError(w, r, err)
		return
	}
	conds, err := patchOptions(r, pt)
	if err != nil {
		writeError(w, r, err)
		return
	}
	body, err := readBody(w, r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	warnings := collectWarnings(&conds, r)
	patched, created, err := write(r.Context(), pt, body, conds)
	if err != nil {
		writeError(w, r, err)
		return
	}
	warnings(w)
	code := http.StatusOK
	if created {
		code = http.StatusCreated
	}
	w.Header().Set("ETag", etag(patched.GetResourceVersion()))
	h.writeWritten(w, r, code, patched, conds.DryRun)
}

// patchTypes are the patch formats of h's resource.
func (h *resourceHandler) patchTypes() []types.PatchType {
	if isCustom(h.store.Resource) {
		return customPatchTypes
	}
	return patchTypes
}

// patchType reads a PATCH's Content-Type: one of accepted, else kube's 415
// listing them.
func patchType(r *http.Request, accepted []types.PatchType) (types.PatchType, error) {
	mediaType, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if pt := types.PatchType(mediaType); err == nil && slices.Contains(accepted, pt) {
		return pt, nil
	}
	names := make([]string, len(accepted))
	for i, t := range accepted {
		names[i] = string(t)
	}
	return "", apierrors.NewGenericServerResponse(http.StatusUnsupportedMediaType, "", schema.GroupResource{}, "",
		"the body of the request was in an unknown format - accepted media types include: "+strings.Join(names, ", "), 0, false)
}

// patchOptions are the write options of a PATCH of pt, checked as kube's
// ValidatePatchOptions: an apply names its manager, only an apply may
// force.
func patchOptions(r *http.Request, pt types.PatchType) (registry.WriteOptions, error) {
	q := r.URL.Query()
	var errs field.ErrorList
	if pt == types.ApplyYAMLPatchType {
		if q.Get("fieldManager") == "" {
			errs = append(errs, field.Required(field.NewPath("fieldManager"), "is required for apply patch"))
		}
	} else if q.Has("force") {
		errs = append(errs, field.Forbidden(field.NewPath("force"), "may not be specified for non-apply patch"))
	}
	conds, err := checkedWriteOptions(r, "PatchOptions", errs)
	// kube's query parameters: only "false" and "0" are false.
	if force := q["force"]; len(force) > 0 {
		conds.Force = force[0] != "0" && !strings.EqualFold(force[0], "false")
	}
	return conds, err
}

// collectWarnings has a patch with fieldValidation Warn (the default)
// report what the patched object holds that its type or schema does not
// know; the returned func sends them as Warning headers, once the patch is
// written.
func collectWarnings(conds *registry.WriteOptions, r *http.Request) func(w http.ResponseWriter) {
	if conds.StrictFields || r.URL.Query().Get("fieldValidation") == metav1.FieldValidationIgnore {
		return func(http.ResponseWriter) {}
	}
	var last []string
	conds.Warnings = func(warnings []string) { last = warnings }
	return func(w http.ResponseWriter) {
		for _, text := range last {
			addWarning(w, text)
		}
	}
}
