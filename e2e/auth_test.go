package e2e

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientcmdv1 "k8s.io/client-go/tools/clientcmd/api/v1"
	"sigs.k8s.io/yaml"
)

// secureFlags undo the harness's openServingFlags: HTTPS with the
// generated CA, no anonymous requests, the Policy authorizer.
var secureFlags = []string{"--insecure-serving=false", "--anonymous-auth=false", "--authorization-mode", "Policy"}

const authPolicy = `
rules:
- users: [alice]
  verbs: [get, list, watch]
  resources: [configmaps]
  namespaces: [team]
- groups: [system:unauthenticated]
  verbs: [get, list]
  resources: [configmaps]
  namespaces: [public]
`

// TestAuthDevModeWithKubectl runs the dev-mode binary as shipped: HTTPS
// with its own CA, the admin credential in the kubeconfig it writes, a
// token file, a policy file and an audit log; and drives the real kubectl
// (never with --insecure-skip-tls-verify) as the admin and as a token
// user. A restart keeps the CA, so the kubeconfigs keep working.
func TestAuthDevModeWithKubectl(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat(kubectlPath); err != nil {
		t.Fatalf("this test drives the real kubectl: %v", err)
	}
	tmp := t.TempDir()
	dataDir := filepath.Join(tmp, "data")
	tokens := filepath.Join(tmp, "tokens.csv")
	policy := filepath.Join(tmp, "policy.yaml")
	audit := filepath.Join(tmp, "audit.log")
	writeFile(t, tokens, "alice-token,alice,1001,\"team-a,dev\"\n")
	writeFile(t, policy, authPolicy)
	args := append(append([]string{}, secureFlags...), "--data-dir", dataDir,
		"--token-auth-file", tokens, "--authorization-policy-file", policy, "--audit-log-path", audit)
	srv := startConcord(t, "concord (secure dev mode)", t.TempDir(), args...)
	if !strings.HasPrefix(srv.url, "https://127.0.0.1:") {
		t.Fatalf("ready line url = %q; want https://127.0.0.1:<port>", srv.url)
	}
	kc := readKubeconfig(t, srv.kubeconfig)
	if c := kc.Clusters[0].Cluster; c.Server != srv.url || len(c.CertificateAuthorityData) == 0 || c.InsecureSkipTLSVerify {
		t.Fatalf("kubeconfig cluster %+v; want the https URL and the CA", c)
	}
	if u := kc.AuthInfos[0].AuthInfo; len(u.ClientCertificateData) == 0 || len(u.ClientKeyData) == 0 {
		t.Fatalf("kubeconfig user has no client certificate")
	}
	caFile := filepath.Join(dataDir, "tls", "ca.crt")
	caPEM, err := os.ReadFile(caFile)
	if err != nil || string(caPEM) != string(kc.Clusters[0].Cluster.CertificateAuthorityData) {
		t.Fatalf("the CA next to the kubeconfig (%s, %v) is not the kubeconfig's", caFile, err)
	}

	admin := &kubectlUser{t: t, kubeconfig: srv.kubeconfig, cacheDir: filepath.Join(tmp, "cache-admin")}
	admin.run("create", "namespace", "team")
	admin.run("create", "namespace", "other")
	admin.run("create", "namespace", "public")
	admin.run("-n", "team", "create", "configmap", "app", "--from-literal=mode=blue")
	admin.run("-n", "other", "create", "configmap", "elsewhere")
	admin.run("-n", "public", "create", "configmap", "notice")
	if out := admin.run("auth", "can-i", "get", "configmaps"); out != "yes\n" {
		t.Errorf("admin: kubectl auth can-i get configmaps = %q; want yes", out)
	}
	if out := admin.run("auth", "can-i", "*", "*", "--all-namespaces"); out != "yes\n" {
		t.Errorf("admin: kubectl auth can-i '*' '*' -A = %q; want yes", out)
	}
	if out := admin.run("auth", "whoami", "-o", "jsonpath={.status.userInfo.username}"); out != "concord-admin" {
		t.Errorf("admin: kubectl auth whoami = %q; want concord-admin (the certificate's CN)", out)
	}

	aliceConfig := filepath.Join(tmp, "alice.kubeconfig")
	writeTokenKubeconfig(t, aliceConfig, srv.url, caFile, "alice-token")
	alice := &kubectlUser{t: t, kubeconfig: aliceConfig, cacheDir: filepath.Join(tmp, "cache-alice")}
	checkAlice := func() {
		t.Helper()
		if names := tableColumn(alice.run("-n", "team", "get", "configmaps"), "NAME"); !contains(names, "app") {
			t.Errorf("alice: kubectl get configmaps -n team listed %q; want app", names)
		}
		if out := alice.run("auth", "can-i", "list", "configmaps", "-n", "team"); out != "yes\n" {
			t.Errorf("alice: kubectl auth can-i list configmaps -n team = %q; want yes", out)
		}
		if out := alice.fail("auth", "can-i", "list", "secrets", "-n", "team"); out != "no\n" {
			t.Errorf("alice: kubectl auth can-i list secrets -n team = %q; want no (exit 1)", out)
		}
		if out := alice.fail("auth", "can-i", "list", "configmaps", "--all-namespaces"); out != "no\n" {
			t.Errorf("alice: kubectl auth can-i list configmaps -A = %q; want no", out)
		}
		for _, tc := range []struct {
			args []string
			want string
		}{
			{[]string{"-n", "other", "get", "configmaps"},
				`Error from server (Forbidden): configmaps is forbidden: User "alice" cannot list resource "configmaps" in API group "" in the namespace "other"`},
			{[]string{"get", "configmaps", "--all-namespaces"},
				`Error from server (Forbidden): configmaps is forbidden: User "alice" cannot list resource "configmaps" in API group "" at the cluster scope`},
			{[]string{"-n", "team", "delete", "configmap", "app"},
				`Error from server (Forbidden): configmaps "app" is forbidden: User "alice" cannot delete resource "configmaps" in API group "" in the namespace "team"`},
			{[]string{"-n", "team", "get", "secrets"},
				`Error from server (Forbidden): secrets is forbidden: User "alice" cannot list resource "secrets" in API group "" in the namespace "team"`},
		} {
			if out := alice.failStderr(tc.args...); !strings.Contains(out, tc.want) {
				t.Errorf("alice: kubectl %s said %q; want %q", strings.Join(tc.args, " "), out, tc.want)
			}
		}
	}
	checkAlice()

	wrongConfig := filepath.Join(tmp, "wrong.kubeconfig")
	writeTokenKubeconfig(t, wrongConfig, srv.url, caFile, "not-a-token")
	wrong := &kubectlUser{t: t, kubeconfig: wrongConfig, cacheDir: filepath.Join(tmp, "cache-wrong")}
	// kubectl's words for a 401, as with kube-apiserver.
	if out := wrong.failStderr("-n", "team", "get", "configmaps"); !strings.Contains(out, "error: You must be logged in to the server") {
		t.Errorf("a wrong token: kubectl said %q; want \"error: You must be logged in to the server\"", out)
	}

	// Without credentials: 401 Status, over HTTPS verified with the CA.
	https := caClient(t, caPEM)
	if code, st := getStatus(t, https, srv.url+"/api/v1/namespaces/public/configmaps"); code != http.StatusUnauthorized || st.Reason != "Unauthorized" {
		t.Errorf("GET without credentials: %d %+v; want 401 Unauthorized", code, st)
	}
	if resp, err := https.Get(srv.url + "/readyz"); err != nil || resp.StatusCode != http.StatusOK {
		t.Errorf("GET /readyz without credentials: %v %v; want 200", resp, err)
	} else {
		resp.Body.Close()
	}

	srv.stopCleanly(t)
	assertAudit(t, audit)

	// Restart with anonymous requests allowed: the same CA, so both
	// kubeconfigs still work; anonymous gets what system:unauthenticated
	// is granted, and nothing else.
	args = append(args, "--anonymous-auth")
	again := startConcord(t, "concord (restarted, --anonymous-auth)", t.TempDir(), args...)
	if caAgain, err := os.ReadFile(caFile); err != nil || string(caAgain) != string(caPEM) {
		t.Fatalf("the CA changed across a restart (%v)", err)
	}
	writeTokenKubeconfig(t, aliceConfig, again.url, caFile, "alice-token")
	if out := admin.run("auth", "can-i", "create", "namespaces"); out != "yes\n" {
		t.Errorf("admin after restart: can-i create namespaces = %q; want yes", out)
	}
	checkAlice()
	if code, _ := getStatus(t, https, again.url+"/api/v1/namespaces/public/configmaps"); code != http.StatusOK {
		t.Errorf("anonymous list in public: %d; want 200", code)
	}
	if code, st := getStatus(t, https, again.url+"/api/v1/namespaces/team/configmaps"); code != http.StatusForbidden ||
		st.Message != `configmaps is forbidden: User "system:anonymous" cannot list resource "configmaps" in API group "" in the namespace "team"` {
		t.Errorf("anonymous list in team: %d %q; want 403 for system:anonymous", code, st.Message)
	}
	again.stopCleanly(t)
}

