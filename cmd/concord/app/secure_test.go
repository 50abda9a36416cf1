package app

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"flag"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// openServing makes cfg serve plain HTTP to anyone, as tests that are not
// about security talk to it (the e2e harness's openServingFlags).
func openServing(cfg *Config) {
	cfg.Security.InsecureServing = true
	cfg.Security.AnonymousAuth = true
	cfg.Security.AuthorizationMode = AuthorizationAlwaysAllow
}

func TestSecurityFlagDefaults(t *testing.T) {
	cfg := DefaultConfig()
	fs := flag.NewFlagSet("concord", flag.ContinueOnError)
	cfg.AddFlags(fs)
	if err := fs.Parse([]string{"--data-dir", "/var/lib/concord"}); err != nil {
		t.Fatal(err)
	}
	cfg.Complete()
	s := cfg.Security
	if s.InsecureServing || s.AnonymousAuth || s.AuthorizationMode != "RBAC,Policy" || s.CertDir != "/var/lib/concord/tls" {
		t.Errorf("defaults: %+v; want HTTPS, no anonymous requests, RBAC,Policy, --cert-dir <data-dir>/tls", s)
	}
	for _, name := range []string{"tls-cert-file", "tls-private-key-file", "cert-dir", "insecure-serving", "client-ca-file",
		"token-auth-file", "anonymous-auth", "authorization-mode", "authorization-policy-file", "audit-log-path"} {
		if fs.Lookup(name) == nil {
			t.Errorf("no flag --%s", name)
		}
	}
}

func TestValidateSecurity(t *testing.T) {
	pki := newTestPKI(t)
	dir := t.TempDir()
	file := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	goodTokens := file("tokens.csv", "t1,alice,1\n")
	badTokens := file("bad-tokens.csv", "t1,alice\n")
	goodPolicy := file("policy.yaml", "rules:\n- users: [alice]\n  verbs: [get]\n  resources: [configmaps]\n  namespaces: [team]\n")
	badPolicy := file("bad-policy.yaml", "rules:\n- users: [alice]\n  verbs: [read]\n  resources: [configmaps]\n  namespaces: [team]\n")
	notPEM := file("not.pem", "hello")

	runValidateCases(t, []validateCase{
		{"defaults", func(*Config) {}, ""},
		{"everything", func(c *Config) {
			s := &c.Security
			s.TLSCertFile, s.TLSPrivateKeyFile, s.ClientCAFile = pki.serverCert, pki.serverKey, pki.caFile
			s.TokenAuthFile, s.AuthorizationPolicyFile, s.AuditLogPath = goodTokens, goodPolicy, filepath.Join(dir, "audit.log")
		}, ""},
		{"open for tests", openServing, ""},
		{"cert without key", func(c *Config) { c.Security.TLSCertFile = pki.serverCert }, "--tls-cert-file and --tls-private-key-file: give both or neither"},
		{"key does not match", func(c *Config) {
			c.Security.TLSCertFile, c.Security.TLSPrivateKeyFile = pki.serverCert, pki.clientKey
		}, "--tls-cert-file, --tls-private-key-file: tls: private key does not match public key"},
		{"insecure serving on all interfaces", func(c *Config) { c.BindAddress = "0.0.0.0"; c.Security.InsecureServing = true }, "--insecure-serving: only on a loopback --bind-address"},
		{"insecure serving with a certificate", func(c *Config) {
			c.Security.InsecureServing = true
			c.Security.TLSCertFile, c.Security.TLSPrivateKeyFile = pki.serverCert, pki.serverKey
		}, "--insecure-serving and --tls-cert-file"},
		{"insecure serving with client CAs", func(c *Config) { c.Security.InsecureServing = true; c.Security.ClientCAFile = pki.caFile }, "--insecure-serving and --client-ca-file"},
		{"client CA file without certificates", func(c *Config) { c.Security.ClientCAFile = notPEM }, "--client-ca-file: " + notPEM + " holds no PEM certificate"},
		{"missing client CA file", func(c *Config) { c.Security.ClientCAFile = filepath.Join(dir, "missing") }, "--client-ca-file: open"},
		{"bad token file", func(c *Config) { c.Security.TokenAuthFile = badTokens }, "--token-auth-file: token file " + badTokens + ", line 1: must have at least 3 columns"},
		{"bad policy file", func(c *Config) { c.Security.AuthorizationPolicyFile = badPolicy }, `--authorization-policy-file: policy file ` + badPolicy + `: rule 1: verbs: "read" is not one of`},
		{"unknown mode", func(c *Config) { c.Security.AuthorizationMode = "RBAC,Node" }, `--authorization-mode: "Node" is not one of RBAC, Policy, AlwaysAllow`},
		{"mode given twice", func(c *Config) { c.Security.AuthorizationMode = "RBAC,RBAC" }, `--authorization-mode: "RBAC" is given twice`},
		{"policy file with AlwaysAllow", func(c *Config) {
			c.Security.AuthorizationMode, c.Security.AuthorizationPolicyFile = AuthorizationAlwaysAllow, goodPolicy
		}, "--authorization-policy-file: only with Policy in --authorization-mode"},
	})
}

