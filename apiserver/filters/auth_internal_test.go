package filters

import (
	"context"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestRequestAttributes(t *testing.T) {
	type want struct {
		verb                                      string
		resource                                  bool
		group, version, res, sub, namespace, name string
	}
	for _, tc := range []struct {
		method, target string
		want           want
	}{
		// Non-resource requests: discovery, /version, OpenAPI, anything.
		{"GET", "/api", want{verb: "get"}},
		{"GET", "/api/v1", want{verb: "get"}},
		{"GET", "/apis", want{verb: "get"}},
		{"GET", "/apis/coordination.k8s.io", want{verb: "get"}},
		{"GET", "/apis/coordination.k8s.io/v1", want{verb: "get"}},
		{"GET", "/version", want{verb: "get"}},
		{"GET", "/openapi/v3/api/v1", want{verb: "get"}},
		{"POST", "/logs/x", want{verb: "post"}},
		// Collections and objects.
		{"GET", "/api/v1/namespaces/team/configmaps", want{"list", true, "", "v1", "configmaps", "", "team", ""}},
		{"GET", "/api/v1/namespaces/team/configmaps?watch=true", want{"watch", true, "", "v1", "configmaps", "", "team", ""}},
		{"GET", "/api/v1/namespaces/team/configmaps?watch=1&resourceVersion=5", want{"watch", true, "", "v1", "configmaps", "", "team", ""}},
		{"GET", "/api/v1/namespaces/team/configmaps?watch=false", want{"list", true, "", "v1", "configmaps", "", "team", ""}},
		{"GET", "/api/v1/namespaces/team/configmaps?fieldSelector=metadata.name%3Dapp&watch=true", want{"watch", true, "", "v1", "configmaps", "", "team", "app"}},
		{"GET", "/api/v1/configmaps", want{"list", true, "", "v1", "configmaps", "", "", ""}},
		{"GET", "/api/v1/configmaps?watch=true", want{"watch", true, "", "v1", "configmaps", "", "", ""}},
		{"GET", "/api/v1/namespaces/team/configmaps/app", want{"get", true, "", "v1", "configmaps", "", "team", "app"}},
		{"HEAD", "/api/v1/namespaces/team/configmaps/app", want{"get", true, "", "v1", "configmaps", "", "team", "app"}},
		{"GET", "/api/v1/namespaces/team/configmaps/app?watch=true", want{"watch", true, "", "v1", "configmaps", "", "team", "app"}},
		{"POST", "/api/v1/namespaces/team/configmaps", want{"create", true, "", "v1", "configmaps", "", "team", ""}},
		{"PUT", "/api/v1/namespaces/team/configmaps/app", want{"update", true, "", "v1", "configmaps", "", "team", "app"}},
		{"PATCH", "/api/v1/namespaces/team/configmaps/app", want{"patch", true, "", "v1", "configmaps", "", "team", "app"}},
		{"DELETE", "/api/v1/namespaces/team/configmaps/app", want{"delete", true, "", "v1", "configmaps", "", "team", "app"}},
		{"DELETE", "/api/v1/namespaces/team/configmaps", want{"deletecollection", true, "", "v1", "configmaps", "", "team", ""}},
		{"OPTIONS", "/api/v1/namespaces/team/configmaps", want{"", true, "", "v1", "configmaps", "", "team", ""}},
		// A list or watch of one object by its name, as client-go's
		// informers and kubectl wait ask; a selector over the limit names
		// nothing (it is not parsed: the handler refuses it).
		{"GET", "/api/v1/namespaces/team/configmaps?fieldSelector=metadata.name%3Dapp", want{"list", true, "", "v1", "configmaps", "", "team", "app"}},
		{"GET", "/api/v1/namespaces/team/configmaps?watch=1&fieldSelector=metadata.name%3D%3Dapp%2Cmetadata.namespace%3Dteam", want{"watch", true, "", "v1", "configmaps", "", "team", "app"}},
		{"GET", "/api/v1/namespaces/team/configmaps?fieldSelector=metadata.name!%3Dapp", want{"list", true, "", "v1", "configmaps", "", "team", ""}},
		{"GET", "/api/v1/namespaces/team/configmaps?fieldSelector=metadata.name%3D..", want{"list", true, "", "v1", "configmaps", "", "team", ""}},
		{"GET", "/api/v1/namespaces/team/configmaps?fieldSelector=metadata.name%3Dapp," + strings.Repeat("x", MaxSelectorBytes), want{"list", true, "", "v1", "configmaps", "", "team", ""}},
		// ?watch= is read as the list options decoder reads it.
		{"GET", "/api/v1/configmaps?watch=", want{"watch", true, "", "v1", "configmaps", "", "", ""}},
		{"GET", "/api/v1/configmaps?watch=False", want{"list", true, "", "v1", "configmaps", "", "", ""}},
		{"GET", "/api/v1/configmaps?watch=0&watch=1", want{"list", true, "", "v1", "configmaps", "", "", ""}},
		{"GET", "/api/v1/configmaps?watch;=1", want{"list", true, "", "v1", "configmaps", "", "", ""}},
		{"GET", "/api/v1/configmaps?w%61tch=1", want{"watch", true, "", "v1", "configmaps", "", "", ""}},
		// The deprecated watch paths.
		{"GET", "/api/v1/watch/namespaces/team/configmaps", want{"watch", true, "", "v1", "configmaps", "", "team", ""}},
		{"GET", "/api/v1/watch/namespaces/team/configmaps/app", want{"watch", true, "", "v1", "configmaps", "", "team", "app"}},
		{"GET", "/api/v1/watch/configmaps", want{"watch", true, "", "v1", "configmaps", "", "", ""}},
		// Namespaces are their own namespace; their subresources.
		{"GET", "/api/v1/namespaces", want{"list", true, "", "v1", "namespaces", "", "", ""}},
		{"POST", "/api/v1/namespaces", want{"create", true, "", "v1", "namespaces", "", "", ""}},
		{"GET", "/api/v1/namespaces/team", want{"get", true, "", "v1", "namespaces", "", "team", "team"}},
		{"DELETE", "/api/v1/namespaces/team", want{"delete", true, "", "v1", "namespaces", "", "team", "team"}},
		{"PUT", "/api/v1/namespaces/team/finalize", want{"update", true, "", "v1", "namespaces", "finalize", "team", "team"}},
		// Groups.
		{"GET", "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/leader", want{"get", true, "coordination.k8s.io", "v1", "leases", "", "kube-system", "leader"}},
		{"POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", want{"create", true, "authorization.k8s.io", "v1", "selfsubjectaccessreviews", "", "", ""}},
		// Unknown resources are still parsed (and authorized first).
		{"GET", "/api/v1/namespaces/team/pods/web/log", want{"get", true, "", "v1", "pods", "log", "team", "web"}},
	} {
		r := httptest.NewRequest(tc.method, tc.target, nil)
		a := requestAttributes(r)
		got := want{a.Verb, a.ResourceRequest, a.APIGroup, a.APIVersion, a.Resource, a.Subresource, a.Namespace, a.Name}
		if got != tc.want {
			t.Errorf("%s %s: %+v; want %+v", tc.method, tc.target, got, tc.want)
		}
		if a.Path != r.URL.Path {
			t.Errorf("%s %s: path %q", tc.method, tc.target, a.Path)
		}
	}
}

// TestQueryValue: queryValue reads a query as url.Values.Get does.
func TestQueryValue(t *testing.T) {
	for _, raw := range []string{
		"", "watch", "watch=", "watch=1", "a=1&watch=2&watch=3", "watch=%zz&watch=4", "w%61tch=5", "watch+=6", "watch%20=7",
		"watch=a%2Bb+c", "x;watch=8&watch=9", "&&watch=10&", "watch=%", strings.Repeat("a=1&", maxQueryParams) + "watch=11",
		strings.Repeat("a=1&", maxQueryParams-1) + "watch=12",
	} {
		values, _ := url.ParseQuery(raw)
		want, wantOK := values.Get("watch"), values.Has("watch")
		if got, ok := queryValue(raw, "watch"); got != want || ok != wantOK {
			t.Errorf("queryValue(%.40q) = %q, %v; want %q, %v as url.ParseQuery", raw, got, ok, want, wantOK)
		}
	}
	for _, sel := range []string{"", "app=web", "app in (a, b),!legacy", "a%b=c+d", strings.Repeat("k=v,", 3000)} {
		raw := "limit=5&labelSelector=" + url.QueryEscape(sel) + "&labelSelector=other"
		if got := SelectorLength(raw, "labelSelector"); got != len(sel) {
			t.Errorf("SelectorLength of %.40q = %d; want %d", sel, got, len(sel))
		}
	}
}

func TestParsePolicy(t *testing.T) {
	rules, err := ParsePolicy([]byte(`
rules:
- users: [alice]
  groups: [team-a]
  verbs: [get, list, watch]
  resources: [configmaps]
  namespaces: [team]
- groups: [ops]
  verbs: ["*"]
  apiGroups: [coordination.k8s.io]
  resources: ["*"]
  namespaces: ["*"]
- users: ["*"]
  verbs: [get]
  nonResourceURLs: [/healthz, /custom/*]
`))
	if err != nil {
		t.Fatalf("ParsePolicy: %v", err)
	}
	want := []PolicyRule{
		{Users: []string{"alice"}, Groups: []string{"team-a"}, Verbs: []string{"get", "list", "watch"}, Resources: []string{"configmaps"}, Namespaces: []string{"team"}},
		{Groups: []string{"ops"}, Verbs: []string{"*"}, APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"*"}, Namespaces: []string{"*"}},
		{Users: []string{"*"}, Verbs: []string{"get"}, NonResourceURLs: []string{"/healthz", "/custom/*"}},
	}
	if diff := cmp.Diff(want, rules, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("rules (-want +got):\n%s", diff)
	}
	if rules, err := ParsePolicy([]byte("\n")); err != nil || len(rules) != 0 {
		t.Errorf("ParsePolicy(empty) = %v, %v; want no rules", rules, err)
	}

	for _, tc := range []struct{ name, yaml, wantErr string }{
		{"unknown field", "rules:\n- user: [alice]\n  verbs: [get]\n  resources: [configmaps]\n  namespaces: [x]\n", `unknown field "user"`},
		{"no subject", "rules:\n- verbs: [get]\n  resources: [configmaps]\n  namespaces: [x]\n", "rule 1: give the users or the groups"},
		{"no verbs", "rules:\n- users: [a]\n  resources: [configmaps]\n  namespaces: [x]\n", "verbs: give the verbs"},
		{"unknown verb", "rules:\n- users: [a]\n  verbs: [read]\n  resources: [configmaps]\n  namespaces: [x]\n", `verbs: "read" is not one of`},
		{"no namespaces", "rules:\n- users: [a]\n  verbs: [get]\n  resources: [configmaps]\n", "namespaces: give the namespaces"},
		{"no resources", "rules:\n- users: [a]\n  verbs: [get]\n  namespaces: [x]\n", "resources: give the resources"},
		{"both kinds", "rules:\n- users: [a]\n  verbs: [get]\n  resources: [configmaps]\n  namespaces: [x]\n  nonResourceURLs: [/x]\n", "not both"},
		{"relative URL", "rules:\n- users: [a]\n  verbs: [get]\n  nonResourceURLs: [version]\n", `"version" is neither a path`},
		{"second rule", "rules:\n- users: [a]\n  verbs: [get]\n  nonResourceURLs: [/version]\n- users: [b]\n", "rule 2:"},
		{"not YAML", "rules: [", "yaml"},
	} {
		if _, err := ParsePolicy([]byte(tc.yaml)); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("%s: ParsePolicy = %v; want an error with %q", tc.name, err, tc.wantErr)
		}
	}
}

