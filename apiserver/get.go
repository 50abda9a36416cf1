package apiserver

import (
	"net/http"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/concord-dev/concord/apiserver/filters"
)

// get answers a GET of an object (a watch of it with ?watch), with its
// ETag; If-None-Match is 304.
func (h *resourceHandler) get(w http.ResponseWriter, r *http.Request, namespace, name string) {
	if filters.IsWatch(r) {
		h.legacyWatch(w, r)
		return
	}
	h.getObject(w, r, namespace, name)
}

// getObject answers a GET of an object with its ETag; If-None-Match is
// 304.
func (h *resourceHandler) getObject(w http.ResponseWriter, r *http.Request, namespace, name string) {
	ifNoneMatch, conditional, err := headerTags(r, "If-None-Match")
	if err != nil {
		writeError(w, r, apierrors.NewBadRequest(err.Error()))
		return
	}
	if err := h.store.AwaitResourceVersion(r.Context(), r.URL.Query().Get("resourceVersion")); err != nil {
		writeError(w, r, err)
		return
	}
	format := fastFormat(r)
	if format == runtime.ContentTypeJSON {
		// Objects are stored as JSON: pass it through.
		raw, rv, err := h.store.GetJSON(r.Context(), namespace, name)
		if err != nil {
			writeError(w, r, err)
			return
		}
		w.Header().Set("ETag", etag(rv))
		if conditional && ifNoneMatch.weakMatch(rv) {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		writeJSON(w, r, http.StatusOK, raw)
		return
	}
	if format == runtime.ContentTypeProtobuf {
		obj, served, err := h.store.GetProtobuf(r.Context(), namespace, name)
		if err != nil {
			writeError(w, r, err)
			return
		}
		if served {
			w.Header().Set("ETag", etag(obj.ResourceVersion))
			if conditional && ifNoneMatch.weakMatch(obj.ResourceVersion) {
				w.WriteHeader(http.StatusNotModified)
				return
			}
			writeProtobuf(w, r, len(obj.Encoded)+256, obj) // the framing and TypeMeta: well below 256 bytes
			return
		}
	}
	obj, err := h.store.Get(r.Context(), namespace, name)
	if err != nil {
		writeError(w, r, err)
		return
	}
	w.Header().Set("ETag", etag(obj.GetResourceVersion()))
	if conditional && ifNoneMatch.weakMatch(obj.GetResourceVersion()) {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	writeResource(w, r, h.store.Resource, obj)
}
