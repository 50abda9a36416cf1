package apiserver_test

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/csv"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	"math/big"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/concord-dev/concord/apiserver/filters"
	"github.com/concord-dev/concord/cmd/concord/app"
	apptesting "github.com/concord-dev/concord/cmd/concord/app/testing"
	"github.com/concord-dev/concord/etcdstore/etcdtest"
)

// testTokens are the bearer tokens of the auth tests' users.
var testTokens = map[string]filters.UserInfo{
	"admin-token": {Name: "root", UID: "0", Groups: []string{filters.MastersGroup}},
	"alice-token": {Name: "alice", UID: "1001", Groups: []string{"team-a"}},
	"bob-token":   {Name: "bob", UID: "1002"},
}

// testPolicy: alice reads ConfigMaps in team; group team-a also creates
// them there; everyone, anonymous included, reads ConfigMaps in public.
const testPolicy = `
rules:
- users: [alice]
  verbs: [get, list, watch]
  resources: [configmaps]
  namespaces: [team]
- groups: [team-a]
  verbs: [create]
  resources: [configmaps]
  namespaces: [team]
- groups: [system:unauthenticated, system:authenticated]
  verbs: [get, list]
  resources: [configmaps]
  namespaces: [public]
`

// authServer is a server (cmd/concord/app) behind TLS with a certificate
// of its own CA, authenticating and authorizing as its Config says, with
// an audit log.
type authServer struct {
	URL string
	// transport trusts the server's CA, caPEM.
	transport *http.Transport
	caPEM     []byte
	ca        *testCA // signs the client certificates it trusts
	auditPath string
	reg       *prometheus.Registry
}

// startAuthServer serves with the test tokens, client certificates of a
// test CA, the test policy (--authorization-mode=Policy), profiling and
// an audit log; anonymous is --anonymous-auth.
func startAuthServer(t *testing.T, anonymous bool) *authServer {
	t.Helper()
	ca := newTestCA(t, "test client CA")
	cfg := apptesting.Config(t, etcdtest.Start(t).Endpoint)
	cfg.Security.TokenAuthFile = writeTokenFile(t, testTokens)
	cfg.Security.ClientCAFile = writeTestFile(t, "client-ca.crt", string(ca.pem()))
	cfg.Security.AnonymousAuth = anonymous
	cfg.Security.AuthorizationMode = app.AuthorizationPolicy
	cfg.Security.AuthorizationPolicyFile = writeTestFile(t, "policy.yaml", testPolicy)
	cfg.Profiling = true
	s := startTLSServer(t, cfg)
	s.ca = ca
	for _, ns := range []string{"team", "other", "public"} {
		if resp := s.do(t, "admin-token", http.MethodPost, "/api/v1/namespaces", `{"metadata":{"name":"`+ns+`"}}`); resp.Code != http.StatusCreated {
			t.Fatalf("create namespace %s: %d %s", ns, resp.Code, resp.Body)
		}
	}
	return s
}

// startTLSServer runs the server of cfg (its security as the caller set
// it) over HTTPS with a certificate of the CA it generates in a
// --cert-dir of the test's, and an audit log.
func startTLSServer(t *testing.T, cfg app.Config, opts ...app.Option) *authServer {
	t.Helper()
	cfg.Security.CertDir = t.TempDir()
	s := &authServer{auditPath: filepath.Join(t.TempDir(), "audit.log")}
	cfg.Security.AuditLogPath = s.auditPath
	srv := apptesting.Run(t, cfg, opts...)
	caPEM, err := os.ReadFile(filepath.Join(cfg.Security.CertDir, "ca.crt"))
	if err != nil {
		t.Fatalf("the server's CA: %v", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		t.Fatalf("the server's CA: no certificate in %s", caPEM)
	}
	s.URL, s.caPEM, s.reg = srv.URL(), caPEM, srv.Metrics()
	s.transport = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}, ForceAttemptHTTP2: true}
	t.Cleanup(s.transport.CloseIdleConnections)
	return s
}

// writeTokenFile writes tokens as a --token-auth-file.
func writeTokenFile(t *testing.T, tokens map[string]filters.UserInfo) string {
	t.Helper()
	var b strings.Builder
	w := csv.NewWriter(&b)
	for token, u := range tokens {
		if err := w.Write([]string{token, u.Name, u.UID, strings.Join(u.Groups, ",")}); err != nil {
			t.Fatal(err)
		}
	}
	w.Flush()
	return writeTestFile(t, "tokens.csv", b.String())
}

// writeTestFile writes content to a file named name in a directory of the
// test's and returns its path.
func writeTestFile(t testing.TB, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// auditLog is the audit log written so far.
func (s *authServer) auditLog(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile(s.auditPath)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("read the audit log: %v", err)
	}
	return string(data)
}

// client is an HTTPS client that trusts the server and presents cert, if
// not nil.
func (s *authServer) client(cert *tls.Certificate) *http.Client {
	tr := s.transport
	if cert != nil {
		tr = tr.Clone()
		tr.TLSClientConfig.Certificates = []tls.Certificate{*cert}
	}
	return &http.Client{Transport: tr, Timeout: 30 * time.Second}
}

