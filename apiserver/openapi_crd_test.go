package apiserver_test

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/openapi3"
	"k8s.io/client-go/rest"
	"k8s.io/kube-openapi/pkg/validation/spec"
)

// v2Doc fetches /openapi/v2 and its ETag.
func v2Doc(t *testing.T, s *testServer) (*spec.Swagger, string) {
	t.Helper()
	resp := s.do(t, http.MethodGet, "/openapi/v2", nil)
	if resp.Code != http.StatusOK || resp.Header.Get("ETag") == "" {
		t.Fatalf("GET /openapi/v2: %d, ETag %q", resp.Code, resp.Header.Get("ETag"))
	}
	var swagger spec.Swagger
	resp.decode(t, &swagger)
	return &swagger, resp.Header.Get("ETag")
}

// waitOpenAPI polls the v3 index until done says the documents are as
// the test waits for them to be, for at most 10 s.
func waitOpenAPI(t *testing.T, s *testServer, what string, done func(index map[string]string) bool) map[string]string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		index := v3Index(t, s)
		if done(index) {
			return index
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not so 10s later; /openapi/v3 lists %v", what, index)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

const gadgetsV1Key = "apis/example.com/v1"

// TestOpenAPICustomResourcesFollowCRDs: a CRD's custom resources are in
// /openapi/v2 and /openapi/v3/apis/<group>/<version> as kube-apiserver
// documents them (definitions com.example.v1.Gadget and GadgetList with
// their x-kubernetes-group-version-kind, the paths with their subresources,
// PATCH with fieldValidation), from the moment the catalog serves them;
// a change of the CRD's schema changes the document, its hash in the index
// and the v2 ETag, and nothing else; once the CRD is deleted, all of it is
// gone again.
func TestOpenAPICustomResourcesFollowCRDs(t *testing.T) {
	s := startCRDServer(t)
	before := v3Index(t, s)
	if _, ok := before[gadgetsV1Key]; ok {
		t.Fatalf("/openapi/v3 lists %s before any CRD", gadgetsV1Key)
	}
	if resp := s.do(t, http.MethodGet, "/openapi/v3/"+gadgetsV1Key, nil); resp.Code != http.StatusNotFound {
		t.Errorf("GET /openapi/v3/%s before the CRD: %d; want 404", gadgetsV1Key, resp.Code)
	}
	v2Before, etagBefore := v2Doc(t, s)

	crd := s.createCRD(t, gadgetsCRD)
	index := v3Index(t, s)
	u, ok := index[gadgetsV1Key]
	if !ok || !strings.HasPrefix(u, "/openapi/v3/"+gadgetsV1Key+"?hash=") {
		t.Fatalf("/openapi/v3 once gadgets are served: %v; want %s with its hash", index, gadgetsV1Key)
	}
	for key, u := range before {
		if index[key] != u {
			t.Errorf("/openapi/v3 %s: %s before the CRD, %s after; want it unchanged", key, u, index[key])
		}
	}

	doc := v3Doc(t, s, u)
	var own []string
	for name := range doc.Components.Schemas {
		if !strings.HasPrefix(name, "io.k8s.") {
			own = append(own, name)
		}
	}
	slices.Sort(own)
	if want := []string{"com.example.v1.Gadget", "com.example.v1.GadgetList"}; !slices.Equal(own, want) {
		t.Errorf("v3 %s schemas besides kube's own types: %v; want %v", gadgetsV1Key, own, want)
	}
	for _, name := range []string{"io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta", "io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta", "io.k8s.api.autoscaling.v1.Scale"} {
		if doc.Components.Schemas[name] == nil {
			t.Errorf("v3 %s has no %s", gadgetsV1Key, name)
		}
	}
	g := doc.Components.Schemas["com.example.v1.Gadget"]
	if g == nil {
		t.Fatal("no com.example.v1.Gadget")
	}
	if got := schemaGVKs(t, g.Extensions); !slices.Equal(got, []gvk{{"example.com", "v1", "Gadget"}}) {
		t.Errorf("v3 Gadget x-kubernetes-group-version-kind = %+v", got)
	}
	if got := schemaGVKs(t, doc.Components.Schemas["com.example.v1.GadgetList"].Extensions); !slices.Equal(got, []gvk{{"example.com", "v1", "GadgetList"}}) {
		t.Errorf("v3 GadgetList x-kubernetes-group-version-kind = %+v", got)
	}
	for _, prop := range []string{"apiVersion", "kind", "metadata", "spec", "status"} {
		if _, ok := g.Properties[prop]; !ok {
			t.Errorf("v3 Gadget has no property %s", prop)
		}
	}
	color := g.Properties["spec"].Properties["color"]
	if raw, _ := json.Marshal(color.Enum); string(raw) != `["red","blue"]` || !color.Type.Contains("string") {
		t.Errorf("v3 Gadget spec.color = %+v; want a string of [red blue]", color)
	}
	if rules := g.Properties["spec"].Extensions["x-kubernetes-validations"]; rules == nil {
		t.Error("v3 Gadget spec has no x-kubernetes-validations")
	}
	base := "/apis/example.com/v1/namespaces/{namespace}/gadgets"
	for _, path := range []string{"/apis/example.com/v1/gadgets", base, base + "/{name}", base + "/{name}/status", base + "/{name}/scale"} {
		if doc.Paths.Paths[path] == nil {
			t.Errorf("v3 %s has no path %s", gadgetsV1Key, path)
		}
	}
	patch := doc.Paths.Paths[base+"/{name}"].Patch
	if patch == nil || operationGVK(t, patch.Extensions) != (gvk{"example.com", "v1", "Gadget"}) || !hasQueryParam(patch, "fieldValidation") {
		t.Fatalf("v3 PATCH %s/{name}: %+v; want the Gadget GVK and fieldValidation, kubectl's check for server-side field validation", base, patch)
	}

	// client-go's OpenAPI v3 client, which kubectl explain reads, finds it.
	dc, err := discovery.NewDiscoveryClientForConfig(&rest.Config{Host: s.URL})
	if err != nil {
		t.Fatal(err)
	}
	root := openapi3.NewRoot(dc.OpenAPIV3())
	gv := schema.GroupVersion{Group: "example.com", Version: "v1"}
	if gvs, err := root.GroupVersions(); err != nil || !slices.Contains(gvs, gv) {
		t.Errorf("openapi3 Root.GroupVersions() = %v, %v; want example.com/v1 among them", gvs, err)
	}
	if gvSpec, err := root.GVSpec(gv); err != nil || gvSpec.Components.Schemas["com.example.v1.Gadget"] == nil {
		t.Errorf("openapi3 Root.GVSpec(example.com/v1): %v", err)
	}

	// v2: the same, merged into the built-in document.
	v2, etag := v2Doc(t, s)
	if etag == etagBefore {
		t.Errorf("/openapi/v2 ETag %s unchanged by the CRD", etag)
	}
	for _, name := range []string{"com.example.v1.Gadget", "com.example.v1.GadgetList"} {
		def, ok := v2.Definitions[name]
		if !ok {
			t.Errorf("v2 has no definition %s", name)
			continue
		}
		if got := schemaGVKs(t, def.Extensions); len(got) != 1 || got[0] != (gvk{"example.com", "v1", strings.TrimPrefix(name, "com.example.v1.")}) {
			t.Errorf("v2 %s x-kubernetes-group-version-kind = %+v", name, got)
		}
	}
	if size := v2.Definitions["com.example.v1.Gadget"].Properties["spec"].Properties["size"]; size.Default != nil || !size.Type.Contains("integer") {
		t.Errorf("v2 Gadget spec.size = %+v; want an integer without its default (kube prunes defaults from v2)", size)
	}
	if p := v2.Paths.Paths[base+"/{name}"].Patch; p == nil || operationGVK(t, p.Extensions) != (gvk{"example.com", "v1", "Gadget"}) {
		t.Errorf("v2 PATCH %s/{name}: %+v", base, p)
	}
	for _, path := range []string{base + "/{name}/status", base + "/{name}/scale", "/apis/example.com/v1/gadgets"} {
		if _, ok := v2.Paths.Paths[path]; !ok {
			t.Errorf("v2 has no path %s", path)
		}
	}
	for path := range v2Before.Paths.Paths {
		if _, ok := v2.Paths.Paths[path]; !ok {
			t.Errorf("v2 lost the built-in path %s", path)
		}
	}
	for name := range v2.Definitions {
		if strings.Contains(name, "_v") {
			t.Errorf("v2 definition %s: the CRD's definitions conflict with the built-in ones", name)
		}
	}

	// A change of the schema: a new documented field.
	resp := s.do(t, http.MethodGet, crds+"/gadgets.example.com", nil)
	var current apiextensionsv1.CustomResourceDefinition
	resp.decode(t, &current)
	specProps := current.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
	specProps.Properties["shape"] = apiextensionsv1.JSONSchemaProps{Type: "string", Description: "The shape of the gadget."}
	current.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"] = specProps
	if resp := s.do(t, http.MethodPut, crds+"/gadgets.example.com", &current); resp.Code != http.StatusOK {
		t.Fatalf("PUT the CRD: %d %s", resp.Code, resp.Body)
	}
	changed := waitOpenAPI(t, s, "the CRD's new field documented", func(index map[string]string) bool {
		next, ok := index[gadgetsV1Key]
		return ok && v3Doc(t, s, next).Components.Schemas["com.example.v1.Gadget"].Properties["spec"].Properties["shape"].Description == "The shape of the gadget."
	})
	if changed[gadgetsV1Key] == u {
		t.Errorf("/openapi/v3 %s: hash unchanged by the schema change (%s)", gadgetsV1Key, u)
	}
	for key, u := range before {
		if changed[key] != u {
			t.Errorf("/openapi/v3 %s changed with the CRD: %s, then %s", key, u, changed[key])
		}
	}
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	redirect, err := client.Get(s.URL + u)
	if err != nil {
		t.Fatal(err)
	}
	redirect.Body.Close()
	if redirect.StatusCode != http.StatusMovedPermanently || redirect.Header.Get("Location") != changed[gadgetsV1Key] {
		t.Errorf("GET the old hash %s: %d Location %q; want 301 to %s", u, redirect.StatusCode, redirect.Header.Get("Location"), changed[gadgetsV1Key])
	}
	v2Changed, etagChanged := v2Doc(t, s)
	if etagChanged == etag {
		t.Errorf("/openapi/v2 ETag %s unchanged by the schema change", etag)
	}
	if d := v2Changed.Definitions["com.example.v1.Gadget"].Properties["spec"].Properties["shape"].Description; d != "The shape of the gadget." {
		t.Errorf("v2 Gadget spec.shape description %q", d)
	}

	// The CRD deleted: its documents go with its resource.
	if resp := s.do(t, http.MethodDelete, crds+"/"+crd.Name, nil); resp.Code != http.StatusOK {
		t.Fatalf("DELETE the CRD: %d %s", resp.Code, resp.Body)
	}
	after := waitOpenAPI(t, s, "the deleted CRD's group version gone from /openapi/v3", func(index map[string]string) bool {
		_, ok := index[gadgetsV1Key]
		return !ok
	})
	for key, u := range before {
		if after[key] != u {
			t.Errorf("/openapi/v3 %s: %s before the CRD, %s after its deletion", key, u, after[key])
		}
	}
	if len(after) != len(before) {
		t.Errorf("/openapi/v3 lists %v after the CRD's deletion; want %v", after, before)
	}
	if resp := s.do(t, http.MethodGet, "/openapi/v3/"+gadgetsV1Key, nil); resp.Code != http.StatusNotFound {
		t.Errorf("GET /openapi/v3/%s after the CRD's deletion: %d; want 404", gadgetsV1Key, resp.Code)
	}
	v2After, etagAfter := v2Doc(t, s)
	if etagAfter == etagChanged {
		t.Errorf("/openapi/v2 ETag %s unchanged by the CRD's deletion", etagAfter)
	}
	for name := range v2After.Definitions {
		if strings.HasPrefix(name, "com.example.") {
			t.Errorf("v2 still defines %s after the CRD's deletion", name)
		}
	}
	for path := range v2After.Paths.Paths {
		if strings.HasPrefix(path, "/apis/example.com/") {
			t.Errorf("v2 still has the path %s after the CRD's deletion", path)
		}
	}
	if len(v2After.Paths.Paths) != len(v2Before.Paths.Paths) || len(v2After.Definitions) != len(v2Before.Definitions) {
		t.Errorf("v2 after the CRD's deletion: %d paths, %d definitions; before it: %d, %d", len(v2After.Paths.Paths), len(v2After.Definitions), len(v2Before.Paths.Paths), len(v2Before.Definitions))
	}
}

// TestOpenAPICustomResourceVersions: each served version of a CRD is in
// the v3 document of its group version, and both in v2; a version that is
// not served is in neither.
func TestOpenAPICustomResourceVersions(t *testing.T) {
	s := startCRDServer(t)
	s.createCRD(t, `{"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition",
 "metadata":{"name":"gizmos.example.com"},
 "spec":{"group":"example.com","scope":"Cluster","names":{"plural":"gizmos","kind":"Gizmo"},
  "versions":[
   {"name":"v1","served":true,"storage":true,"schema":{"openAPIV3Schema":{"type":"object","properties":{"spec":{"type":"object","properties":{"speed":{"type":"integer","description":"Speed in v1."}}}}}}},
   {"name":"v2","served":true,"storage":false,"schema":{"openAPIV3Schema":{"type":"object","properties":{"spec":{"type":"object","properties":{"velocity":{"type":"integer","description":"Speed in v2."}}}}}}},
   {"name":"v3","served":false,"storage":false,"schema":{"openAPIV3Schema":{"type":"object"}}}]}}`)
	index := v3Index(t, s)
	want := map[string]string{"apis/example.com/v1": "speed", "apis/example.com/v2": "velocity"}
	for key, field := range want {
		u, ok := index[key]
		if !ok {
			t.Errorf("/openapi/v3 has no %s", key)
			continue
		}
		doc := v3Doc(t, s, u)
		version := strings.TrimPrefix(key, "apis/example.com/")
		g := doc.Components.Schemas["com.example."+version+".Gizmo"]
		if g == nil {
			t.Errorf("%s: no com.example.%s.Gizmo", key, version)
			continue
		}
		if _, ok := g.Properties["spec"].Properties[field]; !ok || len(g.Properties["spec"].Properties) != 1 {
			t.Errorf("%s: Gizmo spec %+v; want only %s", key, g.Properties["spec"].Properties, field)
		}
		if doc.Paths.Paths["/apis/example.com/"+version+"/gizmos/{name}"] == nil {
			t.Errorf("%s: no path /apis/example.com/%s/gizmos/{name}", key, version)
		}
		if other := map[string]string{"v1": "v2", "v2": "v1"}[version]; doc.Components.Schemas["com.example."+other+".Gizmo"] != nil {
			t.Errorf("%s documents %s too", key, other)
		}
	}
	if _, ok := index["apis/example.com/v3"]; ok {
		t.Error("/openapi/v3 lists example.com/v3, which is not served")
	}
	v2, _ := v2Doc(t, s)
	for _, name := range []string{"com.example.v1.Gizmo", "com.example.v2.Gizmo", "com.example.v1.GizmoList", "com.example.v2.GizmoList"} {
		if _, ok := v2.Definitions[name]; !ok {
			t.Errorf("v2 has no %s", name)
		}
	}
	if _, ok := v2.Definitions["com.example.v3.Gizmo"]; ok {
		t.Error("v2 defines com.example.v3.Gizmo, which is not served")
	}
}
