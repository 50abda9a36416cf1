package rbac

import (
	"context"
	"fmt"
	"slices"
	"strings"

	rbacv1 "k8s.io/api/rbac/v1"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"

	"github.com/concord-dev/concord/apiserver/filters"
	"github.com/concord-dev/concord/registry"
)

// Authorizer is kube-apiserver's RBAC authorizer over a View: it allows what
// a rule of a role bound to the requester allows, and has no opinion on
// the rest (it never denies). Its reasons are kube's: `RBAC: allowed by
// ClusterRoleBinding "x" of ClusterRole "y" to User "alice"`, and for a
// request it does not allow, the roles its bindings name that are missing.
type Authorizer struct {
	view *View
}

// NewAuthorizer returns the authorizer of view.
func NewAuthorizer(view *View) *Authorizer { return &Authorizer{view: view} }

var _ filters.Authorizer = (*Authorizer)(nil)

// Authorize decides once the view is current (View.await), except a write
// it allows on the view as it is: that one does not wait, and its own etcd
// transaction checks the decision, guarded by the generation key at the
// revision this view has of it (filters.Fence, registry.FencedStorage). A
// write the view does not allow waits as every other request, so that no
// denial is stale either.
func (z *Authorizer) Authorize(ctx context.Context, a filters.Attributes) (filters.Decision, string, error) {
	fence, fast := filters.Fencing(ctx)
	if fence != nil && !writes(a) {
		fence = nil
	}
	if fence != nil && fast {
		z.view.mu.RLock()
		if z.view.ready {
			d, reason, err := z.view.idx.decide(a)
			gen := z.view.gen
			z.view.mu.RUnlock()
			if d == filters.Allow {
				fence.Offer(registry.RBACGenerationGuard(gen))
				return d, reason, err
			}
		} else {
			z.view.mu.RUnlock()
		}
	}
	if fence != nil && !fast {
		// Decided again after the request began (a guard failed): the
		// request's first revision is not enough; a new quorum read is.
		ctx = registry.WithRevisionMemo(ctx)
	}
	if err := z.view.await(ctx); err != nil {
		return filters.NoOpinion, "", err
	}
	defer z.view.mu.RUnlock()
	d, reason, err := z.view.idx.decide(a)
	if d == filters.Allow && fence != nil && !fast {
		fence.Offer(registry.RBACGenerationGuard(z.view.gen))
	}
	return d, reason, err
}

// writes: a that may write objects (the decision of which the write's
// etcd transaction can check).
func writes(a filters.Attributes) bool {
	if !a.ResourceRequest {
		return false
	}
	switch a.Verb {
	case "create", "update", "patch", "delete", "deletecollection":
		return true
	}
	return false
}

func (x *index) decide(a filters.Attributes) (filters.Decision, string, error) {
	var errs []error
	var allowedBy *binding
	x.visit(a.User, a.Namespace, func(b *binding, rules []rbacv1.PolicyRule, err error) bool {
		if err != nil {
			errs = append(errs, err)
			return true
		}
		for i := range rules {
			if RuleAllows(a, &rules[i]) {
				allowedBy = b
				return false
			}
		}
		return true
	})
	if allowedBy != nil {
		return filters.Allow, "RBAC: allowed by " + allowedBy.describe(a.User), nil
	}
	if len(errs) > 0 {
		return filters.NoOpinion, fmt.Sprintf("RBAC: %v", utilerrors.NewAggregate(errs)), nil
	}
	return filters.NoOpinion, "", nil
}

// visit calls f with the rules of every binding that applies to user in
// namespace, as kube's VisitRulesFor: the ClusterRoleBindings first, then
// the RoleBindings of namespace; a binding to a missing role gives its
// error instead. f returns false to stop.
func (x *index) visit(user filters.UserInfo, namespace string, f func(b *binding, rules []rbacv1.PolicyRule, err error) bool) {
	// A binding may name the user more than once (as a user and a group):
	// it is visited once.
	var seenBuf [16]*binding
	seen := seenBuf[:0]
	each := func(m map[string][]*binding, ns string) bool {
		if m == nil {
			return true
		}
		for i := -1; i < len(user.Groups); i++ {
			var list []*binding
			if i < 0 {
				list = m["u:"+user.Name]
			} else {
				list = m["g:"+user.Groups[i]]
			}
			for _, b := range list {
				if slices.Contains(seen, b) {
					continue
				}
				seen = append(seen, b)
				rules, err := x.roleRules(b.ref, ns)
				if !f(b, rules, err) {
					return false
				}
			}
		}
		return true
	}
	if !each(x.cluster, "") || namespace == "" {
		return
	}
	each(x.namespaced[namespace], namespace)
}

