package openapi_test

import (
	"encoding/json"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	crdbuilder "k8s.io/apiextensions-apiserver/pkg/controller/openapi/builder"
	"k8s.io/kube-openapi/pkg/handler"
	"k8s.io/kube-openapi/pkg/spec3"
	"k8s.io/kube-openapi/pkg/validation/spec"
	"sigs.k8s.io/yaml"

	"github.com/concord-dev/concord/apiserver/openapi"
	"github.com/concord-dev/concord/registry"
)

// The CRDs of these tests: every kind of schema kube's builder treats
// differently (descriptions, defaults, enums, nullable, int-or-string,
// list and map types, embedded resources, preserved unknown fields in part
// and at the root), both scopes, the status and scale subresources,
// selectable fields, and a CRD of three versions of which two are served.
const (
	widgetsCRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.example.com}
spec:
  group: example.com
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget, shortNames: [wd]}
  versions:
  - name: v1
    served: true
    storage: true
    subresources:
      status: {}
      scale: {specReplicasPath: .spec.replicas, statusReplicasPath: .status.replicas}
    selectableFields: [{jsonPath: .spec.color}]
    schema:
      openAPIV3Schema:
        type: object
        description: A Widget is a thing of some size and color.
        properties:
          spec:
            type: object
            description: What the widget should be.
            properties:
              size: {type: integer, default: 1, minimum: 0, description: How big the widget is.}
              color: {type: string, enum: [red, blue], description: The color of the widget.}
              replicas: {type: integer}
              port: {x-kubernetes-int-or-string: true}
              note: {type: string, nullable: true}
              tags:
                type: array
                x-kubernetes-list-type: set
                items: {type: string}
              parts:
                type: array
                x-kubernetes-list-type: map
                x-kubernetes-list-map-keys: [name]
                items:
                  type: object
                  required: [name]
                  properties: {name: {type: string}, count: {type: integer}}
              template:
                type: object
                x-kubernetes-embedded-resource: true
                x-kubernetes-preserve-unknown-fields: true
              extra:
                type: object
                x-kubernetes-preserve-unknown-fields: true
            x-kubernetes-validations:
            - {rule: "self.size <= 10", message: "size must be at most 10"}
          status:
            type: object
            properties:
              ready: {type: boolean}
              replicas: {type: integer}
`
	blobsCRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: blobs.storage.example.org}
spec:
  group: storage.example.org
  scope: Cluster
  names: {plural: blobs, singular: blob, kind: Blob, listKind: BlobCollection}
  versions:
  - name: v1alpha1
    served: true
    storage: true
    schema:
      openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
`
	gizmosCRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: gizmos.example.com}
spec:
  group: example.com
  scope: Namespaced
  names: {plural: gizmos, singular: gizmo, kind: Gizmo}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec: {type: object, properties: {speed: {type: integer, description: Speed in v1.}}}
  - name: v2
    served: true
    storage: false
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec: {type: object, properties: {velocity: {type: integer, description: Speed in v2.}}}
  - name: v3
    served: false
    storage: false
    schema:
      openAPIV3Schema: {type: object}
