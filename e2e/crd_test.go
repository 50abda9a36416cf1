package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/yaml"
)

// widgetsCRDManifest is a CRD as a user applies it: namespaced Widgets in
// example.com/v1 with a short name, printer columns, a default, a CEL
// rule and a status subresource.
const widgetsCRDManifest = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget, shortNames: [wd]}
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {status: {}}
    additionalPrinterColumns:
    - {name: Size, type: integer, jsonPath: .spec.size}
    - {name: Color, type: string, jsonPath: .spec.color}
    - {name: Age, type: date, jsonPath: .metadata.creationTimestamp}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            x-kubernetes-validations:
            - {rule: "self.size <= 10", message: "size must be at most 10"}
            properties:
              size: {type: integer, default: 1}
              color: {type: string}
          status:
            type: object
            properties:
              ready: {type: boolean}
`

const widgetManifest = `apiVersion: example.com/v1
kind: Widget
metadata: {name: w1}
spec: {color: blue}
`

// widgetExtraManifest has a field the schema does not declare.
const widgetExtraManifest = `apiVersion: example.com/v1
kind: Widget
metadata: {name: w2}
spec: {color: blue, extra: x}
`

const widgetTooBigManifest = `apiVersion: example.com/v1
kind: Widget
metadata: {name: w3}
spec: {size: 20}
`

const widgetEditorScript = `#!/bin/sh
sed -i 's/color: blue/color: red/' "$1"
`

var widgetsGVR = schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}

// TestKubectlCustomResources drives the real kubectl through a CRD's life
// against the real binary: apply the CRD, wait until it is established,
// apply custom objects (kubectl's strict field validation, its warn mode,
// the CEL rule's 422), get them by short name with the printer columns,
// edit, patch, delete; then delete the CRD. kubectl explain is not
// exercised: Concord publishes no OpenAPI for custom resources yet
// (docs/crds.md).
func TestKubectlCustomResources(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat(kubectlPath); err != nil {
		t.Fatalf("this test drives the real kubectl: %v", err)
	}
	tmp := t.TempDir()
	srv := startConcord(t, "concord", t.TempDir(), "--data-dir", filepath.Join(tmp, "data"))
	k := &kubectlSession{srv: srv, cacheDir: filepath.Join(tmp, "kubectl-cache"), tmp: tmp}
	step := func(name string, f func(t *testing.T)) bool {
		ok := t.Run(name, f)
		if !ok {
			t.Logf("step %s failed", name)
		}
		return ok
	}

	if !step("1-apply-crd", func(t *testing.T) {
		crd := k.writeFile(t, "crd.yaml", widgetsCRDManifest, 0o644)
		if out := k.run(t, "apply", "-f", crd); out != "customresourcedefinition.apiextensions.k8s.io/widgets.example.com created\n" {
			t.Errorf("kubectl apply of the CRD printed %q", out)
		}
		if out := k.run(t, "wait", "--for", "condition=established", "--timeout", "20s", "crd/widgets.example.com"); out != "customresourcedefinition.apiextensions.k8s.io/widgets.example.com condition met\n" {
			t.Errorf("kubectl wait printed %q", out)
		}
	}) {
		return
	}

	step("2-apply-objects", func(t *testing.T) {
		if out := k.run(t, "apply", "-f", k.writeFile(t, "w1.yaml", widgetManifest, 0o644)); out != "widget.example.com/w1 created\n" {
			t.Errorf("kubectl apply of w1 printed %q", out)
		}
		// kubectl validates strictly by default: the server refuses.
		extra := k.writeFile(t, "w2.yaml", widgetExtraManifest, 0o644)
		if out := k.fail(t, "apply", "-f", extra); !strings.Contains(out, `Widget in version "v1" cannot be handled as a Widget: strict decoding error: unknown field "spec.extra"`) {
			t.Errorf("kubectl apply of a widget with an unknown field: %s", out)
		}
		out, errOut, err := kubectl(t, k.srv.kubeconfig, k.cacheDir, "apply", "--validate=warn", "-f", extra)
		if err != nil || out != "widget.example.com/w2 created\n" || !strings.Contains(errOut, `Warning: unknown field "spec.extra"`) {
			t.Errorf("kubectl apply --validate=warn: %v\nstdout: %s\nstderr: %s", err, out, errOut)
		}
		if out := k.fail(t, "apply", "-f", k.writeFile(t, "w3.yaml", widgetTooBigManifest, 0o644)); !strings.Contains(out, `The Widget "w3" is invalid: spec: Invalid value: size must be at most 10`) {
			t.Errorf("kubectl apply of a widget the CEL rule refuses: %s", out)
		}
	})

	step("3-get", func(t *testing.T) {
		out := k.run(t, "get", "wd")
		if h := tableHeader(out); !reflect.DeepEqual(h, []string{"NAME", "SIZE", "COLOR", "AGE"}) {
			t.Errorf("kubectl get wd header = %q; want [NAME SIZE COLOR AGE]\n%s", h, out)
		}
		if row := tableRow(out, "w1"); row == nil || row["SIZE"] != "1" || row["COLOR"] != "blue" {
			t.Errorf("kubectl get wd row for w1 = %v; want SIZE 1 (defaulted), COLOR blue\n%s", row, out)
		}
		out = k.run(t, "get", "widget", "w2", "-o", "json")
		var w2 unstructured.Unstructured
		if err := w2.UnmarshalJSON([]byte(out)); err != nil {
			t.Fatalf("kubectl get widget w2 -o json: %v\n%s", err, out)
		}
		if _, found, _ := unstructured.NestedFieldNoCopy(w2.Object, "spec", "extra"); found {
			t.Errorf("w2 kept spec.extra, which its schema prunes:\n%s", out)
		}
	})

	step("4-edit", func(t *testing.T) {
		editor := k.writeFile(t, "editor.sh", widgetEditorScript, 0o755)
		if out := k.runEnv(t, []string{"EDITOR=" + editor, "KUBE_EDITOR=" + editor}, "edit", "widget", "w1"); out != "widget.example.com/w1 edited\n" {
			t.Errorf("kubectl edit printed %q", out)
		}
		if color := k.run(t, "get", "wd", "w1", "-o", "jsonpath={.spec.color}"); color != "red" {
			t.Errorf("after kubectl edit: spec.color = %q; want red", color)
		}
	})

	step("5-patch", func(t *testing.T) {
		if out := k.run(t, "patch", "wd", "w1", "--type=merge", "-p", `{"spec":{"size":4}}`); out != "widget.example.com/w1 patched\n" {
			t.Errorf("kubectl patch --type=merge printed %q", out)
		}
		if out := k.run(t, "get", "wd", "w1", "-o", "jsonpath={.spec.size} {.metadata.generation}"); out != "4 3" {
			t.Errorf("after the patch: size and generation %q; want 4 3", out)
		}
		// kubectl's default, a strategic merge patch, is not offered for
		// custom objects (415), as kube.
		if out := k.fail(t, "patch", "wd", "w1", "-p", `{"spec":{"size":5}}`); !strings.Contains(out, "strategic-merge-patch+json is not supported") {
			t.Errorf("kubectl patch (strategic): %s", out)
		}
	})

	step("6-delete", func(t *testing.T) {
		if out := k.run(t, "delete", "widget", "w1"); out != "widget.example.com \"w1\" deleted\n" {
			t.Errorf("kubectl delete widget printed %q", out)
		}
		k.waitGone(t, "widget w1", "/apis/example.com/v1/namespaces/default/widgets/w1")
		if out := k.run(t, "delete", "crd", "widgets.example.com"); out != "customresourcedefinition.apiextensions.k8s.io \"widgets.example.com\" deleted\n" {
			t.Errorf("kubectl delete crd printed %q", out)
		}
		k.waitGone(t, "the CRD", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.example.com")
		k.waitGone(t, "the widgets", "/apis/example.com/v1/namespaces/default/widgets")
	})
}

// createWidgetsCRD creates the widgets CRD with apiextensions' typed
// client and waits until it is established.
func createWidgetsCRD(t *testing.T, ctx context.Context, cfg *rest.Config) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	client, err := apiextensionsclient.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	crd := widgetsCRD(t)
	created, err := client.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, crd, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create the CRD: %v", err)
	}
	for {
		got, err := client.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, created.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("get the CRD: %v", err)
		}
		for _, c := range got.Status.Conditions {
			if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
				return got
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the CRD is not established: %+v", got.Status)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// widgetsCRD is widgetsCRDManifest as a typed object.
func widgetsCRD(t *testing.T) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.Unmarshal([]byte(widgetsCRDManifest), &crd); err != nil {
		t.Fatal(err)
	}
	return &crd
}

func widget(name string, spec map[string]any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "example.com/v1", "kind": "Widget", "metadata": map[string]any{"name": name}, "spec": spec,
	}}
}

// TestDynamicInformerCustomResources: client-go's dynamic client and a
// dynamic informer on custom objects of the real binary see them added,
// updated and deleted.
func TestDynamicInformerCustomResources(t *testing.T) {
	t.Parallel()
	srv := startConcord(t, "concord", t.TempDir())
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	cfg := &rest.Config{Host: srv.url}
	createWidgetsCRD(t, ctx, cfg)
	client, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	widgets := client.Resource(widgetsGVR).Namespace("default")
	// The first write may race this replica's catalog catching up with
	// the CRD (404 until it serves it): retry briefly.
	var w1 *unstructured.Unstructured
	for w1 == nil {
		if w1, err = widgets.Create(ctx, widget("w1", map[string]any{"color": "blue"}), metav1.CreateOptions{}); err != nil {
			if ctx.Err() != nil {
				t.Fatalf("create w1: %v", err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

	var mu sync.Mutex
	var events []string
	record := func(kind string, obj any) {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		u := obj.(*unstructured.Unstructured)
		color, _, _ := unstructured.NestedString(u.Object, "spec", "color")
		mu.Lock()
		events = append(events, fmt.Sprintf("%s %s %s", kind, u.GetName(), color))
		mu.Unlock()
	}
	factory := dynamicinformer.NewFilteredDynamicSharedInformerFactory(client, 0, "default", nil)
	informer := factory.ForResource(widgetsGVR).Informer()
	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { record("add", obj) },
		UpdateFunc: func(_, obj any) { record("update", obj) },
		DeleteFunc: func(obj any) { record("delete", obj) },
	}); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	factory.Start(stop)
	defer func() {
		close(stop) // before Shutdown, which waits for the informer to stop
		factory.Shutdown()
	}()
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		t.Fatal("the informer did not sync")
	}
	if _, err := widgets.Create(ctx, widget("w2", map[string]any{"color": "green"}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	w1.Object["spec"] = map[string]any{"color": "red"}
	if _, err := widgets.Update(ctx, w1, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := widgets.Delete(ctx, "w2", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	want := []string{"add w1 blue", "add w2 green", "update w1 red", "delete w2 green"}
	for {
		mu.Lock()
		got := append([]string(nil), events...)
		mu.Unlock()
		if reflect.DeepEqual(got, want) {
			break
		}
		if len(got) > len(want) || ctx.Err() != nil {
			t.Fatalf("informer events %q; want %q", got, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestReplicasServeCustomResources: two replicas over one etcd. A CRD
// created through A is served by B within 2 s (the time is logged), and a
// schema change made through A is enforced by B: no write the new schema
// refuses is accepted by B, however soon after the change it arrives.
func TestReplicasServeCustomResources(t *testing.T) {
	t.Parallel()
	replicas := startReplicas(t, 2)
	a, b := replicas[0], replicas[1]
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	crdsURL := "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
	widgetsURL := "/apis/example.com/v1/namespaces/default/widgets"

	code, body := do(t, http.MethodPost, a.url+crdsURL, widgetsCRD(t))
	created := time.Now()
	if code != http.StatusCreated {
		t.Fatalf("create the CRD through A: %d %s", code, body)
	}
	for {
		code, body := do(t, http.MethodGet, b.url+widgetsURL, nil)
		if code == http.StatusOK {
			break
		}
		if time.Since(created) > 2*time.Second {
			t.Fatalf("B answers %d %s 2s after A created the CRD; want it served", code, body)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("B serves widgets %v after A's 201 for the CRD", time.Since(created).Round(time.Millisecond))

	// Lower the maximum of spec.size through A, then at once write through
	// B what the new maximum refuses: B refuses it (422), or asks for it
	// again (503) while it catches up; never 201.
	for i, maximum := range []int{9, 7, 5, 3} {
		code, body := do(t, http.MethodGet, a.url+crdsURL+"/widgets.example.com", nil)
		var crd apiextensionsv1.CustomResourceDefinition
		if code != http.StatusOK || json.Unmarshal(body, &crd) != nil {
			t.Fatalf("get the CRD through A: %d %s", code, body)
		}
		crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"].Properties["size"] = apiextensionsv1.JSONSchemaProps{Type: "integer", Maximum: ptrTo(float64(maximum))}
		if code, body := do(t, http.MethodPut, a.url+crdsURL+"/widgets.example.com", &crd); code != http.StatusOK {
			t.Fatalf("PUT the CRD through A: %d %s", code, body)
		}
		tooBig := widget(fmt.Sprintf("big%d", i), map[string]any{"size": maximum + 1})
		for {
			code, body := do(t, http.MethodPost, b.url+widgetsURL, tooBig.Object)
			if code == http.StatusServiceUnavailable {
				time.Sleep(20 * time.Millisecond)
				continue
			}
			if code != http.StatusUnprocessableEntity || !strings.Contains(string(body), fmt.Sprintf("should be less than or equal to %d", maximum)) {
				t.Fatalf("size %d through B right after the maximum became %d through A: %d %s; want 422", maximum+1, maximum, code, body)
			}
			break
		}
		if code, body := do(t, http.MethodPost, b.url+widgetsURL, widget(fmt.Sprintf("ok%d", i), map[string]any{"size": maximum}).Object); code != http.StatusCreated {
			t.Fatalf("size %d through B with the maximum %d: %d %s; want 201", maximum, maximum, code, body)
		}
	}
	if ctx.Err() != nil {
		t.Fatal(ctx.Err())
	}
}

func ptrTo[T any](v T) *T { return &v }