// do sends a request with a bearer token (none if ""); body is JSON.
func (s *authServer) do(t *testing.T, token, method, path, body string) response {
	t.Helper()
	return s.doWith(t, s.client(nil), method, path, body, "Authorization", bearer(token))
}

// openWatch sends a watch request with token through client; the watch
// ends with the test, or after 30 s.
func (s *authServer) openWatch(t *testing.T, client *http.Client, token, path string) *http.Response {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", bearer(token))
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func bearer(token string) string {
	if token == "" {
		return ""
	}
	return "Bearer " + token
}

func (s *authServer) doWith(t *testing.T, c *http.Client, method, path, body string, header ...string) response {
	t.Helper()
	var reader io.Reader
	if body != "" {
		reader = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, s.URL+path, reader)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "application/json")
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(header); i += 2 {
		if header[i+1] != "" {
			req.Header.Set(header[i], header[i+1])
		}
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read: %v", method, path, err)
	}
	return response{Code: resp.StatusCode, Header: resp.Header, Body: data}
}

// wantStatus checks a failure Status: code, reason and exact message.
func wantStatus(t *testing.T, what string, resp response, code int, reason metav1.StatusReason, message string) metav1.Status {
	t.Helper()
	if resp.Code != code {
		t.Errorf("%s: %d %s; want %d", what, resp.Code, resp.Body, code)
		return metav1.Status{}
	}
	st := resp.status(t)
	if st.Reason != reason || st.Message != message {
		t.Errorf("%s: reason %q message %q; want %q %q", what, st.Reason, st.Message, reason, message)
	}
	return st
}

func TestAuthBearerTokens(t *testing.T) {
	s := startAuthServer(t, false)
	if resp := s.do(t, "alice-token", http.MethodGet, "/api/v1/namespaces/team/configmaps", ""); resp.Code != http.StatusOK {
		t.Errorf("alice lists configmaps in team: %d %s; want 200", resp.Code, resp.Body)
	}
	if resp := s.do(t, "alice-token", http.MethodPost, "/api/v1/namespaces/team/configmaps", `{"metadata":{"name":"app"}}`); resp.Code != http.StatusCreated {
		t.Errorf("alice (group team-a) creates a configmap in team: %d %s; want 201", resp.Code, resp.Body)
	}
	for _, tc := range []struct{ name, authorization string }{
		{"wrong token", "Bearer nobody-has-this"},
		{"no credentials", ""},
		{"empty bearer token", "Bearer "},
		{"basic auth (not supported)", "Basic YWxpY2U6c2VjcmV0"},
	} {
		resp := s.doWith(t, s.client(nil), http.MethodGet, "/api/v1/namespaces/team/configmaps", "", "Authorization", tc.authorization)
		wantStatus(t, tc.name, resp, http.StatusUnauthorized, metav1.StatusReasonUnauthorized, "Unauthorized")
		if resp.Header.Get("Audit-Id") == "" {
			t.Errorf("%s: no Audit-Id on the 401", tc.name)
		}
	}
	// Discovery, /version and OpenAPI need an authenticated user too.
	for _, path := range []string{"/api", "/apis", "/version", "/openapi/v2"} {
		wantStatus(t, "anonymous GET "+path, s.do(t, "", http.MethodGet, path, ""), http.StatusUnauthorized, metav1.StatusReasonUnauthorized, "Unauthorized")
	}
	// Health endpoints and /metrics are answered before authentication.
	for _, path := range []string{"/livez", "/readyz", "/healthz", "/metrics"} {
		if resp := s.do(t, "", http.MethodGet, path, ""); resp.Code != http.StatusOK {
			t.Errorf("anonymous GET %s: %d; want 200", path, resp.Code)
		}
	}
}

