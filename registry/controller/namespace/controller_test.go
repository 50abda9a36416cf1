package namespace_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/concord-dev/concord/etcdstore"
	"github.com/concord-dev/concord/etcdstore/etcdtest"
	"github.com/concord-dev/concord/registry"
	"github.com/concord-dev/concord/registry/controller/garbagecollector"
	namespacecontroller "github.com/concord-dev/concord/registry/controller/namespace"
)

// fixture is a catalog of the built-in stores and example.com/v1 widgets
// (a custom resource, added as a CRD adds it) over a real embedded etcd,
// with the namespace controller and the garbage collector running.
type fixture struct {
	etcd       *clientv3.Client
	catalog    *registry.Catalog
	namespaces *registry.Store
	configMaps *registry.Store
	widgets    *registry.Store
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	e := etcdtest.Start(t)
	storage := etcdstore.New(e.Client, "/registry")
	stores := registry.NewStores(storage, registry.DefaultWatchConfig())
	f := &fixture{etcd: e.Client, catalog: registry.NewCatalog(stores)}
	f.namespaces, f.configMaps = f.store(t, "", "namespaces"), f.store(t, "", "configmaps")
	if err := registry.EnsureSystemNamespaces(ctxFor(t), stores); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, run := range []func(context.Context){
		namespacecontroller.New(f.namespaces, f.catalog, log).Run,
		garbagecollector.New(f.catalog, garbagecollector.Config{}, log).Run,
	} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			run(ctx)
		}()
	}
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		for _, s := range f.catalog.Stores() {
			s.StopWatches()
		}
	})
	// Served after the controller started, as a CRD established later is.
	var crd apiextensionsv1.CustomResourceDefinition
	if err := json.Unmarshal([]byte(widgetCRD), &crd); err != nil {
		t.Fatal(err)
	}
	res, err := registry.CustomResource(&crd, "v1")
	if err != nil {
		t.Fatal(err)
	}
	f.widgets = registry.NewStore(storage, res, registry.DefaultWatchConfig())
	if err := f.catalog.Add(f.widgets); err != nil {
		t.Fatal(err)
	}
	return f
}

const widgetCRD = `{"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition","metadata":{"name":"widgets.example.com"},
"spec":{"group":"example.com","scope":"Namespaced","names":{"plural":"widgets","singular":"widget","kind":"Widget","listKind":"WidgetList"},
"versions":[{"name":"v1","served":true,"storage":true,"schema":{"openAPIV3Schema":{"type":"object","x-kubernetes-preserve-unknown-fields":true}}}]}}`

func (f *fixture) store(t *testing.T, group, plural string) *registry.Store {
	t.Helper()
	for _, s := range f.catalog.Stores() {
		if s.Resource.GroupVersion.Group == group && s.Resource.Plural == plural && s.Resource.Storage == nil {
			return s
		}
	}
	t.Fatalf("no store of %s", plural)
	return nil
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// eventually waits (bounded) until cond holds.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// keys are the etcd keys under prefix.
func (f *fixture) keys(t *testing.T, prefix string) []string {
	t.Helper()
	resp, err := f.etcd.Get(ctxFor(t), prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, kv := range resp.Kvs {
		keys = append(keys, string(kv.Key))
	}
	return keys
}

// contentKeys are the keys of every object in namespace, whatever its
// resource.
func (f *fixture) contentKeys(t *testing.T, namespace string) []string {
	t.Helper()
	var in []string
	for _, key := range f.keys(t, "/registry/") {
		if strings.Contains(key, "/"+namespace+"/") {
			in = append(in, key)
		}
	}
	return in
}

func (f *fixture) createNamespace(t *testing.T, name string) {
	t.Helper()
	if _, err := f.namespaces.Create(ctxFor(t), "", &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, registry.WriteOptions{}); err != nil {
		t.Fatalf("create namespace %s: %v", name, err)
	}
}

// deleteNamespace deletes name and checks the answer is the namespace
// marked as being deleted, as kube answers it.
func (f *fixture) deleteNamespace(t *testing.T, name string) *corev1.Namespace {
	t.Helper()
	out, err := f.namespaces.Delete(ctxFor(t), "", name, &metav1.DeleteOptions{}, registry.WriteOptions{})
	if err != nil {
		t.Fatalf("delete namespace %s: %v", name, err)
	}
	ns, ok := out.(*corev1.Namespace)
	if !ok || ns.DeletionTimestamp == nil || ns.Status.Phase != corev1.NamespaceTerminating {
		t.Fatalf("delete namespace %s answered %#v; want the namespace, Terminating", name, out)
	}
	return ns
}

func (f *fixture) gone(t *testing.T, namespace string) {
	t.Helper()
	eventually(t, "namespace "+namespace+" gone", func() bool {
		_, err := f.namespaces.GetFromStorage(ctxFor(t), "", namespace)
		return apierrors.IsNotFound(err)
	})
}

func widget(name string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("example.com/v1")
	u.SetKind("Widget")
	u.SetName(name)
	return u
}

// TestDeletesContent: every kind of content of a deleted namespace is
// deleted through its store, custom resources included, then the
// namespace; its name can be used again.
func TestDeletesContent(t *testing.T) {
	f := newFixture(t)
	f.createNamespace(t, "team")
	owner, err := f.configMaps.Create(ctxFor(t), "team", &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "owner"}}, registry.WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	block := true
	ownerRef := metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: "owner", UID: owner.GetUID(), BlockOwnerDeletion: &block}
	content := []struct {
		name  string
		store *registry.Store
		obj   registry.Object
	}{
		{"a ConfigMap", f.configMaps, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "settings"}}},
		{"a ConfigMap owned by one in the namespace", f.configMaps, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "child", OwnerReferences: []metav1.OwnerReference{ownerRef}}}},
		{"a Secret", f.store(t, "", "secrets"), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "token"}}},
		{"an Event", f.store(t, "", "events"), &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "ev"}, InvolvedObject: corev1.ObjectReference{Kind: "ConfigMap", Namespace: "team", Name: "settings"}, Reason: "Test", Message: "m"}},
		{"a custom resource", f.widgets, widget("w")},
	}
	for _, c := range content {
		if _, err := c.store.Create(ctxFor(t), "team", c.obj, registry.WriteOptions{}); err != nil {
			t.Fatalf("create %s: %v", c.name, err)
		}
	}
	if n := len(f.contentKeys(t, "team")); n != len(content)+1 {
		t.Fatalf("%d keys in team; want %d", n, len(content)+1)
	}
	marked := f.deleteNamespace(t, "team")
	if len(marked.Spec.Finalizers) != 1 || marked.Spec.Finalizers[0] != corev1.FinalizerKubernetes {
		t.Errorf("spec.finalizers of the deleted namespace: %v; want [kubernetes]", marked.Spec.Finalizers)
	}
	f.gone(t, "team")
	if keys := f.contentKeys(t, "team"); len(keys) != 0 {
		t.Errorf("left after the namespace was deleted: %v", keys)
	}
	f.createNamespace(t, "team")
}

