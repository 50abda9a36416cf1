package e2e

import (
	"context"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// TestApplyAfterManagedFieldsCleared: kube's documented way to clear
// managedFields (a patch setting them to [{}]) strips them all; updates of
// an object without managedFields are not tracked; the first apply then
// gives the fields already there to "before-first-apply" (an Update
// manager), so a different value conflicts with it and the same value
// co-owns.
func TestApplyAfterManagedFieldsCleared(t *testing.T) {
	t.Parallel()
	srv := startConcord(t, "concord", t.TempDir())
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	client, err := kubernetes.NewForConfig(&rest.Config{Host: srv.url, Timeout: requestTimeout})
	if err != nil {
		t.Fatal(err)
	}
	cms := client.CoreV1().ConfigMaps("default")
	apply := func(manager, value string) (*corev1.ConfigMap, error) {
		return cms.Apply(ctx, corev1ac.ConfigMap("cleared", "default").WithData(map[string]string{"key": value}), metav1.ApplyOptions{FieldManager: manager})
	}
	if _, err := apply("a", "1"); err != nil {
		t.Fatalf("apply by a: %v", err)
	}
	cleared, err := cms.Patch(ctx, "cleared", types.MergePatchType, []byte(`{"metadata":{"managedFields":[{}]}}`), metav1.PatchOptions{FieldManager: "clearer"})
	if err != nil {
		t.Fatalf("merge patch managedFields [{}]: %v", err)
	}
	if len(cleared.ManagedFields) != 0 {
		t.Errorf("after the patch of managedFields to [{}]: managedFields %s; want none", describeManaged(cleared.ManagedFields))
	}
	cleared.Data["key"] = "2"
	updated, err := cms.Update(ctx, cleared, metav1.UpdateOptions{FieldManager: "editor"})
	if err != nil {
		t.Fatalf("update by editor: %v", err)
	}
	if len(updated.ManagedFields) != 0 {
		t.Errorf("after an update of an object without managedFields: managedFields %s; want none (kube tracks again from the first apply)", describeManaged(updated.ManagedFields))
	}

	_, err = apply("x", "3")
	wantOneConflict(t, "apply by x of key=3 after the fields were cleared", err, `"before-first-apply" using v1`, ".data.key")
	coowned, err := apply("x", "2")
	if err != nil {
		t.Fatalf("apply by x of the current key=2: %v", err)
	}
	wantApplyEntry(t, "after x's first apply", coowned.ManagedFields, "x", "key")
	e := managedBy(t, coowned.ManagedFields, "before-first-apply", metav1.ManagedFieldsOperationUpdate)
	if e == nil || !slices.Equal(ownedDataKeys(t, e), []string{"key"}) || len(coowned.ManagedFields) != 2 {
		t.Errorf("after x's first apply: managedFields %s; want x's Apply entry and before-first-apply's Update entry, both owning data.key", describeManaged(coowned.ManagedFields))
	}
}

// TestManagedFieldsCapUpdateManagers: kube keeps at most 10 Update
// entries; beyond that the oldest are merged into "ancient-changes"
// (time, then name order). And a write without fieldManager is recorded
// under the first part of its User-Agent.
func TestManagedFieldsCapUpdateManagers(t *testing.T) {
	t.Parallel()
	srv := startConcord(t, "concord", t.TempDir())
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	client, err := kubernetes.NewForConfig(&rest.Config{Host: srv.url, Timeout: requestTimeout, UserAgent: "capper/1.0 (linux/amd64) e2e"})
	if err != nil {
		t.Fatal(err)
	}
	cms := client.CoreV1().ConfigMaps("default")
	created, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "capped"}, Data: map[string]string{"base": "0"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if e := managedBy(t, created.ManagedFields, "capper", metav1.ManagedFieldsOperationUpdate); e == nil || !slices.Equal(ownedDataKeys(t, e), []string{"base"}) || len(created.ManagedFields) != 1 {
		t.Errorf("after a create without fieldManager by User-Agent capper/1.0: managedFields %s; want one Update entry of capper owning data.base", describeManaged(created.ManagedFields))
	}
	// 11 more managers: 12 updaters in all, in time then name order.
	for i := 1; i <= 11; i++ {
		patch := fmt.Sprintf(`{"data":{"k%02d":"v"}}`, i)
		if _, err := cms.Patch(ctx, "capped", types.MergePatchType, []byte(patch), metav1.PatchOptions{FieldManager: fmt.Sprintf("u%02d", i)}); err != nil {
			t.Fatalf("patch by u%02d: %v", i, err)
		}
	}
	got, err := cms.Get(ctx, "capped", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.ManagedFields) != 10 {
		t.Errorf("after 12 updaters: %d managedFields entries; want 10: %s", len(got.ManagedFields), describeManaged(got.ManagedFields))
	}
	// The oldest three (capper, u01, u02) are merged into the bucket.
	bucket := managedBy(t, got.ManagedFields, "ancient-changes", metav1.ManagedFieldsOperationUpdate)
	if bucket == nil || bucket.APIVersion != "v1" || !slices.Equal(ownedDataKeys(t, bucket), []string{"base", "k01", "k02"}) {
		t.Errorf("after 12 updaters: managedFields %s; want an ancient-changes Update entry owning data.base, k01 and k02", describeManaged(got.ManagedFields))
	}
	for i := 3; i <= 11; i++ {
		m := fmt.Sprintf("u%02d", i)
		if e := managedBy(t, got.ManagedFields, m, metav1.ManagedFieldsOperationUpdate); e == nil || !slices.Equal(ownedDataKeys(t, e), []string{fmt.Sprintf("k%02d", i)}) {
			t.Errorf("after 12 updaters: no Update entry of %s owning its key: %s", m, describeManaged(got.ManagedFields))
		}
	}
}

// TestApplyDryRun: an apply with dryRun=All answers what it would write
// (201 for a create) and stores nothing.
func TestApplyDryRun(t *testing.T) {
	t.Parallel()
	srv := startConcord(t, "concord", t.TempDir())
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	client, err := kubernetes.NewForConfig(&rest.Config{Host: srv.url, Timeout: requestTimeout})
	if err != nil {
		t.Fatal(err)
	}
	cms := client.CoreV1().ConfigMaps("default")
	dry := metav1.ApplyOptions{FieldManager: "a", DryRun: []string{metav1.DryRunAll}}
	out, err := cms.Apply(ctx, corev1ac.ConfigMap("dry", "default").WithData(map[string]string{"key": "1"}), dry)
	if err != nil {
		t.Fatalf("dry-run apply (create): %v", err)
	}
	if out.Data["key"] != "1" || out.Name != "dry" {
		t.Errorf("dry-run apply (create) answered %s data %v; want dry with key 1", out.Name, out.Data)
	}
	wantApplyEntry(t, "dry-run apply (create)", out.ManagedFields, "a", "key")
	if _, err := cms.Get(ctx, "dry", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("GET after the dry-run create: %v; want NotFound", err)
	}
	code, body, err := requestPatch(ctx, configMapURL(srv.url, "dry")+"?fieldManager=a&dryRun=All", applyPatchType, "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: dry\n")
	if err != nil || code != http.StatusCreated {
		t.Errorf("dry-run apply creating over HTTP: %d %s %v; want 201", code, body, err)
	}

	real, err := cms.Apply(ctx, corev1ac.ConfigMap("dry", "default").WithData(map[string]string{"key": "1"}), metav1.ApplyOptions{FieldManager: "a"})
	if err != nil {
		t.Fatal(err)
	}
	out, err = cms.Apply(ctx, corev1ac.ConfigMap("dry", "default").WithData(map[string]string{"key": "2"}), metav1.ApplyOptions{FieldManager: "b", Force: true, DryRun: []string{metav1.DryRunAll}})
	if err != nil {
		t.Fatalf("dry-run forced apply by b: %v", err)
	}
	if out.Data["key"] != "2" {
		t.Errorf("dry-run forced apply by b answered data %v; want key 2", out.Data)
	}
	wantApplyEntry(t, "dry-run forced apply by b", out.ManagedFields, "b", "key")
	got, err := cms.Get(ctx, "dry", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.ResourceVersion != real.ResourceVersion || got.Data["key"] != "1" || !reflect.DeepEqual(got.ManagedFields, real.ManagedFields) {
		t.Errorf("after the dry-run forced apply: rv %s data %v managedFields %s; want unchanged (rv %s, key 1, a's)", got.ResourceVersion, got.Data, describeManaged(got.ManagedFields), real.ResourceVersion)
	}
}

// TestApplyFieldValidationStrict: a key set twice in the applied YAML is
// refused with fieldValidation=Strict (400, "error strict decoding
// patch"), and nothing is stored.
func TestApplyFieldValidationStrict(t *testing.T) {
	t.Parallel()
	srv := startConcord(t, "concord", t.TempDir())
	body := "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: dup\ndata:\n  k: a\n  k: b\n"
	code, resp, err := requestPatch(t.Context(), configMapURL(srv.url, "dup")+"?fieldManager=t&fieldValidation=Strict", applyPatchType, body)
	if err != nil {
		t.Fatal(err)
	}
	st, err := decodeStatus(resp)
	if err != nil {
		t.Fatal(err)
	}
	if code != http.StatusBadRequest || st.Reason != metav1.StatusReasonBadRequest || !strings.HasPrefix(st.Message, "error strict decoding patch: ") || !strings.Contains(st.Message, `"k" already set in map`) {
		t.Errorf("strict apply with a duplicate key: %d %s; want 400 error strict decoding patch naming the key", code, resp)
	}
	if code, body := do(t, http.MethodGet, configMapURL(srv.url, "dup"), nil); code != http.StatusNotFound {
		t.Errorf("GET dup after the strict refusal: %d %s; want 404", code, body)
	}
}

// TestApplyAfterCRDSchemaChange: a field added to a CRD's schema can be
// applied (and is owned) as soon as it is served, through the replica
// that changed the CRD and through another one, both of which had typed
// the resource by the first schema.
func TestApplyAfterCRDSchemaChange(t *testing.T) {
	t.Parallel()
	replicas := startReplicas(t, 2)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	cfgA := &rest.Config{Host: replicas[0].url, Timeout: requestTimeout}
	createCRD(t, ctx, cfgA, gadgetsCRDManifest)
	clients := make([]dynamic.ResourceInterface, 2)
	for i, r := range replicas {
		dyn, err := dynamic.NewForConfig(&rest.Config{Host: r.url, Timeout: requestTimeout})
		if err != nil {
			t.Fatal(err)
		}
		clients[i] = dyn.Resource(gadgetsGVR).Namespace("default")
	}
	// Every replica applies once before the change: each has typed the
	// resource by the first schema.
	for i, c := range clients {
		name := fmt.Sprintf("g%d", i)
		if err := retryNotFound(ctx, func() error {
			_, err := c.Apply(ctx, name, gadget(name, map[string]any{"owner": "a"}), metav1.ApplyOptions{FieldManager: "a"})
			return err
		}); err != nil {
			t.Fatalf("apply %s through replica %d: %v", name, i, err)
		}
	}

	ext, err := apiextensionsclient.NewForConfig(cfgA)
	if err != nil {
		t.Fatal(err)
	}
	crds := ext.ApiextensionsV1().CustomResourceDefinitions()
	crd, err := crds.Get(ctx, "gadgets.example.com", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	spec := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
	spec.Properties["color"] = apiextensionsv1.JSONSchemaProps{Type: "string"}
	crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"] = spec
	if _, err := crds.Update(ctx, crd, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("add spec.color to the CRD: %v", err)
	}
	for i, c := range clients {
		name := fmt.Sprintf("g%d", i)
		// A replica may take a moment to serve the new schema: a 400
		// naming spec.color (not declared) is retried until then.
		var out *unstructured.Unstructured
		deadline := time.Now().Add(5 * time.Second)
		for {
			out, err = c.Apply(ctx, name, gadget(name, map[string]any{"owner": "a", "color": "red"}), metav1.ApplyOptions{FieldManager: "a"})
			if err == nil || !apierrors.IsBadRequest(err) || time.Now().After(deadline) {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if err != nil {
			t.Errorf("apply of the new spec.color to %s through replica %d: %v; want it applied", name, i, err)
			continue
		}
		if color, _, _ := unstructured.NestedString(out.Object, "spec", "color"); color != "red" {
			t.Errorf("%s through replica %d: spec.color %q; want red", name, i, color)
		}
		e := managedBy(t, out.GetManagedFields(), "a", metav1.ManagedFieldsOperationApply)
		if e == nil || !slices.Equal(fieldKeys(fieldsOf(t, e), "f:spec"), []string{"f:color", "f:owner"}) {
			t.Errorf("%s through replica %d: managedFields %s; want a owning spec.color and spec.owner", name, i, describeManaged(out.GetManagedFields()))
		}
	}
}

// retryNotFound retries f while it answers 404 (a CRD not served yet),
// for at most 10 s.
func retryNotFound(ctx context.Context, f func() error) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := f()
		if err == nil || !apierrors.IsNotFound(err) || time.Now().After(deadline) || ctx.Err() != nil {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}
