package rbac

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	rbacv1 "k8s.io/api/rbac/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/component-helpers/auth/rbac/validation"

	"github.com/concord-dev/concord/apiserver/filters"
	"github.com/concord-dev/concord/registry"
)

// Escalation is kube's privilege-escalation prevention (its rbac
// policybased storage), as the admission checks of the four stores: a
// Role or ClusterRole may grant only what its writer holds through RBAC,
// unless the writer may "escalate" it; a binding may bind only a role
// whose rules the writer holds, unless the writer may "bind" it. The group
// system:masters is exempt, and so are writes without a requester
// (Concord's own: the bootstrap and the aggregation controller).
type Escalation struct {
	// Rules resolves what a writer holds; Authorizer (the whole chain)
	// decides escalate and bind.
	Rules      *Authorizer
	Authorizer filters.Authorizer
}

// Install sets the checks on the stores.
func (e *Escalation) Install(roles, clusterRoles, roleBindings, clusterRoleBindings *registry.Store) {
	roles.SetAdmission(func(ctx context.Context, obj, old registry.Object) error {
		return e.checkRole(ctx, roles.Resource, obj, old, obj.(*rbacv1.Role).Rules)
	})
	clusterRoles.SetAdmission(func(ctx context.Context, obj, old registry.Object) error {
		return e.checkRole(ctx, clusterRoles.Resource, obj, old, obj.(*rbacv1.ClusterRole).Rules)
	})
	roleBindings.SetAdmission(func(ctx context.Context, obj, old registry.Object) error {
		return e.checkBinding(ctx, roleBindings.Resource, obj, old, obj.(*rbacv1.RoleBinding).RoleRef)
	})
	clusterRoleBindings.SetAdmission(func(ctx context.Context, obj, old registry.Object) error {
		return e.checkBinding(ctx, clusterRoleBindings.Resource, obj, old, obj.(*rbacv1.ClusterRoleBinding).RoleRef)
	})
}

// requester is who writes, and whether the checks apply to them.
func requester(ctx context.Context) (*filters.UserInfo, bool) {
	u := filters.UserOf(ctx)
	return u, u != nil && !slices.Contains(u.Groups, filters.MastersGroup)
}

func (e *Escalation) checkRole(ctx context.Context, res *registry.Resource, obj, old registry.Object, rules []rbacv1.PolicyRule) error {
	u, check := requester(ctx)
	if !check || (old != nil && onlyGCFields(obj, old)) {
		return nil
	}
	name := ""
	if old != nil { // a create is authorized on its collection
		name = obj.GetName()
	}
	escalate := filters.Attributes{User: *u, Verb: "escalate", ResourceRequest: true, APIGroup: rbacv1.GroupName, APIVersion: "*",
		Resource: res.Plural, Namespace: obj.GetNamespace(), Name: name}
	if ok, _, _ := filters.Allowed(ctx, e.Authorizer, escalate); ok {
		return nil
	}
	if err := e.confirmNoEscalation(ctx, *u, obj.GetNamespace(), rules); err != nil {
		return apierrors.NewForbidden(res.GroupResource(), obj.GetName(), err)
	}
	return nil
}

func (e *Escalation) checkBinding(ctx context.Context, res *registry.Resource, obj, old registry.Object, ref rbacv1.RoleRef) error {
	u, check := requester(ctx)
	if !check || (old != nil && onlyGCFields(obj, old)) {
		return nil
	}
	ns := obj.GetNamespace()
	bind := filters.Attributes{User: *u, Verb: "bind", ResourceRequest: true, APIGroup: ref.APIGroup, Namespace: ns, Name: ref.Name}
	switch ref.Kind {
	case "ClusterRole":
		bind.Resource = registry.ClusterRoles.Plural
	case "Role":
		bind.Resource = registry.Roles.Plural
	default:
		return nil // validation answers 422 (kube: 500, unsupported kind)
	}
	if ok, _, _ := filters.Allowed(ctx, e.Authorizer, bind); ok {
		return nil
	}
	if err := e.Rules.view.await(ctx); err != nil {
		return apierrors.NewInternalError(err)
	}
	rules, err := e.Rules.view.idx.roleRules(ref, ns)
	e.Rules.view.mu.RUnlock()
	if err != nil {
		// kube answers the missing role's NotFound.
		gr := registry.ClusterRoles.GroupResource()
		if ref.Kind == "Role" {
			gr = registry.Roles.GroupResource()
		}
		return apierrors.NewNotFound(gr, ref.Name)
	}
	if err := e.confirmNoEscalation(ctx, *u, ns, rules); err != nil {
		return apierrors.NewForbidden(res.GroupResource(), obj.GetName(), err)
	}
	return nil
}