// TestImpersonation: kubectl --as sends Impersonate-* headers; each thing
// asked for needs the verb impersonate (kube's messages), and the request
// then runs as the impersonated user, which the audit line records next to
// the sender.
func TestImpersonation(t *testing.T) {
	s := startAuthServer(t, false)
	for _, tc := range []struct {
		name   string
		header []string
		msg    string
	}{
		{"a user", []string{"Impersonate-User", "root"}, `users "root" is forbidden: User "alice" cannot impersonate resource "users" in API group "" at the cluster scope`},
		{"a service account", []string{"Impersonate-User", "system:serviceaccount:team:app"}, `serviceaccounts "app" is forbidden: User "alice" cannot impersonate resource "serviceaccounts" in API group "" in the namespace "team"`},
		{"a group without a user", []string{"Impersonate-Group", "system:masters"}, `requested impersonation of groups ["system:masters"], extras or a uid without impersonating a user`},
	} {
		resp := s.doWith(t, s.client(nil), http.MethodGet, "/api/v1/namespaces/team/configmaps", "", append([]string{"Authorization", "Bearer alice-token"}, tc.header...)...)
		code := http.StatusForbidden
		if tc.name == "a group without a user" {
			code = http.StatusInternalServerError
		}
		if st := resp.status(t); resp.Code != code || !strings.Contains(st.Message, tc.msg) {
			t.Errorf("alice impersonating %s: %d %q; want %d %q", tc.name, resp.Code, st.Message, code, tc.msg)
		}
	}
	// system:masters may impersonate: as alice, root reads what alice may.
	resp := s.doWith(t, s.client(nil), http.MethodGet, "/api/v1/namespaces/team/configmaps", "", "Authorization", "Bearer admin-token", "Impersonate-User", "alice", "Impersonate-Group", "team-a")
	if resp.Code != http.StatusOK {
		t.Fatalf("root as alice, list in team: %d %s", resp.Code, resp.Body)
	}
	wantStatus(t, "root as alice in other", s.doWith(t, s.client(nil), http.MethodGet, "/api/v1/namespaces/other/configmaps", "", "Authorization", "Bearer admin-token", "Impersonate-User", "alice"),
		http.StatusForbidden, metav1.StatusReasonForbidden, `configmaps is forbidden: User "alice" cannot list resource "configmaps" in API group "" in the namespace "other"`)
	resp = s.doWith(t, s.client(nil), http.MethodPost, "/apis/authentication.k8s.io/v1/selfsubjectreviews", `{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}`,
		"Authorization", "Bearer admin-token", "Impersonate-User", "system:serviceaccount:team:app", "Impersonate-Extra-Scopes%2Fa", "x")
	if resp.Code != http.StatusCreated || !strings.Contains(string(resp.Body), `"username":"system:serviceaccount:team:app"`) ||
		!strings.Contains(string(resp.Body), `"groups":["system:serviceaccounts","system:serviceaccounts:team","system:authenticated"]`) || !strings.Contains(string(resp.Body), `"scopes/a":["x"]`) {
		t.Fatalf("whoami as the service account: %d %s", resp.Code, resp.Body)
	}
	var found bool
	for _, line := range strings.Split(strings.TrimSpace(s.auditLog(t)), "\n") {
		if strings.Contains(line, `"uri":"/api/v1/namespaces/team/configmaps"`) && strings.Contains(line, `"impersonatedUser":"alice"`) {
			found = strings.Contains(line, `"user":"root"`) && strings.Contains(line, `"impersonatedGroups":["team-a","system:authenticated"]`) && strings.Contains(line, `"code":200`)
		}
	}
	if !found {
		t.Errorf("no audit line of root as alice (user root, impersonatedUser alice, 200):\n%s", s.auditLog(t))
	}
}

func TestAuthAnonymous(t *testing.T) {
	s := startAuthServer(t, true)
	if resp := s.do(t, "", http.MethodGet, "/api/v1/namespaces/public/configmaps", ""); resp.Code != http.StatusOK {
		t.Errorf("anonymous list in public (granted to system:unauthenticated): %d %s; want 200", resp.Code, resp.Body)
	}
	wantStatus(t, "anonymous list in team", s.do(t, "", http.MethodGet, "/api/v1/namespaces/team/configmaps", ""),
		http.StatusForbidden, metav1.StatusReasonForbidden,
		`configmaps is forbidden: User "system:anonymous" cannot list resource "configmaps" in API group "" in the namespace "team"`)
	// A wrong token is 401 even when anonymous requests are allowed.
	wantStatus(t, "wrong token", s.do(t, "nobody-has-this", http.MethodGet, "/api/v1/namespaces/public/configmaps", ""),
		http.StatusUnauthorized, metav1.StatusReasonUnauthorized, "Unauthorized")
	// Anonymous users read /version, not discovery (as kube-apiserver).
	if resp := s.do(t, "", http.MethodGet, "/version", ""); resp.Code != http.StatusOK {
		t.Errorf("anonymous GET /version: %d; want 200", resp.Code)
	}
	wantStatus(t, "anonymous GET /api", s.do(t, "", http.MethodGet, "/api", ""), http.StatusForbidden, metav1.StatusReasonForbidden,
		`forbidden: User "system:anonymous" cannot get path "/api"`)
}

