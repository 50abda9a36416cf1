package rbac

import (
	"fmt"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/concord-dev/concord/apiserver/filters"
	"github.com/concord-dev/concord/registry"
)

func role(ns, name string, rules ...rbacv1.PolicyRule) *rbacv1.Role {
	return &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Rules: rules}
}

func clusterRole(name string, rules ...rbacv1.PolicyRule) *rbacv1.ClusterRole {
	return &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}
}

func roleBinding(ns, name, kind, roleName string, subjects ...rbacv1.Subject) *rbacv1.RoleBinding {
	return &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Subjects: subjects,
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: kind, Name: roleName}}
}

func clusterRoleBinding(name, roleName string, subjects ...rbacv1.Subject) *rbacv1.ClusterRoleBinding {
	return &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name}, Subjects: subjects,
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: roleName}}
}

func user(name string) rbacv1.Subject {
	return rbacv1.Subject{Kind: "User", APIGroup: rbacv1.GroupName, Name: name}
}
func group(name string) rbacv1.Subject {
	return rbacv1.Subject{Kind: "Group", APIGroup: rbacv1.GroupName, Name: name}
}

// indexOf puts objects into an index as the view does.
func indexOf(objs ...registry.Object) *index {
	x := newIndex()
	for _, o := range objs {
		var plural string
		switch o.(type) {
		case *rbacv1.Role:
			plural = "roles"
		case *rbacv1.ClusterRole:
			plural = "clusterroles"
		case *rbacv1.RoleBinding:
			plural = "rolebindings"
		case *rbacv1.ClusterRoleBinding:
			plural = "clusterrolebindings"
		}
		key := plural + "/" + o.GetName()
		if o.GetNamespace() != "" {
			key = plural + "/" + o.GetNamespace() + "/" + o.GetName()
		}
		x.put(key, o)
	}
	return x
}

func res(u filters.UserInfo, verb, group, resource, sub, ns, name string) filters.Attributes {
	return filters.Attributes{User: u, Verb: verb, ResourceRequest: true, APIGroup: group, Resource: resource, Subresource: sub, Namespace: ns, Name: name}
}