// confirmNoEscalation is kube's ConfirmNoEscalation: the rules user holds
// in namespace must cover rules; the error lists what they lack.
func (e *Escalation) confirmNoEscalation(ctx context.Context, user filters.UserInfo, namespace string, rules []rbacv1.PolicyRule) error {
	owner, resolveErr := e.Rules.RulesFor(ctx, user, namespace)
	if errors.Is(resolveErr, errNotCurrent) || errors.Is(resolveErr, context.Canceled) || errors.Is(resolveErr, context.DeadlineExceeded) {
		return resolveErr
	}
	covers, missing := validation.Covers(owner, rules)
	if covers {
		return nil
	}
	descriptions := sets.New[string]()
	for _, r := range CompactRules(missing) {
		descriptions.Insert(CompactString(r))
	}
	msg := fmt.Sprintf("user %q (groups=%q) is attempting to grant RBAC permissions not currently held:\n%s", user.Name, user.Groups, strings.Join(sets.List(descriptions), "\n"))
	if resolveErr != nil {
		msg += fmt.Sprintf("; resolution errors: %v", []error{resolveErr})
	}
	return errors.New(msg)
}

// onlyGCFields is kube's IsOnlyMutatingGCFields: a write that changes only
// owner references and finalizers is no grant.
func onlyGCFields(obj, old registry.Object) bool {
	c := obj.DeepCopyObject().(registry.Object)
	c.SetOwnerReferences(old.GetOwnerReferences())
	c.SetFinalizers(old.GetFinalizers())
	c.SetManagedFields(old.GetManagedFields())
	c.SetResourceVersion(old.GetResourceVersion())
	return apiequality.Semantic.DeepEqual(c, old)
}

// CompactRules is kube's: rules of one API group, one resource and at most
// one name, differing only in their verbs, become one rule.
func CompactRules(rules []rbacv1.PolicyRule) []rbacv1.PolicyRule {
	type simple struct {
		group, resource string
		named           bool
		name            string
	}
	var out []rbacv1.PolicyRule
	merged := map[simple]*rbacv1.PolicyRule{}
	var order []simple
	for _, r := range rules {
		if len(r.ResourceNames) > 1 || len(r.NonResourceURLs) > 0 || len(r.APIGroups) != 1 || len(r.Resources) != 1 {
			out = append(out, r)
			continue
		}
		k := simple{group: r.APIGroups[0], resource: r.Resources[0], named: len(r.ResourceNames) == 1}
		if k.named {
			k.name = r.ResourceNames[0]
		}
		if m, ok := merged[k]; ok {
			for _, v := range r.Verbs {
				if !slices.Contains(m.Verbs, v) {
					m.Verbs = append(m.Verbs, v)
				}
			}
			continue
		}
		merged[k] = r.DeepCopy()
		order = append(order, k)
	}
	for _, k := range order {
		out = append(out, *merged[k])
	}
	return out
}

// CompactString is kube's rbacv1helpers.CompactString, the form of the
// escalation message: {APIGroups:[""], Resources:["secrets"], Verbs:["get"]}.
func CompactString(r rbacv1.PolicyRule) string {
	var parts []string
	for _, f := range []struct {
		name string
		v    []string
	}{
		{"APIGroups", r.APIGroups}, {"Resources", r.Resources}, {"NonResourceURLs", r.NonResourceURLs},
		{"ResourceNames", r.ResourceNames}, {"Verbs", r.Verbs},
	} {
		if len(f.v) > 0 {
			parts = append(parts, fmt.Sprintf("%s:%q", f.name, f.v))
		}
	}
	return "{" + strings.Join(parts, ", ") + "}"
}
