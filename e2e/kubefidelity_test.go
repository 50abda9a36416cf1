package e2e

import (
	"encoding/base64"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
)

// kubeCanIListServiceAccount is what kube-apiserver 1.37's kubectl auth
// can-i --list prints for a ServiceAccount no binding names: the rules of
// the bootstrap ClusterRoles bound to its groups (system:basic-user,
// system:discovery, system:public-info-viewer,
// system:service-account-issuer-discovery), each once.
const kubeCanIListServiceAccount = `Resources                                       Non-Resource URLs                      Resource Names   Verbs
selfsubjectreviews.authentication.k8s.io        []                                     []               [create]
selfsubjectaccessreviews.authorization.k8s.io   []                                     []               [create]
selfsubjectrulesreviews.authorization.k8s.io    []                                     []               [create]
                                                [/.well-known/openid-configuration/]   []               [get]
                                                [/.well-known/openid-configuration]    []               [get]
                                                [/api/*]                               []               [get]
                                                [/api]                                 []               [get]
                                                [/apis/*]                              []               [get]
                                                [/apis]                                []               [get]
                                                [/healthz]                             []               [get]
                                                [/healthz]                             []               [get]
                                                [/livez]                               []               [get]
                                                [/livez]                               []               [get]
                                                [/openapi/*]                           []               [get]
                                                [/openapi]                             []               [get]
                                                [/openid/v1/jwks/]                     []               [get]
                                                [/openid/v1/jwks]                      []               [get]
                                                [/readyz]                              []               [get]
                                                [/readyz]                              []               [get]
                                                [/version/]                            []               [get]
                                                [/version/]                            []               [get]
                                                [/version]                             []               [get]
                                                [/version]                             []               [get]
`

// TestKubectlSeesKubesAnswers drives the real kubectl against the secure
// dev-mode binary with the default --authorization-mode (RBAC,Policy) and
// compares what it prints with kube-apiserver 1.37's: auth can-i --list
// as a ServiceAccount lists each grant once (the built-in policy rules
// that the bootstrap RBAC roles already grant are not listed again), in
// the SelfSubjectRulesReview too; get serviceaccounts has NAME and AGE
// only; a token of one audience has aud as a list; and no command makes
// the server warn of a response body it could not write (a 304 of the
// OpenAPI documents over HTTP/2).
func TestKubectlSeesKubesAnswers(t *testing.T) {
	t.Parallel()
	tmp := t.TempDir()
	srv := startConcord(t, "concord (secure dev mode, RBAC)", t.TempDir(), "--insecure-serving=false", "--anonymous-auth=false", "--authorization-mode", "RBAC,Policy", "--data-dir", filepath.Join(tmp, "data"))
	admin := &kubectlUser{t: t, kubeconfig: srv.kubeconfig, cacheDir: filepath.Join(tmp, "cache-admin")}
	admin.run("create", "namespace", "team")
	admin.run("-n", "team", "create", "sa", "app")
	const as = "--as=system:serviceaccount:team:app"

	// The bootstrap roles are written once the replica leads: wait for
	// them (/livez is only theirs) rather than assume.
	var list string
	waitFor(t, "the bootstrap ClusterRoleBindings", 30*time.Second, func() string {
		if list = admin.run("-n", "team", "auth", "can-i", "--list", as); !strings.Contains(list, "[/livez]") {
			return "kubectl auth can-i --list printed\n" + list
		}
		return ""
	})
	if list != kubeCanIListServiceAccount {
		t.Errorf("kubectl auth can-i --list as the ServiceAccount printed\n%s\nwant kube's\n%s", list, kubeCanIListServiceAccount)
	}

	writeFile(t, filepath.Join(tmp, "review.json"), `{"apiVersion":"authorization.k8s.io/v1","kind":"SelfSubjectRulesReview","spec":{"namespace":"team"}}`)
	// Twice: kubectl validates with the OpenAPI v3 documents, and the
	// second time asks for them with the ETag it cached (a 304).
	admin.run("create", "-f", filepath.Join(tmp, "review.json"), "-o", "name", as)
	var review authorizationv1.SelfSubjectRulesReview
	if err := json.Unmarshal([]byte(admin.run("create", "-f", filepath.Join(tmp, "review.json"), "-o", "json", as)), &review); err != nil {
		t.Fatal(err)
	}
	var resources, urls []string
	for _, r := range review.Status.ResourceRules {
		resources = append(resources, strings.Join(r.Verbs, ",")+" "+strings.Join(r.APIGroups, ",")+" "+strings.Join(r.Resources, ","))
	}
	for _, r := range review.Status.NonResourceRules {
		urls = append(urls, strings.Join(r.Verbs, ",")+" "+strings.Join(r.NonResourceURLs, ","))
	}
	wantResources := []string{
		"create authorization.k8s.io selfsubjectaccessreviews,selfsubjectrulesreviews",
		"create authentication.k8s.io selfsubjectreviews",
	}
	if strings.Join(resources, "\n") != strings.Join(wantResources, "\n") || len(urls) != 3 || review.Status.Incomplete || review.Status.EvaluationError != "" {
		t.Errorf("SelfSubjectRulesReview as the ServiceAccount: resource rules\n%s\nnon-resource rules\n%s\nincomplete %v %q; want the resource rules\n%s\nand the 3 non-resource rules of the bootstrap roles, complete",
			strings.Join(resources, "\n"), strings.Join(urls, "\n"), review.Status.Incomplete, review.Status.EvaluationError, strings.Join(wantResources, "\n"))
	}

	if header := strings.Fields(strings.SplitN(admin.run("-n", "team", "get", "serviceaccounts"), "\n", 2)[0]); strings.Join(header, " ") != "NAME AGE" {
		t.Errorf("kubectl get serviceaccounts header %q; want NAME AGE", header)
	}

	token := strings.TrimSpace(admin.run("-n", "team", "create", "token", "app", "--audience", "vault"))
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		t.Fatalf("kubectl create token printed %q; want a JWT", token)
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	var claims struct {
		Aud json.RawMessage `json:"aud"`
	}
	if err := json.Unmarshal(payload, &claims); err != nil {
		t.Fatal(err)
	}
	if string(claims.Aud) != `["vault"]` {
		t.Errorf("aud of a token of one audience: %s; want [\"vault\"]", claims.Aud)
	}

	if log := srv.log(); strings.Contains(log, "does not allow body") {
		t.Errorf("the server could not write a response body:\n%s", log)
	}
}