`
)

func crdOf(t *testing.T, manifest string) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.UnmarshalStrict([]byte(manifest), &crd); err != nil {
		t.Fatal(err)
	}
	return &crd
}

// customResources are the declarations the catalog serves for crd, as
// crdserving makes them: one per served version.
func customResources(t *testing.T, crd *apiextensionsv1.CustomResourceDefinition) []*registry.Resource {
	t.Helper()
	var out []*registry.Resource
	for _, v := range crd.Spec.Versions {
		if !v.Served {
			continue
		}
		res, err := registry.CustomResource(crd, v.Name)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, res)
	}
	return out
}

// jsonOf is v as generic JSON, to compare documents as they are served.
func jsonOf(t *testing.T, v any) any {
	t.Helper()
	raw, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out any
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func gvksOf(t *testing.T, s spec.Schema) string {
	t.Helper()
	raw, err := json.Marshal(s.Extensions["x-kubernetes-group-version-kind"])
	if err != nil {
		t.Fatal(err)
	}
	return string(raw)
}

// TestBuildCustomResources: the documents of the built-in resources and of
// three CRDs' custom resources. The custom resources' definitions and paths
// are, to the byte, those of kube-apiserver 1.37's builder with the options
// of its controllers (v2: each CRD's served versions merged, defaults
// pruned; v3: one document per group version), and the built-in ones are
// untouched by them.
func TestBuildCustomResources(t *testing.T) {
	builtIn, err := openapi.Build(registry.Resources, "v1.37.0")
	if err != nil {
		t.Fatal(err)
	}
	crds := []*apiextensionsv1.CustomResourceDefinition{crdOf(t, widgetsCRD), crdOf(t, blobsCRD), crdOf(t, gizmosCRD)}
	resources := append([]*registry.Resource(nil), registry.Resources...)
	for _, crd := range crds {
		resources = append(resources, customResources(t, crd)...)
	}
	if got := len(openapi.CustomResources(resources)); got != 4 {
		t.Fatalf("CustomResources: %d; want 4 (widgets v1, blobs v1alpha1, gizmos v1 and v2)", got)
	}
	specs, err := openapi.Build(resources, "v1.37.0")
	if err != nil {
		t.Fatal(err)
	}
	if len(specs.Errors) != 0 {
		t.Fatalf("Build left custom resources out: %v", specs.Errors)
	}

	// What kube's controllers build of the same CRDs (as served: with
	// kube's v1 defaults).
	kubeV2 := map[string]spec.Schema{}
	kubeV2Paths := map[string]spec.PathItem{}
	kubeV3 := map[string][]*spec3.OpenAPI{}
	for _, crd := range crds {
		served := registry.CustomResourceDefinitionOf(customResources(t, crd)[0])
		for _, v := range served.Spec.Versions {
			if !v.Served {
				continue
			}
			v2, err := crdbuilder.BuildOpenAPIV2(served, v.Name, crdbuilder.Options{V2: true, IncludeSelectableFields: true})
			if err != nil {
				t.Fatal(err)
			}
			for name, def := range handler.PruneDefaults(v2.Definitions) {
				if !strings.HasPrefix(name, "io.k8s.") {
					kubeV2[name] = def
				}
			}
			for path, item := range v2.Paths.Paths {
				kubeV2Paths[path] = item
			}
			v3, err := crdbuilder.BuildOpenAPIV3(served, v.Name, crdbuilder.Options{V2: false, IncludeSelectableFields: true})
			if err != nil {
				t.Fatal(err)
			}
			key := "apis/" + served.Spec.Group + "/" + v.Name
			kubeV3[key] = append(kubeV3[key], v3)
		}
	}

	// v2: the custom resources' definitions, named as kube names them.
	var names []string
	for name := range kubeV2 {
		names = append(names, name)
	}
	sort.Strings(names)
	wantNames := []string{
		"com.example.v1.Gizmo", "com.example.v1.GizmoList", "com.example.v1.Widget", "com.example.v1.WidgetList",
		"com.example.v2.Gizmo", "com.example.v2.GizmoList",
		"org.example.storage.v1alpha1.Blob", "org.example.storage.v1alpha1.BlobCollection",
	}
	if diff := cmp.Diff(wantNames, names); diff != "" {
		t.Fatalf("kube's builder defines (-want +got):\n%s", diff)
	}
	for _, name := range names {
		got, ok := specs.V2.Definitions[name]
		if !ok {
			t.Errorf("v2: no definition %s", name)
			continue
		}
		if diff := cmp.Diff(jsonOf(t, kubeV2[name]), jsonOf(t, got)); diff != "" {
			t.Errorf("v2 definition %s differs from kube's (-kube +concord):\n%s", name, diff)
		}
	}
	for path, item := range kubeV2Paths {
		got, ok := specs.V2.Paths.Paths[path]
		if !ok {
			t.Errorf("v2: no path %s", path)
			continue
		}
		if diff := cmp.Diff(jsonOf(t, item), jsonOf(t, got)); diff != "" {
			t.Errorf("v2 path %s differs from kube's (-kube +concord):\n%s", path, diff)
		}
	}
	// The definitions they share with the built-ins (ObjectMeta, Status,
	// DeleteOptions, Patch, autoscaling's Scale) are the same schemas: none
	// is renamed (Foo_v2), and the built-in paths and definitions remain.
	for name := range specs.V2.Definitions {
		if strings.Contains(name, "_v") {
			t.Errorf("v2: definition %s: a conflict between the built-in and the CRDs' definitions", name)
		}
	}
	for name, def := range builtIn.V2.Definitions {
		got, ok := specs.V2.Definitions[name]
		if !ok {
			t.Errorf("v2: the built-in definition %s is gone", name)
			continue
		}
		def.Extensions, got.Extensions = nil, nil // the GVKs of shared types are merged, as kube merges them
		if diff := cmp.Diff(jsonOf(t, def), jsonOf(t, got)); diff != "" {
			t.Errorf("v2: the built-in definition %s changed (-before +after):\n%s", name, diff)
		}
	}
	for path := range builtIn.V2.Paths.Paths {
		if _, ok := specs.V2.Paths.Paths[path]; !ok {
			t.Errorf("v2: the built-in path %s is gone", path)
		}
	}
	if got, want := len(specs.V2.Paths.Paths), len(builtIn.V2.Paths.Paths)+len(kubeV2Paths); got != want {
		t.Errorf("v2: %d paths; want %d (%d built-in, %d of the CRDs)", got, want, len(builtIn.V2.Paths.Paths), len(kubeV2Paths))
	}

	// v2, as kubectl reads it: the kind, the fields and their descriptions,
	// no defaults, the PATCH operation with fieldValidation.
	w := specs.V2.Definitions["com.example.v1.Widget"]
	if got := gvksOf(t, w); got != `[{"group":"example.com","kind":"Widget","version":"v1"}]` {
		t.Errorf("v2 Widget x-kubernetes-group-version-kind = %s", got)
	}
	if got := gvksOf(t, specs.V2.Definitions["org.example.storage.v1alpha1.BlobCollection"]); got != `[{"group":"storage.example.org","kind":"BlobCollection","version":"v1alpha1"}]` {
		t.Errorf("v2 BlobCollection x-kubernetes-group-version-kind = %s", got)
	}
	if meta := w.Properties["metadata"]; w.Description != "A Widget is a thing of some size and color." || meta.Ref.String() != "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta" {
		t.Errorf("v2 Widget: description %q, metadata %s", w.Description, jsonOf(t, meta))
	}
	size := w.Properties["spec"].Properties["size"]
	if size.Description != "How big the widget is." || size.Default != nil || !size.Type.Contains("integer") {
		t.Errorf("v2 Widget spec.size = %s; want the description, type integer, no default (kube prunes them from v2)", jsonOf(t, size))
	}
	if blob := specs.V2.Definitions["org.example.storage.v1alpha1.Blob"]; len(blob.Properties) != 0 || !blob.Type.Contains("object") {
		t.Errorf("v2 Blob (unknown fields preserved at the root) = %s; want an object without properties, as kube", jsonOf(t, blob))
	}
	item := specs.V2.Paths.Paths["/apis/example.com/v1/namespaces/{namespace}/widgets/{name}"]
	if item.Patch == nil || !hasV2Query(item.Patch, "fieldValidation") || gvkOfOperation(t, item.Patch.Extensions) != `{"group":"example.com","version":"v1","kind":"Widget"}` {
		t.Errorf("v2 PATCH widgets: %s; want the Widget GVK and a fieldValidation parameter", jsonOf(t, item.Patch))
	}
	for _, path := range []string{
		"/apis/example.com/v1/widgets",
		"/apis/example.com/v1/namespaces/{namespace}/widgets",
		"/apis/example.com/v1/namespaces/{namespace}/widgets/{name}/status",
		"/apis/example.com/v1/namespaces/{namespace}/widgets/{name}/scale",
		"/apis/storage.example.org/v1alpha1/blobs/{name}",
		"/apis/example.com/v2/namespaces/{namespace}/gizmos/{name}",
	} {
		if _, ok := specs.V2.Paths.Paths[path]; !ok {
			t.Errorf("v2: no path %s", path)
		}
	}
	if _, ok := specs.V2.Paths.Paths["/apis/example.com/v3/namespaces/{namespace}/gizmos/{name}"]; ok {
		t.Error("v2 documents gizmos v3, which is not served")
	}

	// v3: one document per group version, kube's merge of its CRDs'.
	for key, docs := range kubeV3 {
		want, err := crdbuilder.MergeSpecsV3(docs...)
		if err != nil {
			t.Fatal(err)
		}
		got := specs.V3[key]
		if got == nil {
			t.Errorf("v3: no document %s", key)
			continue
		}
		if diff := cmp.Diff(jsonOf(t, want), jsonOf(t, got)); diff != "" {
			t.Errorf("v3 %s differs from kube's (-kube +concord):\n%s", key, diff)
		}
	}
	var keys []string
	for key := range specs.V3 {
		if _, ok := builtIn.V3[key]; !ok {
			keys = append(keys, key)
		}
	}
	sort.Strings(keys)
	if diff := cmp.Diff([]string{"apis/example.com/v1", "apis/example.com/v2", "apis/storage.example.org/v1alpha1"}, keys); diff != "" {
		t.Errorf("v3 documents besides the built-in ones (-want +got):\n%s", diff)
	}
	for key, doc := range builtIn.V3 {
		if diff := cmp.Diff(jsonOf(t, doc), jsonOf(t, specs.V3[key])); diff != "" {
			t.Errorf("v3: the built-in document %s changed:\n%s", key, diff)
		}
	}
	v1 := specs.V3["apis/example.com/v1"]
	var schemas []string
	for name := range v1.Components.Schemas {
		if !strings.HasPrefix(name, "io.k8s.") {
			schemas = append(schemas, name)
		}
	}
	sort.Strings(schemas)
	if diff := cmp.Diff([]string{"com.example.v1.Gizmo", "com.example.v1.GizmoList", "com.example.v1.Widget", "com.example.v1.WidgetList"}, schemas); diff != "" {
		t.Errorf("v3 apis/example.com/v1 schemas (-want +got):\n%s", diff)
	}
	wv3 := v1.Components.Schemas["com.example.v1.Widget"]
	if got := gvksOf(t, *wv3); got != `[{"group":"example.com","kind":"Widget","version":"v1"}]` {
		t.Errorf("v3 Widget x-kubernetes-group-version-kind = %s", got)
	}
	if sf := jsonOf(t, wv3.Extensions["x-kubernetes-selectable-fields"]); !cmp.Equal(sf, []any{map[string]any{"fieldPath": "spec.color"}}) {
		t.Errorf("v3 Widget x-kubernetes-selectable-fields = %v", sf)
	}
	size3 := wv3.Properties["spec"].Properties["size"]
	if jsonOf(t, size3.Default) != float64(1) || size3.Minimum == nil || *size3.Minimum != 0 {
		t.Errorf("v3 Widget spec.size = %s; want default 1 and minimum 0 (v3 keeps them)", jsonOf(t, size3))
	}
	if got := wv3.Properties["metadata"].AllOf; len(got) != 1 || got[0].Ref.String() != "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta" {
		t.Errorf("v3 Widget metadata = %s", jsonOf(t, wv3.Properties["metadata"]))
	}
	if _, ok := v1.Components.Schemas["io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"]; !ok {
		t.Error("v3 apis/example.com/v1 has no ObjectMeta schema")
	}
	patch := v1.Paths.Paths["/apis/example.com/v1/namespaces/{namespace}/widgets/{name}"].Patch
	if patch == nil || gvkOfOperation(t, patch.Extensions) != `{"group":"example.com","version":"v1","kind":"Widget"}` || !hasV3Query(patch, "fieldValidation") {
		t.Errorf("v3 PATCH widgets = %s; want the Widget GVK and a fieldValidation parameter (kubectl's check for server-side field validation)", jsonOf(t, patch))
	}
	if _, ok := specs.V3["apis/example.com/v2"].Components.Schemas["com.example.v1.Widget"]; ok {
		t.Error("v3 apis/example.com/v2 has the v1 Widget")
	}
}

// TestBuildCustomResourceInBuiltInGroupVersion: a CRD of a group version
// the built-ins document leaves that document as it is (the built-in
// resources' paths and definitions win, as kube's merge makes them win)
// and is reported; its v2 definitions are merged as kube merges them.
func TestBuildCustomResourceInBuiltInGroupVersion(t *testing.T) {
	crd := crdOf(t, strings.ReplaceAll(gizmosCRD, "example.com", "coordination.k8s.io"))
	res := customResources(t, crd)
	builtIn, err := openapi.Build(registry.Resources, "v1.37.0")
	if err != nil {
		t.Fatal(err)
	}
	specs, err := openapi.Build(append(append([]*registry.Resource(nil), registry.Resources...), res...), "v1.37.0")
	if err != nil {
		t.Fatal(err)
	}
	if len(specs.Errors) != 1 || !strings.Contains(specs.Errors[0].Error(), "coordination.k8s.io/v1 has built-in resources") {
		t.Errorf("Errors = %v; want one, for gizmos in coordination.k8s.io/v1", specs.Errors)
	}
	if diff := cmp.Diff(jsonOf(t, builtIn.V3["apis/coordination.k8s.io/v1"]), jsonOf(t, specs.V3["apis/coordination.k8s.io/v1"])); diff != "" {
		t.Errorf("v3 apis/coordination.k8s.io/v1 changed:\n%s", diff)
	}
	if specs.V3["apis/coordination.k8s.io/v2"] == nil {
		t.Error("v3: no apis/coordination.k8s.io/v2 for the CRD's v2")
	}
}

// TestBuilderKeepsCustomResourceDocuments: a Builder builds a custom
// resource's documents once while it is served, and forgets them when it
// is not.
func TestBuilderKeepsCustomResourceDocuments(t *testing.T) {
	res := customResources(t, crdOf(t, widgetsCRD))
	all := append(append([]*registry.Resource(nil), registry.Resources...), res...)
	var b openapi.Builder
	first, err := b.Build(all, "v1.37.0")
	if err != nil {
		t.Fatal(err)
	}
	second, err := b.Build(all, "v1.37.0")
	if err != nil {
		t.Fatal(err)
	}
	if first.V3["apis/example.com/v1"].Components.Schemas["com.example.v1.Widget"] != second.V3["apis/example.com/v1"].Components.Schemas["com.example.v1.Widget"] {
		t.Error("the second build built the Widget schema again")
	}
	third, err := b.Build(registry.Resources, "v1.37.0")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := third.V2.Definitions["com.example.v1.Widget"]; ok || third.V3["apis/example.com/v1"] != nil {
		t.Error("a build without the widgets still documents them")
	}
	if _, ok := second.V2.Definitions["com.example.v1.Widget"]; !ok {
		t.Error("a later build changed an earlier one's documents")
	}
}

func hasV2Query(op *spec.Operation, name string) bool {
	for _, p := range op.Parameters {
		if p.Name == name && p.In == "query" {
			return true
		}
	}
	return false
}

func hasV3Query(op *spec3.Operation, name string) bool {
	for _, p := range op.Parameters {
		if p.Name == name && p.In == "query" {
			return true
		}
	}
	return false
}

func gvkOfOperation(t *testing.T, ext spec.Extensions) string {
	t.Helper()
	raw, err := json.Marshal(ext["x-kubernetes-group-version-kind"])
	if err != nil {
		t.Fatal(err)
	}
	return string(raw)
}
