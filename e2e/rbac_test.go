package e2e

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/concord-dev/concord/etcdstore/etcdtest"
)

// rbacFlags: secure serving with the default authorization, RBAC,Policy
// (the e2e launcher otherwise opens the API).
var rbacFlags = []string{"--insecure-serving=false", "--anonymous-auth=false", "--authorization-mode", "RBAC,Policy"}

// TestRBACWithKubectlAcrossReplicas drives RBAC with the real kubectl
// against two replicas on one etcd: roles and bindings made on A take
// effect on B for the very next request, revocations too; auth can-i and
// --list answer from them; --as impersonates; escalation is refused.
func TestRBACWithKubectlAcrossReplicas(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat(kubectlPath); err != nil {
		t.Fatalf("this test drives the real kubectl: %v", err)
	}
	tmp := t.TempDir()
	tokens := filepath.Join(tmp, "tokens.csv")
	writeFile(t, tokens, "alice-token,alice,1001,\"dev\"\nbob-token,bob,1002\n")
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(tmp, "sa.key")
	writeFile(t, keyFile, string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der})))
	certDir := filepath.Join(tmp, "tls") // one CA for both replicas
	etcd := etcdtest.Start(t)
	var admins [2]*kubectlUser
	var urls [2]string
	for i, name := range []string{"replica A", "replica B"} {
		dir := t.TempDir()
		args := append(append([]string{}, rbacFlags...), "--etcd-servers", etcd.Endpoint, "--cert-dir", certDir,
			"--token-auth-file", tokens, "--service-account-signing-key-file", keyFile, "--write-kubeconfig", filepath.Join(dir, "admin.kubeconfig"))
		p := startConcord(t, name, dir, args...)
		urls[i] = p.url
		admins[i] = &kubectlUser{t: t, kubeconfig: p.kubeconfig, cacheDir: filepath.Join(tmp, "cache-admin-"+name[len(name)-1:])}
	}
	caFile := filepath.Join(certDir, "ca.crt")
	users := func(token string) [2]*kubectlUser {
		var out [2]*kubectlUser
		for i, u := range urls {
			config := filepath.Join(tmp, token+"-"+string(rune('a'+i))+".kubeconfig")
			writeTokenKubeconfig(t, config, u, caFile, token)
			out[i] = &kubectlUser{t: t, kubeconfig: config, cacheDir: filepath.Join(tmp, "cache-"+token+string(rune('a'+i)))}
		}
		return out
	}
	alice, bob := users("alice-token"), users("bob-token")
	adminA, adminB := admins[0], admins[1]

	adminA.run("create", "namespace", "team")
	adminA.run("-n", "team", "create", "configmap", "app", "--from-literal=mode=blue")
	adminA.run("-n", "team", "create", "secret", "generic", "db", "--from-literal=p=x")

	// Nothing granted yet: 403 with kube's message, on either replica.
	if out := alice[1].failStderr("-n", "team", "get", "configmaps"); !strings.Contains(out, `configmaps is forbidden: User "alice" cannot list resource "configmaps" in API group "" in the namespace "team"`) {
		t.Errorf("alice before any grant, on B: %q", out)
	}
	// Grant on A, use on B at once.
	adminA.run("-n", "team", "create", "role", "cm-reader", "--verb=get,list,watch", "--resource=configmaps")
	adminA.run("-n", "team", "create", "rolebinding", "alice-cm", "--role=cm-reader", "--user=alice")
	if names := tableColumn(alice[1].run("-n", "team", "get", "configmaps"), "NAME"); !contains(names, "app") {
		t.Errorf("alice on B right after the grant on A: listed %q; want app", names)
	}
	if out := alice[1].run("auth", "can-i", "list", "configmaps", "-n", "team"); out != "yes\n" {
		t.Errorf("alice on B: auth can-i list configmaps -n team = %q", out)
	}
	if out := alice[1].fail("auth", "can-i", "get", "secrets", "-n", "team"); out != "no\n" {
		t.Errorf("alice on B: auth can-i get secrets -n team = %q; want no", out)
	}
	list := alice[1].run("auth", "can-i", "--list", "-n", "team")
	for _, want := range []string{"configmaps", "selfsubjectrulesreviews.authorization.k8s.io", "[/api/*]"} {
		if !strings.Contains(list, want) {
			t.Errorf("alice on B: auth can-i --list -n team lacks %q:\n%s", want, list)
		}
	}
	if strings.Contains(list, "secrets") {
		t.Errorf("alice: auth can-i --list -n team lists secrets:\n%s", list)
	}
	// The admin asks on behalf of alice and bob (impersonation).
	if out := adminB.run("auth", "can-i", "list", "configmaps", "-n", "team", "--as", "alice"); out != "yes\n" {
		t.Errorf("admin --as alice: %q", out)
	}
	if out := adminB.fail("auth", "can-i", "list", "configmaps", "-n", "team", "--as", "bob"); out != "no\n" {
		t.Errorf("admin --as bob: %q", out)
	}
	if names := tableColumn(adminB.run("-n", "team", "get", "configmaps", "--as", "alice"), "NAME"); !contains(names, "app") {
		t.Errorf("admin --as alice get configmaps: %q", names)
	}
	// bob may not impersonate (--raw: kubectl's discovery prints a 403 as
	// "unknown").
	if out := bob[0].failStderr("get", "--raw", "/api/v1/namespaces/team/configmaps", "--as", "alice"); !strings.Contains(out, `users "alice" is forbidden: User "bob" cannot impersonate resource "users" in API group "" at the cluster scope`) {
		t.Errorf("bob --as alice: %q", out)
	}

	// Escalation: alice may write roles and bindings in team (admin role),
	// but not grant secrets, nor bind cluster-admin.
	adminA.run("-n", "team", "create", "rolebinding", "alice-admin", "--clusterrole=admin", "--user=alice")
	// A write on B right after the grant on A (B's view may not have it
	// yet: a denial is decided again at etcd's current revision).
	alice[1].run("-n", "team", "create", "configmap", "by-alice", "--from-literal=k=v")
	alice[0].run("-n", "team", "create", "role", "cm-writer", "--verb=create,update", "--resource=configmaps")
	if out := alice[0].failStderr("-n", "team", "create", "role", "secret-reader", "--verb=get", "--resource=secrets"); !strings.Contains(out,
		`roles.rbac.authorization.k8s.io "secret-reader" is forbidden: user "alice" (groups=["dev" "system:authenticated"]) is attempting to grant RBAC permissions not currently held:`) ||
		!strings.Contains(out, `{APIGroups:[""], Resources:["secrets"], Verbs:["get"]}`) {
		t.Errorf("alice creating a role over secrets: %q", out)
	}
	if out := alice[1].failStderr("-n", "team", "create", "rolebinding", "alice-root", "--clusterrole=cluster-admin", "--user=alice"); !strings.Contains(out,
		`rolebindings.rbac.authorization.k8s.io "alice-root" is forbidden: user "alice" (groups=["dev" "system:authenticated"]) is attempting to grant RBAC permissions not currently held:`) {
		t.Errorf("alice binding cluster-admin: %q", out)
	}
	alice[1].run("-n", "team", "create", "rolebinding", "bob-cm", "--role=cm-reader", "--user=bob") // she holds it
	if out := adminA.fail("get", "rolebinding", "alice-root", "-n", "team"); out != "" {
		t.Errorf("the refused binding was stored: %q", out)
	}

	// A ServiceAccount's token, granted through its group on B.
	adminB.run("-n", "team", "create", "serviceaccount", "app")
	token := strings.TrimSpace(adminA.run("-n", "team", "create", "token", "app"))
	saConfig := filepath.Join(tmp, "sa.kubeconfig")
	writeTokenKubeconfig(t, saConfig, urls[1], caFile, token)
	sa := &kubectlUser{t: t, kubeconfig: saConfig, cacheDir: filepath.Join(tmp, "cache-sa")}
	sa.fail("auth", "can-i", "get", "configmaps", "-n", "team")
	adminA.run("-n", "team", "create", "rolebinding", "sa-view", "--clusterrole=view", "--group=system:serviceaccounts:team")
	if out := sa.run("-n", "team", "get", "configmap", "app", "-o", "jsonpath={.data.mode}"); out != "blue" {
		t.Errorf("the ServiceAccount on B after the grant on A: %q", out)
	}

	// Revoke on A, refused on B at once.
	adminA.run("-n", "team", "delete", "rolebinding", "alice-cm", "alice-admin")
	// A write on B right after the revocation on A: refused, nothing stored
	// (a write allowed by a view behind the revocation fails its etcd guard
	// and is decided again).
	if out := alice[1].failStderr("-n", "team", "create", "configmap", "after-revoke", "--from-literal=k=v"); !strings.Contains(out,
		`configmaps is forbidden: User "alice" cannot create resource "configmaps" in API group "" in the namespace "team"`) {
		t.Errorf("alice creating on B right after the revocation on A: %q", out)
	}
	if out := adminB.fail("-n", "team", "get", "configmap", "after-revoke"); out != "" {
		t.Errorf("the refused create was stored: %q", out)
	}
	if out := alice[1].failStderr("-n", "team", "get", "configmaps"); !strings.Contains(out, `configmaps is forbidden: User "alice" cannot list resource "configmaps"`) {
		t.Errorf("alice on B right after the revocation on A: %q", out)
	}
	adminB.run("-n", "team", "delete", "role", "cm-reader")
	if out := bob[0].failStderr("-n", "team", "get", "configmaps"); !strings.Contains(out,
		`configmaps is forbidden: User "bob" cannot list resource "configmaps" in API group "" in the namespace "team": RBAC: roles.rbac.authorization.k8s.io "cm-reader" not found`) {
		t.Errorf("bob, whose binding names a deleted role: %q", out)
	}
	// kubectl's RBAC tables.
	if out := adminB.run("-n", "team", "get", "rolebindings", "-o", "wide"); !strings.Contains(out, "ROLE") || !strings.Contains(out, "Role/cm-reader") || !strings.Contains(out, "SERVICEACCOUNTS") {
		t.Errorf("kubectl get rolebindings -o wide:\n%s", out)
	}
}
