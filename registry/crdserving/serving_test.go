package crdserving

import (
	"context"
	"encoding/json"
	"errors"
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
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/concord-dev/concord/apiserver"
	"github.com/concord-dev/concord/etcdstore"
	"github.com/concord-dev/concord/etcdstore/etcdtest"
	"github.com/concord-dev/concord/registry"
)

const widgetsCRD = `
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.example.com}
spec:
  group: example.com
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              size: {type: string, maxLength: 10}
`

// fixture is a Server over a real etcd whose CRD watch does not run: the
// test decides when the replica applies a CRD change (apply).
type fixture struct {
	server  *Server
	crds    *registry.Store
	storage *countingStorage
	catalog *registry.Catalog
}

// countingStorage counts the writes etcd refused for a changed guard.
type countingStorage struct {
	registry.Storage
	mu             sync.Mutex
	guardsRefused  int
	writesAccepted int
	// onRefused, if set, runs (in a goroutine of its own) after the first
	// write etcd refused for a changed guard: the replica's catch-up that
	// write then waits for.
	onRefused func()
}

func (c *countingStorage) count(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case errors.Is(err, etcdstore.ErrGuardChanged):
		c.guardsRefused++
		if c.onRefused != nil {
			go c.onRefused()
			c.onRefused = nil
		}
	case err == nil:
		c.writesAccepted++
	}
}

func (c *countingStorage) Create(ctx context.Context, ref etcdstore.Ref, value []byte, guards ...etcdstore.Guard) (int64, error) {
	rev, err := c.Storage.Create(ctx, ref, value, guards...)
	c.count(err)
	return rev, err
}

func (c *countingStorage) setOnRefused(f func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.onRefused = f
}

func (c *countingStorage) counts() (refused, accepted int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.guardsRefused, c.writesAccepted
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	e := etcdtest.Start(t)
	storage := etcdstore.New(e.Client, "/registry")
	catalog := registry.NewCatalog(registry.NewStores(storage, registry.DefaultWatchConfig()))
	t.Cleanup(func() {
		for _, s := range catalog.Stores() {
			s.StopWatches()
		}
	})
	gv := registry.CustomResourceDefinitions.GroupVersion
	crds, _ := catalog.Lookup(gv.Group, gv.Version, registry.CustomResourceDefinitions.Plural)
	namespaces, _ := catalog.Lookup("", "v1", "namespaces")
	if _, err := namespaces.Create(testCtx(t), "", &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ns"}}, registry.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	counting := &countingStorage{Storage: storage}
	newStore := func(storage registry.Storage, res *registry.Resource) *registry.Store {
		return registry.NewStore(storage, res, registry.DefaultWatchConfig(), registry.WithoutReadCache())
	}
	return &fixture{server: New(crds, catalog, counting, newStore, slog.New(slog.DiscardHandler)), crds: crds, storage: counting, catalog: catalog}
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// established creates the widgets CRD with its status set as crdstatus
// sets it, and returns it as stored.
func (f *fixture) established(t *testing.T) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.Unmarshal([]byte(widgetsCRD), crd); err != nil {
		t.Fatal(err)
	}
	obj, err := f.crds.Create(testCtx(t), "", crd, registry.WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	crd = obj.(*apiextensionsv1.CustomResourceDefinition)
	crd.Status.AcceptedNames = crd.Spec.Names
	crd.Status.Conditions = []apiextensionsv1.CustomResourceDefinitionCondition{
		{Type: apiextensionsv1.NamesAccepted, Status: apiextensionsv1.ConditionTrue, Reason: "NoConflicts", Message: "no conflicts found"},
		{Type: apiextensionsv1.Established, Status: apiextensionsv1.ConditionTrue, Reason: "InitialNamesAccepted", Message: "the initial names have been accepted"},
	}
	return f.updateStatus(t, crd)
}

func (f *fixture) updateStatus(t *testing.T, crd *apiextensionsv1.CustomResourceDefinition) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	obj, err := f.crds.UpdateStatus(testCtx(t), "", crd.Name, crd, registry.WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return obj.(*apiextensionsv1.CustomResourceDefinition)
}

// widgets is the store the catalog serves widgets with now.
func (f *fixture) widgets(t *testing.T) *registry.Store {
	t.Helper()
	s, ok := f.catalog.Lookup("example.com", "v1", "widgets")
	if !ok {
		t.Fatal("widgets are not served")
	}
	return s
}

func widget(name, size string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "example.com/v1", "kind": "Widget",
		"metadata": map[string]any{"name": name, "namespace": "ns"},
		"spec":     map[string]any{"size": size},
	}}
}

