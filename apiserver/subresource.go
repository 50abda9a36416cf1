package apiserver

import (
	"context"
	"net/http"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	"github.com/concord-dev/concord/registry"
)

// Subresources of an object: GET, PUT and PATCH of .../{name}/status for a
// resource with a StatusStrategy (the custom resources whose CRD version
// has subresources.status, CustomResourceDefinitions), and of
// .../{name}/scale for a custom resource whose version declares
// subresources.scale (scale.go); POST of a ServiceAccount's .../{name}/token
// (token.go); PUT of a Namespace's /namespaces/{name}/finalize.

// routesSubresource reports whether a path to subresource of an object of
// res is a resource path (routeResource): one res has, or any of a custom
// resource, whose handler answers the others as kube's custom resource
// handler does (404; a watch 405). A built-in resource's other
// subresource paths are left to the other routes (404), as before.
func routesSubresource(res *registry.Resource, subresource string, watch bool) bool {
	if isCustom(res) {
		return true
	}
	return !watch && ((subresource == "status" && res.StatusStrategy != nil) || (subresource == "token" && hasTokenSubresource(res)) ||
		(subresource == "finalize" && res.IsNamespace))
}

// subresource answers a request to a subresource of the object h names.
func (h *resourceHandler) subresource(w http.ResponseWriter, r *http.Request, subresource string, watch bool) {
	namespace, name := h.namespace, h.name
	res := h.store.Resource
	scale, hasScale := res.Scale()
	served := (subresource == "status" && res.StatusStrategy != nil) || (subresource == "scale" && hasScale) ||
		(subresource == "token" && hasTokenSubresource(res) && h.tokens != nil) ||
		(subresource == "finalize" && res.IsNamespace)
	verb := r.Method
	if watch {
		verb = "WATCH"
	}
	describeResource(r, res, verb, namespace, name)
	if served {
		// Only subresources served are labelled: no client makes up series.
		infoOf(r).subresource = subresource
	}
	if err := checkPathSegments(namespace, name); err != nil {
		writeError(w, r, err)
		return
	}
	if err := h.checkAccept(r); err != nil {
		writeError(w, r, err)
		return
	}
	switch {
	case subresource == "token" && hasTokenSubresource(res) && h.tokens == nil:
		writeError(w, r, errTokensNotServed(name))
	case !served && !isCustom(res):
		// A built-in subresource not served here: the path is unknown, as
		// to kube's router.
		notFound(w, r)
	case !served:
		// kube's custom resource handler: the object is not found.
		writeError(w, r, apierrors.NewNotFound(res.GroupResource(), name))
	case watch:
		h.methodNotAllowed(w, r, "watch")
	case subresource == "token" && r.Method != http.MethodPost:
		h.methodNotAllowed(w, r, subresourceVerb(r.Method))
	case subresource == "token":
		h.token(w, r)
	case subresource == "finalize" && r.Method != http.MethodPut:
		h.methodNotAllowed(w, r, subresourceVerb(r.Method))
	case subresource == "finalize":
		h.finalize(w, r)
	case r.Method != http.MethodGet && r.Method != http.MethodPut && r.Method != http.MethodPatch:
		h.methodNotAllowed(w, r, subresourceVerb(r.Method))
	case subresource == "scale":
		h.scale(w, r, scale)
	default:
		h.status(w, r)
	}
}

// subresourceVerb is the API verb kube names in a subresource's 405.
func subresourceVerb(method string) string {
	switch method {
	case http.MethodPost:
		return "create"
	case http.MethodDelete:
		return "delete"
	}
	return verb(method)
}

// status serves .../{name}/status: GET reads the object (?watch is
// ignored, as kube does), PUT replaces its status (Store.UpdateStatus:
// conditional, 428 without a version, nothing else of the object changed),
// PATCH patches or applies it (Store.PatchStatus, ApplyStatus).
func (h *resourceHandler) status(w http.ResponseWriter, r *http.Request) {
	namespace, name := h.namespace, h.name
	switch r.Method {
	case http.MethodGet:
		h.getObject(w, r, namespace, name)
	case http.MethodPut:
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
		updated, err := h.store.UpdateStatus(r.Context(), namespace, name, obj, conds)
		if err != nil {
			writeError(w, r, err)
			return
		}
		w.Header().Set("ETag", etag(updated.GetResourceVersion()))
		h.writeWritten(w, r, http.StatusOK, updated, conds.DryRun)
	case http.MethodPatch:
		h.servePatch(w, r, func(ctx context.Context, pt types.PatchType, body []byte, conds registry.WriteOptions) (registry.Object, bool, error) {
			if pt == types.ApplyYAMLPatchType {
				obj, err := h.store.ApplyStatus(ctx, namespace, name, body, conds)
				return obj, false, err
			}
			obj, err := h.store.PatchStatus(ctx, namespace, name, pt, body, conds)
			return obj, false, err
		})
	}
}

// finalize serves PUT /namespaces/{name}/finalize: the namespace's
// spec.finalizers replaced (Store.Finalize: conditional, the status kept),
// as the namespace controller and "kubectl replace --raw" write them.
func (h *resourceHandler) finalize(w http.ResponseWriter, r *http.Request) {
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
	updated, err := h.store.Finalize(r.Context(), h.name, obj, conds)
	if err != nil {
		writeError(w, r, err)
		return
	}
	w.Header().Set("ETag", etag(updated.GetResourceVersion()))
	h.writeWritten(w, r, http.StatusOK, updated, conds.DryRun)
}