// describe is kube's clusterRoleBindingDescriber and roleBindingDescriber,
// of the first subject of b that is user.
func (b *binding) describe(user filters.UserInfo) string {
	var s *rbacv1.Subject
	for i := range b.subjects {
		k := b.subjectKeys[i]
		if k == "u:"+user.Name || (strings.HasPrefix(k, "g:") && slices.Contains(user.Groups, k[2:])) {
			s = &b.subjects[i]
			break
		}
	}
	subject := ""
	if s != nil {
		switch {
		case s.Kind != rbacv1.ServiceAccountKind:
			subject = fmt.Sprintf("%s %q", s.Kind, s.Name)
		case s.Namespace != "":
			subject = fmt.Sprintf("%s %q", s.Kind, s.Name+"/"+s.Namespace)
		default:
			subject = fmt.Sprintf("%s %q", s.Kind, s.Name+"/"+b.namespace)
		}
	}
	if b.namespace == "" {
		return fmt.Sprintf("ClusterRoleBinding %q of %s %q to %s", b.name, b.ref.Kind, b.ref.Name, subject)
	}
	return fmt.Sprintf("RoleBinding %q of %s %q to %s", b.name+"/"+b.namespace, b.ref.Kind, b.ref.Name, subject)
}

// RulesFor are the rules that apply to user in namespace ("": the cluster
// bindings' only), as kube's RulesFor, once the view is current; err names
// the missing roles (the rules are those found).
func (z *Authorizer) RulesFor(ctx context.Context, user filters.UserInfo, namespace string) ([]rbacv1.PolicyRule, error) {
	if err := z.view.await(ctx); err != nil {
		return nil, err
	}
	defer z.view.mu.RUnlock()
	return z.view.idx.rulesFor(user, namespace)
}

func (x *index) rulesFor(user filters.UserInfo, namespace string) ([]rbacv1.PolicyRule, error) {
	var rules []rbacv1.PolicyRule
	var errs []error
	x.visit(user, namespace, func(_ *binding, r []rbacv1.PolicyRule, err error) bool {
		if err != nil {
			errs = append(errs, err)
		}
		rules = append(rules, r...)
		return true
	})
	return rules, utilerrors.NewAggregate(errs)
}

// RuleAllows is kube's: the verb, API group, resource (or
// resource/subresource, or */subresource) and name of a resource request,
// or the verb and path of another; "*" matches everything, a URL ending in
// "*" every path it begins.
func RuleAllows(a filters.Attributes, rule *rbacv1.PolicyRule) bool {
	if !has(rule.Verbs, a.Verb) {
		return false
	}
	if !a.ResourceRequest {
		for _, u := range rule.NonResourceURLs {
			if u == rbacv1.NonResourceAll || u == a.Path || (strings.HasSuffix(u, "*") && strings.HasPrefix(a.Path, strings.TrimRight(u, "*"))) {
				return true
			}
		}
		return false
	}
	return has(rule.APIGroups, a.APIGroup) && resourceMatches(rule.Resources, a.Resource, a.Subresource) &&
		(len(rule.ResourceNames) == 0 || slices.Contains(rule.ResourceNames, a.Name))
}

// has: "*" or v is in list.
func has(list []string, v string) bool {
	for _, s := range list {
		if s == "*" || s == v {
			return true
		}
	}
	return false
}

func resourceMatches(resources []string, resource, subresource string) bool {
	for _, r := range resources {
		if r == rbacv1.ResourceAll {
			return true
		}
		if subresource == "" {
			if r == resource {
				return true
			}
			continue
		}
		// resource/subresource, or */subresource.
		if len(r) == len(resource)+1+len(subresource) && strings.HasPrefix(r, resource) && r[len(resource)] == '/' && strings.HasSuffix(r, subresource) {
			return true
		}
		if len(r) == len(subresource)+2 && strings.HasPrefix(r, "*/") && strings.HasSuffix(r, subresource) {
			return true
		}
	}
	return false
}
