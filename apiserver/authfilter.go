package apiserver

import (
	"context"
	"errors"
	"net/http"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/concord-dev/concord/registry"
)

// withAuth authenticates every request that reaches it, then authorizes
// it, before any routing or storage access: 401 for a request it cannot
// authenticate, 403 for one the authorizer denies. A nil authn leaves the
// API open (no users, no authorization); a nil authz is the built-in rules
// alone. served finds the served resources, to label the metrics of
// refused requests.
func withAuth(next http.Handler, authn *Authentication, authz Authorizer, served func(schema.GroupVersionResource) (*registry.Resource, bool)) http.Handler {
	if authn == nil {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			attrs := requestAttributes(r)
			infoOf(r).attrs = &attrs
			next.ServeHTTP(w, r)
		})
	}
	if authz == nil {
		authz = NewPolicyAuthorizer(nil)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		attrs := requestAttributes(r)
		info := infoOf(r)
		info.attrs = &attrs
		user, err := authn.authenticate(r)
		if err != nil {
			labelRefused(r, attrs, served)
			logger(r).Info("request not authenticated", "path", r.URL.Path, "reason", err.Error())
			writeError(w, r, unauthorized())
			return
		}
		info.user = user
		attrs.User = *user
		if impersonating(r) {
			// Acting as the caller while the client believes it acts as
			// someone else would be a silent surprise: refuse instead.
			labelRefused(r, attrs, served)
			writeError(w, r, apierrors.NewForbidden(schema.GroupResource{Resource: "users"}, r.Header.Get("Impersonate-User"),
				errors.New("impersonation is not supported by this server")))
			return
		}
		if allowed, reason := authz.Authorize(attrs); !allowed {
			labelRefused(r, attrs, served)
			writeError(w, r, forbidden(attrs, reason))
			return
		}
		ctx := context.WithValue(r.Context(), userKey{}, user)
		// A handler may need to authorize more (checkUnsafeDelete).
		ctx = context.WithValue(ctx, authorizerKey{}, authz)
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// labelRefused gives a refused request to a served resource the metric
// labels its handler would have: a refused request never reaches it. Other
// paths keep no resource label, so that no client can make up series.
func labelRefused(r *http.Request, a Attributes, served func(schema.GroupVersionResource) (*registry.Resource, bool)) {
	if !a.ResourceRequest || a.Subresource != "" {
		return
	}
	res, ok := served(schema.GroupVersionResource{Group: a.APIGroup, Version: a.APIVersion, Resource: a.Resource})
	if !ok {
		return
	}
	verb := strings.ToUpper(a.Verb)
	switch a.Verb {
	case "create":
		verb = http.MethodPost
	case "update":
		verb = http.MethodPut
	}
	describeResource(r, res, verb, a.Namespace, a.Name)
}

// servedResource finds a resource the catalog serves now, or a review.
func servedResource(c *registry.Catalog) func(schema.GroupVersionResource) (*registry.Resource, bool) {
	return func(gvr schema.GroupVersionResource) (*registry.Resource, bool) {
		if s, ok := c.Lookup(gvr.Group, gvr.Version, gvr.Resource); ok {
			return s.Resource, true
		}
		for _, res := range reviewResources {
			if res.GroupVersion.WithResource(res.Plural) == gvr {
				return res, true
			}
		}
		return nil, false
	}
}

// impersonating reports whether the request asks to act as another user
// (kubectl --as, --as-group, --as-uid).
func impersonating(r *http.Request) bool {
	for name := range r.Header {
		if strings.HasPrefix(name, "Impersonate-") {
			return true
		}
	}
	return false
}