func TestLoadOrCreatePKI(t *testing.T) {
	dir := t.TempDir()
	ips, dns := servingNames("127.0.0.1")
	now := time.Now()
	first, err := loadOrCreatePKI(dir, ips, dns, now)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(first.generated, []string{pkiCAFile, pkiServingFile, pkiAdminFile}) {
		t.Errorf("first start generated %q; want all three", first.generated)
	}
	for name, perm := range map[string]os.FileMode{pkiCAKeyFile: 0o600, pkiServingKeyFile: 0o600, pkiAdminKeyFile: 0o600, pkiCAFile: 0o644} {
		if fi, err := os.Stat(filepath.Join(dir, name)); err != nil || fi.Mode().Perm() != perm {
			t.Errorf("%s: %v %v; want mode %v", name, fi.Mode(), err, perm)
		}
	}
	// The serving certificate is the CA's, for loopback and localhost.
	pool := x509.NewCertPool()
	pool.AddCert(first.caCert)
	for _, name := range []string{"127.0.0.1", "::1", "localhost"} {
		if _, err := first.serving.Leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: name}); err != nil {
			t.Errorf("serving certificate for %s: %v", name, err)
		}
	}
	admin := parseCertPEM(t, first.adminCert)
	if admin.Subject.CommonName != "concord-admin" || !slices.Equal(admin.Subject.Organization, []string{"system:masters"}) {
		t.Errorf("admin certificate subject %v; want CN=concord-admin, O=system:masters", admin.Subject)
	}
	if _, err := admin.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("admin certificate: %v", err)
	}

	// Reused as they are at the next start.
	again, err := loadOrCreatePKI(dir, ips, dns, now.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if len(again.generated) != 0 || !bytes.Equal(again.caPEM, first.caPEM) || !bytes.Equal(again.adminCert, first.adminCert) {
		t.Errorf("second start generated %q; want everything reused", again.generated)
	}

	// Another bind address: a new serving certificate of the same CA.
	ips2, dns2 := servingNames("127.0.0.2")
	moved, err := loadOrCreatePKI(dir, ips2, dns2, now)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(moved.generated, []string{pkiServingFile}) || !bytes.Equal(moved.caPEM, first.caPEM) {
		t.Errorf("new bind address: generated %q; want the serving certificate only", moved.generated)
	}
	if _, err := moved.serving.Leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: "127.0.0.2"}); err != nil {
		t.Errorf("serving certificate for 127.0.0.2: %v", err)
	}

	// Leaves are renewed ahead of their expiry, with the same CA.
	late := now.Add(leafValidity - leafRenewBefore + time.Hour)
	renewed, err := loadOrCreatePKI(dir, ips2, dns2, late)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(renewed.generated, []string{pkiServingFile, pkiAdminFile}) || !bytes.Equal(renewed.caPEM, first.caPEM) {
		t.Errorf("near the leaves' expiry: generated %q; want the two leaves", renewed.generated)
	}

	// A CA near its end, or a broken one, is replaced, and everything with it.
	for _, tc := range []struct {
		name  string
		setup func()
		at    time.Time
	}{
		{"expiring CA", func() {}, now.Add(caValidity - leafValidity + time.Hour)},
		{"corrupt CA", func() {
			if err := os.WriteFile(filepath.Join(dir, pkiCAFile), []byte("garbage"), 0o644); err != nil {
				t.Fatal(err)
			}
		}, now},
	} {
		tc.setup()
		p, err := loadOrCreatePKI(dir, ips, dns, tc.at)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if !slices.Equal(p.generated, []string{pkiCAFile, pkiServingFile, pkiAdminFile}) || bytes.Equal(p.caPEM, first.caPEM) {
			t.Errorf("%s: generated %q; want a new CA and both leaves", tc.name, p.generated)
		}
	}
}

