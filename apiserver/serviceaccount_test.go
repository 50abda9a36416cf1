package apiserver_test

import (
	stdcmp "cmp"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"github.com/google/go-cmp/cmp"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/concord-dev/concord/cmd/concord/app"
	apptesting "github.com/concord-dev/concord/cmd/concord/app/testing"
	"github.com/concord-dev/concord/etcdstore/etcdtest"
	"github.com/concord-dev/concord/registry"
)

const testIssuer = "https://concord.test"

// saServer is a server (cmd/concord/app) authenticating the test tokens
// and ServiceAccount tokens (issuer testIssuer), authorizing with the
// built-in rules, over a real etcd: its issuer signs with signer, its
// authenticator verifies with verify.
type saServer struct {
	*testServer
	stores map[string]*registry.Store
	etcd   *etcdtest.Etcd
}

type saServerOptions struct {
	signer        crypto.Signer
	verify        []crypto.PublicKey
	maxExpiration time.Duration
	anonymous     bool
	// etcd, when set, is shared with another server (another replica).
	etcd *etcdtest.Etcd
}

// startSAServer starts the server with the keys as
// --service-account-signing-key-file and --service-account-key-file
// files (the latter only when opts.verify is set: the signer's key
// otherwise), serving plain HTTP.
func startSAServer(t *testing.T, opts saServerOptions) *saServer {
	t.Helper()
	e := opts.etcd
	if e == nil {
		e = etcdtest.Start(t)
	}
	cfg := apptesting.Config(t, e.Endpoint)
	cfg.Security.InsecureServing = true
	cfg.Security.TokenAuthFile = writeTokenFile(t, testTokens)
	cfg.Security.AnonymousAuth = opts.anonymous
	cfg.Security.AuthorizationMode = app.AuthorizationPolicy
	cfg.ServiceAccounts.Issuers = []string{testIssuer}
	cfg.ServiceAccounts.MaxTokenExpiration = opts.maxExpiration
	cfg.ServiceAccounts.SigningKeyFile = writeTestFile(t, "sa.key", string(privateKeyPEM(t, opts.signer)))
	if opts.verify != nil {
		var keys []byte
		for _, k := range opts.verify {
			keys = append(keys, publicKeyPEM(t, k)...)
		}
		cfg.ServiceAccounts.KeyFiles = []string{writeTestFile(t, "sa.pub", string(keys))}
	}
	srv := apptesting.Run(t, cfg)
	byName := map[string]*registry.Store{}
	for _, s := range srv.Stores() {
		if s.Resource.GroupVersion.Group == "" {
			byName[s.Resource.Plural] = s
		}
	}
	return &saServer{testServer: &testServer{URL: srv.URL(), Etcd: e, Stores: srv.Stores(), Catalog: srv.Catalog(), Handler: srv.Handler()}, stores: byName, etcd: e}
}

// privateKeyPEM is key as a PKCS #8 PEM block.
func privateKeyPEM(t *testing.T, key crypto.Signer) []byte {
	t.Helper()
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
}

// publicKeyPEM is key as a PKIX PEM block.
func publicKeyPEM(t *testing.T, key crypto.PublicKey) []byte {
	t.Helper()
	der, err := x509.MarshalPKIXPublicKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
}

// as sends a request with a bearer token.
func (s *saServer) as(t *testing.T, token, method, path string, body any) response {
	t.Helper()
	return s.do(t, method, path, body, "Authorization", "Bearer "+token)
}

// create creates an object as the admin and returns it decoded into out.
func (s *saServer) create(t *testing.T, path string, body, out any) {
	t.Helper()
	resp := s.as(t, "admin-token", http.MethodPost, path, body)
	if resp.Code != http.StatusCreated {
		t.Fatalf("POST %s: %d %s", path, resp.Code, resp.Body)
	}
	if out != nil {
		resp.decode(t, out)
	}
}

