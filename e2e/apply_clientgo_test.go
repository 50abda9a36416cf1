package e2e

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// TestClientGoApplyConfigMap: client-go's typed Apply of a ConfigMap by
// two field managers, as kube-apiserver answers it: create (201) and
// change by the first; the second's different value is a 409 whose cause
// names the field and its manager, the same value makes it a co-owner,
// Force moves the field; an Update (PUT) takes a field without a conflict
// and then conflicts as "<manager> using v1".
func TestClientGoApplyConfigMap(t *testing.T) {
	t.Parallel()
	srv := startConcord(t, "concord", t.TempDir())
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	client, err := kubernetes.NewForConfig(&rest.Config{Host: srv.url, Timeout: requestTimeout})
	if err != nil {
		t.Fatal(err)
	}
	cms := client.CoreV1().ConfigMaps("default")
	apply := func(manager string, force bool, data map[string]string) (*corev1.ConfigMap, error) {
		return cms.Apply(ctx, corev1ac.ConfigMap("typed", "default").WithData(data), metav1.ApplyOptions{FieldManager: manager, Force: force})
	}
	get := func() *corev1.ConfigMap {
		t.Helper()
		cm, err := cms.Get(ctx, "typed", metav1.GetOptions{})
		if err != nil {
			t.Fatalf("get: %v", err)
		}
		return cm
	}

	created, err := apply("a", false, map[string]string{"key": "1"})
	if err != nil {
		t.Fatalf("apply by a (create): %v", err)
	}
	if created.UID == "" || created.ResourceVersion == "" || created.CreationTimestamp.IsZero() || !reflect.DeepEqual(created.Data, map[string]string{"key": "1"}) {
		t.Errorf("apply by a (create) answered uid %q rv %q created %v data %v; want all set and data map[key:1]", created.UID, created.ResourceVersion, created.CreationTimestamp, created.Data)
	}
	wantApplyEntry(t, "after a's create", created.ManagedFields, "a", "key")
	if e := managedBy(t, created.ManagedFields, "a", metav1.ManagedFieldsOperationApply); e != nil && e.Time == nil {
		t.Errorf("after a's create: a's entry has no time; want the time of the apply")
	}
	if len(created.ManagedFields) != 1 {
		t.Errorf("after a's create: managedFields %s; want a's Apply entry only", describeManaged(created.ManagedFields))
	}

	changed, err := apply("a", false, map[string]string{"key": "1", "x": "2"})
	if err != nil {
		t.Fatalf("apply by a (change): %v", err)
	}
	if changed.UID != created.UID || changed.ResourceVersion == created.ResourceVersion || !reflect.DeepEqual(changed.Data, map[string]string{"key": "1", "x": "2"}) {
		t.Errorf("apply by a (change): uid %q rv %q data %v; want uid %q, a new rv, data map[key:1 x:2]", changed.UID, changed.ResourceVersion, changed.Data, created.UID)
	}
	wantApplyEntry(t, "after a's change", changed.ManagedFields, "a", "key", "x")

	// Applying the same configuration again writes nothing.
	same, err := apply("a", false, map[string]string{"key": "1", "x": "2"})
	if err != nil {
		t.Fatalf("apply by a (no change): %v", err)
	}
	if same.ResourceVersion != changed.ResourceVersion {
		t.Errorf("apply by a of an unchanged configuration: rv %s; want %s (a no-op is not written)", same.ResourceVersion, changed.ResourceVersion)
	}

	_, err = apply("b", false, map[string]string{"key": "2"})
	wantOneConflict(t, "apply by b of key=2 (a's key=1)", err, `"a"`, ".data.key")
	if cm := get(); cm.ResourceVersion != changed.ResourceVersion || cm.Data["key"] != "1" {
		t.Errorf("after b's conflict: rv %s data %v; want unchanged (rv %s, key 1)", cm.ResourceVersion, cm.Data, changed.ResourceVersion)
	}

	// The same value: b co-owns data.key.
	coowned, err := apply("b", false, map[string]string{"key": "1"})
	if err != nil {
		t.Fatalf("apply by b of a's value key=1: %v; want success (co-ownership)", err)
	}
	wantApplyEntry(t, "after b co-owns", coowned.ManagedFields, "a", "key", "x")
	wantApplyEntry(t, "after b co-owns", coowned.ManagedFields, "b", "key")
	// kube's managedFieldsUpdater sets an applier's time only when its
	// apply changed the object: b's did not.
	if e := managedBy(t, coowned.ManagedFields, "b", metav1.ManagedFieldsOperationApply); e != nil && e.Time != nil {
		t.Errorf("after b co-owns: b's entry has time %v; want none (its apply changed nothing but managedFields)", e.Time)
	}
	if coowned.ResourceVersion == changed.ResourceVersion {
		t.Errorf("after b co-owns: rv %s unchanged; want a write (managedFields gained b)", coowned.ResourceVersion)
	}

	_, err = apply("b", false, map[string]string{"key": "2"})
	wantOneConflict(t, "apply by b of key=2 while co-owner", err, `"a"`, ".data.key")

	forced, err := apply("b", true, map[string]string{"key": "2"})
	if err != nil {
		t.Fatalf("apply by b with force: %v", err)
	}
	if !reflect.DeepEqual(forced.Data, map[string]string{"key": "2", "x": "2"}) {
		t.Errorf("after b's forced apply: data %v; want map[key:2 x:2]", forced.Data)
	}
	wantApplyEntry(t, "after b's force", forced.ManagedFields, "a", "x")
	wantApplyEntry(t, "after b's force", forced.ManagedFields, "b", "key")

	_, err = apply("a", false, map[string]string{"key": "1", "x": "2"})
	wantOneConflict(t, "apply by a of key=1 after b forced key=2", err, `"b"`, ".data.key")

	// a drops data.key from its configuration: b still owns it, it stays.
	dropped, err := apply("a", false, map[string]string{"x": "2"})
	if err != nil {
		t.Fatalf("apply by a without key: %v", err)
	}
	if !reflect.DeepEqual(dropped.Data, map[string]string{"key": "2", "x": "2"}) {
		t.Errorf("after a dropped key: data %v; want map[key:2 x:2] (b owns key)", dropped.Data)
	}

	// An update never conflicts; it takes the fields it changes, and an
	// applier's entry left with no field goes.
	cm := get()
	cm.Data["key"] = "3"
	updated, err := cms.Update(ctx, cm, metav1.UpdateOptions{FieldManager: "editor"})
	if err != nil {
		t.Fatalf("update by editor: %v", err)
	}
	e := managedBy(t, updated.ManagedFields, "editor", metav1.ManagedFieldsOperationUpdate)
	if e == nil || e.APIVersion != "v1" || !slices.Equal(ownedDataKeys(t, e), []string{"key"}) {
		t.Errorf("after editor's update: managedFields %s; want an Update entry of editor in v1 owning data.key", describeManaged(updated.ManagedFields))
	}
	if managedBy(t, updated.ManagedFields, "b", metav1.ManagedFieldsOperationApply) != nil {
		t.Errorf("after editor's update: managedFields %s; want b's entry gone (it owned data.key only)", describeManaged(updated.ManagedFields))
	}
	wantApplyEntry(t, "after editor's update", updated.ManagedFields, "a", "x")
	_, err = apply("b", false, map[string]string{"key": "2"})
	wantOneConflict(t, "apply by b of key=2 after editor's update", err, `"editor" using v1`, ".data.key")
	current := get()
	if current.Data["key"] != "3" {
		t.Errorf("after the conflict with editor: data %v; want key 3", current.Data)
	}

	// A resourceVersion in the configuration is a precondition: a stale
	// one is the optimistic-lock 409 (no causes), the current one applies.
	_, err = cms.Apply(ctx, corev1ac.ConfigMap("typed", "default").WithResourceVersion(created.ResourceVersion).WithData(map[string]string{"x": "2", "y": "1"}), metav1.ApplyOptions{FieldManager: "a"})
	var status apierrors.APIStatus
	if !apierrors.IsConflict(err) || !errors.As(err, &status) || status.Status().Details == nil || len(status.Status().Details.Causes) != 0 ||
		err.Error() != `Operation cannot be fulfilled on configmaps "typed": the object has been modified; please apply your changes to the latest version and try again` {
		t.Errorf("apply by a with the stale resourceVersion %s: %v; want the optimistic-lock 409", created.ResourceVersion, err)
	}
	if cm := get(); cm.ResourceVersion != current.ResourceVersion {
		t.Errorf("after the stale apply: rv %s; want %s (nothing written)", cm.ResourceVersion, current.ResourceVersion)
	}
	fresh, err := cms.Apply(ctx, corev1ac.ConfigMap("typed", "default").WithResourceVersion(current.ResourceVersion).WithData(map[string]string{"x": "2", "y": "1"}), metav1.ApplyOptions{FieldManager: "a"})
	if err != nil {
		t.Fatalf("apply by a with the current resourceVersion: %v", err)
	}
	if !reflect.DeepEqual(fresh.Data, map[string]string{"key": "3", "x": "2", "y": "1"}) {
		t.Errorf("after the apply with the current resourceVersion: data %v; want map[key:3 x:2 y:1]", fresh.Data)
	}
	wantApplyEntry(t, "after the apply with the current resourceVersion", fresh.ManagedFields, "a", "x", "y")
}