// assertAudit checks the audit lines of alice's refused delete and of a
// request without credentials.
func assertAudit(t *testing.T, path string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("audit log: %v", err)
	}
	defer f.Close()
	type line struct {
		Time      time.Time `json:"time"`
		AuditID   string    `json:"auditID"`
		User      string    `json:"user"`
		Groups    []string  `json:"groups"`
		Verb      string    `json:"verb"`
		Resource  string    `json:"resource"`
		Namespace string    `json:"namespace"`
		Name      string    `json:"name"`
		Code      int       `json:"code"`
		Latency   string    `json:"latency"`
	}
	var deleted, anonymous, adminCreate bool
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var l line
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("audit line %q: %v", sc.Text(), err)
		}
		if l.AuditID == "" || l.Time.IsZero() || l.Latency == "" {
			t.Errorf("audit line without auditID, time or latency: %s", sc.Text())
		}
		switch {
		case l.User == "alice" && l.Verb == "delete" && l.Resource == "configmaps" && l.Namespace == "team" && l.Name == "app":
			deleted = l.Code == http.StatusForbidden && strings.Join(l.Groups, ",") == "team-a,dev,system:authenticated"
		case l.User == "" && l.Verb == "list" && l.Namespace == "public":
			anonymous = l.Code == http.StatusUnauthorized
		case l.User == "concord-admin" && l.Verb == "create" && l.Resource == "configmaps" && l.Namespace == "team":
			adminCreate = l.Code == http.StatusCreated
		}
	}
	if !deleted || !anonymous || !adminCreate {
		data, _ := os.ReadFile(path)
		t.Errorf("audit log: alice's 403 delete %v, the 401 list %v, the admin's 201 create %v; want all three\n%s", deleted, anonymous, adminCreate, data)
	}
}

