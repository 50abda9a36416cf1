package filters

import (
	"context"
	"errors"
	"slices"

	rbacv1 "k8s.io/api/rbac/v1"
)

// RuleResolver is an authorizer that can list what it allows a user in a
// namespace, for SelfSubjectRulesReview (kube's authorizer.RuleResolver).
type RuleResolver interface {
	RulesFor(ctx context.Context, user UserInfo, namespace string) ([]rbacv1.PolicyRule, error)
}

// RulesFor lists what z allows user in namespace: the rules of every
// authorizer of a chain that can list them; incomplete when one cannot.
func RulesFor(ctx context.Context, z Authorizer, user UserInfo, namespace string) (rules []rbacv1.PolicyRule, incomplete bool, err error) {
	list := []Authorizer{z}
	if c, ok := z.(chain); ok {
		list = c
	}
	var errs []error
	for _, a := range list {
		r, ok := a.(RuleResolver)
		if !ok {
			incomplete = true
			continue
		}
		got, err := r.RulesFor(ctx, user, namespace)
		rules = append(rules, got...)
		if err != nil {
			errs = append(errs, err)
		}
	}
	return rules, incomplete, errors.Join(errs...)
}

// RulesFor of AlwaysAllow is everything.
func (alwaysAllow) RulesFor(context.Context, UserInfo, string) ([]rbacv1.PolicyRule, error) {
	return []rbacv1.PolicyRule{
		{Verbs: []string{"*"}, APIGroups: []string{"*"}, Resources: []string{"*"}},
		{Verbs: []string{"*"}, NonResourceURLs: []string{"*"}},
	}, nil
}

// RulesFor of a policy are its rules (the built-in ones first) that are for
// user and cover namespace, as RBAC rules.
func (p *policyAuthorizer) RulesFor(_ context.Context, user UserInfo, namespace string) ([]rbacv1.PolicyRule, error) {
	var out []rbacv1.PolicyRule
	for _, r := range slices.Concat(builtinRules, p.rules) {
		if !r.appliesTo(user) {
			continue
		}
		if len(r.NonResourceURLs) > 0 {
			out = append(out, rbacv1.PolicyRule{Verbs: r.Verbs, NonResourceURLs: r.NonResourceURLs})
			continue
		}
		if !slices.Contains(r.Namespaces, "*") && !slices.Contains(r.Namespaces, namespace) {
			continue
		}
		groups := r.APIGroups
		if len(groups) == 0 {
			groups = []string{"*"}
		}
		out = append(out, rbacv1.PolicyRule{Verbs: r.Verbs, APIGroups: groups, Resources: r.Resources})
	}
	return out, nil
}
