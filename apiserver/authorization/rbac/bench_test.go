package rbac

import (
	"fmt"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"

	"github.com/concord-dev/concord/apiserver/filters"
	"github.com/concord-dev/concord/registry"
)

// BenchmarkDecision: one decision among 1,000 RoleBindings (in 100
// namespaces, of 1,000 users and 50 groups) and 200 ClusterRoles of 10
// rules each, for a user with a binding in the namespace asked about and
// two group bindings, allowed by the last rule of its role; and one denied.
func BenchmarkDecision(b *testing.B) {
	var objs []registry.Object
	for i := range 200 {
		var rules []rbacv1.PolicyRule
		for j := range 10 {
			rules = append(rules, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{fmt.Sprintf("r%d", j)}, Verbs: []string{"get", "list"}})
		}
		objs = append(objs, clusterRole(fmt.Sprintf("role-%d", i), rules...))
	}
	for i := range 1000 {
		objs = append(objs, roleBinding(fmt.Sprintf("ns-%d", i%100), fmt.Sprintf("b-%d", i), "ClusterRole", fmt.Sprintf("role-%d", i%200),
			user(fmt.Sprintf("user-%d", i)), group(fmt.Sprintf("group-%d", i%50))))
	}
	x := indexOf(objs...)
	u := filters.UserInfo{Name: "user-7", Groups: []string{"group-7", "group-8", "system:authenticated"}}
	allowed := res(u, "list", "", "r9", "", "ns-7", "")
	denied := res(u, "delete", "", "r9", "", "ns-7", "x")
	if d, _, _ := x.decide(allowed); d != filters.Allow {
		b.Fatal("not allowed")
	}
	if d, _, _ := x.decide(denied); d != filters.NoOpinion {
		b.Fatal("allowed")
	}
	v := &View{idx: x}
	for _, bc := range []struct {
		name string
		a    filters.Attributes
	}{{"allowed", allowed}, {"denied", denied}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				v.mu.RLock()
				_, _, _ = v.idx.decide(bc.a)
				v.mu.RUnlock()
			}
		})
	}
}