// TestDynamicApplyListMap: two managers apply their own item of a custom
// object's associative list (x-kubernetes-list-type map, keyed by name)
// with client-go's dynamic client: both items are kept and each manager
// owns its item; a different value of the other's item conflicts on that
// item's field; a manager applying without its item removes it and keeps
// the other's.
func TestDynamicApplyListMap(t *testing.T) {
	t.Parallel()
	srv := startConcord(t, "concord", t.TempDir())
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	cfg := &rest.Config{Host: srv.url, Timeout: requestTimeout}
	createCRD(t, ctx, cfg, gadgetsCRDManifest)
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	gadgets := dyn.Resource(gadgetsGVR).Namespace("default")
	apply := func(manager string, spec map[string]any) (*unstructured.Unstructured, error) {
		return gadgets.Apply(ctx, "g", gadget("g", spec), metav1.ApplyOptions{FieldManager: manager})
	}
	item := func(name, value string) map[string]any { return map[string]any{"name": name, "value": value} }

	// The first write may race the catalog catching up with the CRD.
	var err0 error
	for {
		if _, err0 = apply("a", map[string]any{"items": []any{item("a", "1")}}); err0 == nil || !apierrors.IsNotFound(err0) || ctx.Err() != nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err0 != nil {
		t.Fatalf("apply by a of item a: %v", err0)
	}
	both, err := apply("b", map[string]any{"items": []any{item("b", "2")}})
	if err != nil {
		t.Fatalf("apply by b of item b: %v", err)
	}
	if got := itemsByName(t, both); !reflect.DeepEqual(got, map[string]string{"a": "1", "b": "2"}) {
		t.Errorf("after both applied: items %v; want map[a:1 b:2]", got)
	}
	wantOwnedItems(t, "after both applied", both, "a", `k:{"name":"a"}`)
	wantOwnedItems(t, "after both applied", both, "b", `k:{"name":"b"}`)

	_, err = apply("b", map[string]any{"items": []any{item("b", "2"), item("a", "9")}})
	wantOneConflict(t, "apply by b of item a with another value", err, `"a"`, `.spec.items[name="a"].value`)

	// a applies without its item: it goes, b's stays.
	after, err := apply("a", map[string]any{"owner": "a"})
	if err != nil {
		t.Fatalf("apply by a without item a: %v", err)
	}
	if got := itemsByName(t, after); !reflect.DeepEqual(got, map[string]string{"b": "2"}) {
		t.Errorf("after a applied without its item: items %v; want map[b:2]", got)
	}
	if owner, _, _ := unstructured.NestedString(after.Object, "spec", "owner"); owner != "a" {
		t.Errorf("after a applied owner: spec.owner %q; want a", owner)
	}
	wantOwnedItems(t, "after a applied without its item", after, "a")
	wantOwnedItems(t, "after a applied without its item", after, "b", `k:{"name":"b"}`)
	stored, err := gadgets.Get(ctx, "g", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := itemsByName(t, stored); !reflect.DeepEqual(got, map[string]string{"b": "2"}) {
		t.Errorf("stored items %v; want map[b:2]", got)
	}
}

var gadgetsGVR = schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "gadgets"}

func gadget(name string, spec map[string]any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "example.com/v1", "kind": "Gadget", "metadata": map[string]any{"name": name, "namespace": "default"}, "spec": spec,
	}}
}