func TestAuthClientCertificates(t *testing.T) {
	s := startAuthServer(t, false)
	alice := s.ca.issue(t, "alice", []string{"team-a"}, x509.ExtKeyUsageClientAuth)
	resp := s.doWith(t, s.client(&alice), http.MethodGet, "/api/v1/namespaces/team/configmaps", "")
	if resp.Code != http.StatusOK {
		t.Errorf("alice's certificate lists configmaps in team: %d %s; want 200", resp.Code, resp.Body)
	}
	// The user is the CN, the groups the O, plus system:authenticated.
	resp = s.doWith(t, s.client(&alice), http.MethodPost, "/apis/authentication.k8s.io/v1/selfsubjectreviews", `{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}`)
	var review authenticationv1.SelfSubjectReview
	resp.decode(t, &review)
	if resp.Code != http.StatusCreated || review.Status.UserInfo.Username != "alice" ||
		!slices.Equal(review.Status.UserInfo.Groups, []string{"team-a", filters.AuthenticatedGroup}) {
		t.Errorf("SelfSubjectReview with alice's certificate: %d %s; want user alice, groups team-a, system:authenticated", resp.Code, resp.Body)
	}
	// The O of the certificate is a group the policy grants: create in team.
	if resp := s.doWith(t, s.client(&alice), http.MethodPost, "/api/v1/namespaces/team/configmaps", `{"metadata":{"name":"by-cert"}}`); resp.Code != http.StatusCreated {
		t.Errorf("create with alice's certificate: %d %s; want 201", resp.Code, resp.Body)
	}

	other := newTestCA(t, "someone else's CA")
	for _, tc := range []struct {
		name string
		cert tls.Certificate
	}{
		{"a certificate of another CA", other.issue(t, "alice", []string{filters.MastersGroup}, x509.ExtKeyUsageClientAuth)},
		{"a serving certificate", s.ca.issue(t, "alice", nil, x509.ExtKeyUsageServerAuth)},
	} {
		resp := s.doWith(t, s.client(&tc.cert), http.MethodGet, "/api/v1/namespaces/team/configmaps", "")
		wantStatus(t, tc.name, resp, http.StatusUnauthorized, metav1.StatusReasonUnauthorized, "Unauthorized")
	}
	// A bad certificate does not spoil a good token.
	bad := other.issue(t, "mallory", nil, x509.ExtKeyUsageClientAuth)
	if resp := s.doWith(t, s.client(&bad), http.MethodGet, "/api/v1/namespaces/team/configmaps", "", "Authorization", "Bearer alice-token"); resp.Code != http.StatusOK {
		t.Errorf("bad certificate and alice's token: %d %s; want 200", resp.Code, resp.Body)
	}
}

func TestAuthForbiddenMessages(t *testing.T) {
	s := startAuthServer(t, false)
	for _, tc := range []struct {
		token, method, path, body string
		message                   string
		details                   metav1.StatusDetails
	}{
		{"alice-token", http.MethodGet, "/api/v1/namespaces/default/configmaps/x", "",
			`configmaps "x" is forbidden: User "alice" cannot get resource "configmaps" in API group "" in the namespace "default"`,
			metav1.StatusDetails{Name: "x", Kind: "configmaps"}},
		{"alice-token", http.MethodDelete, "/api/v1/namespaces/team/configmaps/app", "",
			`configmaps "app" is forbidden: User "alice" cannot delete resource "configmaps" in API group "" in the namespace "team"`,
			metav1.StatusDetails{Name: "app", Kind: "configmaps"}},
		{"alice-token", http.MethodGet, "/api/v1/configmaps", "",
			`configmaps is forbidden: User "alice" cannot list resource "configmaps" in API group "" at the cluster scope`,
			metav1.StatusDetails{Kind: "configmaps"}},
		{"bob-token", http.MethodPost, "/api/v1/namespaces", `{"metadata":{"name":"mine"}}`,
			`namespaces is forbidden: User "bob" cannot create resource "namespaces" in API group "" at the cluster scope`,
			metav1.StatusDetails{Kind: "namespaces"}},
		{"bob-token", http.MethodGet, "/api/v1/namespaces/team", "",
			`namespaces "team" is forbidden: User "bob" cannot get resource "namespaces" in API group "" in the namespace "team"`,
			metav1.StatusDetails{Name: "team", Kind: "namespaces"}},
		{"bob-token", http.MethodGet, "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/leader", "",
			`leases.coordination.k8s.io "leader" is forbidden: User "bob" cannot get resource "leases" in API group "coordination.k8s.io" in the namespace "kube-system"`,
			metav1.StatusDetails{Name: "leader", Group: "coordination.k8s.io", Kind: "leases"}},
		{"bob-token", http.MethodPost, "/api", "{}",
			`forbidden: User "bob" cannot post path "/api"`,
			metav1.StatusDetails{}},
		// Forbidden comes before not found: the path is not served.
		{"bob-token", http.MethodGet, "/api/v1/namespaces/team/pods", "",
			`pods is forbidden: User "bob" cannot list resource "pods" in API group "" in the namespace "team"`,
			metav1.StatusDetails{Kind: "pods"}},
	} {
		what := tc.token + " " + tc.method + " " + tc.path
		st := wantStatus(t, what, s.do(t, tc.token, tc.method, tc.path, tc.body), http.StatusForbidden, metav1.StatusReasonForbidden, tc.message)
		if st.Details != nil && !reflect.DeepEqual(*st.Details, tc.details) {
			t.Errorf("%s: details %+v; want %+v", what, *st.Details, tc.details)
		}
	}
	// The refused requests are counted with their resource.
	if got := counterValue(t, s.reg, "apiserver_request_total", map[string]string{"code": "403", "resource": "configmaps", "verb": "LIST", "scope": "cluster"}); got != 1 {
		t.Errorf("apiserver_request_total{code=403,resource=configmaps,verb=LIST,scope=cluster} = %v; want 1", got)
	}
}