// token asks for a token of team/app and returns it.
func (s *saServer) token(t *testing.T, spec authenticationv1.TokenRequestSpec) string {
	t.Helper()
	var tr authenticationv1.TokenRequest
	s.create(t, "/api/v1/namespaces/team/serviceaccounts/app/token", authenticationv1.TokenRequest{Spec: spec}, &tr)
	return tr.Status.Token
}

// whoami is who the server takes token for (SelfSubjectReview), or the
// code of the refusal.
func (s *saServer) whoami(t *testing.T, token string) (authenticationv1.UserInfo, int) {
	t.Helper()
	resp := s.as(t, token, http.MethodPost, "/apis/authentication.k8s.io/v1/selfsubjectreviews", `{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}`)
	if resp.Code != http.StatusCreated {
		return authenticationv1.UserInfo{}, resp.Code
	}
	var review authenticationv1.SelfSubjectReview
	resp.decode(t, &review)
	return review.Status.UserInfo, resp.Code
}

func rsaKey(t *testing.T) *rsa.PrivateKey {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func ecKey(t *testing.T) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// setupTeam creates the namespace team, the ServiceAccount app and the
// Secret bound in it.
func (s *saServer) setupTeam(t *testing.T) (sa corev1.ServiceAccount, secret corev1.Secret) {
	t.Helper()
	s.create(t, "/api/v1/namespaces", `{"metadata":{"name":"team"}}`, nil)
	s.create(t, "/api/v1/namespaces/team/serviceaccounts", `{"metadata":{"name":"app"}}`, &sa)
	s.create(t, "/api/v1/namespaces/team/secrets", `{"metadata":{"name":"bound"}}`, &secret)
	return sa, secret
}

// TestServiceAccountValidation: ServiceAccounts are validated as kube's
// (names are DNS subdomains), keep only the names of their secrets, and
// warn of the deprecated enforce-mountable-secrets annotation.
func TestServiceAccountValidation(t *testing.T) {
	s := startSAServer(t, saServerOptions{signer: ecKey(t)})
	s.create(t, "/api/v1/namespaces", `{"metadata":{"name":"team"}}`, nil)
	for _, tc := range []struct {
		name, body string
		code       int
		causes     []metav1.StatusCause
		warning    string
	}{
		{name: "invalid name", body: `{"metadata":{"name":"Bad_Name"}}`, code: http.StatusUnprocessableEntity,
			causes: []metav1.StatusCause{{Type: "FieldValueInvalid", Message: `Invalid value: "Bad_Name": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')`, Field: "metadata.name"}}},
		{name: "valid", body: `{"metadata":{"name":"app"},"secrets":[{"name":"s","namespace":"elsewhere","uid":"u"}]}`, code: http.StatusCreated},
		{name: "deprecated annotation", body: `{"metadata":{"name":"old","annotations":{"kubernetes.io/enforce-mountable-secrets":"true"}}}`, code: http.StatusCreated,
			warning: `299 - "metadata.annotations[kubernetes.io/enforce-mountable-secrets]: deprecated in v1.32+; prefer separate namespaces to isolate access to mounted secrets"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := s.as(t, "admin-token", http.MethodPost, "/api/v1/namespaces/team/serviceaccounts", tc.body)
			if resp.Code != tc.code {
				t.Fatalf("code = %d; want %d: %s", resp.Code, tc.code, resp.Body)
			}
			if tc.code != http.StatusCreated {
				if diff := cmp.Diff(tc.causes, resp.status(t).Details.Causes); diff != "" {
					t.Errorf("causes (-want +got):\n%s", diff)
				}
				return
			}
			if got := resp.Header.Get("Warning"); got != tc.warning {
				t.Errorf("Warning = %q; want %q", got, tc.warning)
			}
		})
	}
	var sa corev1.ServiceAccount
	s.as(t, "admin-token", http.MethodGet, "/api/v1/namespaces/team/serviceaccounts/app", nil).decode(t, &sa)
	if want := []corev1.ObjectReference{{Name: "s"}}; !cmp.Equal(sa.Secrets, want) {
		t.Errorf("secrets = %v; want %v (names only)", sa.Secrets, want)
	}
	var table metav1.Table
	s.do(t, http.MethodGet, "/api/v1/namespaces/team/serviceaccounts/app", nil,
		"Authorization", "Bearer admin-token", "Accept", "application/json;as=Table;v=v1;g=meta.k8s.io").decode(t, &table)
	var columns []string
	for _, c := range table.ColumnDefinitions {
		columns = append(columns, c.Name)
	}
	// kube 1.37 dropped the Secrets column.
	if want := []string{"Name", "Age"}; !slices.Equal(columns, want) || len(table.Rows) != 1 || len(table.Rows[0].Cells) != 2 || table.Rows[0].Cells[0] != "app" {
		t.Errorf("table columns %v, rows %v; want columns %v and the row of app", columns, table.Rows, want)
	}
}

// TestTokenRequestBadInput: every refusal of a TokenRequest is kube's,
// code, reason and causes, and nothing is written.
func TestTokenRequestBadInput(t *testing.T) {
	s := startSAServer(t, saServerOptions{signer: ecKey(t)})
	sa, secret := s.setupTeam(t)
	s.create(t, "/api/v1/namespaces/team/configmaps", `{"metadata":{"name":"cm"}}`, nil)
	const path = "/api/v1/namespaces/team/serviceaccounts/app/token"
	for _, tc := range []struct {
		name, method, path string
		body               any
		code               int
		reason             metav1.StatusReason
		message            string
		causes             []metav1.StatusCause
	}{
		{name: "name mismatch", body: authenticationv1.TokenRequest{ObjectMeta: metav1.ObjectMeta{Name: "other"}},
			code: 422, reason: metav1.StatusReasonInvalid,
			message: `TokenRequest.authentication.k8s.io "app" is invalid: metadata.name: Invalid value: "other": must match the service account name if specified`,
			causes:  []metav1.StatusCause{{Type: "FieldValueInvalid", Message: `Invalid value: "other": must match the service account name if specified`, Field: "metadata.name"}}},
		{name: "namespace mismatch", body: authenticationv1.TokenRequest{ObjectMeta: metav1.ObjectMeta{Namespace: "default"}},
			code: 422, reason: metav1.StatusReasonInvalid,
			message: `TokenRequest.authentication.k8s.io "app" is invalid: metadata.namespace: Invalid value: "default": must match the service account namespace if specified`,
			causes:  []metav1.StatusCause{{Type: "FieldValueInvalid", Message: `Invalid value: "default": must match the service account namespace if specified`, Field: "metadata.namespace"}}},
		{name: "no such service account", path: "/api/v1/namespaces/team/serviceaccounts/nope/token", body: authenticationv1.TokenRequest{},
			code: 404, reason: metav1.StatusReasonNotFound, message: `serviceaccounts "nope" not found`},
		{name: "uid mismatch", body: authenticationv1.TokenRequest{ObjectMeta: metav1.ObjectMeta{UID: "not-the-uid"}},
			code: 409, reason: metav1.StatusReasonConflict,
			message: `Operation cannot be fulfilled on TokenRequest.authentication.k8s.io "app": the UID in the token request (not-the-uid) does not match the UID of the service account (` + string(sa.UID) + `)`},
		{name: "expiration below 10 minutes", body: authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr(int64(599))}},
			code: 422, reason: metav1.StatusReasonInvalid,
			message: `TokenRequest.authentication.k8s.io "" is invalid: spec.expirationSeconds: Invalid value: 599: may not specify a duration less than 10 minutes`,
			causes:  []metav1.StatusCause{{Type: "FieldValueInvalid", Message: "Invalid value: 599: may not specify a duration less than 10 minutes", Field: "spec.expirationSeconds"}}},
		{name: "expiration above 2^32 seconds", body: authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr(int64(1<<32 + 1))}},
			code: 422, reason: metav1.StatusReasonInvalid,
			message: `TokenRequest.authentication.k8s.io "" is invalid: spec.expirationSeconds: Invalid value: 4294967297: may not specify a duration larger than 2^32 seconds`,
			causes:  []metav1.StatusCause{{Type: "FieldValueInvalid", Message: "Invalid value: 4294967297: may not specify a duration larger than 2^32 seconds", Field: "spec.expirationSeconds"}}},
		{name: "bound to a pod", body: authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: "p"}}},
			code: 404, reason: metav1.StatusReasonNotFound, message: `pods "p" not found`},
		{name: "bound to a configmap", body: authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "ConfigMap", APIVersion: "v1", Name: "cm"}}},
			code: 400, reason: metav1.StatusReasonBadRequest, message: `cannot bind token to object of type /v1, Kind=ConfigMap`},
		{name: "bound to a missing secret", body: authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Secret", APIVersion: "v1", Name: "missing"}}},
			code: 404, reason: metav1.StatusReasonNotFound, message: `secrets "missing" not found`},
		{name: "bound secret uid mismatch", body: authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Secret", APIVersion: "v1", Name: secret.Name, UID: "stale"}}},
			code: 409, reason: metav1.StatusReasonConflict,
			message: `Operation cannot be fulfilled on Secret "bound": the UID in the bound object reference (stale) does not match the UID in record. The object might have been deleted and then recreated`},
		{name: "not a TokenRequest", body: `{"apiVersion":"v1","kind":"ConfigMap"}`,
			code: 400, reason: metav1.StatusReasonBadRequest,
			message: `ConfigMap in version "v1" cannot be handled as a TokenRequest: the body must be of kind TokenRequest, apiVersion authentication.k8s.io/v1`},
		{name: "GET", method: http.MethodGet, code: 405, reason: metav1.StatusReasonMethodNotAllowed,
			message: `get is not supported on resources of kind "serviceaccounts"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := s.storedKeys(t, "/registry/")
			method, p := stdcmp.Or(tc.method, http.MethodPost), stdcmp.Or(tc.path, path)
			resp := s.as(t, "admin-token", method, p, tc.body)
			if resp.Code != tc.code {
				t.Fatalf("code = %d; want %d: %s", resp.Code, tc.code, resp.Body)
			}
			st := resp.status(t)
			if st.Reason != tc.reason || st.Message != tc.message {
				t.Errorf("reason %q, message %q;\nwant %q, %q", st.Reason, st.Message, tc.reason, tc.message)
			}
			var causes []metav1.StatusCause
			if st.Details != nil {
				causes = st.Details.Causes
			}
			if diff := cmp.Diff(tc.causes, causes); diff != "" {
				t.Errorf("causes (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(before, s.storedKeys(t, "/registry/")); diff != "" {
				t.Errorf("etcd changed (-before +after):\n%s", diff)
			}
		})
	}
}

// jwtParts decodes a token's header and claims without verifying it.
func jwtParts(t *testing.T, token string) (header, claims map[string]any) {
	t.Helper()
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		t.Fatalf("token %q is not a compact JWS", token)
	}
	for i, out := range []*map[string]any{&header, &claims} {
		data, err := base64.RawURLEncoding.DecodeString(parts[i])
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(data, out); err != nil {
			t.Fatal(err)
		}
	}
	return header, claims
}

