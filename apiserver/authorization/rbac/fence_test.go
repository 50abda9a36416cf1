package rbac

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/concord-dev/concord/apiserver/filters"
	"github.com/concord-dev/concord/etcdstore"
	"github.com/concord-dev/concord/etcdstore/etcdtest"
	"github.com/concord-dev/concord/registry"
)

// gate holds a view back: while shut, the view applies no watch response.
type gate struct {
	mu   sync.Mutex
	shut chan struct{}
}

func (g *gate) hold() {
	g.mu.Lock()
	ch := g.shut
	g.mu.Unlock()
	if ch != nil {
		<-ch
	}
}

func (g *gate) close() {
	g.mu.Lock()
	g.shut = make(chan struct{})
	g.mu.Unlock()
}

func (g *gate) open() {
	g.mu.Lock()
	if g.shut != nil {
		close(g.shut)
		g.shut = nil
	}
	g.mu.Unlock()
}

// sendLog counts the creates sent to etcd and those refused; refused (if
// set) is called at each refusal, lose (if set) turns a create that landed
// into one whose answer was lost, after calling it.
type sendLog struct {
	registry.Storage
	mu             sync.Mutex
	sends, refusal int
	refused, lose  func()
}

func (l *sendLog) Create(ctx context.Context, ref etcdstore.Ref, value []byte, guards ...etcdstore.Guard) (int64, error) {
	rev, err := l.Storage.Create(ctx, ref, value, guards...)
	l.mu.Lock()
	l.sends++
	if err != nil {
		l.refusal++
	}
	refused, lose := l.refused, l.lose
	l.mu.Unlock()
	if err != nil && refused != nil {
		refused()
	}
	if err == nil && lose != nil && strings.HasPrefix(ref.Resource, "configmaps") {
		lose()
		return 0, fmt.Errorf("create: %w: %w", etcdstore.ErrUnknownOutcome, context.DeadlineExceeded)
	}
	return rev, err
}

func (l *sendLog) counts() (sends, refusals int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s, r := l.sends, l.refusal
	l.sends, l.refusal = 0, 0
	return s, r
}

type testRequests struct{}

func (testRequests) Parsed(*http.Request, *filters.Attributes) {}
func (testRequests) Refused(*http.Request, filters.Attributes) {}
func (testRequests) Logger(*http.Request) *slog.Logger {
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

func writeTestError(w http.ResponseWriter, _ *http.Request, err error) {
	code, msg := http.StatusInternalServerError, err.Error()
	if s, ok := err.(apierrors.APIStatus); ok {
		code, msg = int(s.Status().Code), s.Status().Message
	}
	w.WriteHeader(code)
	io.WriteString(w, msg)
}

// fencedFixture: replica a, where RBAC is written, and replica b, whose
// view is held back by gate and whose writes go through log, serving
// creates of ConfigMaps in "team" through the authorization filter.
type fencedFixture struct {
	a, b    *replica
	gate    *gate
	log     *sendLog
	handler http.Handler
	ctx     context.Context
}

func newFencedFixture(t *testing.T) *fencedFixture {
	e := etcdtest.Start(t)
	f := &fencedFixture{gate: &gate{}}
	f.a = startReplica(t, e)
	f.b = startReplicaWith(t, e, func(s registry.Storage) registry.Storage { f.log = &sendLog{Storage: s}; return f.log }, f.gate.hold)
	t.Cleanup(f.gate.open) // before b's view is stopped
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	f.ctx = ctx
	if _, err := f.a.Namespaces.Create(ctx, "", &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team"}}, registry.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.a.src.ClusterRoles.Create(ctx, "", clusterRole("cm-writer",
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"create"}}), registry.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	authn := &filters.Authentication{Tokens: map[string]filters.UserInfo{"alice": {Name: "alice"}, "bob": {Name: "bob"}}}
	create := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: r.URL.Query().Get("name")}}
		if _, err := f.b.ConfigMaps.Create(r.Context(), "team", cm, registry.WriteOptions{}); err != nil {
			writeTestError(w, r, err)
			return
		}
		w.WriteHeader(http.StatusCreated)
	})
	f.handler = filters.WithAuth(create, authn, filters.Chain(NewAuthorizer(f.b.view)), writeTestError, testRequests{})
	return f
}

// create sends user's create of the ConfigMap name to b.
func (f *fencedFixture) create(user, name string) (int, string) {
	r := httptest.NewRequest(http.MethodPost, "/api/v1/namespaces/team/configmaps?name="+name, nil).WithContext(f.ctx)
	r.Header.Set("Authorization", "Bearer "+user)
	w := httptest.NewRecorder()
	f.handler.ServeHTTP(w, r)
	return w.Code, w.Body.String()
}

