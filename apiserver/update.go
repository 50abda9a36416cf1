package apiserver

import "net/http"

// update answers a PUT of an object: a replace (or, create-only, a create).
func (h *resourceHandler) update(w http.ResponseWriter, r *http.Request, namespace, name string) {
	conds, err := writeOptions(r, "UpdateOptions")
	if err != nil {
		writeError(w, r, err)
		return
	}
	obj, err := h.decode(w, r, &conds)
	if err != nil {
		writeError(w, r, err)
		return
	}
	updated, created, err := h.store.Update(r.Context(), namespace, name, obj, conds)
	if err != nil {
		writeError(w, r, err)
		return
	}
	code := http.StatusOK
	if created {
		code = http.StatusCreated
	}
	w.Header().Set("ETag", etag(updated.GetResourceVersion()))
	h.writeWritten(w, r, code, updated, conds.DryRun)
}
