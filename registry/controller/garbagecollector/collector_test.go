package garbagecollector

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/concord-dev/concord/etcdstore"
	"github.com/concord-dev/concord/etcdstore/etcdtest"
	"github.com/concord-dev/concord/internal/syncbuf"
	"github.com/concord-dev/concord/registry"
)

// fixture is a catalog of the built-in stores over a real embedded etcd,
// and a collector running over it.
type fixture struct {
	storage    registry.Storage
	catalog    *registry.Catalog
	configMaps *registry.Store
	namespaces *registry.Store
	log        *syncbuf.Buffer
}

func newFixture(t testing.TB, wrap func(registry.Storage) registry.Storage) *fixture {
	t.Helper()
	e := etcdtest.Start(t)
	var storage registry.Storage = etcdstore.New(e.Client, "/registry")
	if wrap != nil {
		storage = wrap(storage)
	}
	stores := registry.NewStores(storage, registry.DefaultWatchConfig())
	f := &fixture{storage: storage, catalog: registry.NewCatalog(stores), log: &syncbuf.Buffer{}}
	f.configMaps, _ = f.catalog.Lookup("", "v1", "configmaps")
	f.namespaces, _ = f.catalog.Lookup("", "v1", "namespaces")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := registry.EnsureSystemNamespaces(ctx, stores); err != nil {
		t.Fatalf("system namespaces: %v", err)
	}
	t.Cleanup(func() {
		for _, s := range f.catalog.Stores() {
			s.StopWatches()
		}
	})
	return f
}

// run runs a collector until the test ends.
func (f *fixture) run(t testing.TB) { f.runWith(t, nil) }

// runWith runs a collector, set up by setup first, until the test ends.
func (f *fixture) runWith(t testing.TB, setup func(*Collector)) {
	t.Helper()
	c := New(f.catalog, Config{}, slog.New(slog.NewTextHandler(f.log, nil)))
	if setup != nil {
		setup(c)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		c.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})
}

func ctxFor(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// ref is a reference to obj of kind (a ConfigMap unless said otherwise).
func ref(obj metav1.Object, block bool) metav1.OwnerReference {
	apiVersion, kind := "v1", "ConfigMap"
	if u, ok := obj.(*unstructured.Unstructured); ok {
		apiVersion, kind = u.GetAPIVersion(), u.GetKind()
	}
	return metav1.OwnerReference{APIVersion: apiVersion, Kind: kind, Name: obj.GetName(), UID: obj.GetUID(), BlockOwnerDeletion: &block}
}

// configMap creates a ConfigMap in default with owners.
func (f *fixture) configMap(t testing.TB, name string, owners ...metav1.OwnerReference) *corev1.ConfigMap {
	t.Helper()
	obj, err := f.configMaps.Create(ctxFor(t), "default", &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, OwnerReferences: owners}}, registry.WriteOptions{})
	if err != nil {
		t.Fatalf("create ConfigMap %s: %v", name, err)
	}
	return obj.(*corev1.ConfigMap)
}

func (f *fixture) delete(t testing.TB, store *registry.Store, namespace, name string, policy metav1.DeletionPropagation) {
	t.Helper()
	opts := &metav1.DeleteOptions{}
	if policy != "" {
		opts.PropagationPolicy = &policy
	}
	if _, err := store.Delete(ctxFor(t), namespace, name, opts, registry.WriteOptions{}); err != nil {
		t.Fatalf("delete %s: %v", name, err)
	}
}

// get reads name from etcd; nil when it is gone.
func get(t testing.TB, store *registry.Store, namespace, name string) registry.Object {
	t.Helper()
	obj, err := store.GetFromStorage(ctxFor(t), namespace, name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatalf("get %s: %v", name, err)
	}
	return obj
}

// eventually polls cond for up to 15s.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within 15s: %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (f *fixture) gone(t testing.TB, store *registry.Store, namespace string, names ...string) {
	t.Helper()
	for _, name := range names {
		eventually(t, name+" deleted", func() bool { return get(t, store, namespace, name) == nil })
	}
}

// TestBackground: an owner deleted (Background, the default) takes its
// dependents and theirs with it; an unrelated object stays.
func TestBackground(t *testing.T) {
	f := newFixture(t, nil)
	f.run(t)
	owner := f.configMap(t, "owner")
	child := f.configMap(t, "child", ref(owner, false))
	f.configMap(t, "grandchild", ref(child, true))
	f.configMap(t, "child2", ref(owner, true))
	f.configMap(t, "unrelated")
	f.delete(t, f.configMaps, "default", "owner", "")
	f.gone(t, f.configMaps, "default", "owner", "child", "child2", "grandchild")
	if get(t, f.configMaps, "default", "unrelated") == nil {
		t.Error("the unrelated ConfigMap was deleted")
	}
}