// counterValue is the sum of the counter's series that have labels.
func counterValue(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	metric:
		for _, m := range f.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for k, v := range labels {
				if have[k] != v {
					continue metric
				}
			}
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}

// TestAuthNamespaceScopedGrant: alice's grant in team lets her list and
// watch there only; everywhere else, and across all namespaces, is 403
// (not a silently filtered list), as in kube-apiserver.
func TestAuthNamespaceScopedGrant(t *testing.T) {
	s := startAuthServer(t, false)
	for _, ns := range []string{"team", "other"} {
		if resp := s.do(t, "admin-token", http.MethodPost, "/api/v1/namespaces/"+ns+"/configmaps", `{"metadata":{"name":"in-`+ns+`"}}`); resp.Code != http.StatusCreated {
			t.Fatalf("admin creates a configmap in %s: %d %s", ns, resp.Code, resp.Body)
		}
	}
	resp := s.do(t, "alice-token", http.MethodGet, "/api/v1/namespaces/team/configmaps", "")
	var list corev1.ConfigMapList
	resp.decode(t, &list)
	if resp.Code != http.StatusOK || len(list.Items) != 1 || list.Items[0].Name != "in-team" {
		t.Errorf("alice lists team: %d %s; want 200 with in-team only", resp.Code, resp.Body)
	}
	if resp := s.do(t, "alice-token", http.MethodGet, "/api/v1/namespaces/team/configmaps/in-team", ""); resp.Code != http.StatusOK {
		t.Errorf("alice gets in-team: %d; want 200", resp.Code)
	}
	for _, path := range []string{
		"/api/v1/namespaces/other/configmaps",
		"/api/v1/namespaces/other/configmaps/in-other",
		"/api/v1/configmaps",
		"/api/v1/configmaps?watch=true",
		"/api/v1/watch/configmaps",
		"/api/v1/namespaces/other/configmaps?watch=true",
		"/api/v1/namespaces/team/secrets",
	} {
		if resp := s.do(t, "alice-token", http.MethodGet, path, ""); resp.Code != http.StatusForbidden {
			t.Errorf("alice GET %s: %d %s; want 403", path, resp.Code, resp.Body)
		}
	}
	if resp := s.do(t, "alice-token", http.MethodDelete, "/api/v1/namespaces/team/configmaps", ""); resp.Code != http.StatusForbidden {
		t.Errorf("alice deletes the collection in team: %d; want 403", resp.Code)
	}

	// The watch in team is served: it sends the existing object.
	watch := s.openWatch(t, s.client(nil), "alice-token", "/api/v1/namespaces/team/configmaps?watch=true")
	defer watch.Body.Close()
	if watch.StatusCode != http.StatusOK {
		t.Fatalf("alice watches team: %d; want 200", watch.StatusCode)
	}
	line, err := bufio.NewReader(watch.Body).ReadString('\n')
	if err != nil || !strings.Contains(line, `"ADDED"`) || !strings.Contains(line, `"in-team"`) {
		t.Errorf("alice's watch of team: first event %q, %v; want ADDED in-team", line, err)
	}
}

func TestAuthMastersAndDiscovery(t *testing.T) {
	s := startAuthServer(t, false)
	for _, c := range []struct{ method, path, body string }{
		{http.MethodPost, "/api/v1/namespaces", `{"metadata":{"name":"made-by-root"}}`},
		{http.MethodGet, "/api/v1/secrets", ""},
		{http.MethodDelete, "/api/v1/namespaces/other/configmaps", ""},
	} {
		if resp := s.do(t, "admin-token", c.method, c.path, c.body); resp.Code >= 300 {
			t.Errorf("system:masters %s %s: %d %s; want success", c.method, c.path, resp.Code, resp.Body)
		}
	}
	// bob has no rule: discovery, /version and OpenAPI only.
	for _, path := range []string{"/api", "/api/v1", "/apis", "/apis/coordination.k8s.io/v1", "/version", "/openapi/v2", "/openapi/v3", "/openapi/v3/api/v1"} {
		if resp := s.do(t, "bob-token", http.MethodGet, path, ""); resp.Code != http.StatusOK {
			t.Errorf("bob GET %s: %d %s; want 200", path, resp.Code, resp.Body)
		}
	}
	// An unknown path the user may read is 404, not 403.
	if resp := s.do(t, "bob-token", http.MethodGet, "/apis/example.com/v1", ""); resp.Code != http.StatusNotFound {
		t.Errorf("bob GET /apis/example.com/v1: %d; want 404", resp.Code)
	}
}

