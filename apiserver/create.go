package apiserver

import "net/http"

// create answers a POST to a collection (in one namespace, for a
// namespaced resource).
func (h *resourceHandler) create(w http.ResponseWriter, r *http.Request, namespace string) {
	opts, err := writeOptions(r, "CreateOptions")
	if err != nil {
		writeError(w, r, err)
		return
	}
	obj, err := h.decode(w, r, &opts)
	if err != nil {
		writeError(w, r, err)
		return
	}
	created, err := h.store.Create(r.Context(), namespace, obj, opts)
	if err != nil {
		writeError(w, r, err)
		return
	}
	w.Header().Set("ETag", etag(created.GetResourceVersion()))
	h.writeWritten(w, r, http.StatusCreated, created, opts.DryRun)
}