// holdB waits until b's view is current, then holds it there.
func (f *fencedFixture) holdB(t *testing.T) {
	t.Helper()
	if err := f.b.view.await(f.ctx); err != nil {
		t.Fatal(err)
	}
	f.b.view.mu.RUnlock()
	f.gate.close()
	// b's view catches up once the write it let through was refused.
	f.log.mu.Lock()
	f.log.refused = f.gate.open
	f.log.mu.Unlock()
}

func (f *fencedFixture) stored(t *testing.T, name string) bool {
	t.Helper()
	_, err := f.a.ConfigMaps.Get(f.ctx, "team", name)
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	return err == nil
}

const aliceForbidden = `configmaps is forbidden: User "alice" cannot create resource "configmaps" in API group "" in the namespace "team"`

// TestFencedWriteAfterRevoke: a grant revoked through replica a (the
// binding deleted, or the role's rule taken away) and a create on replica b
// allowed by b's view, held back so that it has not seen the revoke: the
// create's transaction is refused by its guard, b decides again on a
// current view, and the create is answered 403, nothing stored, sent once.
// An answer other than a write (409 AlreadyExists) is decided again too.
func TestFencedWriteAfterRevoke(t *testing.T) {
	f := newFencedFixture(t)
	if _, err := f.a.src.ClusterRoleBindings.Create(f.ctx, "", clusterRoleBinding("alice-writes", "cm-writer", user("alice")), registry.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	if code, body := f.create("alice", "granted"); code != http.StatusCreated {
		t.Fatalf("create while granted: %d %s", code, body)
	}
	if sends, refused := f.log.counts(); sends != 1 || refused != 0 {
		t.Fatalf("create while granted: %d sends, %d refused; want 1, 0", sends, refused)
	}

	f.holdB(t)
	if _, err := f.a.src.ClusterRoleBindings.Delete(f.ctx, "", "alice-writes", nil, registry.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	code, body := f.create("alice", "after-revoke")
	if code != http.StatusForbidden || !strings.HasPrefix(body, aliceForbidden) {
		t.Errorf("create on a view behind a revoked binding: %d %q; want 403 %q", code, body, aliceForbidden)
	}
	if sends, refused := f.log.counts(); sends != 1 || refused != 1 {
		t.Errorf("create after the revoke: %d sends, %d refused; want 1 sent and refused by its guard", sends, refused)
	}
	if f.stored(t, "after-revoke") {
		t.Error("the create refused 403 was stored")
	}

	// A role's rule taken away is a revoke as well; and an answer that is
	// not a write (the object exists) is decided again before it is sent.
	if _, err := f.a.src.ClusterRoleBindings.Create(f.ctx, "", clusterRoleBinding("alice-writes", "cm-writer", user("alice")), registry.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	f.holdB(t)
	obj, err := f.a.src.ClusterRoles.Get(f.ctx, "", "cm-writer")
	if err != nil {
		t.Fatal(err)
	}
	role := obj.(*rbacv1.ClusterRole)
	role.Rules[0].Resources = []string{"secrets"}
	if _, _, err := f.a.src.ClusterRoles.Update(f.ctx, "", "cm-writer", role, registry.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"after-rule-removed", "granted"} {
		if code, body := f.create("alice", name); code != http.StatusForbidden || !strings.HasPrefix(body, aliceForbidden) {
			t.Errorf("create of %s on a view behind the rule's removal: %d %q; want 403 %q", name, code, body, aliceForbidden)
		}
		f.gate.open()
		f.holdB(t)
	}
	f.gate.open()
	if f.stored(t, "after-rule-removed") {
		t.Error("the create refused 403 was stored")
	}
}

// TestFencedWriteAfterUnrelatedChange: an RBAC change that does not touch
// the requester's grant fails the guard too; b decides again, still
// allowed, and sends the same create again under the new guard: 201, sent
// twice, the first refused.
func TestFencedWriteAfterUnrelatedChange(t *testing.T) {
	f := newFencedFixture(t)
	if _, err := f.a.src.ClusterRoleBindings.Create(f.ctx, "", clusterRoleBinding("alice-writes", "cm-writer", user("alice")), registry.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	f.holdB(t)
	if _, err := f.a.src.ClusterRoles.Create(f.ctx, "", clusterRole("unrelated",
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get"}}), registry.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	if code, body := f.create("alice", "x"); code != http.StatusCreated {
		t.Errorf("create after an unrelated RBAC change: %d %s; want 201", code, body)
	}
	if sends, refused := f.log.counts(); sends != 2 || refused != 1 {
		t.Errorf("create after an unrelated change: %d sends, %d refused; want 2 sends, the first refused", sends, refused)
	}
	if !f.stored(t, "x") {
		t.Error("the create answered 201 is not stored")
	}
}

// TestFencedWriteAfterGrant: a user not allowed waits for a current view,
// so a grant through a is honoured by b's very next decision.
func TestFencedWriteAfterGrant(t *testing.T) {
	f := newFencedFixture(t)
	if code, _ := f.create("bob", "before"); code != http.StatusForbidden {
		t.Fatalf("create before the grant: %d; want 403", code)
	}
	if _, err := f.a.src.RoleBindings.Create(f.ctx, "team", roleBinding("team", "bob-writes", "ClusterRole", "cm-writer", user("bob")), registry.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	if code, body := f.create("bob", "after"); code != http.StatusCreated {
		t.Errorf("create right after the grant: %d %s; want 201", code, body)
	}
}

// TestFencedWriteOfUnknownOutcomeIsNotSentAgain: a fenced create whose
// answer is lost, with the grant revoked meanwhile, stays of unknown
// outcome (504), sent once, never decided again into a 403.
func TestFencedWriteOfUnknownOutcomeIsNotSentAgain(t *testing.T) {
	f := newFencedFixture(t)
	if _, err := f.a.src.ClusterRoleBindings.Create(f.ctx, "", clusterRoleBinding("alice-writes", "cm-writer", user("alice")), registry.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	f.log.lose = func() {
		if _, err := f.a.src.ClusterRoleBindings.Delete(f.ctx, "", "alice-writes", nil, registry.WriteOptions{}); err != nil {
			t.Error(err)
		}
	}
	code, body := f.create("alice", "lost")
	if code != http.StatusGatewayTimeout {
		t.Errorf("create whose answer was lost: %d %q; want 504", code, body)
	}
	if sends, _ := f.log.counts(); sends != 1 {
		t.Errorf("create whose answer was lost was sent %d times; want 1", sends)
	}
}

// TestEveryRBACWriteBumpsTheGeneration: create, update, delete and
// DeleteCollection of each RBAC resource put the generation key in their
// transaction: its ModRevision is the write's revision.
func TestEveryRBACWriteBumpsTheGeneration(t *testing.T) {
	e := etcdtest.Start(t)
	r := startReplica(t, e)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	gen := func() int64 {
		resp, err := e.Client.Get(ctx, "/registry/"+registry.RBACStoragePrefix+"/generation")
		if err != nil || len(resp.Kvs) != 1 {
			t.Fatalf("generation key: %v %v", resp, err)
		}
		return resp.Kvs[0].ModRevision
	}
	current := func() int64 {
		resp, err := e.Client.Get(ctx, "/nothing")
		if err != nil {
			t.Fatal(err)
		}
		return resp.Header.Revision
	}
	if _, err := r.Namespaces.Create(ctx, "", &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team"}}, registry.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		store *registry.Store
		ns    string
		obj   func(name string) registry.Object
	}{
		{r.src.Roles, "team", func(n string) registry.Object {
			return &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: n, Namespace: "team"}}
		}},
		{r.src.ClusterRoles, "", func(n string) registry.Object { return clusterRole(n) }},
		{r.src.RoleBindings, "team", func(n string) registry.Object { return roleBinding("team", n, "ClusterRole", "x", user("u")) }},
		{r.src.ClusterRoleBindings, "", func(n string) registry.Object { return clusterRoleBinding(n, "x", user("u")) }},
	} {
		what := c.store.Resource.Plural
		obj, err := c.store.Create(ctx, c.ns, c.obj("a"), registry.WriteOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if rv := fmt.Sprint(gen()); rv != obj.(metav1.Object).GetResourceVersion() {
			t.Errorf("%s create at %s: generation at %s", what, obj.(metav1.Object).GetResourceVersion(), rv)
		}
		obj.(metav1.Object).SetLabels(map[string]string{"k": "v"})
		updated, _, err := c.store.Update(ctx, c.ns, "a", obj, registry.WriteOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if rv := fmt.Sprint(gen()); rv != updated.(metav1.Object).GetResourceVersion() {
			t.Errorf("%s update at %s: generation at %s", what, updated.(metav1.Object).GetResourceVersion(), rv)
		}
		if _, err := c.store.Delete(ctx, c.ns, "a", nil, registry.WriteOptions{}); err != nil {
			t.Fatal(err)
		}
		if g := gen(); g != current() {
			t.Errorf("%s delete: generation at %d, etcd at %d", what, g, current())
		}
		for _, n := range []string{"b", "c"} {
			if _, err := c.store.Create(ctx, c.ns, c.obj(n), registry.WriteOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		before := gen()
		if _, err := c.store.DeleteCollection(ctx, c.ns, &metainternalversion.ListOptions{}, nil, registry.WriteOptions{}); err != nil {
			t.Fatal(err)
		}
		if g := gen(); g == before || g != current() {
			t.Errorf("%s deletecollection: generation at %d (before %d), etcd at %d", what, g, before, current())
		}
	}
}
