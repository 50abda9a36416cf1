package apiserver

import (
	"net/http"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/concord-dev/concord/apiserver/authentication/serviceaccount"
	"github.com/concord-dev/concord/registry"
)

// The token subresource of ServiceAccounts: POST
// /api/v1/namespaces/{ns}/serviceaccounts/{name}/token takes an
// authentication.k8s.io/v1 TokenRequest and answers it with a token
// (serviceaccount.Issuer.Request), as kube's TokenREST. Nothing is stored.

// hasTokenSubresource reports whether res is the resource with it.
func hasTokenSubresource(res *registry.Resource) bool {
	return res == registry.ServiceAccounts
}

// tokenDiscovery is the subresource's entry in discovery, as kube lists
// it: serviceaccounts/token, kind TokenRequest, verb create.
var tokenDiscovery = subresourceDiscovery{
	APISubresourceDiscovery: apidiscoveryv2.APISubresourceDiscovery{
		Subresource:  "token",
		ResponseKind: &metav1.GroupVersionKind{Group: serviceaccount.TokenRequestGVK.Group, Version: serviceaccount.TokenRequestGVK.Version, Kind: serviceaccount.TokenRequestGVK.Kind},
		Verbs:        []string{"create"},
	},
	group:   serviceaccount.TokenRequestGVK.Group,
	version: serviceaccount.TokenRequestGVK.Version,
}

// errTokensNotServed answers the token subresource of a server without a
// signing key (--etcd-servers without --service-account-signing-key-file).
// Discovery lists the subresource all the same, as every replica should
// serve it: the 404 says what to configure.
func errTokensNotServed(name string) error {
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status:  metav1.StatusFailure,
		Code:    http.StatusNotFound,
		Reason:  metav1.StatusReasonNotFound,
		Details: &metav1.StatusDetails{Name: name, Kind: "serviceaccounts"},
		Message: "TokenRequests are not served: this server has no ServiceAccount signing key; " +
			"start every replica with the same --service-account-signing-key-file (e.g. openssl genrsa -out sa.key 2048)",
	}}
}

// token answers a POST of .../serviceaccounts/{name}/token.
func (h *resourceHandler) token(w http.ResponseWriter, r *http.Request) {
	if _, err := writeOptions(r, "CreateOptions"); err != nil {
		writeError(w, r, err)
		return
	}
	obj, err := decodeObject(w, r, serviceaccount.TokenRequestGVK, r.URL.Query().Get("fieldValidation"))
	if err != nil {
		writeError(w, r, err)
		return
	}
	out, err := h.tokens.Request(r.Context(), h.namespace, h.name, obj.(*authenticationv1.TokenRequest))
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeObject(w, r, http.StatusCreated, out)
}

// serveOpenIDMetadata serves the OpenID Connect discovery documents as
// kube's OpenIDMetadataServer: the configuration as JSON, the keys as a
// JWK set, both cacheable for an hour (the keys change only at a restart).
func serveOpenIDMetadata(body []byte, contentType string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", contentType)
		w.Header().Set("Cache-Control", "public, max-age=3600")
		w.WriteHeader(http.StatusOK)
		if r.Method == http.MethodHead {
			return
		}
		if _, err := w.Write(body); err != nil {
			logger(r).Warn("write response", "err", err)
		}
	})
}