// TestAlreadyGone: dependents whose owner was deleted before the collector
// started are collected from its initial view; those of a live owner stay.
func TestAlreadyGone(t *testing.T) {
	f := newFixture(t, nil)
	owner := f.configMap(t, "owner")
	alive := f.configMap(t, "alive")
	f.configMap(t, "orphaned", ref(owner, false))
	f.configMap(t, "kept", ref(alive, false))
	f.delete(t, f.configMaps, "default", "owner", "")
	f.run(t)
	f.gone(t, f.configMaps, "default", "orphaned")
	if get(t, f.configMaps, "default", "kept") == nil {
		t.Error("the dependent of a live owner was deleted")
	}
}

// TestForeground: the owner is marked and stays until every dependent with
// blockOwnerDeletion is gone; then its finalizer goes and it is deleted. A
// dependent that owns others is deleted in the foreground itself, after it
// stops blocking the owner (as kube's collector does, so that chains do not
// deadlock).
func TestForeground(t *testing.T) {
	f := newFixture(t, nil)
	f.run(t)
	owner := f.configMap(t, "owner")
	f.configMap(t, "nonblocking", ref(owner, false))
	middle := f.configMap(t, "middle", ref(owner, true))
	f.configMap(t, "grandchild", ref(middle, true))
	// held, blocking, keeps the owner's deletion waiting.
	if _, err := f.configMaps.Create(ctxFor(t), "default", &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
		Name: "held", OwnerReferences: []metav1.OwnerReference{ref(owner, true)}, Finalizers: []string{"example.com/hold"},
	}}, registry.WriteOptions{}); err != nil {
		t.Fatalf("create held: %v", err)
	}
	f.delete(t, f.configMaps, "default", "owner", metav1.DeletePropagationForeground)
	f.gone(t, f.configMaps, "default", "nonblocking", "grandchild", "middle")
	eventually(t, "held marked for deletion", func() bool {
		obj := get(t, f.configMaps, "default", "held")
		return obj != nil && obj.GetDeletionTimestamp() != nil
	})
	if obj := get(t, f.configMaps, "default", "owner"); obj == nil || obj.GetDeletionTimestamp() == nil {
		t.Fatalf("owner: %v; want it kept, being deleted, while held blocks it", obj)
	}
	// The last finalizer of held goes: then the owner.
	h := get(t, f.configMaps, "default", "held").(*corev1.ConfigMap)
	h.Finalizers = nil
	if _, _, err := f.configMaps.Update(ctxFor(t), "default", "held", h, registry.WriteOptions{}); err != nil {
		t.Fatalf("release held: %v", err)
	}
	f.gone(t, f.configMaps, "default", "held", "owner")
}

// TestOrphan: the owner goes, its dependents stay without the reference to
// it (other references kept).
func TestOrphan(t *testing.T) {
	f := newFixture(t, nil)
	f.run(t)
	owner := f.configMap(t, "owner")
	other := f.configMap(t, "other")
	f.configMap(t, "a", ref(owner, true))
	f.configMap(t, "b", ref(owner, false), ref(other, false))
	f.delete(t, f.configMaps, "default", "owner", metav1.DeletePropagationOrphan)
	f.gone(t, f.configMaps, "default", "owner")
	for name, want := range map[string]int{"a": 0, "b": 1} {
		obj := get(t, f.configMaps, "default", name)
		if obj == nil {
			t.Fatalf("%s was deleted; want it orphaned", name)
		}
		if refs := obj.GetOwnerReferences(); len(refs) != want || (want == 1 && refs[0].UID != other.UID) {
			t.Errorf("%s's ownerReferences %v; want %d, not naming the owner", name, refs, want)
		}
	}
}

// TestMultipleOwners: a dependent with an owner alive loses only the
// reference to the one gone; once the last owner goes, it goes.
func TestMultipleOwners(t *testing.T) {
	f := newFixture(t, nil)
	f.run(t)
	first, second := f.configMap(t, "first"), f.configMap(t, "second")
	f.configMap(t, "shared", ref(first, false), ref(second, true))
	f.delete(t, f.configMaps, "default", "first", "")
	eventually(t, "the reference to first removed", func() bool {
		obj := get(t, f.configMaps, "default", "shared")
		return obj != nil && len(obj.GetOwnerReferences()) == 1 && obj.GetOwnerReferences()[0].UID == second.UID
	})
	f.delete(t, f.configMaps, "default", "second", "")
	f.gone(t, f.configMaps, "default", "shared")
}