// TestTokenRequestClaims: the token's header and claims are kube's, for an
// RSA and an ECDSA signing key, with and without a bound Secret and
// audiences (aud a list, even of one, as kube writes it); the expiration
// defaults to an hour and is capped by the maximum, with kube's warning.
func TestTokenRequestClaims(t *testing.T) {
	for _, tc := range []struct {
		name string
		key  crypto.Signer
		alg  string
	}{
		{name: "RSA", key: rsaKey(t), alg: "RS256"},
		{name: "ECDSA P-256", key: ecKey(t), alg: "ES256"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := startSAServer(t, saServerOptions{signer: tc.key, maxExpiration: 2 * time.Hour})
			sa, secret := s.setupTeam(t)
			var tr authenticationv1.TokenRequest
			s.create(t, "/api/v1/namespaces/team/serviceaccounts/app/token", `{"apiVersion":"authentication.k8s.io/v1","kind":"TokenRequest","spec":{}}`, &tr)
			if tr.Kind != "TokenRequest" || tr.APIVersion != "authentication.k8s.io/v1" || tr.Name != "app" || tr.Namespace != "team" || *tr.Spec.ExpirationSeconds != 3600 || !slices.Equal(tr.Spec.Audiences, []string{testIssuer}) {
				t.Errorf("answer %+v; want the TokenRequest of team/app with expirationSeconds 3600 and the API audiences", tr)
			}
			header, claims := jwtParts(t, tr.Status.Token)
			if want := map[string]any{"alg": tc.alg, "kid": keyIDOf(t, tc.key.Public())}; !cmp.Equal(header, want) {
				t.Errorf("header = %v; want %v", header, want)
			}
			iat := claims["iat"].(float64)
			if claims["exp"].(float64)-iat != 3600 || claims["nbf"] != iat || int64(iat) != tr.CreationTimestamp.Unix() || tr.Status.ExpirationTimestamp.Unix() != int64(iat)+3600 {
				t.Errorf("iat %v, nbf %v, exp %v, expirationTimestamp %v; want nbf = iat, exp = iat + 3600 = expirationTimestamp", iat, claims["nbf"], claims["exp"], tr.Status.ExpirationTimestamp)
			}
			for _, k := range []string{"iat", "nbf", "exp", "jti"} {
				delete(claims, k)
			}
			want := map[string]any{
				"iss": testIssuer, "sub": "system:serviceaccount:team:app", "aud": []any{testIssuer},
				"kubernetes.io": map[string]any{"namespace": "team", "serviceaccount": map[string]any{"name": "app", "uid": string(sa.UID)}},
			}
			if diff := cmp.Diff(want, claims); diff != "" {
				t.Errorf("claims (-want +got):\n%s", diff)
			}

			// Audiences given, a Secret bound, 3 hours asked for: capped.
			resp := s.as(t, "admin-token", http.MethodPost, "/api/v1/namespaces/team/serviceaccounts/app/token", authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
				Audiences: []string{"vault", testIssuer}, ExpirationSeconds: ptr(int64(3 * 3600)),
				BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Secret", APIVersion: "v1", Name: "bound", UID: secret.UID},
			}})
			if resp.Code != http.StatusCreated {
				t.Fatalf("bound request: %d %s", resp.Code, resp.Body)
			}
			if got, want := resp.Header.Get("Warning"), `299 - "requested expiration of 10800 seconds shortened to 7200 seconds"`; got != want {
				t.Errorf("Warning = %q; want %q", got, want)
			}
			resp.decode(t, &tr)
			_, claims = jwtParts(t, tr.Status.Token)
			if *tr.Spec.ExpirationSeconds != 7200 || claims["exp"].(float64)-claims["iat"].(float64) != 7200 {
				t.Errorf("expirationSeconds %d, exp - iat %v; want 7200", *tr.Spec.ExpirationSeconds, claims["exp"].(float64)-claims["iat"].(float64))
			}
			if diff := cmp.Diff([]any{"vault", testIssuer}, claims["aud"]); diff != "" {
				t.Errorf("aud (-want +got):\n%s", diff)
			}
			wantK8s := map[string]any{"namespace": "team", "serviceaccount": map[string]any{"name": "app", "uid": string(sa.UID)}, "secret": map[string]any{"name": "bound", "uid": string(secret.UID)}}
			if diff := cmp.Diff(wantK8s, claims["kubernetes.io"]); diff != "" {
				t.Errorf("kubernetes.io claims (-want +got):\n%s", diff)
			}
		})
	}
}