func parseCertPEM(t *testing.T, data []byte) *x509.Certificate {
	t.Helper()
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "CERTIFICATE" {
		t.Fatalf("no PEM certificate in %q", data)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

// TestRunDevModeHTTPS: dev mode serves HTTPS (HTTP/2) with a certificate
// of its own CA, and the kubeconfig it writes trusts that CA and holds an
// admin credential; requests without one are 401. After a restart the CA
// is the same, so the old kubeconfig still works.
func TestRunDevModeHTTPS(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Port = 0
	cfg.DataDir = t.TempDir()
	base, stop, done := startRun(t, cfg, io.Discard)
	if !strings.HasPrefix(base, "https://127.0.0.1:") {
		t.Fatalf("dev mode URL %q; want https://127.0.0.1:<port>", base)
	}
	kubeconfig := filepath.Join(cfg.DataDir, "kubeconfig.yaml")
	kc, err := clientcmd.LoadFromFile(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cluster, user := kc.Clusters["concord"], kc.AuthInfos["concord"]
	if cluster == nil || user == nil || cluster.Server != base || len(cluster.CertificateAuthorityData) == 0 ||
		len(user.ClientCertificateData) == 0 || len(user.ClientKeyData) == 0 || cluster.InsecureSkipTLSVerify {
		t.Fatalf("kubeconfig: cluster %+v user %+v; want the server, its CA and a client certificate", cluster, user)
	}
	ca, err := os.ReadFile(filepath.Join(cfg.DataDir, "tls", "ca.crt"))
	if err != nil || !bytes.Equal(ca, cluster.CertificateAuthorityData) {
		t.Errorf("<data-dir>/tls/ca.crt (%v) is not the kubeconfig's CA", err)
	}

	useKubeconfig := func(what string) {
		t.Helper()
		restCfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
		if err != nil {
			t.Fatal(err)
		}
		client, err := kubernetes.NewForConfig(restCfg)
		if err != nil {
			t.Fatal(err)
		}
		review, err := client.AuthenticationV1().SelfSubjectReviews().Create(t.Context(), &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
		if err != nil || review.Status.UserInfo.Username != "concord-admin" || !slices.Contains(review.Status.UserInfo.Groups, "system:masters") {
			t.Errorf("%s: whoami = %+v, %v; want concord-admin in system:masters", what, review, err)
		}
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "via-kubeconfig"}}
		if _, err := client.CoreV1().ConfigMaps("default").Create(t.Context(), cm, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Errorf("%s: create a configmap as admin: %v", what, err)
		}
	}
	useKubeconfig("first run")

	// HTTP/2, and the CA verifies the server without any skip.
	pool, _ := certPoolOf(cluster.CertificateAuthorityData)
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true}}
	resp, err := client.Get(base + "/api/v1/namespaces/default/configmaps")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.ProtoMajor != 2 || resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("GET without credentials: %s %d; want HTTP/2 and 401", resp.Proto, resp.StatusCode)
	}
	if resp, err := client.Get(base + "/readyz"); err != nil || resp.StatusCode != http.StatusOK {
		t.Errorf("GET /readyz without credentials: %v %v; want 200", resp, err)
	} else {
		resp.Body.Close()
	}
	// Plain HTTP is not served.
	if resp, err := http.Get(strings.Replace(base, "https://", "http://", 1) + "/readyz"); err == nil {
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("plain HTTP to the HTTPS port: %d; want 400 (Go's answer to HTTP on a TLS port)", resp.StatusCode)
		}
	}

	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	base2, _, _ := startRun(t, cfg, io.Discard)
	ca2, err := os.ReadFile(filepath.Join(cfg.DataDir, "tls", "ca.crt"))
	if err != nil || !bytes.Equal(ca, ca2) {
		t.Errorf("the CA changed across a restart")
	}
	if base2 == base {
		t.Logf("same port again: %s", base2)
	}
	useKubeconfig("second run")
}

