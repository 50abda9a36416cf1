package rbac

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/component-helpers/auth/rbac/validation"

	"github.com/concord-dev/concord/registry"
)

// The label and annotation of kube's bootstrap policy: an object whose
// autoupdate annotation is "false" is left as its owner edited it.
const (
	bootstrapLabel      = "kubernetes.io/bootstrapping"
	autoUpdateKey       = rbacv1.AutoUpdateAnnotationKey
	aggregateToAdmin    = "rbac.authorization.k8s.io/aggregate-to-admin"
	aggregateToEdit     = "rbac.authorization.k8s.io/aggregate-to-edit"
	aggregateToView     = "rbac.authorization.k8s.io/aggregate-to-view"
	bootstrapFieldOwner = "kube-apiserver"
)

var (
	read  = []string{"get", "list", "watch"}
	write = []string{"create", "delete", "deletecollection", "patch", "update"}
	rw    = []string{"create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"}
)

func rule(verbs []string, group string, resources ...string) rbacv1.PolicyRule {
	return rbacv1.PolicyRule{Verbs: verbs, APIGroups: []string{group}, Resources: resources}
}

func urls(verbs []string, paths ...string) rbacv1.PolicyRule {
	return rbacv1.PolicyRule{Verbs: verbs, NonResourceURLs: paths}
}

func aggregated(label string) *rbacv1.AggregationRule {
	return &rbacv1.AggregationRule{ClusterRoleSelectors: []metav1.LabelSelector{{MatchLabels: map[string]string{label: "true"}}}}
}

// BootstrapClusterRoles are kube-apiserver 1.37's default ClusterRoles
// (plugin/pkg/auth/authorizer/rbac/bootstrappolicy) that concern what
// Concord serves or what clients ask of every cluster: the user-facing
// roles (cluster-admin; admin, edit and view, aggregated from the
// system:aggregate-to-* roles and from any ClusterRole labelled as they
// are) and the discovery roles every user is bound to. The controllers'
// and nodes' roles are left out: Concord runs no kubelets, schedulers or
// kube-controller-manager.
func BootstrapClusterRoles() []*rbacv1.ClusterRole {
	roles := []*rbacv1.ClusterRole{
		{ObjectMeta: metav1.ObjectMeta{Name: "cluster-admin"}, Rules: []rbacv1.PolicyRule{
			rule([]string{"*"}, "*", "*"),
			urls([]string{"*"}, "*"),
		}},
		{ObjectMeta: metav1.ObjectMeta{Name: "system:discovery"}, Rules: []rbacv1.PolicyRule{
			urls([]string{"get"}, "/livez", "/readyz", "/healthz", "/version", "/version/", "/openapi", "/openapi/*", "/api", "/api/*", "/apis", "/apis/*"),
		}},
		{ObjectMeta: metav1.ObjectMeta{Name: "system:monitoring"}, Rules: []rbacv1.PolicyRule{
			urls([]string{"get"}, "/metrics", "/metrics/slis", "/livez", "/readyz", "/healthz", "/livez/*", "/readyz/*", "/healthz/*"),
		}},
		{ObjectMeta: metav1.ObjectMeta{Name: "system:basic-user"}, Rules: []rbacv1.PolicyRule{
			rule([]string{"create"}, "authorization.k8s.io", "selfsubjectaccessreviews", "selfsubjectrulesreviews"),
			rule([]string{"create"}, "authentication.k8s.io", "selfsubjectreviews"),
		}},
		{ObjectMeta: metav1.ObjectMeta{Name: "system:public-info-viewer"}, Rules: []rbacv1.PolicyRule{
			urls([]string{"get"}, "/livez", "/readyz", "/healthz", "/version", "/version/"),
		}},
		{ObjectMeta: metav1.ObjectMeta{Name: "system:service-account-issuer-discovery"}, Rules: []rbacv1.PolicyRule{
			urls([]string{"get"}, "/.well-known/openid-configuration", "/.well-known/openid-configuration/", "/openid/v1/jwks", "/openid/v1/jwks/"),
		}},
		{ObjectMeta: metav1.ObjectMeta{Name: "admin"}, AggregationRule: aggregated(aggregateToAdmin)},
		{ObjectMeta: metav1.ObjectMeta{Name: "edit", Labels: map[string]string{aggregateToAdmin: "true"}}, AggregationRule: aggregated(aggregateToEdit)},
		{ObjectMeta: metav1.ObjectMeta{Name: "view", Labels: map[string]string{aggregateToEdit: "true"}}, AggregationRule: aggregated(aggregateToView)},
		{ObjectMeta: metav1.ObjectMeta{Name: "system:aggregate-to-admin", Labels: map[string]string{aggregateToAdmin: "true"}}, Rules: []rbacv1.PolicyRule{
			rule([]string{"create"}, "authorization.k8s.io", "localsubjectaccessreviews"),
			rule(rw, rbacv1.GroupName, "roles", "rolebindings"),
		}},
		{ObjectMeta: metav1.ObjectMeta{Name: "system:aggregate-to-edit", Labels: map[string]string{aggregateToEdit: "true"}}, Rules: []rbacv1.PolicyRule{
			rule([]string{"impersonate"}, "", "serviceaccounts"),
			rule(write, "", "pods", "pods/attach", "pods/proxy", "pods/exec", "pods/portforward"),
			rule([]string{"create"}, "", "pods/eviction"),
			rule(write, "", "replicationcontrollers", "replicationcontrollers/scale", "serviceaccounts", "services", "services/proxy", "persistentvolumeclaims", "configmaps", "secrets", "events"),
			rule([]string{"create"}, "", "serviceaccounts/token"),
			rule(write, "apps", "statefulsets", "statefulsets/scale", "daemonsets", "deployments", "deployments/scale", "deployments/rollback", "replicasets", "replicasets/scale"),
			rule(write, "autoscaling", "horizontalpodautoscalers"),
			rule(write, "batch", "jobs", "cronjobs"),
			rule(write, "extensions", "daemonsets", "deployments", "deployments/scale", "deployments/rollback", "ingresses", "replicasets", "replicasets/scale", "replicationcontrollers/scale", "networkpolicies"),
			rule(write, "policy", "poddisruptionbudgets"),
			rule(write, "networking.k8s.io", "networkpolicies", "ingresses"),
		}},
		{ObjectMeta: metav1.ObjectMeta{Name: "system:aggregate-to-view", Labels: map[string]string{aggregateToView: "true"}}, Rules: []rbacv1.PolicyRule{
			rule(read, "", "pods", "replicationcontrollers", "replicationcontrollers/scale", "serviceaccounts", "services", "services/status", "endpoints", "persistentvolumeclaims", "persistentvolumeclaims/status", "configmaps"),
			rule(read, "", "limitranges", "resourcequotas", "bindings", "events", "pods/status", "resourcequotas/status", "namespaces/status", "replicationcontrollers/status", "pods/log"),
			rule(read, "", "namespaces"),
			rule(read, "discovery.k8s.io", "endpointslices"),
			rule(read, "apps", "controllerrevisions", "statefulsets", "statefulsets/status", "statefulsets/scale", "daemonsets", "daemonsets/status", "deployments", "deployments/status", "deployments/scale", "replicasets", "replicasets/status", "replicasets/scale"),
			rule(read, "autoscaling", "horizontalpodautoscalers", "horizontalpodautoscalers/status"),
			rule(read, "batch", "jobs", "cronjobs", "cronjobs/status", "jobs/status"),
			rule(read, "extensions", "daemonsets", "daemonsets/status", "deployments", "deployments/scale", "deployments/status", "ingresses", "ingresses/status", "replicasets", "replicasets/scale", "replicasets/status", "replicationcontrollers/scale", "networkpolicies"),
			rule(read, "policy", "poddisruptionbudgets", "poddisruptionbudgets/status"),
			rule(read, "networking.k8s.io", "networkpolicies", "ingresses", "ingresses/status"),
		}},
	}
	for _, r := range roles {
		r.Labels = maps.Clone(r.Labels)
		if r.Labels == nil {
			r.Labels = map[string]string{}
		}
		r.Labels[bootstrapLabel] = "rbac-defaults"
		r.Annotations = map[string]string{autoUpdateKey: "true"}
	}
	return roles
}