// TestWriteCheckedAgainstAStaleSchemaIsNotApplied: a replica that has not
// applied a schema change yet sends a write its old schema allows; etcd
// refuses it (the guard on the CRD's key), the replica answers 503 with
// Retry-After and nothing is stored; once it applied the change, the new
// schema decides.
func TestWriteCheckedAgainstAStaleSchemaIsNotApplied(t *testing.T) {
	f := newFixture(t)
	crd := f.established(t)
	f.server.apply(crd)
	old := f.widgets(t)
	if _, err := old.Create(testCtx(t), "ns", widget("before", "medium"), registry.WriteOptions{}); err != nil {
		t.Fatalf("create under the schema applied: %v", err)
	}

	// The schema changes in etcd (through another replica); this one has
	// not seen it.
	crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"].Properties["size"] = apiextensionsv1.JSONSchemaProps{Type: "string", MaxLength: ptr(int64(3))}
	obj, _, err := f.crds.Update(testCtx(t), "", crd.Name, crd, registry.WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	changedCRD := obj.(*apiextensionsv1.CustomResourceDefinition)
	// It applies the change while the refused write waits for it (a
	// timer could fire before the write took its view of the CRD).
	f.storage.setOnRefused(func() { f.server.apply(changedCRD) })
	_, err = old.Create(testCtx(t), "ns", widget("stale", "medium"), registry.WriteOptions{})
	var status *apierrors.StatusError
	if !errors.As(err, &status) || status.ErrStatus.Code != http.StatusServiceUnavailable || status.ErrStatus.Details == nil || status.ErrStatus.Details.RetryAfterSeconds != 1 ||
		!strings.Contains(status.ErrStatus.Message, "checked against generation 1 (it is now at generation 2); nothing was written") {
		t.Fatalf("write checked against the old schema = %v; want 503 with Retry-After 1 naming generations 1 and 2", err)
	}
	if _, err := old.Get(testCtx(t), "ns", "stale"); !apierrors.IsNotFound(err) {
		t.Fatalf("the refused write left %v; want nothing stored (404)", err)
	}
	if refused, _ := f.storage.counts(); refused != 1 {
		t.Errorf("etcd refused %d guarded writes; want 1 (the write was sent, guarded, once)", refused)
	}
	// The client's retry meets the new schema.
	_, err = f.widgets(t).Create(testCtx(t), "ns", widget("stale", "medium"), registry.WriteOptions{})
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.size: Too long: may not be more than 3 bytes") {
		t.Fatalf("retry under the new schema = %v; want 422 spec.size too long", err)
	}
	if _, err := f.widgets(t).Create(testCtx(t), "ns", widget("fits", "s"), registry.WriteOptions{}); err != nil {
		t.Fatalf("create the new schema allows: %v", err)
	}
}

// TestStatusChangeOfTheCRDDoesNotRefuseWrites: when only the CRD's status
// changed since the replica's view, the write whose guard failed is sent
// again under the view the replica then has, and lands once.
func TestStatusChangeOfTheCRDDoesNotRefuseWrites(t *testing.T) {
	f := newFixture(t)
	crd := f.established(t)
	f.server.apply(crd)
	store := f.widgets(t)
	crd.Status.Conditions = append(crd.Status.Conditions, apiextensionsv1.CustomResourceDefinitionCondition{Type: "Example", Status: apiextensionsv1.ConditionTrue, Reason: "Test", Message: "a condition"})
	statusChanged := f.updateStatus(t, crd)
	f.storage.setOnRefused(func() { f.server.apply(statusChanged) })
	if _, err := store.Create(testCtx(t), "ns", widget("w", "medium"), registry.WriteOptions{}); err != nil {
		t.Fatalf("create after a change of the CRD's status alone: %v", err)
	}
	if refused, accepted := f.storage.counts(); refused != 1 || accepted != 1 {
		t.Errorf("etcd refused %d guarded creates and applied %d; want 1 and 1", refused, accepted)
	}
	if _, err := store.Get(testCtx(t), "ns", "w"); err != nil {
		t.Errorf("the created widget: %v", err)
	}
}

