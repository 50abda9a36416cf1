package rbac

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/concord-dev/concord/apiserver/filters"
	"github.com/concord-dev/concord/etcdstore"
	"github.com/concord-dev/concord/etcdstore/etcdtest"
	"github.com/concord-dev/concord/registry"
)

// testRequestTimeout is the replicas' --etcd-request-timeout here (5 s as
// run), short so that the test of an unreachable etcd is quick.
const testRequestTimeout = time.Second

// replica is what one Concord replica has of RBAC: its own etcd client,
// stores and view.
type replica struct {
	src  Source
	view *View
	// Namespaces is the replica's store of them: RoleBindings need one.
	Namespaces *registry.Store
	ConfigMaps *registry.Store
}

func startReplica(t *testing.T, e *etcdtest.Etcd) *replica {
	t.Helper()
	return startReplicaWith(t, e, nil, nil)
}

// startReplicaWith is startReplica with the stores' writes through wrap
// (under the fence; nil: none) and hold called before the view applies each
// watch response.
func startReplicaWith(t *testing.T, e *etcdtest.Etcd, wrap func(registry.Storage) registry.Storage, hold func()) *replica {
	t.Helper()
	client, err := clientv3.New(clientv3.Config{Endpoints: []string{e.Endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	storage := etcdstore.NewWithOptions(client, "/registry", etcdstore.Options{RequestTimeout: testRequestTimeout, Bump: registry.RBACBump()})
	var writes registry.Storage = storage
	if wrap != nil {
		writes = wrap(writes)
	}
	byRes := map[*registry.Resource]*registry.Store{}
	for _, s := range registry.NewStores(registry.FencedStorage(writes, filters.FenceOf), registry.DefaultWatchConfig()) {
		t.Cleanup(s.StopWatches)
		byRes[s.Resource] = s
	}
	src := Source{Storage: storage, Roles: byRes[registry.Roles], ClusterRoles: byRes[registry.ClusterRoles],
		RoleBindings: byRes[registry.RoleBindings], ClusterRoleBindings: byRes[registry.ClusterRoleBindings]}
	ctx, cancel := context.WithCancel(context.Background())
	view := NewView(src, slog.New(slog.NewTextHandler(io.Discard, nil)))
	view.hold = hold
	done := make(chan struct{})
	go func() { view.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return &replica{src: src, view: view, Namespaces: byRes[registry.Namespaces], ConfigMaps: byRes[registry.ConfigMaps]}
}

// TestViewFreshnessAcrossReplicas: a binding written through one replica's
// store is honoured by the other replica's authorizer at its very next
// decision, and its delete revoked as soon — no sleep, no retry. Each
// round is a new binding, so that a view one change behind fails it.
func TestViewFreshnessAcrossReplicas(t *testing.T) {
	e := etcdtest.Start(t)
	a, b := startReplica(t, e), startReplica(t, e)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := a.Namespaces.Create(ctx, "", &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team"}}, registry.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.src.ClusterRoles.Create(ctx, "", clusterRole("cm-reader",
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get"}}), registry.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	authzB := NewAuthorizer(b.view)
	for i := range 20 {
		// The writer alternates, so that each view sees its own writes and
		// the other's.
		writer, reader := a, NewAuthorizer(b.view)
		if i%2 == 1 {
			writer, reader = b, NewAuthorizer(a.view)
		}
		u := filters.UserInfo{Name: fmt.Sprintf("user-%d", i)}
		get := res(u, "get", "", "configmaps", "", "team", "x")
		if d, _, err := reader.Authorize(ctx, get); d != filters.NoOpinion || err != nil {
			t.Fatalf("round %d, before the grant: %v %v", i, d, err)
		}
		name := fmt.Sprintf("grant-%d", i)
		if _, err := writer.src.RoleBindings.Create(ctx, "team", roleBinding("team", name, "ClusterRole", "cm-reader", user(u.Name)), registry.WriteOptions{}); err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprintf(`RBAC: allowed by RoleBinding "%s/team" of ClusterRole "cm-reader" to User %q`, name, u.Name)
		if d, reason, err := reader.Authorize(ctx, get); d != filters.Allow || reason != want || err != nil {
			t.Fatalf("round %d, the decision right after the grant: %v %q %v; want Allow %q", i, d, reason, err, want)
		}
		if _, err := writer.src.RoleBindings.Delete(ctx, "team", name, nil, registry.WriteOptions{}); err != nil {
			t.Fatal(err)
		}
		if d, reason, err := reader.Authorize(ctx, get); d != filters.NoOpinion || reason != "" || err != nil {
			t.Fatalf("round %d, the decision right after the revoke: %v %q %v; want no opinion", i, d, reason, err)
		}
	}
	// Role edits count as soon: the rule taken away is refused at once.
	if _, err := a.src.ClusterRoles.Create(ctx, "", clusterRole("editable",
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"}}), registry.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.src.ClusterRoleBindings.Create(ctx, "", clusterRoleBinding("dave-edits", "editable", user("dave")), registry.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	getSecret := res(filters.UserInfo{Name: "dave"}, "get", "", "secrets", "", "team", "x")
	if d, _, err := authzB.Authorize(ctx, getSecret); d != filters.Allow || err != nil {
		t.Fatalf("dave reads a secret through the new ClusterRole: %v %v; want Allow", d, err)
	}
	obj, err := a.src.ClusterRoles.Get(ctx, "", "editable")
	if err != nil {
		t.Fatal(err)
	}
	edited := obj.(*rbacv1.ClusterRole)
	edited.Rules[0].Resources = []string{"configmaps"}
	if _, _, err := a.src.ClusterRoles.Update(ctx, "", "editable", edited, registry.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	if d, _, err := authzB.Authorize(ctx, getSecret); d != filters.NoOpinion || err != nil {
		t.Fatalf("dave reads a secret after the rule was edited away: %v %v; want no opinion", d, err)
	}
}

// TestViewWhenEtcdIsGone: the documented answer. A view that cannot
// confirm it is current (etcd unreachable) decides nothing: no opinion and
// an error that says so, once the etcd request times out — never the grant
// it last saw; the chain then asks the next authorizer, and system:masters
// is decided without RBAC.
func TestViewWhenEtcdIsGone(t *testing.T) {
	e := etcdtest.Start(t)
	r := startReplica(t, e)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := r.src.ClusterRoles.Create(ctx, "", clusterRole("cm-reader",
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get"}}), registry.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.src.ClusterRoleBindings.Create(ctx, "", clusterRoleBinding("alice-reads", "cm-reader", user("alice")), registry.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	authz := NewAuthorizer(r.view)
	get := res(filters.UserInfo{Name: "alice", Groups: []string{filters.AuthenticatedGroup}}, "get", "", "configmaps", "", "team", "x")
	if d, _, err := authz.Authorize(ctx, get); d != filters.Allow || err != nil {
		t.Fatalf("with etcd up: %v %v; want Allow", d, err)
	}

	e.Stop()
	start := time.Now()
	d, reason, err := authz.Authorize(ctx, get)
	took := time.Since(start)
	if d != filters.NoOpinion || reason != "" || !errors.Is(err, errNotCurrent) {
		t.Errorf("with etcd stopped: %v %q %v; want no opinion and %v", d, reason, err, errNotCurrent)
	}
	// Bounded by the etcd request timeout, not by the caller's deadline.
	if took > testRequestTimeout+awaitTimeout {
		t.Errorf("the decision took %v; want at most the etcd request timeout and the wait (%v)", took, testRequestTimeout+awaitTimeout)
	}
	rules, err := authz.RulesFor(ctx, get.User, "team")
	if rules != nil || !errors.Is(err, errNotCurrent) {
		t.Errorf("RulesFor with etcd stopped: %v %v; want none and %v", rules, err, errNotCurrent)
	}

	// In the chain: the next authorizer decides; the error is kept.
	chain := filters.Chain(authz, filters.NewPolicyAuthorizer(nil))
	discovery := filters.Attributes{User: get.User, Verb: "get", Path: "/version"}
	if d, _, err := chain.Authorize(ctx, discovery); d != filters.Allow || !errors.Is(err, errNotCurrent) {
		t.Errorf("chain, /version: %v %v; want Allow by the policy, with RBAC's error", d, err)
	}
	if d, _, err := chain.Authorize(ctx, get); d != filters.NoOpinion || !errors.Is(err, errNotCurrent) {
		t.Errorf("chain, the RBAC grant: %v %v; want no opinion with RBAC's error", d, err)
	}
	root := get
	root.User = filters.UserInfo{Name: "root", Groups: []string{filters.MastersGroup}}
	start = time.Now()
	if d, _, err := chain.Authorize(ctx, root); d != filters.Allow || err != nil || time.Since(start) > 100*time.Millisecond {
		t.Errorf("chain, system:masters: %v %v after %v; want Allow at once", d, err, time.Since(start))
	}
}
