package apiserver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
)

// gadgetsCRD serves namespaced Gadgets in example.com/v1: a structural
// schema with a default, bounds, an enum and a CEL rule, the status and
// scale subresources, printer columns and a short name.
const gadgetsCRD = `{"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition",
 "metadata":{"name":"gadgets.example.com"},
 "spec":{"group":"example.com","scope":"Namespaced","names":{"plural":"gadgets","kind":"Gadget","shortNames":["gd"]},
  "versions":[{"name":"v1","served":true,"storage":true,
   "subresources":{"status":{},"scale":{"specReplicasPath":".spec.replicas","statusReplicasPath":".status.replicas","labelSelectorPath":".status.selector"}},
   "additionalPrinterColumns":[{"name":"Size","type":"integer","jsonPath":".spec.size"},{"name":"Color","type":"string","jsonPath":".spec.color"}],
   "schema":{"openAPIV3Schema":{"type":"object","properties":{
    "spec":{"type":"object","properties":{
      "size":{"type":"integer","default":1},
      "replicas":{"type":"integer","minimum":0},
      "color":{"type":"string","enum":["red","blue"]}},
     "x-kubernetes-validations":[{"rule":"self.size <= 10","message":"size must be at most 10"}]},
    "status":{"type":"object","properties":{"ready":{"type":"boolean"},"replicas":{"type":"integer"},"selector":{"type":"string"}}}}}}}]}}`

const gadgets = "/apis/example.com/v1/namespaces/ns/gadgets"

var gadgetsGVR = schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "gadgets"}

// startCRDServer is a test server that serves CRDs as the binary does
// (crdserving, crdstatus and crdcleanup run), with namespace ns.
func startCRDServer(t testing.TB) *testServer {
	t.Helper()
	s := startServerWithOptions(t, serverOptions{crds: true})
	s.namespace(t, "ns")
	return s
}

// createCRD creates the CRD of manifest and waits until the catalog serves
// its custom resource, in every served version, and discovery lists it.
func (s *testServer) createCRD(t testing.TB, manifest string) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	resp := s.do(t, http.MethodPost, crds, manifest)
	if resp.Code != http.StatusCreated {
		t.Fatalf("create CRD: %d %s", resp.Code, resp.Body)
	}
	var crd apiextensionsv1.CustomResourceDefinition
	resp.decode(t, &crd)
	s.waitServed(t, &crd)
	return &crd
}