// BootstrapClusterRoleBindings are kube's default bindings of those roles.
func BootstrapClusterRoleBindings() []*rbacv1.ClusterRoleBinding {
	bind := func(role string, groups ...string) *rbacv1.ClusterRoleBinding {
		b := &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: role, Labels: map[string]string{bootstrapLabel: "rbac-defaults"}, Annotations: map[string]string{autoUpdateKey: "true"}},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
		}
		for _, g := range groups {
			b.Subjects = append(b.Subjects, rbacv1.Subject{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: g})
		}
		return b
	}
	return []*rbacv1.ClusterRoleBinding{
		bind("cluster-admin", "system:masters"),
		bind("system:monitoring", "system:monitoring"),
		bind("system:discovery", "system:authenticated"),
		bind("system:basic-user", "system:authenticated"),
		bind("system:public-info-viewer", "system:authenticated", "system:unauthenticated"),
		bind("system:service-account-issuer-discovery", "system:serviceaccounts"),
	}
}

// Bootstrap reconciles the default roles and bindings as kube-apiserver's
// rbac/bootstrap-roles hook does, and may run on every replica at once: a
// missing one is created; an existing one gets the rules (and aggregation
// selectors, labels, annotations, subjects) it lacks, nothing of it is
// removed, and one annotated autoupdate "false" is left alone. A binding
// whose roleRef differs is deleted and created again (roleRef is
// immutable). Every write is guarded by the version it was computed from,
// so concurrent runs converge.
func Bootstrap(ctx context.Context, clusterRoles, clusterRoleBindings *registry.Store, log *slog.Logger) error {
	var errs []error
	for _, want := range BootstrapClusterRoles() {
		errs = append(errs, reconcile(ctx, clusterRoles, want, func(have registry.Object) bool {
			return reconcileRole(have.(*rbacv1.ClusterRole), want)
		}, log))
	}
	for _, want := range BootstrapClusterRoleBindings() {
		errs = append(errs, reconcile(ctx, clusterRoleBindings, want, func(have registry.Object) bool {
			return reconcileBinding(have.(*rbacv1.ClusterRoleBinding), want)
		}, log))
	}
	return errors.Join(errs...)
}

