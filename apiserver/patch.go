package apiserver

import (
	"mime"
	"net/http"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// patchTypes are the patch formats served; server-side apply is not yet.
var patchTypes = []types.PatchType{types.JSONPatchType, types.MergePatchType, types.StrategicMergePatchType}

// patch answers a PATCH of an object: JSON, merge or strategic merge.
func (h *resourceHandler) patch(w http.ResponseWriter, r *http.Request, namespace, name string) {
	mediaType, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	pt := types.PatchType(mediaType)
	switch {
	case err == nil && slices.Contains(patchTypes, pt):
	case pt == types.ApplyYAMLPatchType || pt == types.ApplyCBORPatchType:
		writeError(w, r, apierrors.NewGenericServerResponse(http.StatusUnsupportedMediaType, "", schema.GroupResource{}, "",
			"server-side apply (application/apply-patch+yaml) is not supported yet: use kubectl apply without --server-side, or a strategic-merge, merge or JSON patch", 0, false))
		return
	default:
		names := make([]string, len(patchTypes))
		for i, t := range patchTypes {
			names[i] = string(t)
		}
		writeError(w, r, apierrors.NewGenericServerResponse(http.StatusUnsupportedMediaType, "", schema.GroupResource{}, "",
			"the body of the request was in an unknown format - accepted media types include: "+strings.Join(names, ", "), 0, false))
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
	patched, err := h.store.Patch(r.Context(), namespace, name, pt, body, conds)
	if err != nil {
		writeError(w, r, err)
		return
	}
	w.Header().Set("ETag", etag(patched.GetResourceVersion()))
	h.writeWritten(w, r, http.StatusOK, patched, conds.DryRun)
}
