package rbac

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"

	"github.com/concord-dev/concord/etcdstore"
	"github.com/concord-dev/concord/etcdstore/etcdtest"
	"github.com/concord-dev/concord/registry"
)

// TestBootstrapKeepsEdits: a second run restores what was taken from a
// default role and keeps what was added; autoupdate "false" is respected.
func TestBootstrapKeepsEdits(t *testing.T) {
	e := etcdtest.Start(t)
	byRes := map[*registry.Resource]*registry.Store{}
	for _, s := range registry.NewStores(etcdstore.New(e.Client, "/registry"), registry.DefaultWatchConfig()) {
		t.Cleanup(s.StopWatches)
		byRes[s.Resource] = s
	}
	roles, bindings := byRes[registry.ClusterRoles], byRes[registry.ClusterRoleBindings]
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if err := Bootstrap(ctx, roles, bindings, log); err != nil {
		t.Fatal(err)
	}
	extra := rbacv1.PolicyRule{Verbs: []string{"get"}, APIGroups: []string{""}, Resources: []string{"configmaps"}}
	edit := func(name string, f func(*rbacv1.ClusterRole)) {
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
	// basic-user loses a rule and gains one; public-info-viewer is the
	// owner's from now on.
	edit("system:basic-user", func(r *rbacv1.ClusterRole) { r.Rules = []rbacv1.PolicyRule{extra} })
	edit("system:public-info-viewer", func(r *rbacv1.ClusterRole) {
		r.Rules, r.Annotations[autoUpdateKey] = []rbacv1.PolicyRule{extra}, "false"
	})
	if _, err := bindings.Delete(ctx, "", "cluster-admin", nil, registry.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := Bootstrap(ctx, roles, bindings, log); err != nil {
		t.Fatal(err)
	}
	get := func(name string) *rbacv1.ClusterRole {
		obj, err := roles.Get(ctx, "", name)
		if err != nil {
			t.Fatal(err)
		}
		return obj.(*rbacv1.ClusterRole)
	}
	basic := get("system:basic-user")
	want := []rbacv1.PolicyRule{extra,
		{Verbs: []string{"create"}, APIGroups: []string{"authorization.k8s.io"}, Resources: []string{"selfsubjectaccessreviews"}},
		{Verbs: []string{"create"}, APIGroups: []string{"authorization.k8s.io"}, Resources: []string{"selfsubjectrulesreviews"}},
		{Verbs: []string{"create"}, APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"selfsubjectreviews"}},
	}
	if !equality.Semantic.DeepEqual(basic.Rules, want) {
		t.Errorf("system:basic-user after the second run: %+v; want the added rule kept and the defaults back: %+v", basic.Rules, want)
	}
	if r := get("system:public-info-viewer"); !equality.Semantic.DeepEqual(r.Rules, []rbacv1.PolicyRule{extra}) {
		t.Errorf("system:public-info-viewer (autoupdate false): %+v; want the owner's rules alone", r.Rules)
	}
	obj, err := bindings.Get(ctx, "", "cluster-admin")
	if err != nil {
		t.Fatalf("the deleted cluster-admin binding: %v; want it created again", err)
	}
	if b := obj.(*rbacv1.ClusterRoleBinding); len(b.Subjects) != 1 || b.Subjects[0].Name != "system:masters" {
		t.Errorf("cluster-admin binding: %+v", b.Subjects)
	}
}
