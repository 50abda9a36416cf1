package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// TestApplyRaceListMapItems: 8 managers apply their own item of a custom
// object's associative list at once (the first creates the object): all
// succeed, and the object holds the 8 items, each owned by its manager
// alone.
func TestApplyRaceListMapItems(t *testing.T) {
	t.Parallel()
	srv := startConcord(t, "concord", t.TempDir())
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	cfg := &rest.Config{Host: srv.url, Timeout: requestTimeout, QPS: -1}
	createCRD(t, ctx, cfg, gadgetsCRDManifest)
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	gadgets := dyn.Resource(gadgetsGVR).Namespace("default")
	// Served once a throwaway object can be applied.
	if err := retryNotFound(ctx, func() error {
		_, err := gadgets.Apply(ctx, "probe", gadget("probe", map[string]any{}), metav1.ApplyOptions{FieldManager: "probe"})
		return err
	}); err != nil {
		t.Fatalf("apply probe: %v", err)
	}
	for round := range applyRaceRounds {
		name := fmt.Sprintf("items-%d", round)
		errs := make([]error, applyRaceManagers)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range applyRaceManagers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				item := map[string]any{"name": fmt.Sprintf("i%d", i), "value": fmt.Sprint(i)}
				obj := gadget(name, map[string]any{"items": []any{item}})
				<-start
				_, errs[i] = gadgets.Apply(ctx, name, obj, metav1.ApplyOptions{FieldManager: fmt.Sprintf("m%d", i)})
			}()
		}
		close(start)
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Errorf("round %d: apply by m%d: %v; want success (items of their own never conflict)", round, i, err)
			}
		}
		got, err := gadgets.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("round %d: get: %v", round, err)
		}
		want := map[string]string{}
		for i := range applyRaceManagers {
			want[fmt.Sprintf("i%d", i)] = fmt.Sprint(i)
		}
		if items := itemsByName(t, got); !reflect.DeepEqual(items, want) {
			t.Errorf("round %d: items %v; want %v", round, items, want)
		}
		for i := range applyRaceManagers {
			wantOwnedItems(t, fmt.Sprintf("round %d", round), got, fmt.Sprintf("m%d", i), fmt.Sprintf(`k:{"name":"i%d"}`, i))
		}
		if n := len(applyManagers(got.GetManagedFields())); n != applyRaceManagers {
			t.Errorf("round %d: %d Apply entries; want %d: %s", round, n, applyRaceManagers, describeManaged(got.GetManagedFields()))
		}
	}
}

// TestApplyLabelsAndAnnotations: metadata's labels and annotations are
// owned key by key like any map: two managers' labels are kept side by
// side, a label dropped by its only manager is removed, and a label
// another manager sets to another value conflicts.
func TestApplyLabelsAndAnnotations(t *testing.T) {
	t.Parallel()
	srv := startConcord(t, "concord", t.TempDir())
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	client, err := kubernetes.NewForConfig(&rest.Config{Host: srv.url, Timeout: requestTimeout})
	if err != nil {
		t.Fatal(err)
	}
	cms := client.CoreV1().ConfigMaps("default")
	apply := func(manager string, labels, annotations map[string]string) error {
		cm := corev1ac.ConfigMap("meta", "default").WithLabels(labels)
		if annotations != nil {
			cm.WithAnnotations(annotations)
		}
		_, err := cms.Apply(ctx, cm, metav1.ApplyOptions{FieldManager: manager})
		return err
	}
	if err := apply("a", map[string]string{"x": "1", "shared": "s"}, map[string]string{"note": "a"}); err != nil {
		t.Fatal(err)
	}
	if err := apply("b", map[string]string{"y": "2", "shared": "s"}, nil); err != nil {
		t.Fatal(err)
	}
	err = apply("b", map[string]string{"y": "2", "shared": "s", "x": "9"}, nil)
	wantOneConflict(t, "apply by b of label x=9 (a's x=1)", err, `"a"`, ".metadata.labels.x")
	// a drops x, shared and its annotation: x and the annotation go;
	// shared stays, b co-owns it.
	if err := apply("a", map[string]string{}, nil); err != nil {
		t.Fatal(err)
	}
	got, err := cms.Get(ctx, "meta", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.Labels, map[string]string{"y": "2", "shared": "s"}) || len(got.Annotations) != 0 {
		t.Errorf("after a dropped its labels and annotation: labels %v annotations %v; want map[shared:s y:2] and none; managedFields %s", got.Labels, got.Annotations, describeManaged(got.ManagedFields))
	}
}

// TestKubectlServerSideApplyDryRun: kubectl apply --server-side
// --dry-run=server says what it would do and writes nothing.
func TestKubectlServerSideApplyDryRun(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat(kubectlPath); err != nil {
		t.Fatalf("this test drives the real kubectl: %v", err)
	}
	tmp := t.TempDir()
	srv := startConcord(t, "concord", t.TempDir(), "--data-dir", filepath.Join(tmp, "data"))
	k := &kubectlSession{srv: srv, cacheDir: filepath.Join(tmp, "kubectl-cache"), tmp: tmp}
	manifest := k.writeFile(t, "dry.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: dry\ndata:\n  key: v1\n", 0o644)
	if out := k.run(t, "apply", "--server-side", "--dry-run=server", "-f", manifest); out != "configmap/dry serverside-applied (server dry run)\n" {
		t.Errorf("kubectl apply --server-side --dry-run=server printed %q; want %q", out, "configmap/dry serverside-applied (server dry run)\n")
	}
	if out := k.fail(t, "get", "configmap", "dry"); !reflect.DeepEqual(out, "Error from server (NotFound): configmaps \"dry\" not found\n") {
		t.Errorf("kubectl get configmap dry after the dry run: %q; want NotFound", out)
	}
	k.run(t, "apply", "--server-side", "-f", manifest)
	before := k.managedConfigMap(t, "dry")
	k.writeFile(t, "dry.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: dry\ndata:\n  key: v2\n", 0o644)
	if out := k.run(t, "apply", "--server-side", "--dry-run=server", "-o", "jsonpath={.data.key}", "-f", manifest); out != "v2" {
		t.Errorf("kubectl apply --server-side --dry-run=server -o jsonpath printed %q; want v2", out)
	}
	after := k.managedConfigMap(t, "dry")
	if after.ResourceVersion != before.ResourceVersion || after.Data["key"] != "v1" {
		t.Errorf("after the dry run: rv %s data %v; want unchanged (rv %s, key v1)", after.ResourceVersion, after.Data, before.ResourceVersion)
	}
}
