package apiserver

import (
	"net/http"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversionscheme "k8s.io/apimachinery/pkg/apis/meta/internalversion/scheme"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/concord-dev/concord/registry"
)

// delete answers a DELETE of an object.
func (h *resourceHandler) delete(w http.ResponseWriter, r *http.Request, namespace, name string) {
	opts, conds, err := h.deleteOptions(w, r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	status, err := h.store.Delete(r.Context(), namespace, name, opts, conds)
	if err != nil {
		writeError(w, r, err)
		return
	}
	h.writeObject(w, r, http.StatusOK, status)
}

// deleteCollection answers a DELETE of a collection: the objects its list
// options select.
func (h *resourceHandler) deleteCollection(w http.ResponseWriter, r *http.Request, namespace string) {
	listOpts, err := listOptions(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	delOpts, opts, err := h.deleteOptions(w, r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	deleted, err := h.store.DeleteCollection(r.Context(), namespace, listOpts, delOpts, opts)
	if err != nil {
		writeError(w, r, err)
		return
	}
	h.writeObject(w, r, http.StatusOK, deleted)
}

// deleteOptions reads a DELETE's query options, conditions and optional
// DeleteOptions body; dryRun may come from either.
func (h *resourceHandler) deleteOptions(w http.ResponseWriter, r *http.Request) (*metav1.DeleteOptions, registry.WriteOptions, error) {
	opts, err := writeOptions(r, "DeleteOptions")
	if err != nil {
		return nil, opts, err
	}
	// DeleteOptions travel in every built-in group version and in
	// meta.k8s.io/v1, which a body that names none is taken to be for a
	// custom resource, as kube-apiserver takes it.
	gv := h.store.Resource.GroupVersion
	if isCustom(h.store.Resource) {
		gv = metav1.SchemeGroupVersion
	}
	delOpts, err := decodeDeleteOptions(w, r, gv)
	if err != nil {
		return nil, opts, err
	}
	// Without a body the options may come as query parameters
	// (?propagationPolicy=Foreground), as kube's delete handler reads them.
	if noDeleteOptions(delOpts) {
		if err := metainternalversionscheme.ParameterCodec.DecodeParameters(r.URL.Query(), metav1.SchemeGroupVersion, delOpts); err != nil {
			return nil, opts, apierrors.NewBadRequest(err.Error())
		}
	}
	if err := checkUnsafeDelete(r, delOpts, h.name == ""); err != nil {
		return nil, opts, err
	}
	opts.DryRun = opts.DryRun || len(delOpts.DryRun) > 0
	return delOpts, opts, nil
}
