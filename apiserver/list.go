package apiserver

import (
	"net/http"

	"k8s.io/apimachinery/pkg/runtime"
)

// list answers a GET of a collection: a list, or a watch when the options
// ask for one (?watch).
func (h *resourceHandler) list(w http.ResponseWriter, r *http.Request, namespace string) {
	opts, err := listOptions(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	if opts.Watch {
		infoOf(r).verb = "WATCH"
		h.serveWatch(w, r, namespace, "", opts)
		return
	}
	format := fastFormat(r)
	if format == runtime.ContentTypeJSON {
		list, served, err := h.store.ListJSON(r.Context(), namespace, opts)
		if err != nil {
			writeError(w, r, err)
			return
		}
		if served {
			writeJSONList(w, r, list)
			return
		}
	}
	if format == runtime.ContentTypeProtobuf {
		list, served, err := h.store.ListProtobuf(r.Context(), namespace, opts)
		if err != nil {
			writeError(w, r, err)
			return
		}
		if served {
			writeProtobuf(w, r, 64<<10, list)
			return
		}
	}
	list, err := h.store.List(r.Context(), namespace, opts)
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeResource(w, r, h.store.Resource, list)
}