// TestProfilingIsForMasters: /debug/pprof/ is a non-resource URL like any
// other: system:masters reads it, a user without a rule gets 403, and a
// server without Config.Profiling does not serve it.
func TestProfilingIsForMasters(t *testing.T) {
	s := startAuthServer(t, false)
	for _, path := range []string{"/debug/pprof/", "/debug/pprof/goroutine?debug=1", "/debug/pprof/heap"} {
		if resp := s.do(t, "admin-token", http.MethodGet, path, ""); resp.Code != http.StatusOK {
			t.Errorf("system:masters GET %s: %d %s; want 200", path, resp.Code, resp.Body)
		}
		resp := s.do(t, "bob-token", http.MethodGet, path, "")
		if resp.Code != http.StatusForbidden || !strings.Contains(string(resp.Body), `cannot get path \"/debug/pprof/`) {
			t.Errorf("bob GET %s: %d %s; want 403 naming the path", path, resp.Code, resp.Body)
		}
	}
	off := startServer(t)
	resp, err := http.Get(off.URL + "/debug/pprof/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("without Profiling: GET /debug/pprof/: %d; want 404", resp.StatusCode)
	}
}

func TestSelfSubjectAccessReview(t *testing.T) {
	s := startAuthServer(t, false)
	clientFor := func(token string) *kubernetes.Clientset {
		c, err := kubernetes.NewForConfig(&rest.Config{Host: s.URL, BearerToken: token, TLSClientConfig: rest.TLSClientConfig{CAData: s.caPEM}})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	canI := func(token string, attrs authorizationv1.ResourceAttributes) bool {
		t.Helper()
		review, err := clientFor(token).AuthorizationV1().SelfSubjectAccessReviews().Create(t.Context(),
			&authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &attrs}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("SelfSubjectAccessReview %+v: %v", attrs, err)
		}
		return review.Status.Allowed
	}
	for _, tc := range []struct {
		token string
		attrs authorizationv1.ResourceAttributes
		want  bool
	}{
		{"alice-token", authorizationv1.ResourceAttributes{Namespace: "team", Verb: "list", Resource: "configmaps"}, true},
		{"alice-token", authorizationv1.ResourceAttributes{Namespace: "team", Verb: "watch", Resource: "configmaps", Version: "v1"}, true},
		{"alice-token", authorizationv1.ResourceAttributes{Namespace: "other", Verb: "list", Resource: "configmaps"}, false},
		{"alice-token", authorizationv1.ResourceAttributes{Verb: "list", Resource: "configmaps"}, false}, // all namespaces
		{"alice-token", authorizationv1.ResourceAttributes{Namespace: "team", Verb: "list", Resource: "secrets"}, false},
		{"alice-token", authorizationv1.ResourceAttributes{Namespace: "team", Verb: "create", Resource: "configmaps"}, true}, // group team-a
		{"bob-token", authorizationv1.ResourceAttributes{Namespace: "team", Verb: "get", Resource: "configmaps"}, false},
		{"admin-token", authorizationv1.ResourceAttributes{Verb: "*", Group: "*", Resource: "*"}, true},
	} {
		if got := canI(tc.token, tc.attrs); got != tc.want {
			t.Errorf("%s can-i %+v = %v; want %v", tc.token, tc.attrs, got, tc.want)
		}
	}
	review, err := clientFor("bob-token").AuthorizationV1().SelfSubjectAccessReviews().Create(t.Context(), &authorizationv1.SelfSubjectAccessReview{
		Spec: authorizationv1.SelfSubjectAccessReviewSpec{NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: "/version", Verb: "get"}},
	}, metav1.CreateOptions{})
	if err != nil || !review.Status.Allowed || review.Status.Reason == "" {
		t.Errorf("bob can-i get /version: %+v, %v; want allowed with a reason", review, err)
	}

	_, err = clientFor("bob-token").AuthorizationV1().SelfSubjectAccessReviews().Create(t.Context(), &authorizationv1.SelfSubjectAccessReview{}, metav1.CreateOptions{})
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "exactly one of nonResourceAttributes or resourceAttributes must be specified") {
		t.Errorf("empty review: %v; want 422 Invalid", err)
	}
	if resp := s.do(t, "bob-token", http.MethodGet, "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", ""); resp.Code != http.StatusForbidden {
		t.Errorf("bob lists selfsubjectaccessreviews: %d; want 403 (create only)", resp.Code)
	}
	if resp := s.do(t, "admin-token", http.MethodGet, "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", ""); resp.Code != http.StatusMethodNotAllowed {
		t.Errorf("admin lists selfsubjectaccessreviews: %d; want 405", resp.Code)
	}
	// Without credentials there is nobody to review.
	wantStatus(t, "anonymous review", s.do(t, "", http.MethodPost, "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", `{"spec":{"resourceAttributes":{"verb":"get","resource":"configmaps"}}}`),
		http.StatusUnauthorized, metav1.StatusReasonUnauthorized, "Unauthorized")
}