// itemsByName is a gadget's spec.items, name → value.
func itemsByName(t *testing.T, u *unstructured.Unstructured) map[string]string {
	t.Helper()
	items, _, err := unstructured.NestedSlice(u.Object, "spec", "items")
	if err != nil {
		t.Fatalf("spec.items: %v", err)
	}
	got := map[string]string{}
	for _, it := range items {
		m, _ := it.(map[string]any)
		name, _ := m["name"].(string)
		value, _ := m["value"].(string)
		got[name] = value
	}
	return got
}

// wantOwnedItems checks that manager's Apply entry (in example.com/v1)
// owns exactly the spec.items keys given (none: no f:items at all), each
// item whole (itself, its name and value).
func wantOwnedItems(t *testing.T, what string, u *unstructured.Unstructured, manager string, keys ...string) {
	t.Helper()
	entries := u.GetManagedFields()
	e := managedBy(t, entries, manager, metav1.ManagedFieldsOperationApply)
	if e == nil {
		t.Errorf("%s: no Apply entry of %q: %s", what, manager, describeManaged(entries))
		return
	}
	if e.APIVersion != "example.com/v1" {
		t.Errorf("%s: %q's entry apiVersion %q; want example.com/v1", what, manager, e.APIVersion)
	}
	set := fieldsOf(t, e)
	got := fieldKeys(set, "f:spec", "f:items")
	if len(keys) == 0 {
		if got != nil {
			t.Errorf("%s: %q owns spec.items %q; want none: %s", what, manager, got, describeManaged(entries))
		}
		return
	}
	if !slices.Equal(got, keys) {
		t.Errorf("%s: %q owns spec.items %q; want %q: %s", what, manager, got, keys, describeManaged(entries))
	}
	for _, k := range keys {
		if f := fieldKeys(set, "f:spec", "f:items", k); !slices.Equal(f, []string{".", "f:name", "f:value"}) {
			t.Errorf("%s: %q owns %s of item %s; want [. f:name f:value]", what, manager, f, k)
		}
	}
}
