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

	"github.com/concord-dev/concord/registry"
)

// patchTypes are the patch formats served; server-side apply is not yet.
var patchTypes = []types.PatchType{types.JSONPatchType, types.MergePatchType, types.StrategicMergePatchType}

// patch answers a PATCH of an object: JSON, merge or strategic merge.
func (h *resourceHandler) patch(w http.ResponseWriter, r *http.Request, namespace, name string) {
	h.servePatch(w, r, func(ctx context.Context, pt types.PatchType, body []byte, conds registry.WriteOptions) (registry.Object, error) {
		return h.store.Patch(ctx, namespace, name, pt, body, conds)
	})
}

// servePatch reads a PATCH — its format, options and body — has apply
// apply it, and answers the result with fieldValidation=Warn's warnings:
// the PATCH of an object and of its status.
func (h *resourceHandler) servePatch(w http.ResponseWriter, r *http.Request, apply func(ctx context.Context, pt types.PatchType, body []byte, conds registry.WriteOptions) (registry.Object, error)) {
	pt, err := patchType(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	conds, err := writeOptions(r, "PatchOptions")
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
	patched, err := apply(r.Context(), pt, body, conds)
	if err != nil {
		writeError(w, r, err)
		return
	}
	warnings(w)
	w.Header().Set("ETag", etag(patched.GetResourceVersion()))
	h.writeWritten(w, r, http.StatusOK, patched, conds.DryRun)
}

// patchType reads a PATCH's Content-Type: a patch format served, else the
// 415 to answer.
func patchType(r *http.Request) (types.PatchType, error) {
	mediaType, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	pt := types.PatchType(mediaType)
	switch {
	case err == nil && slices.Contains(patchTypes, pt):
		return pt, nil
	case pt == types.ApplyYAMLPatchType || pt == types.ApplyCBORPatchType:
		return "", apierrors.NewGenericServerResponse(http.StatusUnsupportedMediaType, "", schema.GroupResource{}, "",
			"server-side apply (application/apply-patch+yaml) is not supported yet: use kubectl apply without --server-side, or a strategic-merge, merge or JSON patch", 0, false)
	}
	names := make([]string, len(patchTypes))
	for i, t := range patchTypes {
		names[i] = string(t)
	}
	return "", apierrors.NewGenericServerResponse(http.StatusUnsupportedMediaType, "", schema.GroupResource{}, "",
		"the body of the request was in an unknown format - accepted media types include: "+strings.Join(names, ", "), 0, false)
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