// TestFinalizerHoldsNamespace: an object whose finalizer stays keeps its
// namespace Terminating (refusing new content; a DELETE answers it as it
// is) until the finalizer is removed; then the namespace goes.
func TestFinalizerHoldsNamespace(t *testing.T) {
	f := newFixture(t)
	f.createNamespace(t, "held")
	held := widget("held")
	held.SetFinalizers([]string{"example.com/hold"})
	if _, err := f.widgets.Create(ctxFor(t), "held", held, registry.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.configMaps.Create(ctxFor(t), "held", &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "free"}}, registry.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	first := f.deleteNamespace(t, "held")
	eventually(t, "the ConfigMap deleted and the widget marked", func() bool {
		obj, err := f.widgets.GetFromStorage(ctxFor(t), "held", "held")
		return err == nil && obj.GetDeletionTimestamp() != nil && len(f.contentKeys(t, "held")) == 1
	})
	time.Sleep(time.Second) // a few of the controller's looks
	again := f.deleteNamespace(t, "held")
	if again.UID != first.UID || len(again.Spec.Finalizers) != 1 {
		t.Errorf("second delete answered %+v; want the namespace still held by kubernetes", again)
	}
	_, err := f.configMaps.Create(ctxFor(t), "held", &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "late"}}, registry.WriteOptions{})
	if !apierrors.IsForbidden(err) {
		t.Errorf("create in the terminating namespace: %v; want Forbidden", err)
	}
	obj, err := f.widgets.GetFromStorage(ctxFor(t), "held", "held")
	if err != nil {
		t.Fatal(err)
	}
	obj.SetFinalizers(nil)
	if _, _, err := f.widgets.Update(ctxFor(t), "held", "held", obj, registry.WriteOptions{}); err != nil {
		t.Fatalf("remove the finalizer: %v", err)
	}
	f.gone(t, "held")
}

// TestNamespaceWithoutKubernetesFinalizer: a namespace stored without
// spec.finalizers (by an older Concord) has its content deleted too, then
// goes.
func TestNamespaceWithoutKubernetesFinalizer(t *testing.T) {
	f := newFixture(t)
	old := `{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"old","uid":"6a4f3c3e-0000-4000-8000-000000000001"},"status":{"phase":"Active"}}`
	if _, err := f.etcd.Put(ctxFor(t), "/registry/namespaces/old", old); err != nil {
		t.Fatal(err)
	}
	if _, err := f.configMaps.Create(ctxFor(t), "old", &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "settings"}}, registry.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	f.deleteNamespace(t, "old")
	f.gone(t, "old")
	if keys := f.contentKeys(t, "old"); len(keys) != 0 {
		t.Errorf("left after the namespace was deleted: %v", keys)
	}
}

// TestPropagationPolicies: a namespace deleted with any propagation policy
// goes once its content is gone; the garbage collector removes the GC
// finalizer the policy put on it.
func TestPropagationPolicies(t *testing.T) {
	f := newFixture(t)
	for _, policy := range []metav1.DeletionPropagation{metav1.DeletePropagationOrphan, metav1.DeletePropagationForeground, metav1.DeletePropagationBackground} {
		name := strings.ToLower(string(policy))
		f.createNamespace(t, name)
		if _, err := f.configMaps.Create(ctxFor(t), name, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "settings"}}, registry.WriteOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := f.namespaces.Delete(ctxFor(t), "", name, &metav1.DeleteOptions{PropagationPolicy: &policy}, registry.WriteOptions{}); err != nil {
			t.Fatalf("delete namespace %s: %v", name, err)
		}
		f.gone(t, name)
		if keys := f.contentKeys(t, name); len(keys) != 0 {
			t.Errorf("%s: left after the namespace was deleted: %v", policy, keys)
		}
	}
}
