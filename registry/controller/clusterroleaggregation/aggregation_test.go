package clusterroleaggregation

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/concord-dev/concord/etcdstore"
	"github.com/concord-dev/concord/etcdstore/etcdtest"
	"github.com/concord-dev/concord/registry"
)

// clusterRoles is the ClusterRole store over e.
func clusterRoles(t *testing.T, e *etcdtest.Etcd) *registry.Store {
	t.Helper()
	var roles *registry.Store
	for _, s := range registry.NewStores(etcdstore.New(e.Client, "/registry"), registry.DefaultWatchConfig()) {
		t.Cleanup(s.StopWatches)
		if s.Resource == registry.ClusterRoles {
			roles = s
		}
	}
	return roles
}

func clusterRole(name string, rules ...rbacv1.PolicyRule) *rbacv1.ClusterRole {
	return &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}
}

// TestAggregatorController: the controller over real etcd keeps an
// aggregated ClusterRole's rules those of the roles its selectors match, as
// kube's: replaced, not merged (its own rules, and a user's edit of them,
// go), selector by selector, the matched roles in name order, each rule
// once, the role itself left out — after a matched role changes, a role is
// labelled, or one is deleted.
func TestAggregatorController(t *testing.T) {
	e := etcdtest.Start(t)
	roles := clusterRoles(t, e)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	go NewAggregator(roles, slog.New(slog.NewTextHandler(io.Discard, nil))).Run(ctx)

	rule := func(verb string) rbacv1.PolicyRule {
		return rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{verb}}
	}
	r1, r2, r3, r4, r5 := rule("get"), rule("list"), rule("watch"), rule("create"), rule("delete")
	labelled := func(name string, labels map[string]string, rules ...rbacv1.PolicyRule) *rbacv1.ClusterRole {
		r := clusterRole(name, rules...)
		r.Labels = labels
		return r
	}
	x, y := map[string]string{"x": "true"}, map[string]string{"y": "true"}
	agg := labelled("agg", x, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"*"}})
	agg.AggregationRule = &rbacv1.AggregationRule{ClusterRoleSelectors: []metav1.LabelSelector{{MatchLabels: x}, {MatchLabels: y}}}
	for _, r := range []*rbacv1.ClusterRole{
		labelled("b-role", x, r2, r1), labelled("a-role", x, r1), labelled("c-role", y, r3, r1), labelled("z-other", nil, r4), agg,
	} {
		if _, err := roles.Create(ctx, "", r, registry.WriteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// The controller works in the background: its result is awaited.
	wantRules := func(when string, want ...rbacv1.PolicyRule) {
		t.Helper()
		var got []rbacv1.PolicyRule
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			obj, err := roles.Get(ctx, "", "agg")
			if err != nil {
				t.Fatal(err)
			}
			if got = obj.(*rbacv1.ClusterRole).Rules; equality.Semantic.DeepEqual(got, want) {
				return
			}
		}
		t.Fatalf("%s: agg's rules %v; want %v", when, got, want)
	}
	edit := func(name string, f func(*rbacv1.ClusterRole)) {
		t.Helper()
		obj, err := roles.Get(ctx, "", name)
		if err != nil {
			t.Fatal(err)
		}
		r := obj.(*rbacv1.ClusterRole)
		f(r)
		if _, _, err := roles.Update(ctx, "", name, r, registry.WriteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	wantRules("at first", r1, r2, r3)
	edit("b-role", func(r *rbacv1.ClusterRole) { r.Rules = []rbacv1.PolicyRule{r5} })
	wantRules("after b-role changed", r1, r5, r3)
	edit("z-other", func(r *rbacv1.ClusterRole) { r.Labels = x })
	wantRules("after z-other was labelled", r1, r5, r4, r3)
	if _, err := roles.Delete(ctx, "", "a-role", nil, registry.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	wantRules("after a-role was deleted", r5, r4, r3, r1)
	edit("agg", func(r *rbacv1.ClusterRole) { r.Rules = []rbacv1.PolicyRule{r2} })
	wantRules("after a user edited agg's rules", r5, r4, r3, r1)
	edit("c-role", func(r *rbacv1.ClusterRole) { r.Labels = nil })
	wantRules("after c-role lost its label", r5, r4)
}

// TestAggregate: kube's order (roles by name, rules once), the role itself
// left out.
func TestAggregate(t *testing.T) {
	r1 := rbacv1.PolicyRule{Verbs: []string{"get"}, APIGroups: []string{""}, Resources: []string{"pods"}}
	r2 := rbacv1.PolicyRule{Verbs: []string{"list"}, APIGroups: []string{""}, Resources: []string{"pods"}}
	label := map[string]string{"rbac.authorization.k8s.io/aggregate-to-view": "true"}
	agg := &rbacv1.ClusterRole{AggregationRule: &rbacv1.AggregationRule{ClusterRoleSelectors: []metav1.LabelSelector{{MatchLabels: label}}}}
	agg.Name, agg.Labels = "view", label
	b := clusterRole("b", r2, r1)
	b.Labels = label
	a := clusterRole("a", r1)
	a.Labels = label
	other := clusterRole("c", rbacv1.PolicyRule{Verbs: []string{"*"}})
	got := Aggregate(agg, []*rbacv1.ClusterRole{a, agg, b, other})
	if !equality.Semantic.DeepEqual(got, []rbacv1.PolicyRule{r1, r2}) {
		t.Errorf("Aggregate = %+v; want [get pods, list pods]", got)
	}
}
