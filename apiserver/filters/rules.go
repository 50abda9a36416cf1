package filters

import (
	"context"
	"errors"
	"slices"
	"strings"

	rbacv1 "k8s.io/api/rbac/v1"
)

// RuleResolver is an authorizer that can list what it allows a user in a
// namespace, for SelfSubjectRulesReview (kube's authorizer.RuleResolver).
type RuleResolver interface {
	RulesFor(ctx context.Context, user UserInfo, namespace string) ([]rbacv1.PolicyRule, error)
}

// RulesFor lists what z allows user in namespace: the rules of every
// authorizer of a chain that can list them; incomplete when one cannot. A
// rule that the rules of the authorizers before it already cover is left
// out: RBAC's bootstrap roles grant what the built-in policy rules do, and
// kube, which has only the former, lists each grant once
// (kubectl auth can-i --list).
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
		before := rules
		for _, rule := range got {
			if !covered(before, rule) {
				rules = append(rules, rule)
			}
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	return rules, incomplete, errors.Join(errs...)
}

// covered reports whether rules grant all that rule does, verb by verb
// and resource (or URL) by resource. A non-resource head is covered by get:
// the built-in rules grant both, RBAC's bootstrap roles get alone, and a
// HEAD reads no more than a GET.
func covered(rules []rbacv1.PolicyRule, rule rbacv1.PolicyRule) bool {
	for _, verb := range rule.Verbs {
		if len(rule.NonResourceURLs) > 0 {
			for _, u := range rule.NonResourceURLs {
				if !slices.ContainsFunc(rules, func(r rbacv1.PolicyRule) bool {
					return coversURL(r, verb, u) || (verb == "head" && coversURL(r, "get", u))
				}) {
					return false
				}
			}
			continue
		}
		for _, g := range rule.APIGroups {
			for _, res := range rule.Resources {
				if !slices.ContainsFunc(rules, func(r rbacv1.PolicyRule) bool { return coversResource(r, verb, g, res, rule.ResourceNames) }) {
					return false
				}
			}
		}
	}
	return true
}

// coversURL reports whether r allows verb on u, a path or a prefix ending
// in "*".
func coversURL(r rbacv1.PolicyRule, verb, u string) bool {
	if !matches(r.Verbs, verb) {
		return false
	}
	for _, p := range r.NonResourceURLs {
		if p == "*" || p == u || (strings.HasSuffix(p, "*") && strings.HasPrefix(u, strings.TrimSuffix(p, "*"))) {
			return true
		}
	}
	return false
}

// coversResource reports whether r allows verb on resource res of group
// g, for all of names (all objects when names is empty).
func coversResource(r rbacv1.PolicyRule, verb, g, res string, names []string) bool {
	if len(r.NonResourceURLs) > 0 || !matches(r.Verbs, verb) || !matches(r.APIGroups, g) || !matches(r.Resources, res) {
		return false
	}
	if len(r.ResourceNames) == 0 {
		return true
	}
	return len(names) > 0 && !slices.ContainsFunc(names, func(n string) bool { return !slices.Contains(r.ResourceNames, n) })
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