// TestCreatesWhileTheCRDIsDeletedAreForbidden: once the replica has seen
// the CRD marked for deletion, creates are refused with kube's 403 without
// a request to etcd; updates still go (the cleanup and finalizers need them).
func TestCreatesWhileTheCRDIsDeletedAreForbidden(t *testing.T) {
	f := newFixture(t)
	crd := f.established(t)
	f.server.apply(crd)
	obj, err := f.widgets(t).Create(testCtx(t), "ns", widget("w", "medium"), registry.WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	now := metav1.Now()
	crd.DeletionTimestamp = &now
	f.server.apply(crd) // as the watch delivers the marked CRD
	_, err = f.widgets(t).Create(testCtx(t), "ns", widget("new", "medium"), registry.WriteOptions{})
	if !apierrors.IsForbidden(err) || err.Error() != `widgets.example.com is forbidden: create not allowed while custom resource definition is terminating` {
		t.Fatalf("create while the CRD is deleted = %v; want kube's 403", err)
	}
	if _, accepted := f.storage.counts(); accepted != 1 {
		t.Errorf("%d creates reached etcd; want 1 (the one before the deletion)", accepted)
	}
	w := obj.(*unstructured.Unstructured)
	w.Object["spec"] = map[string]any{"size": "small"}
	if _, _, err := f.widgets(t).Update(testCtx(t), "ns", "w", w, registry.WriteOptions{}); err != nil {
		t.Errorf("update while the CRD is deleted: %v", err)
	}
}

func ptr[T any](v T) *T { return &v }

// TestSyncedOnceTheStoredCRDsAreServed: Synced closes only after the
// catalog serves the resources of the CRDs stored when the replica started.
func TestSyncedOnceTheStoredCRDsAreServed(t *testing.T) {
	f := newFixture(t)
	f.established(t)
	select {
	case <-f.server.Synced():
		t.Fatal("Synced before the CRDs were watched")
	default:
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); f.server.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case <-f.server.Synced():
	case <-time.After(10 * time.Second):
		t.Fatal("not Synced 10s after Run")
	}
	if _, ok := f.catalog.Lookup("example.com", "v1", "widgets"); !ok {
		t.Error("Synced, but the stored CRD's widgets are not served")
	}
}

// TestWriteAfterTheCRDWasCreatedAgain: a write checked against a CRD that
// was since deleted and created again (same name and generation) is
// refused and says so.
func TestWriteAfterTheCRDWasCreatedAgain(t *testing.T) {
	f := newFixture(t)
	crd := f.established(t)
	f.server.apply(crd)
	old := f.widgets(t)
	// Deleted (its cleanup done) and created again, both through another
	// replica: this one has seen neither.
	if _, err := f.storage.Storage.Delete(testCtx(t), f.crds.Ref("", crd.Name), revisionOf(crd.ResourceVersion)); err != nil {
		t.Fatal(err)
	}
	again := f.established(t)
	f.storage.setOnRefused(func() { f.server.apply(again) })
	_, err := old.Create(testCtx(t), "ns", widget("w", "medium"), registry.WriteOptions{})
	var status *apierrors.StatusError
	if !errors.As(err, &status) || status.ErrStatus.Code != http.StatusServiceUnavailable || !strings.Contains(status.ErrStatus.Message, "(it was deleted and created again); nothing was written") {
		t.Fatalf("write checked against the CRD before it was created again = %v; want 503 saying so", err)
	}
}

// lostAnswerStorage applies every write and then loses etcd's answer, as a
// connection cut after the commit does.
type lostAnswerStorage struct {
	registry.Storage
	sent int
}

func (l *lostAnswerStorage) Update(ctx context.Context, ref etcdstore.Ref, value []byte, revision int64, guards ...etcdstore.Guard) (int64, error) {
	l.sent++
	if _, err := l.Storage.Update(ctx, ref, value, revision, guards...); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("update: %w: %w", etcdstore.ErrUnknownOutcome, context.DeadlineExceeded)
}

