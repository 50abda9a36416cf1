package apiserver

import (
	"net/http"
	"strings"

	"github.com/concord-dev/concord/apiserver/authentication/serviceaccount"
	"github.com/concord-dev/concord/registry"
)

// resourceRoute is where a resource path leads: the store serving the
// resource, and the namespace and name the path gives.
type resourceRoute struct {
	store           *registry.Store
	namespace, name string
	// subresource is what the path names of the object ("status",
	// "scale"), if anything.
	subresource string
	// collection: the path names no object; watch: a /watch/ path.
	collection, watch bool
}

// routeResource resolves a resource path through the catalog, at request
// time, so that resources added and removed at run time are routed as
// the built-ins are. These are the paths kube-apiserver serves for a
// resource R in a group version (/api/v1, /apis/<group>/<version>):
//
//	namespaced R:      /namespaces/{namespace}/R[/{name}[/{subresource}]], /R (all namespaces),
//	                   /watch/namespaces/{namespace}/R[/{name}], /watch/R
//	cluster-scoped R:  /R[/{name}[/{subresource}]], /watch/R[/{name}]
//
// A subresource path is routed when the resource has the subresource
// (routesSubresource); a custom resource's is routed whatever it names, and
// its handler answers those it does not have 404 and a watch of one 405,
// as kube-apiserver's custom resource handler does.
// Every segment must be non-empty. Anything else, and a resource the
// catalog does not serve in that group version, is not a resource path: ok
// is false and the other routes (discovery, reviews, 404) get it.
func routeResource(c *registry.Catalog, path string) (_ resourceRoute, ok bool) {
	var group, version string
	var rest []string
	switch {
	case strings.HasPrefix(path, "/api/"):
		parts := strings.Split(path[len("/api/"):], "/")
		if len(parts) < 2 {
			return resourceRoute{}, false
		}
		version, rest = parts[0], parts[1:]
	case strings.HasPrefix(path, "/apis/"):
		parts := strings.Split(path[len("/apis/"):], "/")
		if len(parts) < 3 || parts[0] == "" {
			return resourceRoute{}, false
		}
		group, version, rest = parts[0], parts[1], parts[2:]
	default:
		return resourceRoute{}, false
	}
	if version == "" {
		return resourceRoute{}, false
	}
	for _, p := range rest {
		if p == "" {
			return resourceRoute{}, false
		}
	}
	var route resourceRoute
	if rest[0] == "watch" {
		route.watch, rest = true, rest[1:]
	}
	// /namespaces/{namespace}/R[/{name}], when R is namespaced; otherwise
	// /namespaces is the Namespace resource itself.
	if len(rest) >= 3 && len(rest) <= 5 && rest[0] == "namespaces" {
		if s, ok := c.Lookup(group, version, rest[2]); ok && s.Resource.Namespaced {
			route.store, route.namespace = s, rest[1]
			if len(rest) >= 4 {
				route.name = rest[3]
			}
			if len(rest) == 5 {
				route.subresource = rest[4]
			}
			route.collection = route.name == ""
			if route.subresource != "" && !routesSubresource(s.Resource, route.subresource, route.watch) {
				return resourceRoute{}, false
			}
			return route, true
		}
		if len(rest) != 3 {
			return resourceRoute{}, false
		}
		// /namespaces/{name}/{subresource}: the Namespace resource's.
	}
	if len(rest) == 0 || len(rest) > 3 {
		return resourceRoute{}, false
	}
	s, ok := c.Lookup(group, version, rest[0])
	if !ok || (s.Resource.Namespaced && len(rest) >= 2) {
		return resourceRoute{}, false
	}
	route.store = s
	if len(rest) >= 2 {
		route.name = rest[1]
	}
	if len(rest) == 3 {
		route.subresource = rest[2]
	}
	route.collection = route.name == ""
	if route.subresource != "" && !routesSubresource(s.Resource, route.subresource, route.watch) {
		return resourceRoute{}, false
	}
	return route, true
}

// guardedWrite reports whether a request with method writes through the
// store's guarded transactions: a create, or a replace, patch or delete of
// one object (a delete of a collection lists first).
func (route resourceRoute) guardedWrite(method string) bool {
	switch method {
	case http.MethodPost:
		return true
	case http.MethodPut, http.MethodPatch, http.MethodDelete:
		return !route.collection
	}
	return false
}

// withResourceRoutes serves the resource paths the catalog resolves
// (routeResource), and passes every other request to next.
func withResourceRoutes(next http.Handler, c *registry.Catalog, m *metrics, tokens *serviceaccount.Issuer) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		route, ok := routeResource(c, r.URL.Path)
		if ok && route.store.Resource.Gone != nil {
			gone, err := route.store.Resource.Gone(r.Context(), route.guardedWrite(r.Method))
			if err != nil {
				writeError(w, r, err)
				return
			}
			ok = !gone
		}
		if !ok {
			next.ServeHTTP(w, r)
			return
		}
		r = withWarnings(w, r, route.store.Resource)
		h := &resourceHandler{store: route.store, metrics: m, namespace: route.namespace, name: route.name, tokens: tokens}
		switch {
		case route.subresource != "":
			h.subresource(w, r, route.subresource, route.watch)
		case route.watch:
			h.legacyWatch(w, r)
		case route.collection:
			h.collection(w, r)
		default:
			h.item(w, r)
		}
	})
}
