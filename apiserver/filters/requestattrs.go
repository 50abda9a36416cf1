package filters

import (
	"net/http"
	"strings"
)

// Attributes are what an authorization decision is made on, as
// kube-apiserver's authorizer.Attributes: who asks, and what they ask for.
// A resource request names a verb (get, list, watch, create, update,
// patch, delete, deletecollection), an API group and version, a resource,
// maybe a subresource, a namespace ("" for cluster-scoped resources and for
// lists and watches across all namespaces) and a name ("" for
// collections). Any other request is a non-resource request: its verb is
// the lower-case HTTP method and Path says what it is for.
type Attributes struct {
	User            UserInfo
	Verb            string
	ResourceRequest bool
	APIGroup        string
	APIVersion      string
	Resource        string
	Subresource     string
	Namespace       string
	Name            string
	// Path is the request's URL path.
	Path string
	// Impersonator is who sent a request that acts as User (kubectl
	// --as); nil for the others.
	Impersonator *UserInfo
}

// namespaceSubresources are the subresources of a namespace, which
// /api/v1/namespaces/{name}/{subresource} addresses (kube-apiserver's
// RequestInfoFactory: status and finalize).
var namespaceSubresources = map[string]bool{"status": true, "finalize": true}

// requestAttributes parses a request's URL and method the way
// kube-apiserver's RequestInfoFactory does, before any routing: every
// request is authorized first, whether Concord serves its path or not (an
// unknown path is 403 for whom it is forbidden, 404 for the others).
//
//	/api/{version}/{resource}
//	/api/{version}/{resource}/{name}
//	/api/{version}/namespaces/{namespace}/{resource}[/{name}[/{subresource}]]
//	/api/{version}/namespaces/{name}                 (resource namespaces)
//	/api/{version}/watch/...                         (verb watch)
//	/apis/{group}/{version}/...                      (the same below)
//
// GET is get on an object and list (or watch, with ?watch=true) on a
// collection; DELETE on a collection is deletecollection. A list or watch
// whose fieldSelector is metadata.name=<name> names that object. Unlike
// kube-apiserver, a GET of an object path with ?watch=true (which Concord
// serves as a watch of that object) is watch, not get. It runs before the
// in-flight limits, so it reads of the query only what it needs and never
// parses the labelSelector (selectedName).
func requestAttributes(r *http.Request) Attributes {
	a := Attributes{Path: r.URL.Path, Verb: strings.ToLower(r.Method)}
	parts := splitPath(r.URL.Path)
	if len(parts) < 3 || (parts[0] != "api" && parts[0] != "apis") {
		return a
	}
	prefix := parts[0]
	parts = parts[1:]
	if prefix == "apis" {
		if len(parts) < 3 {
			return a // /apis/{group}/{version}: discovery
		}
		a.APIGroup, parts = parts[0], parts[1:]
	}
	a.ResourceRequest = true
	a.APIVersion, parts = parts[0], parts[1:]

	viaMethod := true
	if parts[0] == "watch" {
		a.Verb, parts, viaMethod = "watch", parts[1:], false
	} else {
		switch r.Method {
		case http.MethodPost:
			a.Verb = "create"
		case http.MethodGet, http.MethodHead:
			a.Verb = "get"
		case http.MethodPut:
			a.Verb = "update"
		case http.MethodPatch:
			a.Verb = "patch"
		case http.MethodDelete:
			a.Verb = "delete"
		default:
			a.Verb = ""
		}
	}

	if len(parts) > 0 && parts[0] == "namespaces" {
		if len(parts) > 1 {
			a.Namespace = parts[1]
			// /namespaces/{namespace}/{resource}/...: the resource is
			// what follows, unless it is a namespace's own subresource.
			if len(parts) > 2 && !namespaceSubresources[parts[2]] {
				parts = parts[2:]
			}
		}
	}
	switch {
	case len(parts) >= 3:
		a.Subresource = parts[2]
		fallthrough
	case len(parts) == 2:
		a.Name = parts[1]
		fallthrough
	case len(parts) == 1:
		a.Resource = parts[0]
	}

	if a.Name == "" && a.Verb == "get" {
		a.Verb = "list"
		if watchRequested(r.URL.RawQuery) {
			a.Verb = "watch"
		}
		if name, ok := selectedName(r.URL.RawQuery); ok {
			a.Name = name
		}
	} else if a.Name != "" && a.Verb == "get" && viaMethod && IsWatch(r) {
		// The same test as the object handler's, so that what is
		// authorized is what is served.
		a.Verb = "watch"
	}
	if a.Name == "" && a.Verb == "delete" {
		a.Verb = "deletecollection"
	}
	return a
}

// IsWatch tells long-running watch requests from the rest: they get no
// request timeout, only their own timeoutSeconds, and are not counted in
// the in-flight limits. It must agree with the handlers, which serve as a
// watch what it says is one (the API calls it too): a GET of a
// /watch/ path (/api/v1/watch/..., /apis/<group>/<version>/watch/...),
// or with the watch parameter as the ListOptions decoder reads it
// (anything but "0" and "false" is true; kube-apiserver's RequestInfo
// reads it the same way). A namespace or object named "watch" does not
// make a request a watch.
func IsWatch(r *http.Request) bool {
	if r.Method != http.MethodGet {
		return false
	}
	parts := strings.SplitN(strings.TrimPrefix(r.URL.Path, "/"), "/", 5)
	switch {
	case len(parts) > 3 && parts[0] == "api" && parts[2] == "watch":
		return true
	case len(parts) > 4 && parts[0] == "apis" && parts[3] == "watch":
		return true
	}
	return watchRequested(r.URL.RawQuery) && !isSubresourcePath(r.URL.Path)
}

// isSubresourcePath reports whether path names a subresource of an object
// (.../namespaces/{namespace}/{resource}/{name}/{subresource},
// .../{resource}/{name}/{subresource}): ?watch on one is ignored, as
// kube-apiserver does (GET .../status?watch=1 reads the object).
func isSubresourcePath(path string) bool {
	parts := splitPath(path)
	switch {
	case len(parts) > 2 && parts[0] == "api":
		parts = parts[2:]
	case len(parts) > 3 && parts[0] == "apis":
		parts = parts[3:]
	default:
		return false
	}
	if len(parts) == 0 || parts[0] == "watch" {
		return false
	}
	return (len(parts) == 5 && parts[0] == "namespaces") || (len(parts) == 3 && parts[0] != "namespaces")
}

// splitPath splits a path into its segments, without empty leading and
// trailing ones.
func splitPath(p string) []string {
	p = strings.Trim(p, "/")
	if p == "" {
		return nil
	}
	return strings.Split(p, "/")
}
