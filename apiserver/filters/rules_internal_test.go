package filters

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	rbacv1 "k8s.io/api/rbac/v1"
)

// listedRules is a RuleResolver that lists the same rules for everyone.
type listedRules []rbacv1.PolicyRule

func (listedRules) Authorize(context.Context, Attributes) (Decision, string, error) {
	return NoOpinion, "", nil
}

func (l listedRules) RulesFor(context.Context, UserInfo, string) ([]rbacv1.PolicyRule, error) {
	return l, nil
}

// TestRulesForListsEachGrantOnce: a rule of a later authorizer that the
// rules before it cover (a non-resource head by get) is left out, so that
// RBAC,Policy lists a ServiceAccount's grants as kube's RBAC does; one
// they cover only in part, or for some names only, is kept; rules of one
// authorizer are all kept, repeats too (kube's RBAC lists them so).
func TestRulesForListsEachGrantOnce(t *testing.T) {
	bootstrap := listedRules{
		{Verbs: []string{"create"}, APIGroups: []string{"authorization.k8s.io"}, Resources: []string{"selfsubjectaccessreviews", "selfsubjectrulesreviews"}},
		{Verbs: []string{"create"}, APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"selfsubjectreviews"}},
		{Verbs: []string{"get"}, NonResourceURLs: []string{"/livez", "/readyz", "/healthz", "/version", "/version/", "/openapi", "/openapi/*", "/api", "/api/*", "/apis", "/apis/*"}},
		{Verbs: []string{"get"}, NonResourceURLs: []string{"/livez", "/readyz", "/healthz", "/version", "/version/"}},
	}
	issuerDiscovery := rbacv1.PolicyRule{Verbs: []string{"get"}, NonResourceURLs: []string{"/.well-known/openid-configuration", "/.well-known/openid-configuration/", "/openid/v1/jwks", "/openid/v1/jwks/"}}
	builtinOpenID := rbacv1.PolicyRule{Verbs: []string{"get", "head"}, NonResourceURLs: []string{"/.well-known/openid-configuration", "/openid/v1/jwks"}}
	sa := UserInfo{Name: "system:serviceaccount:team:app", Groups: []string{"system:serviceaccounts", "system:serviceaccounts:team", AuthenticatedGroup}}
	for _, tc := range []struct {
		name  string
		chain Authorizer
		user  UserInfo
		want  []rbacv1.PolicyRule
	}{
		{"ServiceAccount: the built-in rules are all granted before",
			Chain(append(bootstrap, issuerDiscovery), NewPolicyAuthorizer(nil)), sa, append(bootstrap, issuerDiscovery)},
		{"user: the OpenID documents are the built-in rules' alone",
			Chain(bootstrap, NewPolicyAuthorizer(nil)), UserInfo{Name: "alice", Groups: []string{AuthenticatedGroup}}, append(bootstrap, builtinOpenID)},
		{"a rule for some names covers no rule for all",
			Chain(listedRules{{Verbs: []string{"get"}, APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: []string{"a"}}},
				listedRules{{Verbs: []string{"get"}, APIGroups: []string{""}, Resources: []string{"configmaps"}}, {Verbs: []string{"get"}, APIGroups: []string{"*"}, Resources: []string{"configmaps"}, ResourceNames: []string{"a"}}}),
			sa, []rbacv1.PolicyRule{
				{Verbs: []string{"get"}, APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: []string{"a"}},
				{Verbs: []string{"get"}, APIGroups: []string{""}, Resources: []string{"configmaps"}},
				{Verbs: []string{"get"}, APIGroups: []string{"*"}, Resources: []string{"configmaps"}, ResourceNames: []string{"a"}},
			}},
		{"a wildcard covers what it names",
			Chain(listedRules{{Verbs: []string{"*"}, APIGroups: []string{"*"}, Resources: []string{"*"}}, {Verbs: []string{"*"}, NonResourceURLs: []string{"*"}}}, NewPolicyAuthorizer(nil)),
			UserInfo{Name: "root", Groups: []string{"admins", AuthenticatedGroup}},
			[]rbacv1.PolicyRule{{Verbs: []string{"*"}, APIGroups: []string{"*"}, Resources: []string{"*"}}, {Verbs: []string{"*"}, NonResourceURLs: []string{"*"}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, incomplete, err := RulesFor(t.Context(), tc.chain, tc.user, "team")
			if err != nil || incomplete {
				t.Fatalf("RulesFor: incomplete %v, %v", incomplete, err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("rules (-want +got):\n%s", diff)
			}
		})
	}
}