// auditLine is what the tests read of an audit log line.
type auditLine struct {
	Time      time.Time `json:"time"`
	AuditID   string    `json:"auditID"`
	User      string    `json:"user"`
	Groups    []string  `json:"groups"`
	Verb      string    `json:"verb"`
	APIGroup  string    `json:"apiGroup"`
	Resource  string    `json:"resource"`
	Namespace string    `json:"namespace"`
	Name      string    `json:"name"`
	URI       string    `json:"uri"`
	Code      int       `json:"code"`
	Latency   string    `json:"latency"`
}

func TestAuditLog(t *testing.T) {
	s := startAuthServer(t, false)
	before := time.Now()
	created := s.do(t, "alice-token", http.MethodPost, "/api/v1/namespaces/team/configmaps", `{"metadata":{"name":"audited"}}`)
	denied := s.do(t, "alice-token", http.MethodDelete, "/api/v1/namespaces/team/configmaps/audited", "")
	unauthenticated := s.do(t, "wrong", http.MethodGet, "/api/v1/namespaces/team/configmaps", "")
	s.do(t, "", http.MethodGet, "/readyz", "")
	s.do(t, "alice-token", http.MethodGet, "/version", "")

	lines := map[string]auditLine{}
	var n int
	for _, raw := range strings.Split(strings.TrimSpace(s.auditLog(t)), "\n") {
		var l auditLine
		if err := json.Unmarshal([]byte(raw), &l); err != nil {
			t.Fatalf("audit line %q: %v", raw, err)
		}
		for _, field := range []string{`"time"`, `"auditID"`, `"user"`, `"groups"`, `"verb"`, `"resource"`, `"namespace"`, `"name"`, `"code"`, `"latency"`} {
			if !strings.Contains(raw, field+":") {
				t.Errorf("audit line %s has no %s", raw, field)
			}
		}
		lines[l.AuditID] = l
		n++
	}
	check := func(what string, resp response, want auditLine) {
		t.Helper()
		got, ok := lines[resp.Header.Get("Audit-Id")]
		if !ok {
			t.Errorf("%s: no audit line with its Audit-Id %q; log:\n%s", what, resp.Header.Get("Audit-Id"), s.auditLog(t))
			return
		}
		if got.Time.Before(before.Add(-time.Second)) || got.Time.After(time.Now()) {
			t.Errorf("%s: time %s", what, got.Time)
		}
		if d, err := time.ParseDuration(got.Latency); err != nil || d <= 0 {
			t.Errorf("%s: latency %q", what, got.Latency)
		}
		got.Time, got.Latency, got.AuditID = time.Time{}, "", ""
		if !equalAudit(got, want) {
			t.Errorf("%s: audit line %+v; want %+v", what, got, want)
		}
	}
	aliceGroups := []string{"team-a", filters.AuthenticatedGroup}
	check("create", created, auditLine{User: "alice", Groups: aliceGroups, Verb: "create", Resource: "configmaps", Namespace: "team", URI: "/api/v1/namespaces/team/configmaps", Code: 201})
	check("denied delete", denied, auditLine{User: "alice", Groups: aliceGroups, Verb: "delete", Resource: "configmaps", Namespace: "team", Name: "audited", URI: "/api/v1/namespaces/team/configmaps/audited", Code: 403})
	check("wrong token", unauthenticated, auditLine{Groups: []string{}, Verb: "list", Resource: "configmaps", Namespace: "team", URI: "/api/v1/namespaces/team/configmaps", Code: 401})
	// Namespaces created by startAuthServer (3), the five requests above
	// less /readyz: probes are not audited.
	if n != 3+4 {
		t.Errorf("%d audit lines; want 7 (no line for /readyz):\n%s", n, s.auditLog(t))
	}
}

func equalAudit(a, b auditLine) bool {
	return a.User == b.User && slices.Equal(a.Groups, b.Groups) && a.Verb == b.Verb && a.APIGroup == b.APIGroup &&
		a.Resource == b.Resource && a.Namespace == b.Namespace && a.Name == b.Name && a.URI == b.URI && a.Code == b.Code
}

// testCA signs client certificates.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

func newTestCA(t *testing.T, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &testCA{cert: cert, key: key}
}

// pem is the CA's certificate, as a --client-ca-file holds it.
func (ca *testCA) pem() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.cert.Raw})
}

