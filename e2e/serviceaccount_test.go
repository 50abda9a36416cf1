package e2e

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"

	"github.com/concord-dev/concord/etcdstore/etcdtest"
)

// TestServiceAccountsWithKubectl drives the real kubectl against the
// secure dev-mode binary: a new namespace gets its default ServiceAccount,
// kubectl creates a ServiceAccount and tokens for it (with --audience,
// --duration, --bound-object-kind Secret), and kubectl with such a token
// is the ServiceAccount (kubectl auth whoami; a 403 naming it), until its
// bound Secret is deleted.
func TestServiceAccountsWithKubectl(t *testing.T) {
	t.Parallel()
	tmp := t.TempDir()
	dataDir := filepath.Join(tmp, "data")
	srv := startConcord(t, "concord (secure dev mode)", t.TempDir(), append(append([]string{}, secureFlags...), "--data-dir", dataDir)...)
	admin := &kubectlUser{t: t, kubeconfig: srv.kubeconfig, cacheDir: filepath.Join(tmp, "cache-admin")}
	admin.run("create", "namespace", "team")
	waitFor(t, "the default ServiceAccount of team", 30*time.Second, func() string {
		if names := tableColumn(admin.run("-n", "team", "get", "sa"), "NAME"); !contains(names, "default") {
			return "kubectl get sa -n team listed " + strings.Join(names, ",")
		}
		return ""
	})
	admin.run("-n", "team", "create", "sa", "app")
	admin.run("-n", "team", "create", "secret", "generic", "bound")
	token := strings.TrimSpace(admin.run("-n", "team", "create", "token", "app", "--duration", "20m", "--audience", "https://kubernetes.default.svc.cluster.local"))
	boundToken := strings.TrimSpace(admin.run("-n", "team", "create", "token", "app", "--bound-object-kind", "Secret", "--bound-object-name", "bound"))
	if out := admin.failStderr("-n", "team", "create", "token", "app", "--duration", "5m"); !strings.Contains(out, "spec.expirationSeconds: Invalid value: 300: may not specify a duration less than 10 minutes") {
		t.Errorf("kubectl create token --duration 5m said %q; want kube's 422", out)
	}

	caFile := filepath.Join(dataDir, "tls", "ca.crt")
	for name, tok := range map[string]string{"token": token, "bound token": boundToken} {
		config := filepath.Join(tmp, strings.ReplaceAll(name, " ", "-")+".kubeconfig")
		writeTokenKubeconfig(t, config, srv.url, caFile, tok)
		sa := &kubectlUser{t: t, kubeconfig: config, cacheDir: filepath.Join(tmp, "cache-"+strings.ReplaceAll(name, " ", "-"))}
		if out := sa.run("auth", "whoami", "-o", "jsonpath={.status.userInfo.username} {.status.userInfo.groups}"); out != `system:serviceaccount:team:app ["system:serviceaccounts","system:serviceaccounts:team","system:authenticated"]` {
			t.Errorf("%s: kubectl auth whoami = %q; want the ServiceAccount and its groups", name, out)
		}
		if out, want := sa.failStderr("-n", "team", "get", "configmaps"), `Error from server (Forbidden): configmaps is forbidden: User "system:serviceaccount:team:app" cannot list resource "configmaps" in API group "" in the namespace "team"`; !strings.Contains(out, want) {
			t.Errorf("%s: kubectl get configmaps said %q; want %q", name, out, want)
		}
	}
	admin.run("-n", "team", "delete", "secret", "bound")
	config := filepath.Join(tmp, "bound-token.kubeconfig")
	bound := &kubectlUser{t: t, kubeconfig: config, cacheDir: filepath.Join(tmp, "cache-bound-token")}
	if out := bound.failStderr("auth", "whoami"); !strings.Contains(out, "You must be logged in to the server") {
		t.Errorf("token bound to a deleted Secret: kubectl auth whoami said %q; want a 401", out)
	}
}

// TestServiceAccountTokensAcrossReplicas: two replicas with one signing
// key; a token minted on A authenticates on B, and once the ServiceAccount
// is deleted through A, B refuses the token on the next request.
func TestServiceAccountTokensAcrossReplicas(t *testing.T) {
	t.Parallel()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(t.TempDir(), "sa.key")
	writeFile(t, keyFile, string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der})))
	etcd := etcdtest.Start(t)
	var urls []string
	for _, name := range []string{"replica A", "replica B"} {
		p := startConcord(t, name, t.TempDir(), "--etcd-servers", etcd.Endpoint, "--service-account-signing-key-file", keyFile)
		urls = append(urls, p.url)
	}
	a, b := urls[0], urls[1]
	for _, c := range []struct{ path, body string }{
		{"/api/v1/namespaces", `{"metadata":{"name":"team"}}`},
		{"/api/v1/namespaces/team/serviceaccounts", `{"metadata":{"name":"app"}}`},
	} {
		if code, body := do(t, http.MethodPost, a+c.path, json.RawMessage(c.body)); code != http.StatusCreated {
			t.Fatalf("POST %s on A: %d %s", c.path, code, body)
		}
	}
	code, body := do(t, http.MethodPost, a+"/api/v1/namespaces/team/serviceaccounts/app/token", json.RawMessage(`{}`))
	if code != http.StatusCreated {
		t.Fatalf("TokenRequest on A: %d %s", code, body)
	}
	var tr authenticationv1.TokenRequest
	if err := json.Unmarshal(body, &tr); err != nil {
		t.Fatal(err)
	}
	whoami := func(url string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, url+"/apis/authentication.k8s.io/v1/selfsubjectreviews", strings.NewReader(`{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+tr.Status.Token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusCreated {
			return resp.StatusCode, ""
		}
		var review authenticationv1.SelfSubjectReview
		if err := json.NewDecoder(resp.Body).Decode(&review); err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, review.Status.UserInfo.Username
	}
	if code, user := whoami(b); code != http.StatusCreated || user != "system:serviceaccount:team:app" {
		t.Fatalf("token of A on B: %d %q; want 201 system:serviceaccount:team:app", code, user)
	}
	if code, body := do(t, http.MethodDelete, a+"/api/v1/namespaces/team/serviceaccounts/app", nil); code != http.StatusOK {
		t.Fatalf("DELETE the ServiceAccount on A: %d %s", code, body)
	}
	if code, _ := whoami(b); code != http.StatusUnauthorized {
		t.Errorf("token of a ServiceAccount deleted on A, on B at once: %d; want 401", code)
	}
}