// TestGuardedWriteOfUnknownOutcomeIsNotSentAgain: a guarded write whose
// answer is lost is answered as of unknown outcome, once sent, never
// re-decided as refused (its guard or its revision now fail).
func TestGuardedWriteOfUnknownOutcomeIsNotSentAgain(t *testing.T) {
	f := newFixture(t)
	crd := f.established(t)
	f.server.apply(crd)
	obj, err := f.widgets(t).Create(testCtx(t), "ns", widget("w", "medium"), registry.WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	lost := &lostAnswerStorage{Storage: f.storage.Storage}
	g := &guardedStorage{Storage: lost, server: f.server, name: crd.Name, view: f.server.served[crd.Name].view}
	ref := etcdstore.Ref{Resource: "example.com/widgets", Namespace: "ns", Name: "w"}
	_, err = g.Update(testCtx(t), ref, []byte(`{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"w","namespace":"ns"}}`), revisionOf(obj.GetResourceVersion()))
	if !errors.Is(err, etcdstore.ErrUnknownOutcome) || errors.Is(err, etcdstore.ErrGuardChanged) || errors.Is(err, etcdstore.ErrConflict) || lost.sent != 1 {
		t.Errorf("guarded update whose answer was lost = %v after %d sends; want the unknown outcome after 1", err, lost.sent)
	}
}

// TestDeletedCRDIsNotFoundAtOnce: once a CRD's deletion is acknowledged,
// a request for its resource is kube's 404, through this replica at once
// (its stores stay in the catalog only for the open watches) and through a
// replica that has not seen the deletion yet (the CRD is read then).
func TestDeletedCRDIsNotFoundAtOnce(t *testing.T) {
	for _, tc := range []struct {
		name string
		// seen: this replica applied the deletion.
		seen bool
	}{
		{"replica that saw the deletion", true},
		{"replica that did not see it yet", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			crd := f.established(t)
			f.server.apply(crd)
			srv := httptest.NewServer(apiserver.New(apiserver.Config{Catalog: f.catalog, Logger: slog.New(slog.DiscardHandler)}))
			t.Cleanup(srv.Close)
			const path = "/apis/example.com/v1/namespaces/ns/widgets"
			if code, body := get(t, srv.URL+path); code != http.StatusOK {
				t.Fatalf("GET %s while the CRD is served: %d %s", path, code, body)
			}
			// Deleted through another replica (its objects first, none here).
			rev, err := f.storage.Storage.Delete(testCtx(t), f.crds.Ref("", crd.Name), revisionOf(crd.ResourceVersion))
			if err != nil {
				t.Fatal(err)
			}
			if tc.seen {
				f.server.remove(crd.Name, rev) // as the watch delivers the deletion
			}
			if _, ok := f.catalog.Lookup("example.com", "v1", "widgets"); !ok {
				t.Fatal("the catalog no longer holds the widgets' stores: the test would not show the check")
			}
			for _, p := range []string{path, path + "/w", "/apis/example.com/v1/widgets", "/apis/example.com/v1/watch/namespaces/ns/widgets?timeoutSeconds=1"} {
				code, body := get(t, srv.URL+p)
				want := `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"the server could not find the requested resource","reason":"NotFound","details":{},"code":404}`
				if code != http.StatusNotFound || strings.TrimSpace(body) != want {
					t.Errorf("GET %s after the CRD's deletion: %d %s; want kube's 404 %s", p, code, body, want)
				}
			}
			// A create asks etcd nothing before its guarded write, which
			// the guard refuses: 404, nothing stored.
			_, acceptedBefore := f.storage.counts()
			resp, err := http.Post(srv.URL+path, "application/json", strings.NewReader(`{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"late"}}`))
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			var status metav1.Status
			if err := json.Unmarshal(body, &status); err != nil || resp.StatusCode != http.StatusNotFound || status.Reason != metav1.StatusReasonNotFound {
				t.Errorf("POST %s after the CRD's deletion: %d %s; want 404 NotFound", path, resp.StatusCode, body)
			}
			if _, accepted := f.storage.counts(); accepted != acceptedBefore {
				t.Errorf("POST %s after the CRD's deletion stored %d objects; want none", path, accepted-acceptedBefore)
			}
		})
	}
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(testCtx(t), http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}
