package e2e

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	coordinationv1ac "k8s.io/client-go/applyconfigurations/coordination/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// TestKubectlServerSideApplyKinds: kubectl apply --server-side of other
// kinds than ConfigMaps: a CustomResourceDefinition (created, then
// changed), a cluster-scoped Namespace, and objects of the CRD.
func TestKubectlServerSideApplyKinds(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat(kubectlPath); err != nil {
		t.Fatalf("this test drives the real kubectl: %v", err)
	}
	tmp := t.TempDir()
	srv := startConcord(t, "concord", t.TempDir(), "--data-dir", filepath.Join(tmp, "data"))
	k := &kubectlSession{srv: srv, cacheDir: filepath.Join(tmp, "kubectl-cache"), tmp: tmp}

	crd := k.writeFile(t, "crd.yaml", widgetsCRDManifest, 0o644)
	if out := k.run(t, "apply", "--server-side", "-f", crd); out != "customresourcedefinition.apiextensions.k8s.io/widgets.example.com serverside-applied\n" {
		t.Errorf("kubectl apply --server-side of the CRD printed %q", out)
	}
	k.run(t, "wait", "--for", "condition=established", "--timeout", "20s", "crd/widgets.example.com")
	changed := strings.Replace(widgetsCRDManifest, "    - {name: Age, type: date, jsonPath: .metadata.creationTimestamp}\n",
		"    - {name: Age, type: date, jsonPath: .metadata.creationTimestamp}\n    - {name: Ready, type: boolean, jsonPath: .status.ready}\n", 1)
	if changed == widgetsCRDManifest {
		t.Fatal("the CRD manifest has no Age column to add after")
	}
	k.writeFile(t, "crd.yaml", changed, 0o644)
	if out := k.run(t, "apply", "--server-side", "-f", crd); out != "customresourcedefinition.apiextensions.k8s.io/widgets.example.com serverside-applied\n" {
		t.Errorf("kubectl apply --server-side of the changed CRD printed %q", out)
	}
	if cols := k.run(t, "get", "crd", "widgets.example.com", "-o", "jsonpath={.spec.versions[0].additionalPrinterColumns[*].name}"); cols != "Size Color Age Ready" {
		t.Errorf("after applying the changed CRD: columns %q; want Size Color Age Ready", cols)
	}
	if mf := k.run(t, "get", "crd", "widgets.example.com", "-o", "jsonpath={range .metadata.managedFields[*]}{.manager}/{.operation}/{.subresource} {end}", "--show-managed-fields"); !strings.Contains(mf, "kubectl/Apply/ ") {
		t.Errorf("the CRD's managers %q; want kubectl's Apply among them", mf)
	}

	ns := k.writeFile(t, "ns.yaml", "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: applied\n  labels: {team: a}\n", 0o644)
	if out := k.run(t, "apply", "--server-side", "-f", ns); out != "namespace/applied serverside-applied\n" {
		t.Errorf("kubectl apply --server-side of a Namespace printed %q", out)
	}
	if out := k.run(t, "get", "namespace", "applied", "-o", "jsonpath={.status.phase} {.metadata.labels.team}"); out != "Active a" {
		t.Errorf("namespace applied: phase and label %q; want Active a", out)
	}

	w := k.writeFile(t, "w.yaml", "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w\n  namespace: applied\nspec:\n  color: blue\n", 0o644)
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, errOut, code := k.runCode(t, "apply", "--server-side", "-f", w)
		if code == 0 {
			if out != "widget.example.com/w serverside-applied\n" {
				t.Errorf("kubectl apply --server-side of a widget printed %q", out)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("kubectl apply --server-side of a widget: exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// The schema's default (spec.size 1) is the server's, not kubectl's.
	if out := k.run(t, "-n", "applied", "get", "widget", "w", "-o", "jsonpath={.spec.size} {.spec.color}"); out != "1 blue" {
		t.Errorf("widget w: size and color %q; want 1 blue", out)
	}
	other := k.writeFile(t, "w-other.yaml", "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w\n  namespace: applied\nspec:\n  color: red\n", 0o644)
	out, errOut, code := k.runCode(t, "apply", "--server-side", "--field-manager=other", "-f", other)
	if code != 1 || !strings.HasPrefix(errOut, "error: Apply failed with 1 conflict: conflict with \"kubectl\": .spec.color\n") {
		t.Errorf("a second manager's widget color: exit %d\nstdout: %q\nstderr: %q\nwant exit 1 and the conflict on .spec.color", code, out, errOut)
	}
}

// versionedCRDManifest: Versioned objects served in v1 (stored) and v2
// with the same schema and no conversion webhook.
const versionedCRDManifest = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: versioneds.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {plural: versioneds, singular: versioned, kind: Versioned}
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
              owner: {type: string}
              other: {type: string}
  - name: v2
    served: true
    storage: false
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              owner: {type: string}
              other: {type: string}
`

// TestApplyAcrossVersions: managers applying a custom object through two
// served versions: each entry keeps the version it applied in, and a
// conflict is found across versions.
func TestApplyAcrossVersions(t *testing.T) {
	t.Parallel()
	srv := startConcord(t, "concord", t.TempDir())
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	cfg := &rest.Config{Host: srv.url, Timeout: requestTimeout}
	createCRD(t, ctx, cfg, versionedCRDManifest)
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	in := func(version string) dynamic.ResourceInterface {
		return dyn.Resource(schema.GroupVersionResource{Group: "example.com", Version: version, Resource: "versioneds"}).Namespace("default")
	}
	obj := func(version string, spec map[string]any) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "example.com/" + version, "kind": "Versioned", "metadata": map[string]any{"name": "v"}, "spec": spec}}
	}
	if err := retryNotFound(ctx, func() error {
		_, err := in("v1").Apply(ctx, "v", obj("v1", map[string]any{"owner": "a"}), metav1.ApplyOptions{FieldManager: "a"})
		return err
	}); err != nil {
		t.Fatalf("apply by a in v1: %v", err)
	}
	_, err = in("v2").Apply(ctx, "v", obj("v2", map[string]any{"owner": "b"}), metav1.ApplyOptions{FieldManager: "b"})
	wantOneConflict(t, "apply by b in v2 of owner b (a's owner a in v1)", err, `"a"`, ".spec.owner")
	got, err := in("v2").Apply(ctx, "v", obj("v2", map[string]any{"other": "b"}), metav1.ApplyOptions{FieldManager: "b"})
	if err != nil {
		t.Fatalf("apply by b in v2 of other: %v", err)
	}
	if got.GetAPIVersion() != "example.com/v2" || !reflect.DeepEqual(got.Object["spec"], map[string]any{"owner": "a", "other": "b"}) {
		t.Errorf("apply by b in v2 answered %s spec %v; want example.com/v2 and owner a, other b", got.GetAPIVersion(), got.Object["spec"])
	}
	versions := map[string]string{}
	for _, e := range got.GetManagedFields() {
		if e.Operation == metav1.ManagedFieldsOperationApply {
			versions[e.Manager] = e.APIVersion
			if keys := fieldKeys(fieldsOf(t, &e), "f:spec"); !slices.Equal(keys, map[string][]string{"a": {"f:owner"}, "b": {"f:other"}}[e.Manager]) {
				t.Errorf("%s owns spec fields %q: %s", e.Manager, keys, describeManaged(got.GetManagedFields()))
			}
		}
	}
	if !reflect.DeepEqual(versions, map[string]string{"a": "example.com/v1", "b": "example.com/v2"}) {
		t.Errorf("Apply entries' versions %v; want a in example.com/v1, b in example.com/v2", versions)
	}
	forced, err := in("v2").Apply(ctx, "v", obj("v2", map[string]any{"owner": "b", "other": "b"}), metav1.ApplyOptions{FieldManager: "b", Force: true})
	if err != nil {
		t.Fatalf("forced apply by b in v2: %v", err)
	}
	if owner, _, _ := unstructured.NestedString(forced.Object, "spec", "owner"); owner != "b" {
		t.Errorf("after b's forced apply: spec.owner %q; want b", owner)
	}
	for _, e := range forced.GetManagedFields() {
		if e.Manager == "a" {
			t.Errorf("after b's forced apply: a still has an entry (it owned spec.owner only): %s", describeManaged(forced.GetManagedFields()))
		}
	}
}

// TestApplyLease: client-go's typed Apply of a coordination.k8s.io Lease,
// as leader-election libraries using apply write it.
func TestApplyLease(t *testing.T) {
	t.Parallel()
	srv := startConcord(t, "concord", t.TempDir())
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	client, err := kubernetes.NewForConfig(&rest.Config{Host: srv.url, Timeout: requestTimeout})
	if err != nil {
		t.Fatal(err)
	}
	leases := client.CoordinationV1().Leases("default")
	lease, err := leases.Apply(ctx, coordinationv1ac.Lease("lock", "default").WithSpec(coordinationv1ac.LeaseSpec().WithHolderIdentity("a").WithLeaseDurationSeconds(15)), metav1.ApplyOptions{FieldManager: "a"})
	if err != nil {
		t.Fatalf("apply the lease: %v", err)
	}
	if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity != "a" || lease.Spec.LeaseDurationSeconds == nil || *lease.Spec.LeaseDurationSeconds != 15 {
		t.Errorf("applied lease spec %+v; want holder a, 15 s", lease.Spec)
	}
	_, err = leases.Apply(ctx, coordinationv1ac.Lease("lock", "default").WithSpec(coordinationv1ac.LeaseSpec().WithHolderIdentity("b")), metav1.ApplyOptions{FieldManager: "b"})
	wantOneConflict(t, "apply of holder b over a's", err, `"a"`, ".spec.holderIdentity")

	// Secrets too: data is applied base64-encoded, as a client sends it.
	secret, err := client.CoreV1().Secrets("default").Apply(ctx, corev1ac.Secret("s", "default").WithData(map[string][]byte{"p": []byte("s3cret")}), metav1.ApplyOptions{FieldManager: "a"})
	if err != nil {
		t.Fatalf("apply a secret: %v", err)
	}
	if string(secret.Data["p"]) != "s3cret" || secret.Type != "Opaque" {
		t.Errorf("applied secret: data %q type %q; want p=s3cret, Opaque (defaulted)", secret.Data, secret.Type)
	}
}