// TestReadoptionRace: dependents re-owned by a live owner while their old
// owner's deletion is collected are never deleted: the collector's delete
// is guarded by the resourceVersion it decided on. Those it reached first
// are gone (the re-owning update then finds nothing).
func TestReadoptionRace(t *testing.T) {
	f := newFixture(t, nil)
	f.run(t)
	old, adopter := f.configMap(t, "old"), f.configMap(t, "adopter")
	const n = 40
	for i := range n {
		f.configMap(t, fmt.Sprintf("dep%d", i), ref(old, false))
	}
	f.delete(t, f.configMaps, "default", "old", "")
	adopted := map[string]bool{}
	for i := range n {
		name := fmt.Sprintf("dep%d", i)
		for attempt := 0; ; attempt++ {
			obj := get(t, f.configMaps, "default", name)
			if obj == nil {
				break // collected first
			}
			obj.SetOwnerReferences([]metav1.OwnerReference{ref(adopter, false)})
			_, _, err := f.configMaps.Update(ctxFor(t), "default", name, obj, registry.WriteOptions{})
			if err == nil {
				adopted[name] = true
				break
			}
			if !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) || attempt == 10 {
				t.Fatalf("re-own %s: %v", name, err)
			}
		}
	}
	// Let the collector finish with the old owner: every dependent left
	// must be an adopted one, and every adopted one must be there.
	eventually(t, "only adopted dependents left", func() bool {
		for i := range n {
			name := fmt.Sprintf("dep%d", i)
			if (get(t, f.configMaps, "default", name) != nil) != adopted[name] {
				return false
			}
		}
		return true
	})
	time.Sleep(300 * time.Millisecond) // nothing more may happen to them
	for name := range adopted {
		if get(t, f.configMaps, "default", name) == nil {
			t.Errorf("%s was deleted after it was re-owned by a live owner", name)
		}
	}
	t.Logf("%d of %d dependents re-owned before the collector reached them", len(adopted), n)
}

// TestUnknownKind: a reference to a kind that is not served is left alone
// (logged once); once the kind is served (a custom resource) the
// reference is resolved, and the dependent of a Widget that does not exist
// is collected.
func TestUnknownKind(t *testing.T) {
	f := newFixture(t, nil)
	f.run(t)
	missing := metav1.OwnerReference{APIVersion: "example.com/v1", Kind: "Widget", Name: "w", UID: types.UID("00000000-0000-0000-0000-00000000000a")}
	f.configMap(t, "a", missing)
	f.configMap(t, "b", missing)
	owner := f.configMap(t, "owner")
	f.configMap(t, "dep", ref(owner, false))
	f.delete(t, f.configMaps, "default", "owner", "")
	f.gone(t, f.configMaps, "default", "dep") // the collector has worked past a and b
	for _, name := range []string{"a", "b"} {
		if get(t, f.configMaps, "default", name) == nil {
			t.Fatalf("%s, naming a kind not served, was deleted", name)
		}
	}
	if n := strings.Count(f.log.String(), "names a kind that is not served"); n != 1 {
		t.Errorf("logged the unknown kind %d times; want once:\n%s", n, f.log.String())
	}
	f.serveWidgets(t)
	f.gone(t, f.configMaps, "default", "a", "b")
}

const widgetCRD = `{"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition","metadata":{"name":"widgets.example.com"},
"spec":{"group":"example.com","scope":"Namespaced","names":{"plural":"widgets","singular":"widget","kind":"Widget","listKind":"WidgetList"},
"versions":[{"name":"v1","served":true,"storage":true,"schema":{"openAPIV3Schema":{"type":"object","x-kubernetes-preserve-unknown-fields":true}}}]}}`

// serveWidgets adds example.com/v1 widgets to the catalog, as a CRD does.
func (f *fixture) serveWidgets(t testing.TB) *registry.Store {
	t.Helper()
	var crd apiextensionsv1.CustomResourceDefinition
	if err := jsonUnmarshal(widgetCRD, &crd); err != nil {
		t.Fatal(err)
	}
	res, err := registry.CustomResource(&crd, "v1")
	if err != nil {
		t.Fatalf("custom resource: %v", err)
	}
	s := registry.NewStore(f.storage, res, registry.DefaultWatchConfig())
	if err := f.catalog.Add(s); err != nil {
		t.Fatalf("serve widgets: %v", err)
	}
	return s
}

func (f *fixture) widget(t testing.TB, widgets *registry.Store, name string, owners ...metav1.OwnerReference) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("example.com/v1")
	u.SetKind("Widget")
	u.SetName(name)
	u.SetOwnerReferences(owners)
	obj, err := widgets.Create(ctxFor(t), "default", u, registry.WriteOptions{})
	if err != nil {
		t.Fatalf("create widget %s: %v", name, err)
	}
	return obj.(*unstructured.Unstructured)
}