func TestPolicyAuthorizer(t *testing.T) {
	rules, err := ParsePolicy([]byte(`
rules:
- users: [alice]
  verbs: [get, list, watch]
  resources: [configmaps]
  namespaces: [team]
- groups: [ops]
  verbs: ["*"]
  apiGroups: [coordination.k8s.io]
  resources: ["*"]
  namespaces: ["*"]
- users: ["*"]
  verbs: [get]
  nonResourceURLs: [/custom/*]
`))
	if err != nil {
		t.Fatal(err)
	}
	authz := NewPolicyAuthorizer(rules)
	alice := UserInfo{Name: "alice", Groups: []string{AuthenticatedGroup}}
	ops := UserInfo{Name: "olga", Groups: []string{"ops", AuthenticatedGroup}}
	admin := UserInfo{Name: "root", Groups: []string{MastersGroup, AuthenticatedGroup}}
	anon := UserInfo{Name: AnonymousUser, Groups: []string{UnauthenticatedGroup}}
	res := func(u UserInfo, verb, group, resource, ns string) Attributes {
		return Attributes{User: u, Verb: verb, ResourceRequest: true, APIGroup: group, APIVersion: "v1", Resource: resource, Namespace: ns}
	}
	path := func(u UserInfo, verb, p string) Attributes { return Attributes{User: u, Verb: verb, Path: p} }
	for _, tc := range []struct {
		a    Attributes
		want bool
	}{
		{res(alice, "get", "", "configmaps", "team"), true},
		{res(alice, "watch", "", "configmaps", "team"), true},
		{res(alice, "list", "", "configmaps", "other"), false},
		{res(alice, "list", "", "configmaps", ""), false}, // all namespaces
		{res(alice, "create", "", "configmaps", "team"), false},
		{res(alice, "get", "", "secrets", "team"), false},
		{res(ops, "delete", "coordination.k8s.io", "leases", "kube-system"), true},
		{res(ops, "list", "coordination.k8s.io", "leases", ""), true},
		{res(ops, "list", "", "configmaps", "team"), false}, // another group
		{res(admin, "deletecollection", "", "secrets", "anything"), true},
		{res(admin, "create", "", "namespaces", ""), true},
		{path(admin, "post", "/anything"), true},
		{res(alice, "create", "authorization.k8s.io", "selfsubjectaccessreviews", ""), true},
		{res(anon, "create", "authorization.k8s.io", "selfsubjectaccessreviews", ""), false},
		{path(alice, "get", "/apis/coordination.k8s.io/v1"), true},
		{path(alice, "get", "/openapi/v2"), true},
		{path(alice, "post", "/api"), false},
		{path(anon, "get", "/api"), false},
		{path(anon, "get", "/version"), true},
		{path(anon, "get", "/custom/x"), true},
		{path(anon, "get", "/customer"), false},
	} {
		if got, reason, _ := Allowed(context.Background(), authz, tc.a); got != tc.want {
			t.Errorf("Authorize(%+v) = %v (%q); want %v", tc.a, got, reason, tc.want)
		}
	}
	if _, reason, _ := authz.Authorize(context.Background(), res(alice, "get", "", "configmaps", "team")); reason != "allowed by rule 1 of the authorization policy" {
		t.Errorf("reason = %q", reason)
	}
}