// reconcile creates want, or changes what is stored with merge (which
// reports whether it changed anything), retried on conflicts.
func reconcile(ctx context.Context, s *registry.Store, want registry.Object, merge func(have registry.Object) bool, log *slog.Logger) error {
	opts := registry.WriteOptions{FieldManager: bootstrapFieldOwner}
	for attempt := 0; attempt < 5; attempt++ {
		have, err := s.Get(ctx, "", want.GetName())
		if apierrors.IsNotFound(err) {
			_, err = s.Create(ctx, "", want.DeepCopyObject().(registry.Object), opts)
			if err == nil {
				log.Info("rbac: created a default object", "kind", s.Resource.Kind, "name", want.GetName())
				return nil
			}
			if apierrors.IsAlreadyExists(err) {
				continue
			}
			return fmt.Errorf("create %s %s: %w", s.Resource.Kind, want.GetName(), err)
		}
		if err != nil {
			return fmt.Errorf("read %s %s: %w", s.Resource.Kind, want.GetName(), err)
		}
		if have.GetAnnotations()[autoUpdateKey] == "false" {
			return nil
		}
		if !merge(have) {
			return nil
		}
		if b, ok := have.(*rbacv1.ClusterRoleBinding); ok && b.RoleRef != want.(*rbacv1.ClusterRoleBinding).RoleRef {
			// roleRef cannot change: delete (guarded by the version) and create.
			pre := &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &b.UID, ResourceVersion: &b.ResourceVersion}}
			if _, err := s.Delete(ctx, "", b.Name, pre, registry.WriteOptions{}); err != nil && !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
				return fmt.Errorf("recreate %s %s: %w", s.Resource.Kind, b.Name, err)
			}
			continue
		}
		_, _, err = s.Update(ctx, "", have.GetName(), have, opts)
		if apierrors.IsConflict(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("update %s %s: %w", s.Resource.Kind, want.GetName(), err)
		}
		log.Info("rbac: reconciled a default object", "kind", s.Resource.Kind, "name", want.GetName())
		return nil
	}
	return fmt.Errorf("reconcile %s %s: conflicts kept coming", s.Resource.Kind, want.GetName())
}

// mergeMeta adds want's labels and annotations that have lacks (have's
// values win, as kube's merge).
func mergeMeta(have, want metav1.Object) bool {
	changed := false
	for _, get := range []struct {
		from map[string]string
		get  func() map[string]string
		set  func(map[string]string)
	}{
		{want.GetLabels(), have.GetLabels, have.SetLabels},
		{want.GetAnnotations(), have.GetAnnotations, have.SetAnnotations},
	} {
		m := get.get()
		for k, v := range get.from {
			if _, ok := m[k]; !ok {
				if m == nil {
					m = map[string]string{}
				}
				m[k], changed = v, true
			}
		}
		get.set(m)
	}
	return changed
}

// reconcileRole is kube's computeReconciledRole without removing extras.
func reconcileRole(have, want *rbacv1.ClusterRole) bool {
	changed := mergeMeta(have, want)
	if covers, missing := validation.Covers(have.Rules, want.Rules); !covers {
		have.Rules, changed = append(have.Rules, missing...), true
	}
	if want.AggregationRule != nil {
		if have.AggregationRule == nil {
			have.AggregationRule = &rbacv1.AggregationRule{}
		}
		for _, sel := range want.AggregationRule.ClusterRoleSelectors {
			if !slices.ContainsFunc(have.AggregationRule.ClusterRoleSelectors, func(s metav1.LabelSelector) bool { return equalSelector(s, sel) }) {
				have.AggregationRule.ClusterRoleSelectors, changed = append(have.AggregationRule.ClusterRoleSelectors, sel), true
			}
		}
	}
	return changed
}

func equalSelector(a, b metav1.LabelSelector) bool {
	return maps.Equal(a.MatchLabels, b.MatchLabels) && slices.EqualFunc(a.MatchExpressions, b.MatchExpressions, func(x, y metav1.LabelSelectorRequirement) bool {
		return x.Key == y.Key && x.Operator == y.Operator && slices.Equal(x.Values, y.Values)
	})
}

// reconcileBinding is kube's computeReconciledRoleBinding without removing
// extra subjects; a different roleRef is reported as a change.
func reconcileBinding(have, want *rbacv1.ClusterRoleBinding) bool {
	changed := mergeMeta(have, want)
	for _, s := range want.Subjects {
		if !slices.Contains(have.Subjects, s) {
			have.Subjects, changed = append(have.Subjects, s), true
		}
	}
	return changed || have.RoleRef != want.RoleRef
}