// waitServed waits until the catalog serves crd's resource in every served
// version and discovery lists it.
func (s *testServer) waitServed(t testing.TB, crd *apiextensionsv1.CustomResourceDefinition) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for _, v := range crd.Spec.Versions {
		if !v.Served {
			continue
		}
		for {
			_, served := s.Catalog.Lookup(crd.Spec.Group, v.Name, crd.Spec.Names.Plural)
			var list metav1.APIResourceList
			if served {
				resp := s.do(t, http.MethodGet, "/apis/"+crd.Spec.Group+"/"+v.Name, nil)
				served = resp.Code == http.StatusOK && json.Unmarshal(resp.Body, &list) == nil &&
					slices.ContainsFunc(list.APIResources, func(r metav1.APIResource) bool { return r.Name == crd.Spec.Names.Plural })
			}
			if served {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s/%s %s is not served 10s after the CRD was created", crd.Spec.Group, v.Name, crd.Spec.Names.Plural)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

func gadget(name string, spec map[string]any) map[string]any {
	return map[string]any{"apiVersion": "example.com/v1", "kind": "Gadget", "metadata": map[string]any{"name": name}, "spec": spec}
}

// object decodes the body as an unstructured object.
func (r response) object(t *testing.T) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(r.Body); err != nil {
		t.Fatalf("body is not an object (%v): %s", err, r.Body)
	}
	return u
}

func dynamicClient(t *testing.T, s *testServer) dynamic.NamespaceableResourceInterface {
	t.Helper()
	client, err := dynamic.NewForConfig(&rest.Config{Host: s.URL})
	if err != nil {
		t.Fatal(err)
	}
	return client.Resource(gadgetsGVR)
}

// TestCustomObjectsHTTP: custom objects over HTTP as kube-apiserver serves
// them: created (defaults applied, generateName, dry run), read as JSON,
// YAML and kubectl's Table with the CRD's printer columns, never as
// protobuf, replaced (409 on a stale version, 428 without one, 412 on
// If-Match), patched, refused with kube's 422 causes (schema and CEL),
// deleted.
func TestCustomObjectsHTTP(t *testing.T) {
	s := startCRDServer(t)
	s.createCRD(t, gadgetsCRD)

	resp := s.do(t, http.MethodPost, gadgets, gadget("a", map[string]any{"color": "red"}))
	if resp.Code != http.StatusCreated {
		t.Fatalf("create: %d %s", resp.Code, resp.Body)
	}
	a := resp.object(t)
	if size, _, _ := unstructured.NestedInt64(a.Object, "spec", "size"); size != 1 || a.GetGeneration() != 1 || a.GetUID() == "" || resp.Header.Get("ETag") != `"`+a.GetResourceVersion()+`"` {
		t.Errorf("created %v (ETag %s); want spec.size defaulted to 1, generation 1, a uid, the ETag of its version", a.Object, resp.Header.Get("ETag"))
	}
	if keys := s.storedKeys(t, "/registry/example.com/gadgets/ns/"); len(keys) != 1 || keys["/registry/example.com/gadgets/ns/a"] == "" {
		t.Errorf("etcd holds %v; want kube's key of ns/a", keys)
	}

	// generateName and dry run.
	resp = s.do(t, http.MethodPost, gadgets, map[string]any{"apiVersion": "example.com/v1", "kind": "Gadget", "metadata": map[string]any{"generateName": "gen-"}})
	if resp.Code != http.StatusCreated || !strings.HasPrefix(resp.object(t).GetName(), "gen-") || len(resp.object(t).GetName()) != len("gen-")+5 {
		t.Errorf("create with generateName: %d %s; want 201 and a name gen-xxxxx", resp.Code, resp.Body)
	}
	resp = s.do(t, http.MethodPost, gadgets+"?dryRun=All", gadget("dry", nil))
	if resp.Code != http.StatusCreated || resp.object(t).GetName() != "dry" {
		t.Errorf("dry-run create: %d %s", resp.Code, resp.Body)
	}
	if resp := s.do(t, http.MethodGet, gadgets+"/dry", nil); resp.Code != http.StatusNotFound {
		t.Errorf("GET of a dry-run create: %d %s; want 404", resp.Code, resp.Body)
	}

	// Reads: JSON, YAML, Table; protobuf is not served for custom objects.
	resp = s.do(t, http.MethodGet, gadgets+"/a", nil)
	if got := resp.object(t); resp.Code != http.StatusOK || got.GetResourceVersion() != a.GetResourceVersion() || got.GetKind() != "Gadget" {
		t.Errorf("GET: %d %s", resp.Code, resp.Body)
	}
	resp = s.do(t, http.MethodGet, gadgets+"/a", nil, "Accept", "application/yaml")
	if resp.Code != http.StatusOK || resp.Header.Get("Content-Type") != "application/yaml" || !strings.Contains(string(resp.Body), "kind: Gadget\n") {
		t.Errorf("GET as YAML: %d %s %s", resp.Code, resp.Header.Get("Content-Type"), resp.Body)
	}
	for _, path := range []string{gadgets + "/a", gadgets, gadgets + "?watch=1", gadgets + "/a/scale"} {
		resp = s.do(t, http.MethodGet, path, nil, "Accept", "application/vnd.kubernetes.protobuf")
		if resp.Code != http.StatusNotAcceptable || resp.Header.Get("Content-Type") != "application/vnd.kubernetes.protobuf" ||
			!strings.Contains(string(resp.Body), "only the following media types are accepted: application/json, application/yaml, application/vnd.kubernetes.protobuf") {
			t.Errorf("GET %s as protobuf: %d %s %q; want kube's 406, as a protobuf Status", path, resp.Code, resp.Header.Get("Content-Type"), resp.Body)
		}
	}
	resp = s.do(t, http.MethodGet, gadgets+"/a", nil, "Accept", "application/vnd.kubernetes.protobuf, application/json")
	if resp.Code != http.StatusOK || resp.Header.Get("Content-Type") != "application/json" {
		t.Errorf("GET accepting protobuf then JSON: %d %s; want JSON", resp.Code, resp.Header.Get("Content-Type"))
	}
	resp = s.do(t, http.MethodGet, gadgets, nil, "Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
	var table metav1.Table
	resp.decode(t, &table)
	var columns []string
	for _, c := range table.ColumnDefinitions {
		columns = append(columns, c.Name)
	}
	if diff := cmp.Diff([]string{"Name", "Size", "Color"}, columns); diff != "" {
		t.Errorf("Table columns (-want +got):\n%s", diff)
	}
	if len(table.Rows) != 2 || table.Rows[0].Cells[0] != "a" || table.Rows[0].Cells[1] != float64(1) || table.Rows[0].Cells[2] != "red" {
		t.Errorf("Table rows %+v; want a 1 red first, of 2", table.Rows)
	}
	resp = s.do(t, http.MethodGet, gadgets, nil)
	var list struct {
		Kind  string           `json:"kind"`
		Items []map[string]any `json:"items"`
	}
	resp.decode(t, &list)
	if resp.Code != http.StatusOK || list.Kind != "GadgetList" || len(list.Items) != 2 {
		t.Errorf("LIST: %d %s", resp.Code, resp.Body)
	}

	// Replace: conditional, 409 when stale, 428 without a version, 412.
	a.Object["spec"] = map[string]any{"size": int64(3), "color": "blue"}
	resp = s.do(t, http.MethodPut, gadgets+"/a", a.Object)
	if resp.Code != http.StatusOK || resp.object(t).GetGeneration() != 2 {
		t.Fatalf("PUT: %d %s; want 200, generation 2", resp.Code, resp.Body)
	}
	updated := resp.object(t)
	resp = s.do(t, http.MethodPut, gadgets+"/a", a.Object)
	if st := resp.status(t); resp.Code != http.StatusConflict || st.Reason != metav1.StatusReasonConflict ||
		st.Message != `Operation cannot be fulfilled on gadgets.example.com "a": the object has been modified; please apply your changes to the latest version and try again` {
		t.Errorf("PUT from a stale version: %d %s; want kube's 409", resp.Code, resp.Body)
	}
	noVersion := updated.DeepCopy()
	noVersion.SetResourceVersion("")
	if resp := s.do(t, http.MethodPut, gadgets+"/a", noVersion.Object); resp.Code != http.StatusPreconditionRequired {
		t.Errorf("PUT without a resourceVersion: %d %s; want 428", resp.Code, resp.Body)
	}
	if resp := s.do(t, http.MethodPut, gadgets+"/a", noVersion.Object, "If-Match", `"1"`); resp.Code != http.StatusPreconditionFailed {
		t.Errorf("PUT with a failing If-Match: %d %s; want 412", resp.Code, resp.Body)
	}
	if resp := s.do(t, http.MethodPut, gadgets+"/a", noVersion.Object, "If-Match", `"`+updated.GetResourceVersion()+`"`); resp.Code != http.StatusOK {
		t.Errorf("PUT with a matching If-Match: %d %s; want 200", resp.Code, resp.Body)
	}

	// Patches: merge and JSON; a strategic merge patch is 415, as kube.
	resp = s.do(t, http.MethodPatch, gadgets+"/a", `{"spec":{"size":4}}`, "Content-Type", "application/merge-patch+json")
	if size, _, _ := unstructured.NestedInt64(resp.object(t).Object, "spec", "size"); resp.Code != http.StatusOK || size != 4 {
		t.Errorf("merge patch: %d %s", resp.Code, resp.Body)
	}
	resp = s.do(t, http.MethodPatch, gadgets+"/a", `[{"op":"replace","path":"/spec/size","value":5}]`, "Content-Type", "application/json-patch+json")
	if size, _, _ := unstructured.NestedInt64(resp.object(t).Object, "spec", "size"); resp.Code != http.StatusOK || size != 5 {
		t.Errorf("JSON patch: %d %s", resp.Code, resp.Body)
	}
	if resp := s.do(t, http.MethodPatch, gadgets+"/a", `{"spec":{"size":6}}`, "Content-Type", "application/strategic-merge-patch+json"); resp.Code != http.StatusUnsupportedMediaType {
		t.Errorf("strategic merge patch: %d %s; want 415", resp.Code, resp.Body)
	}

	// kube's 422: the schema's causes, the CEL rule's message.
	resp = s.do(t, http.MethodPost, gadgets, gadget("bad", map[string]any{"size": "x", "replicas": -1, "color": "green"}))
	st := resp.status(t)
	var causes []string
	for _, c := range st.Details.Causes {
		causes = append(causes, c.Field+": "+c.Message)
	}
	want := []string{
		`spec.color: Unsupported value: "green": supported values: "red", "blue"`,
		`spec.replicas: Invalid value: -1: spec.replicas in body should be greater than or equal to 0`,
		`spec.size: Invalid value: "string": spec.size in body must be of type integer: "string"`,
		`.spec.replicas: Invalid value: -1: should be a non-negative integer`,
		`<nil>: Invalid value: null: some validation rules were not checked because the object was invalid; correct the existing errors to complete validation`,
	}
	if resp.Code != http.StatusUnprocessableEntity || st.Details.Kind != "Gadget" || st.Details.Group != "example.com" || !cmp.Equal(sorted(causes), sorted(want)) {
		t.Errorf("POST of an invalid gadget: %d %s\ncauses %q\nwant %q", resp.Code, resp.Body, causes, want)
	}
	resp = s.do(t, http.MethodPost, gadgets, gadget("big", map[string]any{"size": 30}))
	if st := resp.status(t); resp.Code != http.StatusUnprocessableEntity || st.Message != `Gadget.example.com "big" is invalid: spec: Invalid value: size must be at most 10` {
		t.Errorf("POST breaking the CEL rule: %d %s; want kube's 422", resp.Code, resp.Body)
	}

	// Bodies kube refuses: another version, no kind, protobuf, malformed.
	for _, tc := range []struct {
		name, body, contentType, message string
		code                             int
	}{
		{"unserved version", `{"apiVersion":"example.com/v2","kind":"Gadget","metadata":{"name":"v2"}}`, "", `the API version in the data (example.com/v2) does not match the expected API version (example.com/v1)`, 400},
		{"other group", `{"apiVersion":"other.com/v1","kind":"Gadget","metadata":{"name":"o"}}`, "", `the API version in the data (other.com/v1) does not match the expected API version (example.com/v1)`, 400},
		{"no apiVersion", `{"kind":"Gadget","metadata":{"name":"o"}}`, "", `the API version in the data () does not match the expected API version (example.com/v1)`, 400},
		{"no kind", `{"metadata":{"name":"nokind"}}`, "", `the object provided is unrecognized (must be of type Gadget): Object 'Kind' is missing in '{"metadata":{"name":"nokind"}}' ({"metadata":{"name":"nokind"}})`, 400},
		{"not JSON", `not json`, "", `the object provided is unrecognized (must be of type Gadget): couldn't get version/kind; json parse error: invalid character 'o' in literal null (expecting 'u') (6e6f74206a736f6e)`, 400},
		{"protobuf", "k8s\x00", "application/vnd.kubernetes.protobuf", `the body of the request was in an unknown format - accepted media types include: application/json, application/yaml`, 415},
		{"text", `{}`, "text/plain", `the body of the request was in an unknown format - accepted media types include: application/json, application/yaml`, 415},
	} {
		contentType := tc.contentType
		if contentType == "" {
			contentType = "application/json"
		}
		resp := s.do(t, http.MethodPost, gadgets, tc.body, "Content-Type", contentType)
		if st := resp.status(t); resp.Code != tc.code || st.Message != tc.message {
			t.Errorf("POST with %s: %d %s; want %d %q", tc.name, resp.Code, st.Message, tc.code, tc.message)
		}
	}

	// Delete (DeleteOptions without an apiVersion, as kubectl sends them):
	// kube's Status; the object is gone.
	resp = s.do(t, http.MethodDelete, gadgets+"/a", `{"propagationPolicy":"Background"}`)
	if st := resp.status(t); resp.Code != http.StatusOK || st.Status != metav1.StatusSuccess || st.Details.Name != "a" || st.Details.Kind != "gadgets" {
		t.Errorf("DELETE: %d %s", resp.Code, resp.Body)
	}
	resp = s.do(t, http.MethodGet, gadgets+"/a", nil)
	if st := resp.status(t); resp.Code != http.StatusNotFound || st.Message != `gadgets.example.com "a" not found` {
		t.Errorf("GET after DELETE: %d %s", resp.Code, resp.Body)
	}
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// TestCustomObjectFieldValidation: what the schema prunes and duplicate
// fields are answered as kube-apiserver answers them, for each
// fieldValidation: Strict 400 with every field, Warn (the default) one
// Warning header per field, Ignore nothing; for bodies (JSON and YAML),
// status writes and patches.
func TestCustomObjectFieldValidation(t *testing.T) {
	s := startCRDServer(t)
	s.createCRD(t, gadgetsCRD)
	const body = `{"apiVersion":"example.com/v1","kind":"Gadget","metadata":{"name":"%s","foo":1},"spec":{"x":1,"y":{"z":2}},"zz":1}`
	unknown := []string{`unknown field "metadata.foo"`, `unknown field "spec.x"`, `unknown field "spec.y"`, `unknown field "zz"`}
	warnings := func(texts ...string) []string {
		var out []string
		for _, text := range texts {
			out = append(out, fmt.Sprintf("299 - %q", text))
		}
		return out
	}

	resp := s.do(t, http.MethodPost, gadgets+"?fieldValidation=Strict", fmt.Sprintf(body, "strict"))
	if st := resp.status(t); resp.Code != http.StatusBadRequest ||
		st.Message != `Gadget in version "v1" cannot be handled as a Gadget: strict decoding error: `+strings.Join(unknown, ", ") {
		t.Errorf("Strict create: %d %q", resp.Code, st.Message)
	}
	resp = s.do(t, http.MethodPost, gadgets, fmt.Sprintf(body, "warn"))
	if got := resp.Header.Values("Warning"); resp.Code != http.StatusCreated || !cmp.Equal(got, warnings(unknown...)) {
		t.Errorf("Warn create: %d, warnings %q; want 201, %q", resp.Code, got, warnings(unknown...))
	}
	if obj := resp.object(t); obj.Object["zz"] != nil || obj.Object["spec"].(map[string]any)["x"] != nil {
		t.Errorf("Warn create stored %v; want the unknown fields pruned", obj.Object)
	}
	resp = s.do(t, http.MethodPost, gadgets+"?fieldValidation=Ignore", fmt.Sprintf(body, "ignore"))
	if got := resp.Header.Values("Warning"); resp.Code != http.StatusCreated || len(got) != 0 {
		t.Errorf("Ignore create: %d, warnings %q; want 201 and none", resp.Code, got)
	}

	// Duplicate fields, in JSON and YAML.
	dup := `{"apiVersion":"example.com/v1","kind":"Gadget","metadata":{"name":"dup"},"spec":{"size":1,"size":2,"q":1}}`
	resp = s.do(t, http.MethodPost, gadgets+"?fieldValidation=Strict", dup)
	if st := resp.status(t); st.Message != `Gadget in version "v1" cannot be handled as a Gadget: strict decoding error: duplicate field "spec.size", unknown field "spec.q"` {
		t.Errorf("Strict create with a duplicate field: %d %q", resp.Code, st.Message)
	}
	resp = s.do(t, http.MethodPost, gadgets, dup)
	if got, want := resp.Header.Values("Warning"), warnings(`duplicate field "spec.size"`, `unknown field "spec.q"`); resp.Code != http.StatusCreated || !cmp.Equal(got, want) {
		t.Errorf("Warn create with a duplicate field: %d, warnings %q; want %q", resp.Code, got, want)
	}
	yamlDup := "apiVersion: example.com/v1\nkind: Gadget\nmetadata:\n  name: dupy\nspec:\n  size: 1\n  size: 2\n  q: 3\n"
	resp = s.do(t, http.MethodPost, gadgets+"?fieldValidation=Strict", yamlDup, "Content-Type", "application/yaml")
	if st := resp.status(t); st.Message != "Gadget in version \"v1\" cannot be handled as a Gadget: strict decoding error: yaml: unmarshal errors:\n  line 7: key \"size\" already set in map, unknown field \"spec.q\"" {
		t.Errorf("Strict YAML create with a duplicate field: %d %q", resp.Code, st.Message)
	}

	// Status writes and patches.
	obj := s.do(t, http.MethodGet, gadgets+"/warn", nil).object(t)
	obj.Object["status"] = map[string]any{"ready": true, "bogus": 1}
	resp = s.do(t, http.MethodPut, gadgets+"/warn/status?fieldValidation=Strict", obj.Object)
	if st := resp.status(t); st.Message != `Gadget in version "v1" cannot be handled as a Gadget: strict decoding error: unknown field "status.bogus"` {
		t.Errorf("Strict status write: %d %q", resp.Code, st.Message)
	}
	resp = s.do(t, http.MethodPut, gadgets+"/warn/status", obj.Object)
	if got := resp.Header.Values("Warning"); resp.Code != http.StatusOK || !cmp.Equal(got, warnings(`unknown field "status.bogus"`)) {
		t.Errorf("Warn status write: %d %s, warnings %q", resp.Code, resp.Body, got)
	}
	patch := `{"metadata":{"zork":1},"spec":{"bogus":2,"size":3}}`
	resp = s.do(t, http.MethodPatch, gadgets+"/warn?fieldValidation=Strict", patch, "Content-Type", "application/merge-patch+json")
	if resp.Code != http.StatusBadRequest || !strings.Contains(resp.status(t).Message, `unknown field "spec.bogus"`) {
		t.Errorf("Strict patch: %d %s", resp.Code, resp.Body)
	}
	resp = s.do(t, http.MethodPatch, gadgets+"/warn", patch, "Content-Type", "application/merge-patch+json")
	if got, want := resp.Header.Values("Warning"), warnings(`unknown field "metadata.zork"`, `unknown field "spec.bogus"`); resp.Code != http.StatusOK || !cmp.Equal(got, want) {
		t.Errorf("Warn patch: %d %s, warnings %q; want %q", resp.Code, resp.Body, got, want)
	}
	resp = s.do(t, http.MethodPatch, gadgets+"/warn?fieldValidation=Ignore", patch, "Content-Type", "application/merge-patch+json")
	if got := resp.Header.Values("Warning"); resp.Code != http.StatusOK || len(got) != 0 {
		t.Errorf("Ignore patch: %d, warnings %q", resp.Code, got)
	}
	resp = s.do(t, http.MethodPatch, gadgets+"/warn/status", `{"status":{"bogus":2}}`, "Content-Type", "application/merge-patch+json")
	if got := resp.Header.Values("Warning"); resp.Code != http.StatusOK || !cmp.Equal(got, warnings(`unknown field "status.bogus"`)) {
		t.Errorf("Warn status patch: %d %s, warnings %q", resp.Code, resp.Body, got)
	}
}

// TestCustomObjectSubresources: the status subresource (the main resource
// keeps the stored status, /status writes the status only), the scale
// subresource (an autoscaling/v1 Scale from the CRD's paths), both in
// discovery; a CRD's own status subresource; kube's answers for the rest.
func TestCustomObjectSubresources(t *testing.T) {
	s := startCRDServer(t)
	s.createCRD(t, gadgetsCRD)

	resp := s.do(t, http.MethodPost, gadgets, map[string]any{"apiVersion": "example.com/v1", "kind": "Gadget",
		"metadata": map[string]any{"name": "a"}, "spec": map[string]any{"replicas": 2}, "status": map[string]any{"ready": true}})
	created := resp.object(t)
	if resp.Code != http.StatusCreated || created.Object["status"] != nil {
		t.Fatalf("create with a status: %d %s; want 201, the status dropped", resp.Code, resp.Body)
	}
	// The main resource ignores the status.
	created.Object["status"] = map[string]any{"ready": true}
	created.Object["spec"] = map[string]any{"replicas": int64(2), "size": int64(2)}
	resp = s.do(t, http.MethodPut, gadgets+"/a", created.Object)
	main := resp.object(t)
	if resp.Code != http.StatusOK || main.Object["status"] != nil || main.GetGeneration() != 2 {
		t.Fatalf("PUT with a status: %d %s; want 200, the status kept as stored (none), generation 2", resp.Code, resp.Body)
	}
	// /status ignores the spec and the generation stays.
	main.Object["status"] = map[string]any{"ready": true, "replicas": int64(1), "selector": "app=a"}
	main.Object["spec"] = map[string]any{"size": int64(9)}
	resp = s.do(t, http.MethodPut, gadgets+"/a/status", main.Object)
	st := resp.object(t)
	if size, _, _ := unstructured.NestedInt64(st.Object, "spec", "size"); resp.Code != http.StatusOK || size != 2 || st.GetGeneration() != 2 ||
		!cmp.Equal(st.Object["status"], map[string]any{"ready": true, "replicas": int64(1), "selector": "app=a"}) {
		t.Fatalf("PUT /status: %d %s; want 200, spec.size still 2, generation 2, the status written", resp.Code, resp.Body)
	}
	if resp := s.do(t, http.MethodPut, gadgets+"/a/status", main.Object); resp.Code != http.StatusConflict {
		t.Errorf("PUT /status from a stale version: %d %s; want 409", resp.Code, resp.Body)
	}
	noVersion := st.DeepCopy()
	noVersion.SetResourceVersion("")
	if resp := s.do(t, http.MethodPut, gadgets+"/a/status", noVersion.Object); resp.Code != http.StatusPreconditionRequired {
		t.Errorf("PUT /status without a version: %d %s; want 428", resp.Code, resp.Body)
	}
	resp = s.do(t, http.MethodPatch, gadgets+"/a/status", `{"spec":{"size":7},"status":{"ready":false}}`, "Content-Type", "application/merge-patch+json")
	if size, _, _ := unstructured.NestedInt64(resp.object(t).Object, "spec", "size"); resp.Code != http.StatusOK || size != 2 || resp.object(t).Object["status"].(map[string]any)["ready"] != false {
		t.Errorf("PATCH /status: %d %s; want the status patched, the spec not", resp.Code, resp.Body)
	}
	resp = s.do(t, http.MethodGet, gadgets+"/a/status?watch=1", nil)
	if resp.Code != http.StatusOK || resp.object(t).GetName() != "a" {
		t.Errorf("GET /status?watch=1: %d %s; want the object, as kube", resp.Code, resp.Body)
	}

	// Scale.
	resp = s.do(t, http.MethodGet, gadgets+"/a/scale", nil)
	var scale autoscalingv1.Scale
	resp.decode(t, &scale)
	if resp.Code != http.StatusOK || scale.Kind != "Scale" || scale.APIVersion != "autoscaling/v1" || scale.Spec.Replicas != 2 ||
		scale.Status.Replicas != 1 || scale.Status.Selector != "app=a" || scale.ResourceVersion == "" || scale.UID != created.GetUID() {
		t.Fatalf("GET /scale: %d %s", resp.Code, resp.Body)
	}
	scale.Spec.Replicas = 4
	resp = s.do(t, http.MethodPut, gadgets+"/a/scale", scale)
	var scaled autoscalingv1.Scale
	resp.decode(t, &scaled)
	if resp.Code != http.StatusOK || scaled.Spec.Replicas != 4 || scaled.ResourceVersion == scale.ResourceVersion {
		t.Errorf("PUT /scale: %d %s", resp.Code, resp.Body)
	}
	if resp := s.do(t, http.MethodPut, gadgets+"/a/scale", scale); resp.Code != http.StatusConflict {
		t.Errorf("PUT /scale from a stale version: %d %s; want 409", resp.Code, resp.Body)
	}
	scale.ResourceVersion = ""
	if resp := s.do(t, http.MethodPut, gadgets+"/a/scale", scale); resp.Code != http.StatusPreconditionRequired {
		t.Errorf("PUT /scale without a version: %d %s; want 428", resp.Code, resp.Body)
	}
	resp = s.do(t, http.MethodPatch, gadgets+"/a/scale", `{"spec":{"replicas":6}}`, "Content-Type", "application/merge-patch+json")
	resp.decode(t, &scaled)
	if resp.Code != http.StatusOK || scaled.Spec.Replicas != 6 {
		t.Errorf("PATCH /scale: %d %s", resp.Code, resp.Body)
	}
	if replicas, _, _ := unstructured.NestedInt64(s.do(t, http.MethodGet, gadgets+"/a", nil).object(t).Object, "spec", "replicas"); replicas != 6 {
		t.Errorf("spec.replicas after the scale patch = %d; want 6", replicas)
	}
	resp = s.do(t, http.MethodPatch, gadgets+"/a/scale", `{"spec":{"replicas":-1}}`, "Content-Type", "application/merge-patch+json")
	if resp.Code != http.StatusUnprocessableEntity || !strings.Contains(resp.status(t).Message, "should be a non-negative integer") {
		t.Errorf("PATCH /scale to -1: %d %s; want 422", resp.Code, resp.Body)
	}
	resp = s.do(t, http.MethodGet, gadgets+"/a/scale", nil, "Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
	var table metav1.Table
	resp.decode(t, &table)
	if len(table.ColumnDefinitions) != 4 || table.ColumnDefinitions[1].Name != "Desired" || len(table.Rows) != 1 || table.Rows[0].Cells[1] != float64(6) {
		t.Errorf("GET /scale as a Table: %d %s", resp.Code, resp.Body)
	}
	s.do(t, http.MethodPost, gadgets, gadget("noreplicas", nil))
	resp = s.do(t, http.MethodGet, gadgets+"/noreplicas/scale", nil)
	if resp.Code != http.StatusInternalServerError || resp.status(t).Message != `Internal error occurred: the spec replicas field ".spec.replicas" does not exist` {
		t.Errorf("GET /scale without spec replicas: %d %s; want kube's 500", resp.Code, resp.Body)
	}

	// kube's answers for the rest.
	for _, tc := range []struct {
		method, path string
		code         int
		message      string
	}{
		{http.MethodPost, gadgets + "/a/status", http.StatusMethodNotAllowed, `create is not supported on resources of kind "gadgets.example.com"`},
		{http.MethodDelete, gadgets + "/a/status", http.StatusMethodNotAllowed, `delete is not supported on resources of kind "gadgets.example.com"`},
		{http.MethodGet, "/apis/example.com/v1/watch/namespaces/ns/gadgets/a/status", http.StatusMethodNotAllowed, `watch is not supported on resources of kind "gadgets.example.com"`},
		{http.MethodGet, gadgets + "/a/foo", http.StatusNotFound, `gadgets.example.com "a" not found`},
		{http.MethodGet, gadgets + "/missing/status", http.StatusNotFound, `gadgets.example.com "missing" not found`},
		{http.MethodGet, "/api/v1/namespaces/ns/configmaps/x/status", http.StatusNotFound, `the server could not find the requested resource`},
	} {
		var body any
		if tc.method == http.MethodPost {
			body = "{}"
		}
		resp := s.do(t, tc.method, tc.path, body)
		if st := resp.status(t); resp.Code != tc.code || st.Message != tc.message {
			t.Errorf("%s %s: %d %q; want %d %q", tc.method, tc.path, resp.Code, st.Message, tc.code, tc.message)
		}
	}

	// Discovery, legacy and aggregated.
	var list metav1.APIResourceList
	s.do(t, http.MethodGet, "/apis/example.com/v1", nil).decode(t, &list)
	want := []metav1.APIResource{
		// kube's discovery controller's verbs, in its order; the hash of
		// example.com/v1/Gadget, the storage version.
		{Name: "gadgets", SingularName: "gadget", Namespaced: true, Kind: "Gadget", Verbs: []string{"delete", "deletecollection", "get", "list", "patch", "create", "update", "watch"}, ShortNames: []string{"gd"}, StorageVersionHash: "ggWp2HxsL0Q="},
		{Name: "gadgets/status", Namespaced: true, Kind: "Gadget", Verbs: []string{"get", "patch", "update"}},
		{Name: "gadgets/scale", Namespaced: true, Group: "autoscaling", Version: "v1", Kind: "Scale", Verbs: []string{"get", "patch", "update"}},
	}
	if diff := cmp.Diff(want, list.APIResources); diff != "" {
		t.Errorf("/apis/example.com/v1 (-want +got):\n%s", diff)
	}
	s.do(t, http.MethodGet, "/apis/apiextensions.k8s.io/v1", nil).decode(t, &list)
	if len(list.APIResources) != 2 || list.APIResources[1].Name != "customresourcedefinitions/status" || !cmp.Equal(list.APIResources[1].Verbs, metav1.Verbs{"get", "patch", "update"}) {
		t.Errorf("/apis/apiextensions.k8s.io/v1: %+v; want customresourcedefinitions/status", list.APIResources)
	}
	var aggregated apidiscoveryv2.APIGroupDiscoveryList
	s.do(t, http.MethodGet, "/apis", nil, "Accept", "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList").decode(t, &aggregated)
	var subresources []string
	for _, g := range aggregated.Items {
		for _, v := range g.Versions {
			for _, r := range v.Resources {
				for _, sub := range r.Subresources {
					subresources = append(subresources, fmt.Sprintf("%s/%s %s/%s", r.Resource, sub.Subresource, sub.ResponseKind.Group, sub.ResponseKind.Kind))
				}
			}
		}
	}
	if diff := cmp.Diff([]string{"validatingadmissionpolicies/status admissionregistration.k8s.io/ValidatingAdmissionPolicy", "customresourcedefinitions/status apiextensions.k8s.io/CustomResourceDefinition", "gadgets/status example.com/Gadget", "gadgets/scale autoscaling/Scale"}, subresources); diff != "" {
		t.Errorf("aggregated discovery's subresources (-want +got):\n%s", diff)
	}

	// A CRD's own status subresource: the status written, the spec not.
	resp = s.do(t, http.MethodGet, crds+"/gadgets.example.com/status", nil)
	var crd apiextensionsv1.CustomResourceDefinition
	resp.decode(t, &crd)
	if resp.Code != http.StatusOK || crd.Name != "gadgets.example.com" {
		t.Fatalf("GET the CRD's status: %d %s", resp.Code, resp.Body)
	}
	resp = s.do(t, http.MethodPatch, crds+"/gadgets.example.com/status", `{"spec":{"names":{"shortNames":["x"]}}}`, "Content-Type", "application/merge-patch+json")
	resp.decode(t, &crd)
	if resp.Code != http.StatusOK || !cmp.Equal(crd.Spec.Names.ShortNames, []string{"gd"}) {
		t.Errorf("PATCH the CRD's status with a spec change: %d %s; want the spec unchanged", resp.Code, resp.Body)
	}
}

// TestCustomObjectWatch: a watch of custom objects sees them added,
// modified and deleted, through client-go's dynamic client.
func TestCustomObjectWatch(t *testing.T) {
	s := startCRDServer(t)
	s.createCRD(t, gadgetsCRD)
	client := dynamicClient(t, s).Namespace("ns")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w, err := client.Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	obj, err := client.Create(ctx, &unstructured.Unstructured{Object: gadget("w", map[string]any{"size": 2})}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	obj.Object["spec"] = map[string]any{"size": int64(3)}
	if _, err := client.Update(ctx, obj, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := client.Delete(ctx, "w", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	var got []string
	for len(got) < 3 {
		select {
		case ev := <-w.ResultChan():
			u, ok := ev.Object.(*unstructured.Unstructured)
			if !ok {
				t.Fatalf("watch event %s of %T", ev.Type, ev.Object)
			}
			size, _, _ := unstructured.NestedInt64(u.Object, "spec", "size")
			got = append(got, fmt.Sprintf("%s %s %d", ev.Type, u.GetName(), size))
		case <-ctx.Done():
			t.Fatalf("watch events %q; want 3", got)
		}
	}
	if diff := cmp.Diff([]string{"ADDED w 2", "MODIFIED w 3", "DELETED w 3"}, got); diff != "" {
		t.Errorf("watch events (-want +got):\n%s", diff)
	}
}

// TestCRDSchemaChange: once a CRD's schema changes, the next write to its
// objects is checked against the new schema.
func TestCRDSchemaChange(t *testing.T) {
	s := startCRDServer(t)
	s.createCRD(t, gadgetsCRD)
	if resp := s.do(t, http.MethodPost, gadgets, gadget("a", map[string]any{"size": 8})); resp.Code != http.StatusCreated {
		t.Fatalf("create: %d %s", resp.Code, resp.Body)
	}
	resp := s.do(t, http.MethodGet, crds+"/gadgets.example.com", nil)
	var crd apiextensionsv1.CustomResourceDefinition
	resp.decode(t, &crd)
	crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"].Properties["size"] = apiextensionsv1.JSONSchemaProps{Type: "integer", Maximum: ptr(5.0)}
	resp = s.do(t, http.MethodPut, crds+"/gadgets.example.com", crd)
	if resp.Code != http.StatusOK {
		t.Fatalf("PUT the CRD with a maximum: %d %s", resp.Code, resp.Body)
	}
	// No wait: the write right after the CRD's is refused by its schema.
	resp = s.do(t, http.MethodPost, gadgets, gadget("b", map[string]any{"size": 6}))
	for resp.Code == http.StatusServiceUnavailable { // the replica caught up meanwhile: send it again, as told
		time.Sleep(100 * time.Millisecond)
		resp = s.do(t, http.MethodPost, gadgets, gadget("b", map[string]any{"size": 6}))
	}
	if resp.Code != http.StatusUnprocessableEntity || !strings.Contains(resp.status(t).Message, "spec.size in body should be less than or equal to 5") {
		t.Errorf("create breaking the new maximum: %d %s; want 422", resp.Code, resp.Body)
	}
	if resp := s.do(t, http.MethodPost, gadgets, gadget("c", map[string]any{"size": 5})); resp.Code != http.StatusCreated {
		t.Errorf("create within the new maximum: %d %s", resp.Code, resp.Body)
	}
	// The stored object is still read; a change that keeps its invalid
	// value passes (ratcheting), one that breaks the new rule does not.
	obj := s.do(t, http.MethodGet, gadgets+"/a", nil).object(t)
	obj.SetLabels(map[string]string{"x": "y"})
	if resp := s.do(t, http.MethodPut, gadgets+"/a", obj.Object); resp.Code != http.StatusOK {
		t.Errorf("label change of an object the new schema refuses: %d %s; want 200 (ratcheting)", resp.Code, resp.Body)
	}
}

// TestCRDDeletionEndsItsObjects: deleting a CRD deletes its objects (their
// watchers see each DELETED), then the CRD, and once the CRD is gone (when
// kubectl delete crd returns) its paths are kube's 404 at once.
func TestCRDDeletionEndsItsObjects(t *testing.T) {
	s := startCRDServer(t)
	s.createCRD(t, gadgetsCRD)
	client := dynamicClient(t, s).Namespace("ns")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, name := range []string{"a", "b"} {
		if _, err := client.Create(ctx, &unstructured.Unstructured{Object: gadget(name, nil)}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	w, err := client.Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if resp := s.do(t, http.MethodDelete, crds+"/gadgets.example.com", nil); resp.Code != http.StatusOK {
		t.Fatalf("DELETE the CRD: %d %s", resp.Code, resp.Body)
	}
	deleted := map[string]bool{}
	for len(deleted) < 2 {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatalf("watch ended after DELETED of %v", deleted)
			}
			if ev.Type == watch.Deleted {
				deleted[ev.Object.(*unstructured.Unstructured).GetName()] = true
			}
		case <-ctx.Done():
			t.Fatalf("watchers saw DELETED of %v only", deleted)
		}
	}
	for {
		resp := s.do(t, http.MethodGet, crds+"/gadgets.example.com", nil)
		if resp.Code == http.StatusNotFound {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("GET the CRD after its deletion: %d %s; want it gone", resp.Code, resp.Body)
		}
		time.Sleep(20 * time.Millisecond)
	}
	want := metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusFailure,
		Message: "the server could not find the requested resource", Reason: metav1.StatusReasonNotFound, Details: &metav1.StatusDetails{}, Code: http.StatusNotFound}
	for _, path := range []string{gadgets, gadgets + "/a", "/apis/example.com/v1/gadgets"} {
		resp := s.do(t, http.MethodGet, path, nil)
		if diff := cmp.Diff(want, resp.status(t)); resp.Code != http.StatusNotFound || diff != "" {
			t.Errorf("GET %s once the CRD is gone: %d; Status (-want +got):\n%s", path, resp.Code, diff)
		}
	}
	if keys := s.storedKeys(t, "/registry/example.com/gadgets/"); len(keys) != 0 {
		t.Errorf("etcd still holds %v", keys)
	}
	// Discovery follows once the stores leave the catalog, after the open
	// watches drained.
	for {
		resp := s.do(t, http.MethodGet, "/apis/example.com/v1", nil)
		if resp.Code == http.StatusNotFound {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("discovery of example.com/v1 after the CRD's deletion: %d %s", resp.Code, resp.Body)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestCustomObjectConcurrentReplaces: of 8 replaces sent at once from the
// same version of a custom object, exactly one wins; the others are 409.
func TestCustomObjectConcurrentReplaces(t *testing.T) {
	s := startCRDServer(t)
	s.createCRD(t, gadgetsCRD)
	obj := s.do(t, http.MethodPost, gadgets, gadget("a", map[string]any{"size": 1})).object(t)
	codes := make([]int, 8)
	errs := make([]error, 8)
	bodies := make([][]byte, 8)
	for i := range bodies {
		next := obj.DeepCopy()
		next.Object["spec"] = map[string]any{"size": int64(i + 2)}
		var err error
		if bodies[i], err = json.Marshal(next.Object); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	for i := range codes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, err := http.NewRequest(http.MethodPut, s.URL+gadgets+"/a", bytes.NewReader(bodies[i]))
			if err != nil {
				errs[i] = err
				return
			}
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				errs[i] = err
				return
			}
			resp.Body.Close()
			codes[i] = resp.StatusCode
		}()
	}
	wg.Wait()
	count := map[int]int{}
	for i, c := range codes {
		if errs[i] != nil {
			t.Fatalf("PUT %d: %v", i, errs[i])
		}
		count[c]++
	}
	if count[http.StatusOK] != 1 || count[http.StatusConflict] != 7 {
		t.Errorf("8 concurrent PUTs from one version: codes %v; want 1×200, 7×409", count)
	}
	final := s.do(t, http.MethodGet, gadgets+"/a", nil).object(t)
	if final.GetGeneration() != 2 {
		t.Errorf("generation after one replace = %d; want 2", final.GetGeneration())
	}
}