func TestLoadTokenFile(t *testing.T) {
	dir := t.TempDir()
	write := func(content string) string {
		p := filepath.Join(dir, "tokens.csv")
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	tokens, err := LoadTokenFile(write("alice-token,alice,1001,\"team-a,dev\"\nbob-token,bob,1002\n,nobody,1\ncarol-token,carol,1003,ops,extra\n"))
	if err != nil {
		t.Fatalf("LoadTokenFile: %v", err)
	}
	want := map[string]UserInfo{
		"alice-token": {Name: "alice", UID: "1001", Groups: []string{"team-a", "dev"}},
		"bob-token":   {Name: "bob", UID: "1002"},
		"carol-token": {Name: "carol", UID: "1003", Groups: []string{"ops"}},
	}
	if diff := cmp.Diff(want, tokens); diff != "" {
		t.Errorf("tokens (-want +got):\n%s", diff)
	}
	for _, tc := range []struct{ content, wantErr string }{
		{"a,b,c\nx,y\n", "line 2: must have at least 3 columns (token, user name, user uid), found 2"},
		{"a,,c\n", "line 1: the user name (second column) is empty"},
		{"a,\"b,c\n", "extraneous or missing \" in quoted-field"},
	} {
		if _, err := LoadTokenFile(write(tc.content)); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("LoadTokenFile(%q) = %v; want an error with %q", tc.content, err, tc.wantErr)
		}
	}
	if _, err := LoadTokenFile(filepath.Join(dir, "missing.csv")); err == nil {
		t.Error("LoadTokenFile(missing) = nil error")
	}
}