// kubectlUser runs the real kubectl with one kubeconfig.
type kubectlUser struct {
	t          *testing.T
	kubeconfig string
	cacheDir   string
}

// run fails the test unless kubectl exits 0; it returns stdout.
func (k *kubectlUser) run(args ...string) string {
	k.t.Helper()
	out, errOut, err := kubectl(k.t, k.kubeconfig, k.cacheDir, args...)
	if err != nil {
		k.t.Fatalf("kubectl %s: %v\nstdout: %s\nstderr: %s", strings.Join(args, " "), err, out, errOut)
	}
	return out
}

// fail fails the test if kubectl exits 0; it returns stdout.
func (k *kubectlUser) fail(args ...string) string {
	k.t.Helper()
	out, errOut, err := kubectl(k.t, k.kubeconfig, k.cacheDir, args...)
	if err == nil {
		k.t.Errorf("kubectl %s exited 0; want a failure\nstdout: %s\nstderr: %s", strings.Join(args, " "), out, errOut)
	}
	return out
}

// failStderr fails the test if kubectl exits 0; it returns stderr.
func (k *kubectlUser) failStderr(args ...string) string {
	k.t.Helper()
	out, errOut, err := kubectl(k.t, k.kubeconfig, k.cacheDir, args...)
	if err == nil {
		k.t.Errorf("kubectl %s exited 0; want a failure\nstdout: %s\nstderr: %s", strings.Join(args, " "), out, errOut)
	}
	return errOut
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

func readKubeconfig(t *testing.T, path string) clientcmdv1.Config {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("kubeconfig: %v", err)
	}
	var kc clientcmdv1.Config
	if err := yaml.Unmarshal(raw, &kc); err != nil {
		t.Fatalf("decode kubeconfig %s: %v", path, err)
	}
	if len(kc.Clusters) != 1 || len(kc.AuthInfos) != 1 {
		t.Fatalf("kubeconfig %s: want one cluster and one user:\n%s", path, raw)
	}
	return kc
}

// writeTokenKubeconfig writes the kubeconfig a token user would be given:
// the server, the CA file, the token.
func writeTokenKubeconfig(t *testing.T, path, server, caFile, token string) {
	t.Helper()
	kc := clientcmdv1.Config{
		Kind: "Config", APIVersion: "v1",
		Clusters:       []clientcmdv1.NamedCluster{{Name: "concord", Cluster: clientcmdv1.Cluster{Server: server, CertificateAuthority: caFile}}},
		AuthInfos:      []clientcmdv1.NamedAuthInfo{{Name: "user", AuthInfo: clientcmdv1.AuthInfo{Token: token}}},
		Contexts:       []clientcmdv1.NamedContext{{Name: "concord", Context: clientcmdv1.Context{Cluster: "concord", AuthInfo: "user", Namespace: "default"}}},
		CurrentContext: "concord",
	}
	data, err := yaml.Marshal(kc)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, path, string(data))
}

// caClient is an HTTPS client that trusts only the CA caPEM.
func caClient(t *testing.T, caPEM []byte) *http.Client {
	t.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		t.Fatal("no certificate in the CA file")
	}
	return &http.Client{Timeout: requestTimeout, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
}

// getStatus GETs url and decodes a Status answer (empty on success).
func getStatus(t *testing.T, c *http.Client, url string) (int, statusBody) {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	var st statusBody
	if resp.StatusCode >= 300 {
		if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
			t.Fatalf("GET %s: %d, not a Status: %v", url, resp.StatusCode, err)
		}
	}
	return resp.StatusCode, st
}

type statusBody struct {
	Reason  string `json:"reason"`
	Message string `json:"message"`
}