// TestCustomResources: custom resources served after the collector
// started are owners and dependents like any other object; a resource no
// longer served is no longer watched.
func TestCustomResources(t *testing.T) {
	f := newFixture(t, nil)
	f.run(t)
	widgets := f.serveWidgets(t)
	w := f.widget(t, widgets, "owner")
	f.configMap(t, "of-widget", ref(w, true))
	cm := f.configMap(t, "owner")
	f.widget(t, widgets, "of-configmap", ref(cm, false))
	f.widget(t, widgets, "unrelated")
	f.delete(t, widgets, "default", "owner", "")
	f.delete(t, f.configMaps, "default", "owner", metav1.DeletePropagationForeground)
	f.gone(t, f.configMaps, "default", "of-widget", "owner")
	f.gone(t, widgets, "default", "of-configmap")
	if get(t, widgets, "default", "unrelated") == nil {
		t.Error("the unrelated Widget was deleted")
	}
}

// TestClusterScopedDependentOfNamespacedOwner: a Namespace naming a
// ConfigMap as owner can never resolve: it is left alone, with kube's
// warning Event OwnerRefInvalidNamespace.
func TestClusterScopedDependentOfNamespacedOwner(t *testing.T) {
	f := newFixture(t, nil)
	f.run(t)
	gone := metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: "nothere", UID: types.UID("00000000-0000-0000-0000-00000000000b")}
	if _, err := f.namespaces.Create(ctxFor(t), "", &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "owned", OwnerReferences: []metav1.OwnerReference{gone}}}, registry.WriteOptions{}); err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	events, _ := f.catalog.Lookup("", "v1", "events")
	var found *corev1.Event
	eventually(t, "an OwnerRefInvalidNamespace Event", func() bool {
		list, err := events.List(ctxFor(t), metav1.NamespaceDefault, &metainternalversion.ListOptions{})
		if err != nil {
			t.Fatalf("list events: %v", err)
		}
		items, _ := meta.ExtractList(list)
		for _, item := range items {
			if ev := item.(*corev1.Event); ev.Reason == "OwnerRefInvalidNamespace" {
				found = ev
				return true
			}
		}
		return false
	})
	if found.Type != corev1.EventTypeWarning || found.InvolvedObject.Kind != "Namespace" || found.InvolvedObject.Name != "owned" ||
		!strings.Contains(found.Message, "does not exist in namespace") {
		t.Errorf("Event %+v; want a Warning about Namespace owned", found)
	}
	if get(t, f.namespaces, "", "owned") == nil {
		t.Error("the Namespace was deleted")
	}
}

func jsonUnmarshal(s string, v any) error {
	return json.NewDecoder(bytes.NewBufferString(s)).Decode(v)
}

// hookStorage runs beforeDelete (once per name it returns true for) before
// a delete reaches etcd.
type hookStorage struct {
	registry.Storage
	beforeDelete func(ctx context.Context, ref etcdstore.Ref)
}

func (h *hookStorage) Delete(ctx context.Context, ref etcdstore.Ref, revision int64, guards ...etcdstore.Guard) (int64, error) {
	if h.beforeDelete != nil {
		h.beforeDelete(ctx, ref)
	}
	return h.Storage.Delete(ctx, ref, revision, guards...)
}

// TestAdoptedBetweenCheckAndDelete: a dependent re-owned by a live owner
// after the collector found its owner gone, just before its delete
// reaches etcd, is not deleted: the delete is guarded by the version the
// collector decided on, fails, and the dependent is looked at again.
func TestAdoptedBetweenCheckAndDelete(t *testing.T) {
	hook := &hookStorage{}
	f := newFixture(t, func(s registry.Storage) registry.Storage { hook.Storage = s; return hook })
	f.run(t)
	old, adopter := f.configMap(t, "old"), f.configMap(t, "adopter")
	f.configMap(t, "racer", ref(old, false))
	var once sync.Once
	adopted := make(chan error, 1)
	hook.beforeDelete = func(ctx context.Context, r etcdstore.Ref) {
		if r.Name != "racer" {
			return
		}
		once.Do(func() {
			obj, err := f.configMaps.GetFromStorage(ctx, "default", "racer")
			if err == nil {
				obj.SetOwnerReferences([]metav1.OwnerReference{ref(adopter, false)})
				_, _, err = f.configMaps.Update(ctx, "default", "racer", obj, registry.WriteOptions{})
			}
			adopted <- err
		})
	}
	f.delete(t, f.configMaps, "default", "old", "")
	select {
	case err := <-adopted:
		if err != nil {
			t.Fatalf("re-own racer: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the collector never tried to delete racer")
	}
	// The owner's own delete went before; let the collector look again.
	time.Sleep(500 * time.Millisecond)
	obj := get(t, f.configMaps, "default", "racer")
	if obj == nil {
		t.Fatal("racer was deleted after it was re-owned by a live owner")
	}
	if refs := obj.GetOwnerReferences(); len(refs) != 1 || refs[0].UID != adopter.UID {
		t.Errorf("racer's owners %v; want the adopter", refs)
	}
}