// TestRunGivenCertificateTokensPolicyAudit: with --tls-cert-file,
// --client-ca-file, --token-auth-file, a policy and an audit log.
func TestRunGivenCertificateTokensPolicyAudit(t *testing.T) {
	pki := newTestPKI(t)
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens.csv")
	policy := filepath.Join(dir, "policy.yaml")
	audit := filepath.Join(dir, "audit", "audit.log")
	if err := os.WriteFile(tokens, []byte("alice-token,alice,1001,team-a\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// The client certificate of newTestPKI is CN=client.
	if err := os.WriteFile(policy, []byte("rules:\n- users: [alice, client]\n  verbs: [get, list]\n  resources: [configmaps]\n  namespaces: [default]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.Port = 0
	cfg.DataDir = filepath.Join(dir, "data")
	s := &cfg.Security
	s.TLSCertFile, s.TLSPrivateKeyFile, s.ClientCAFile = pki.serverCert, pki.serverKey, pki.caFile
	s.TokenAuthFile, s.AuthorizationPolicyFile, s.AuditLogPath = tokens, policy, audit
	base, stop, done := startRun(t, cfg, io.Discard)

	caPEM, err := os.ReadFile(pki.caFile)
	if err != nil {
		t.Fatal(err)
	}
	get := func(what string, restCfg *rest.Config, want int) {
		t.Helper()
		restCfg.Host = base
		restCfg.TLSClientConfig.CAData = caPEM
		client, err := kubernetes.NewForConfig(restCfg)
		if err != nil {
			t.Fatal(err)
		}
		_, err = client.CoreV1().ConfigMaps("default").List(t.Context(), metav1.ListOptions{})
		if code := codeOf(err); code != want {
			t.Errorf("%s lists configmaps in default: %d (%v); want %d", what, code, err, want)
		}
	}
	get("alice's token", &rest.Config{BearerToken: "alice-token"}, 200)
	get("a wrong token", &rest.Config{BearerToken: "nope"}, 401)
	get("no credentials", &rest.Config{}, 401)
	get("the client certificate (CN=client)", &rest.Config{TLSClientConfig: rest.TLSClientConfig{CertFile: pki.clientCert, KeyFile: pki.clientKey}}, 200)
	// Given a certificate, Concord generates none; the kubeconfig holds
	// no credential.
	// (<data-dir>/tls holds the generated service account signing key.)
	if _, err := os.Stat(filepath.Join(cfg.DataDir, "tls", pkiCAFile)); !os.IsNotExist(err) {
		t.Errorf("stat <data-dir>/tls/ca.crt: %v; want no generated certificates", err)
	}
	kc, err := clientcmd.LoadFromFile(filepath.Join(cfg.DataDir, "kubeconfig.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if u := kc.AuthInfos["concord"]; u == nil || len(u.ClientCertificateData) != 0 || len(kc.Clusters["concord"].CertificateAuthorityData) != 0 {
		t.Errorf("kubeconfig with --tls-cert-file: %+v; want no CA data and no credential", kc)
	}

	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(audit)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var users []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var line struct {
			User, Verb, Resource, Namespace string
			Code                            int
		}
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatalf("audit line %q: %v", sc.Text(), err)
		}
		if line.Verb == "list" && line.Resource == "configmaps" && line.Namespace == "default" {
			users = append(users, line.User+":"+http.StatusText(line.Code))
		}
	}
	if want := []string{"alice:OK", ":Unauthorized", ":Unauthorized", "client:OK"}; !slices.Equal(users, want) {
		t.Errorf("audit log lists of configmaps: %q; want %q", users, want)
	}
	if fi, err := os.Stat(audit); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("audit log mode: %v %v; want 0600", fi, err)
	}
}

// TestRunInsecureServing: plain HTTP, with authentication still enforced.
func TestRunInsecureServing(t *testing.T) {
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens.csv")
	if err := os.WriteFile(tokens, []byte("root-token,root,0,system:masters\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.Port = 0
	cfg.DataDir = filepath.Join(dir, "data")
	cfg.Security.InsecureServing = true
	cfg.Security.TokenAuthFile = tokens
	base, _, _ := startRun(t, cfg, io.Discard)
	if !strings.HasPrefix(base, "http://127.0.0.1:") {
		t.Fatalf("URL %q; want http://127.0.0.1:<port>", base)
	}
	if code, _ := get(t, base+"/api/v1/namespaces"); code != http.StatusUnauthorized {
		t.Errorf("GET without credentials over HTTP: %d; want 401", code)
	}
	client, err := kubernetes.NewForConfig(&rest.Config{Host: base, BearerToken: "root-token"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().Namespaces().List(t.Context(), metav1.ListOptions{}); err != nil {
		t.Errorf("list namespaces with the token over HTTP: %v", err)
	}
	if _, err := os.Stat(filepath.Join(cfg.DataDir, "tls", pkiCAFile)); !os.IsNotExist(err) {
		t.Errorf("stat <data-dir>/tls/ca.crt: %v; want no certificates for plain HTTP", err)
	}
}

// codeOf is the HTTP code of a client-go error (200 for nil).
func codeOf(err error) int {
	if err == nil {
		return http.StatusOK
	}
	if s, ok := err.(apierrors.APIStatus); ok {
		return int(s.Status().Code)
	}
	return -1
}