// TestAuthorizerKubeExamples: the examples of kube's "Using RBAC
// Authorization" page, with kube's reasons.
func TestAuthorizerKubeExamples(t *testing.T) {
	x := indexOf(
		// pod-reader in default, bound to jane.
		role("default", "pod-reader", rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "watch", "list"}}),
		roleBinding("default", "read-pods", "Role", "pod-reader", user("jane")),
		// secret-reader, bound in development to dave; cluster-wide to the group manager.
		clusterRole("secret-reader", rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get", "watch", "list"}}),
		roleBinding("development", "read-secrets", "ClusterRole", "secret-reader", user("dave")),
		clusterRoleBinding("read-secrets-global", "secret-reader", group("manager")),
		// pods and their log subresource; one ConfigMap by name.
		role("default", "pod-and-pod-logs-reader", rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods", "pods/log"}, Verbs: []string{"get", "list"}}),
		role("default", "configmap-updater", rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: []string{"my-configmap"}, Verbs: []string{"update", "get"}}),
		roleBinding("default", "logs", "Role", "pod-and-pod-logs-reader", rbacv1.Subject{Kind: "ServiceAccount", Name: "logger"}),
		roleBinding("default", "cm", "Role", "configmap-updater", user("carol")),
		// /healthz and below; every status subresource.
		clusterRole("health", rbacv1.PolicyRule{NonResourceURLs: []string{"/healthz", "/healthz/*"}, Verbs: []string{"get", "post"}}),
		clusterRole("status", rbacv1.PolicyRule{APIGroups: []string{"*"}, Resources: []string{"*/status"}, Verbs: []string{"*"}}),
		clusterRoleBinding("health", "health", group("monitoring")),
		clusterRoleBinding("status", "status", rbacv1.Subject{Kind: "ServiceAccount", Name: "ctl", Namespace: "kube-system"}),
		// bindings to missing roles.
		roleBinding("default", "dangling", "Role", "gone", user("erin")),
		clusterRoleBinding("dangling", "nothing", user("erin")),
	)
	jane := filters.UserInfo{Name: "jane", Groups: []string{"system:authenticated"}}
	dave := filters.UserInfo{Name: "dave"}
	boss := filters.UserInfo{Name: "boss", Groups: []string{"manager"}}
	logger := filters.UserInfo{Name: "system:serviceaccount:default:logger", Groups: []string{"system:serviceaccounts", "system:serviceaccounts:default"}}
	otherLogger := filters.UserInfo{Name: "system:serviceaccount:team:logger"}
	ctl := filters.UserInfo{Name: "system:serviceaccount:kube-system:ctl"}
	carol := filters.UserInfo{Name: "carol"}
	mon := filters.UserInfo{Name: "prom", Groups: []string{"monitoring"}}
	erin := filters.UserInfo{Name: "erin"}
	for _, tc := range []struct {
		a      filters.Attributes
		want   filters.Decision
		reason string
	}{
		{res(jane, "get", "", "pods", "", "default", "web"), filters.Allow, `RBAC: allowed by RoleBinding "read-pods/default" of Role "pod-reader" to User "jane"`},
		{res(jane, "list", "", "pods", "", "default", ""), filters.Allow, `RBAC: allowed by RoleBinding "read-pods/default" of Role "pod-reader" to User "jane"`},
		{res(jane, "delete", "", "pods", "", "default", "web"), filters.NoOpinion, ""},
		{res(jane, "get", "", "pods", "", "team", "web"), filters.NoOpinion, ""},
		{res(jane, "list", "", "pods", "", "", ""), filters.NoOpinion, ""}, // all namespaces: only a cluster binding
		{res(jane, "get", "apps", "pods", "", "default", "web"), filters.NoOpinion, ""},
		{res(jane, "get", "", "pods", "log", "default", "web"), filters.NoOpinion, ""},
		{res(dave, "get", "", "secrets", "", "development", "db"), filters.Allow, `RBAC: allowed by RoleBinding "read-secrets/development" of ClusterRole "secret-reader" to User "dave"`},
		{res(dave, "get", "", "secrets", "", "default", "db"), filters.NoOpinion, ""},
		{res(boss, "list", "", "secrets", "", "", ""), filters.Allow, `RBAC: allowed by ClusterRoleBinding "read-secrets-global" of ClusterRole "secret-reader" to Group "manager"`},
		{res(logger, "get", "", "pods", "log", "default", "web"), filters.Allow, `RBAC: allowed by RoleBinding "logs/default" of Role "pod-and-pod-logs-reader" to ServiceAccount "logger/default"`},
		{res(otherLogger, "get", "", "pods", "log", "default", "web"), filters.NoOpinion, ""},
		{res(logger, "get", "", "pods", "exec", "default", "web"), filters.NoOpinion, ""},
		{res(ctl, "update", "apps", "deployments", "status", "team", "web"), filters.Allow, `RBAC: allowed by ClusterRoleBinding "status" of ClusterRole "status" to ServiceAccount "ctl/kube-system"`},
		{res(ctl, "update", "apps", "deployments", "", "team", "web"), filters.NoOpinion, ""},
		{res(ctl, "update", "apps", "deployments", "statusx", "team", "web"), filters.NoOpinion, ""},
		{res(carol, "update", "", "configmaps", "", "default", "my-configmap"), filters.Allow, `RBAC: allowed by RoleBinding "cm/default" of Role "configmap-updater" to User "carol"`},
		{res(carol, "update", "", "configmaps", "", "default", "other"), filters.NoOpinion, ""},
		{res(carol, "get", "", "configmaps", "", "default", ""), filters.NoOpinion, ""}, // a list has no name
		{filters.Attributes{User: mon, Verb: "get", Path: "/healthz"}, filters.Allow, `RBAC: allowed by ClusterRoleBinding "health" of ClusterRole "health" to Group "monitoring"`},
		{filters.Attributes{User: mon, Verb: "post", Path: "/healthz/etcd"}, filters.Allow, `RBAC: allowed by ClusterRoleBinding "health" of ClusterRole "health" to Group "monitoring"`},
		{filters.Attributes{User: mon, Verb: "get", Path: "/healthzz"}, filters.NoOpinion, ""},
		{filters.Attributes{User: mon, Verb: "delete", Path: "/healthz"}, filters.NoOpinion, ""},
		{res(erin, "get", "", "pods", "", "", "x"), filters.NoOpinion, `RBAC: clusterroles.rbac.authorization.k8s.io "nothing" not found`},
		{res(erin, "get", "", "pods", "", "default", "x"), filters.NoOpinion, `RBAC: [clusterroles.rbac.authorization.k8s.io "nothing" not found, roles.rbac.authorization.k8s.io "gone" not found]`},
	} {
		t.Run(fmt.Sprintf("%s %s %s/%s %s/%s%s", tc.a.User.Name, tc.a.Verb, tc.a.Resource, tc.a.Subresource, tc.a.Namespace, tc.a.Name, tc.a.Path), func(t *testing.T) {
			d, reason, err := x.decide(tc.a)
			if d != tc.want || reason != tc.reason || err != nil {
				t.Errorf("decide = %v, %q, %v; want %v, %q", d, reason, err, tc.want, tc.reason)
			}
		})
	}
}

// TestIndexUpdates: replacing and deleting bindings and roles updates the
// subject index; a binding whose role appears later grants from then on.
func TestIndexUpdates(t *testing.T) {
	x := indexOf(roleBinding("team", "b", "Role", "r", user("alice"), group("devs"), user("alice")))
	alice := filters.UserInfo{Name: "alice", Groups: []string{"devs"}}
	get := res(alice, "get", "", "configmaps", "", "team", "x")
	if d, reason, _ := x.decide(get); d != filters.NoOpinion || reason != `RBAC: roles.rbac.authorization.k8s.io "r" not found` {
		t.Fatalf("before the role: %v %q", d, reason)
	}
	x.put("roles/team/r", role("team", "r", rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get"}}))
	if d, reason, _ := x.decide(get); d != filters.Allow || reason != `RBAC: allowed by RoleBinding "b/team" of Role "r" to User "alice"` {
		t.Fatalf("with the role: %v %q", d, reason)
	}
	x.put("rolebindings/team/b", roleBinding("team", "b", "Role", "r", user("bob")))
	if d, _, _ := x.decide(get); d != filters.NoOpinion {
		t.Fatalf("after the binding moved to bob: %v", d)
	}
	x.remove("rolebindings/team/b")
	if len(x.namespaced) != 0 || len(x.bindings) != 0 {
		t.Fatalf("after the delete: index %v %v", x.namespaced, x.bindings)
	}
}