// issue signs a certificate for CommonName cn and Organizations orgs.
func (ca *testCA) issue(t *testing.T, cn string, orgs []string, usage x509.ExtKeyUsage) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: cn, Organization: orgs},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// TestHTTP2WatchRunsToItsEnd: an HTTP/2 watch (its stream cannot be taken
// over) runs on its handler's goroutine after the filters returned: it
// still gets its events, ends with timeoutSeconds, and its audit line is
// written when it ended, with the watch's whole duration.
func TestHTTP2WatchRunsToItsEnd(t *testing.T) {
	s := startAuthServer(t, false)
	start := time.Now()
	resp := s.openWatch(t, s.client(nil), "alice-token", "/api/v1/namespaces/team/configmaps?watch=true&timeoutSeconds=2")
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.ProtoMajor != 2 {
		t.Fatalf("watch: %d over %s; want 200 over HTTP/2", resp.StatusCode, resp.Proto)
	}
	if created := s.do(t, "alice-token", http.MethodPost, "/api/v1/namespaces/team/configmaps", `{"metadata":{"name":"h2"}}`); created.Code != http.StatusCreated {
		t.Fatalf("create: %d %s", created.Code, created.Body)
	}
	body, err := io.ReadAll(resp.Body) // to the end of the watch
	took := time.Since(start)
	if err != nil || !strings.Contains(string(body), `"ADDED"`) || !strings.Contains(string(body), `"h2"`) {
		t.Fatalf("watch body %q, %v; want the ADDED event of h2, then a clean end", body, err)
	}
	if took < 2*time.Second || took > 20*time.Second {
		t.Errorf("the watch ended after %v; want its timeoutSeconds, 2s", took)
	}
	id := resp.Header.Get("Audit-Id")
	var line auditLine
	for _, raw := range strings.Split(strings.TrimSpace(s.auditLog(t)), "\n") {
		if err := json.Unmarshal([]byte(raw), &line); err == nil && line.AuditID == id {
			break
		}
		line = auditLine{}
	}
	if d, err := time.ParseDuration(line.Latency); err != nil || d < 2*time.Second || line.Code != http.StatusOK {
		t.Errorf("the watch's audit line: code %d, latency %q; want 200 and the watch's 2s", line.Code, line.Latency)
	}
}

// TestHTTP2WatchEndsWhenItsStreamIsReset: an idle HTTP/2 watch, waiting on
// its handler's goroutine without the request's context, still ends when
// its client resets the stream (the connection stays open).
func TestHTTP2WatchEndsWhenItsStreamIsReset(t *testing.T) {
	s := startAuthServer(t, false)
	ctx, cancel := context.WithCancel(t.Context())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.URL+"/api/v1/namespaces/team/configmaps?watch=true", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", bearer("alice-token"))
	resp, err := s.client(nil).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.ProtoMajor != 2 {
		t.Fatalf("watch: %d over %s; want 200 over HTTP/2", resp.StatusCode, resp.Proto)
	}
	if got := s.watchingConfigMaps(t); got != 1 {
		t.Fatalf("watches open: %v; want 1", got)
	}
	cancel() // RST_STREAM
	deadline := time.Now().Add(10 * time.Second)
	for s.watchingConfigMaps(t) != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the watch still runs 10s after its stream was reset")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// watchingConfigMaps is how many watches of configmaps in a namespace run.
func (s *authServer) watchingConfigMaps(t *testing.T) float64 {
	t.Helper()
	families, err := s.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*dto.MetricFamily{}
	for _, f := range families {
		byName[f.GetName()] = f
	}
	m, ok := find(byName, "apiserver_longrunning_requests", map[string]string{"verb": "WATCH", "group": "", "version": "v1", "resource": "configmaps", "subresource": "", "scope": "namespace", "component": "apiserver"})
	if !ok {
		t.Fatalf("no apiserver_longrunning_requests series for watches of configmaps in a namespace")
	}
	return m.Gauge.GetValue()
}

// TestHTTP11TLSWatchNoticesHangUp: a watch over HTTP/1.1 with TLS takes its
// connection over from net/http; it still sends its events, and when the
// client goes away the server notices (through the TLS connection's
// socket) and ends the watch.
func TestHTTP11TLSWatchNoticesHangUp(t *testing.T) {
	s := startAuthServer(t, false)
	tr := s.transport.Clone()
	tr.ForceAttemptHTTP2 = false
	tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{} // HTTP/1.1 only
	tr.TLSClientConfig.NextProtos = []string{"http/1.1"}
	client := &http.Client{Transport: tr}
	watching := func() float64 { return s.watchingConfigMaps(t) }

	resp := s.openWatch(t, client, "alice-token", "/api/v1/namespaces/team/configmaps?watch=true")
	if resp.StatusCode != http.StatusOK || resp.ProtoMajor != 1 || resp.TLS == nil {
		t.Fatalf("watch: %d over %s (TLS %v); want 200 over HTTP/1.1 with TLS", resp.StatusCode, resp.Proto, resp.TLS != nil)
	}
	if !resp.Close {
		t.Error("no Connection: close; want the watch to take its connection over from net/http")
	}
	if created := s.do(t, "alice-token", http.MethodPost, "/api/v1/namespaces/team/configmaps", `{"metadata":{"name":"h1"}}`); created.Code != http.StatusCreated {
		t.Fatalf("create: %d %s", created.Code, created.Body)
	}
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil || !strings.Contains(line, `"ADDED"`) || !strings.Contains(line, `"h1"`) {
		t.Fatalf("first event %q, %v; want ADDED h1", line, err)
	}
	if got := watching(); got != 1 {
		t.Fatalf("watches open: %v; want 1", got)
	}
	resp.Body.Close() // the client hangs up
	tr.CloseIdleConnections()
	deadline := time.Now().Add(10 * time.Second)
	for watching() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the watch still runs 10s after its client hung up")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