// keyIDOf is kube's keyIDFromPublicKey of pub, computed here from its
// definition: the unpadded base64url SHA-256 of the PKIX DER.
func keyIDOf(t *testing.T, pub crypto.PublicKey) string {
	t.Helper()
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(der)
	return base64.RawURLEncoding.EncodeToString(sum[:])
}

// TestServiceAccountTokenAuthentication: a token authenticates as its
// ServiceAccount (name, uid, groups, credential-id) while the
// ServiceAccount and its bound Secret are the ones it was issued for; a
// token whose ServiceAccount was deleted, or deleted and created again, or
// whose Secret was, is 401, as are tokens of other audiences and keys and
// tampered ones.
func TestServiceAccountTokenAuthentication(t *testing.T) {
	key := rsaKey(t)
	s := startSAServer(t, saServerOptions{signer: key})
	sa, secret := s.setupTeam(t)
	plain := s.token(t, authenticationv1.TokenRequestSpec{})
	bound := s.token(t, authenticationv1.TokenRequestSpec{BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Secret", APIVersion: "v1", Name: secret.Name}})
	otherAudience := s.token(t, authenticationv1.TokenRequestSpec{Audiences: []string{"vault"}})
	otherKey := startSAServer(t, saServerOptions{signer: rsaKey(t), etcd: s.etcd}).token(t, authenticationv1.TokenRequestSpec{})

	user, code := s.whoami(t, plain)
	_, claims := jwtParts(t, plain)
	want := authenticationv1.UserInfo{
		Username: "system:serviceaccount:team:app", UID: string(sa.UID),
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:team", "system:authenticated"},
		Extra:  map[string]authenticationv1.ExtraValue{"authentication.kubernetes.io/credential-id": {"JTI=" + claims["jti"].(string)}},
	}
	if diff := cmp.Diff(want, user); code != http.StatusCreated || diff != "" {
		t.Fatalf("whoami: %d (-want +got):\n%s", code, diff)
	}
	if _, code := s.whoami(t, bound); code != http.StatusCreated {
		t.Fatalf("whoami with the Secret-bound token: %d", code)
	}
	// The policy grants a ServiceAccount nothing by default: 403 names it.
	resp := s.as(t, plain, http.MethodGet, "/api/v1/namespaces/team/configmaps", nil)
	if got, want := resp.status(t).Message, `configmaps is forbidden: User "system:serviceaccount:team:app" cannot list resource "configmaps" in API group "" in the namespace "team"`; resp.Code != http.StatusForbidden || got != want {
		t.Errorf("list configmaps: %d %q; want 403 %q", resp.Code, got, want)
	}
	tampered := plain[:len(plain)-4] + "AAAA"
	for name, token := range map[string]string{"other audience": otherAudience, "other key": otherKey, "tampered": tampered} {
		if _, code := s.whoami(t, token); code != http.StatusUnauthorized {
			t.Errorf("%s: whoami = %d; want 401", name, code)
		}
	}

	// The bound Secret goes: only the token bound to it is refused.
	if resp := s.as(t, "admin-token", http.MethodDelete, "/api/v1/namespaces/team/secrets/bound", nil); resp.Code != http.StatusOK {
		t.Fatalf("delete secret: %d %s", resp.Code, resp.Body)
	}
	if _, code := s.whoami(t, bound); code != http.StatusUnauthorized {
		t.Errorf("token bound to a deleted Secret: whoami = %d; want 401", code)
	}
	// Created again, it is another Secret (another uid).
	s.create(t, "/api/v1/namespaces/team/secrets", `{"metadata":{"name":"bound"}}`, nil)
	if _, code := s.whoami(t, bound); code != http.StatusUnauthorized {
		t.Errorf("token bound to a re-created Secret: whoami = %d; want 401", code)
	}
	if _, code := s.whoami(t, plain); code != http.StatusCreated {
		t.Errorf("unbound token after the Secret changed: whoami = %d; want 201", code)
	}

	// The ServiceAccount is deleted and created again: another uid.
	if resp := s.as(t, "admin-token", http.MethodDelete, "/api/v1/namespaces/team/serviceaccounts/app", nil); resp.Code != http.StatusOK {
		t.Fatalf("delete serviceaccount: %d %s", resp.Code, resp.Body)
	}
	if _, code := s.whoami(t, plain); code != http.StatusUnauthorized {
		t.Errorf("token of a deleted ServiceAccount: whoami = %d; want 401", code)
	}
	s.create(t, "/api/v1/namespaces/team/serviceaccounts", `{"metadata":{"name":"app"}}`, nil)
	if _, code := s.whoami(t, plain); code != http.StatusUnauthorized {
		t.Errorf("token of a re-created ServiceAccount: whoami = %d; want 401", code)
	}
	if _, code := s.whoami(t, s.token(t, authenticationv1.TokenRequestSpec{})); code != http.StatusCreated {
		t.Errorf("new token of the re-created ServiceAccount: whoami = %d; want 201", code)
	}
}

// TestServiceAccountTokenKeyRotation: with two verification keys (two
// --service-account-key-file), tokens signed by either authenticate; once
// the old key is dropped, its tokens are refused.
func TestServiceAccountTokenKeyRotation(t *testing.T) {
	oldKey, newKey := rsaKey(t), ecKey(t)
	e := etcdtest.Start(t)
	before := startSAServer(t, saServerOptions{signer: oldKey, etcd: e})
	before.setupTeam(t)
	oldToken := before.token(t, authenticationv1.TokenRequestSpec{})
	during := startSAServer(t, saServerOptions{signer: newKey, verify: []crypto.PublicKey{oldKey.Public(), newKey.Public()}, etcd: e})
	newToken := during.token(t, authenticationv1.TokenRequestSpec{})
	after := startSAServer(t, saServerOptions{signer: newKey, etcd: e})
	for _, tc := range []struct {
		name   string
		server *saServer
		token  string
		code   int
	}{
		{"old token, both keys", during, oldToken, http.StatusCreated},
		{"new token, both keys", during, newToken, http.StatusCreated},
		{"new token, old key only", before, newToken, http.StatusUnauthorized},
		{"old token, new key only", after, oldToken, http.StatusUnauthorized},
		{"new token, new key only", after, newToken, http.StatusCreated},
	} {
		if _, code := tc.server.whoami(t, tc.token); code != tc.code {
			t.Errorf("%s: whoami = %d; want %d", tc.name, code, tc.code)
		}
	}
}

// TestOpenIDDiscovery: the issuer's OpenID configuration and JWKS are
// served as kube's (content types, Cache-Control), to authenticated and,
// with anonymous requests allowed, anonymous clients, and a token
// verifies with go-jose against the served keys.
func TestOpenIDDiscovery(t *testing.T) {
	key := ecKey(t)
	s := startSAServer(t, saServerOptions{signer: key, verify: []crypto.PublicKey{rsaKey(t).Public(), key.Public()}, anonymous: true})
	s.setupTeam(t)
	token := s.token(t, authenticationv1.TokenRequestSpec{Audiences: []string{"vault"}})

	config := s.do(t, http.MethodGet, "/.well-known/openid-configuration", nil)
	if config.Code != http.StatusOK || config.Header.Get("Content-Type") != "application/json" || config.Header.Get("Cache-Control") != "public, max-age=3600" {
		t.Fatalf("configuration: %d %v %s", config.Code, config.Header, config.Body)
	}
	var doc map[string]any
	config.decode(t, &doc)
	wantDoc := map[string]any{
		"issuer": testIssuer, "jwks_uri": testIssuer + "/openid/v1/jwks",
		"response_types_supported": []any{"id_token"}, "subject_types_supported": []any{"public"},
		"id_token_signing_alg_values_supported": []any{"ES256", "RS256"},
	}
	if diff := cmp.Diff(wantDoc, doc); diff != "" {
		t.Errorf("configuration (-want +got):\n%s", diff)
	}
	// As the ServiceAccount itself (a token for the API).
	keys := s.as(t, s.token(t, authenticationv1.TokenRequestSpec{}), http.MethodGet, "/openid/v1/jwks", nil)
	if keys.Code != http.StatusOK || keys.Header.Get("Content-Type") != "application/jwk-set+json" || keys.Header.Get("Cache-Control") != "public, max-age=3600" {
		t.Fatalf("jwks: %d %v %s", keys.Code, keys.Header, keys.Body)
	}
	var set jose.JSONWebKeySet
	keys.decode(t, &set)
	if len(set.Keys) != 2 {
		t.Fatalf("jwks has %d keys; want 2", len(set.Keys))
	}

	// A relying party verifies the token with the published key its kid names.
	tok, err := jwt.ParseSigned(token, []jose.SignatureAlgorithm{jose.RS256, jose.ES256})
	if err != nil {
		t.Fatal(err)
	}
	published := set.Key(tok.Headers[0].KeyID)
	if len(published) != 1 || published[0].Use != "sig" || published[0].Algorithm != "ES256" {
		t.Fatalf("keys for kid %q: %+v", tok.Headers[0].KeyID, published)
	}
	var claims jwt.Claims
	if err := tok.Claims(published[0].Key, &claims); err != nil {
		t.Fatalf("verify with the published key: %v", err)
	}
	if err := claims.Validate(jwt.Expected{Issuer: testIssuer, AnyAudience: jwt.Audience{"vault"}, Subject: "system:serviceaccount:team:app", Time: time.Now()}); err != nil {
		t.Errorf("claims: %v", err)
	}
}

// TestTokenRequestWithoutSigningKey: a server without a signing key
// (--etcd-servers without --service-account-signing-key-file) answers the
// token subresource, which discovery lists, with a 404 that says what to
// configure, not the router's bare one; kubectl create token shows it.
func TestTokenRequestWithoutSigningKey(t *testing.T) {
	s := startServer(t)
	const message = "TokenRequests are not served: this server has no ServiceAccount signing key; " +
		"start every replica with the same --service-account-signing-key-file (e.g. openssl genrsa -out sa.key 2048)"
	s.do(t, http.MethodPost, "/api/v1/namespaces/default/serviceaccounts", `{"metadata":{"name":"app"}}`)
	for _, method := range []string{http.MethodPost, http.MethodGet} {
		resp := s.do(t, method, "/api/v1/namespaces/default/serviceaccounts/app/token", `{"apiVersion":"authentication.k8s.io/v1","kind":"TokenRequest"}`)
		want := metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusFailure, Code: http.StatusNotFound,
			Reason: metav1.StatusReasonNotFound, Message: message, Details: &metav1.StatusDetails{Name: "app", Kind: "serviceaccounts"}}
		if diff := cmp.Diff(want, resp.status(t)); resp.Code != http.StatusNotFound || diff != "" {
			t.Errorf("%s token: %d; Status (-want +got):\n%s", method, resp.Code, diff)
		}
	}
	if _, err := os.Stat(kubectlBin); err != nil {
		t.Skipf("needs kubectl: %v", err)
	}
	dir := t.TempDir()
	_, stderr, err := runKubectl(t, writeKubeconfig(t, dir, s.URL), filepath.Join(dir, "cache"), "", "create", "token", "app")
	if want := "error: failed to create token: " + message + "\n"; err == nil || stderr != want {
		t.Errorf("kubectl create token: %v, stderr %q; want %q", err, stderr, want)
	}
}
