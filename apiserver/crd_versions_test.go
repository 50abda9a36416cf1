package apiserver_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// gizmosCRD serves namespaced Gizmos of example.com in several versions:
// v1alpha1 deprecated with its own warning (quotes included), v1beta1
// deprecated with kube's default one (a schema that prunes, and a status
// subresource), v2beta1 and v1 (the storage version) served, v2 not
// served, v3 deprecated with no newer version to name.
const gizmosCRD = `{"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition",
 "metadata":{"name":"gizmos.example.com"},
 "spec":{"group":"example.com","scope":"Namespaced","names":{"plural":"gizmos","kind":"Gizmo"},
  "versions":[
   {"name":"v1alpha1","served":true,"storage":false,"deprecated":true,"deprecationWarning":"gizmos v1alpha1 are \"old\"",
    "schema":{"openAPIV3Schema":{"type":"object","x-kubernetes-preserve-unknown-fields":true}}},
   {"name":"v1beta1","served":true,"storage":false,"deprecated":true,"subresources":{"status":{}},
    "schema":{"openAPIV3Schema":{"type":"object","properties":{
     "spec":{"type":"object","properties":{"size":{"type":"integer"}}},
     "status":{"type":"object","x-kubernetes-preserve-unknown-fields":true}}}}},
   {"name":"v2beta1","served":true,"storage":false,"schema":{"openAPIV3Schema":{"type":"object","x-kubernetes-preserve-unknown-fields":true}}},
   {"name":"v1","served":true,"storage":true,"schema":{"openAPIV3Schema":{"type":"object","x-kubernetes-preserve-unknown-fields":true}}},
   {"name":"v2","served":false,"storage":false,"schema":{"openAPIV3Schema":{"type":"object","x-kubernetes-preserve-unknown-fields":true}}},
   {"name":"v3","served":true,"storage":false,"deprecated":true,"schema":{"openAPIV3Schema":{"type":"object","x-kubernetes-preserve-unknown-fields":true}}}]}}`

// warnings are the Warning headers of an answer.
func (r response) warnings() []string { return r.Header.Values("Warning") }

// sortedWarnings are the Warning headers sorted: kube walks a schema's
// properties in map order, so its format warnings come in any order.
func (r response) sortedWarnings() []string { return slices.Sorted(slices.Values(r.warnings())) }

// TestCRDDeprecatedVersions: every request to a deprecated version of a
// custom resource — reads, writes, watches, subresources, even a 404 of an
// unknown subresource — answers kube's Warning: the version's
// deprecationWarning, or kube's default "<group>/<version> <Kind> is
// deprecated; use <group>/<newer> <Kind>" naming the most preferred served
// version that is not deprecated and newer (or without the "use" part when
// there is none), before the request's own warnings. Other versions, an
// unserved one and discovery answer none.
func TestCRDDeprecatedVersions(t *testing.T) {
	s := startCRDServer(t)
	s.createCRD(t, gizmosCRD)
	const base = "/apis/example.com/"
	v1beta1Warning := `299 - "example.com/v1beta1 Gizmo is deprecated; use example.com/v1 Gizmo"`

	for _, tc := range []struct{ version, warning string }{
		{"v1alpha1", `299 - "gizmos v1alpha1 are \"old\""`},
		{"v1beta1", v1beta1Warning},
		{"v3", `299 - "example.com/v3 Gizmo is deprecated"`},
		{"v2beta1", ""},
		{"v1", ""},
	} {
		resp := s.do(t, http.MethodGet, base+tc.version+"/namespaces/ns/gizmos", nil)
		var want []string
		if tc.warning != "" {
			want = []string{tc.warning}
		}
		if resp.Code != http.StatusOK || !cmp.Equal(resp.warnings(), want) {
			t.Errorf("LIST %s: %d, warnings %q; want 200 and %q", tc.version, resp.Code, resp.warnings(), want)
		}
	}
	if resp := s.do(t, http.MethodGet, base+"v2/namespaces/ns/gizmos", nil); resp.Code != http.StatusNotFound || len(resp.warnings()) != 0 {
		t.Errorf("LIST of the unserved v2: %d, warnings %q; want 404 and none", resp.Code, resp.warnings())
	}
	if resp := s.do(t, http.MethodGet, base+"v1beta1", nil); resp.Code != http.StatusOK || len(resp.warnings()) != 0 {
		t.Errorf("discovery of v1beta1: %d, warnings %q; want 200 and none", resp.Code, resp.warnings())
	}

	// Every kind of request to v1beta1.
	gizmos := base + "v1beta1/namespaces/ns/gizmos"
	created := s.do(t, http.MethodPost, gizmos, `{"apiVersion":"example.com/v1beta1","kind":"Gizmo","metadata":{"name":"a"},"spec":{"size":1,"x":true}}`)
	if want := []string{v1beta1Warning, `299 - "unknown field \"spec.x\""`}; created.Code != http.StatusCreated || !cmp.Equal(created.warnings(), want) {
		t.Fatalf("POST v1beta1 with an unknown field: %d %s, warnings %q; want 201 and %q", created.Code, created.Body, created.warnings(), want)
	}
	var obj map[string]any
	created.decode(t, &obj)
	obj["spec"] = map[string]any{"size": 2}
	put, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		method, path string
		body         any
		code         int
	}{
		{http.MethodGet, gizmos + "/a", nil, http.StatusOK},
		{http.MethodPut, gizmos + "/a", put, http.StatusOK},
		{http.MethodPatch, gizmos + "/a", `{"spec":{"size":3}}`, http.StatusOK},
		{http.MethodGet, gizmos + "/a/status", nil, http.StatusOK},
		{http.MethodPatch, gizmos + "/a/status", `{"status":{"ready":true}}`, http.StatusOK},
		{http.MethodGet, gizmos + "/a/scale", nil, http.StatusNotFound},
		{http.MethodGet, gizmos + "?watch=true&timeoutSeconds=1", nil, http.StatusOK},
		{http.MethodGet, base + "v1beta1/watch/namespaces/ns/gizmos?timeoutSeconds=1", nil, http.StatusOK},
		{http.MethodGet, base + "v1beta1/gizmos", nil, http.StatusOK},
		{http.MethodGet, gizmos + "/missing", nil, http.StatusNotFound},
		{http.MethodDelete, gizmos + "/a", nil, http.StatusOK},
		{http.MethodDelete, gizmos, nil, http.StatusOK},
	} {
		var header []string
		if tc.method == http.MethodPatch {
			header = []string{"Content-Type", "application/merge-patch+json"}
		}
		resp := s.do(t, tc.method, tc.path, tc.body, header...)
		if resp.Code != tc.code || !cmp.Equal(resp.warnings(), []string{v1beta1Warning}) {
			t.Errorf("%s %s: %d %s, warnings %q; want %d and the deprecation warning once", tc.method, tc.path, resp.Code, resp.Body, resp.warnings(), tc.code)
		}
	}

	// A change of the CRD changes the warning: v1beta1 now names v2beta1,
	// v1 being deprecated too.
	crd := s.getCRD(t, "gizmos.example.com")
	for i := range crd.Spec.Versions {
		if crd.Spec.Versions[i].Name == "v1" {
			crd.Spec.Versions[i].Deprecated = true
		}
	}
	s.putCRD(t, crd)
	eventually(t, "the warning of v1beta1 once v1 is deprecated", func() (bool, string) {
		got := s.do(t, http.MethodGet, gizmos, nil).warnings()
		return cmp.Equal(got, []string{`299 - "example.com/v1beta1 Gizmo is deprecated; use example.com/v2beta1 Gizmo"`}), strings.Join(got, "; ")
	})
}

// thingsCRD serves cluster-scoped Things of example.com in v1 (the
// storage version) and v2.
const thingsCRD = `{"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition",
 "metadata":{"name":"things.example.com"},
 "spec":{"group":"example.com","scope":"Cluster","names":{"plural":"things","kind":"Thing"},
  "versions":[
   {"name":"v1","served":true,"storage":true,"schema":{"openAPIV3Schema":{"type":"object","x-kubernetes-preserve-unknown-fields":true}}},
   {"name":"v2","served":true,"storage":false,"schema":{"openAPIV3Schema":{"type":"object","x-kubernetes-preserve-unknown-fields":true}}}]}}`

// TestCRDStoredVersions: status.storedVersions gains each storage version
// the spec names (kube's strategy, on create and update), and a version
// still in it cannot leave spec.versions (kube's 422) until a write of the
// status (a storage migration's) removes it from there.
func TestCRDStoredVersions(t *testing.T) {
	s := startCRDServer(t)
	crd := s.createCRD(t, thingsCRD)
	if !cmp.Equal(crd.Status.StoredVersions, []string{"v1"}) {
		t.Fatalf("created with storedVersions %v; want [v1]", crd.Status.StoredVersions)
	}
	if resp := s.do(t, http.MethodPost, "/apis/example.com/v1/things", `{"apiVersion":"example.com/v1","kind":"Thing","metadata":{"name":"old"}}`); resp.Code != http.StatusCreated {
		t.Fatalf("create a Thing in v1: %d %s", resp.Code, resp.Body)
	}

	// v2 becomes the storage version.
	crd = s.getCRD(t, crd.Name)
	crd.Spec.Versions[0].Storage, crd.Spec.Versions[1].Storage = false, true
	crd = s.putCRD(t, crd)
	if !cmp.Equal(crd.Status.StoredVersions, []string{"v1", "v2"}) {
		t.Errorf("after v2 became the storage version: storedVersions %v; want [v1 v2]", crd.Status.StoredVersions)
	}
	if got := s.getCRD(t, crd.Name).Status.StoredVersions; !cmp.Equal(got, []string{"v1", "v2"}) {
		t.Errorf("stored storedVersions %v; want [v1 v2]", got)
	}
	s.waitServed(t, crd)

	// v1 is still in storedVersions: it cannot be removed.
	withoutV1 := crd.DeepCopy()
	withoutV1.Spec.Versions = withoutV1.Spec.Versions[1:]
	body, err := json.Marshal(withoutV1)
	if err != nil {
		t.Fatal(err)
	}
	resp := s.do(t, http.MethodPut, crds+"/"+crd.Name, body)
	want := metav1.StatusCause{
		Type:    metav1.CauseTypeFieldValueInvalid,
		Field:   "status.storedVersions[0]",
		Message: `Invalid value: "v1": missing from spec.versions; v1 was previously a storage version, and must remain in spec.versions until a storage migration ensures no data remains persisted in v1 and removes v1 from status.storedVersions`,
	}
	if resp.Code != http.StatusUnprocessableEntity {
		t.Fatalf("PUT without v1: %d %s; want 422", resp.Code, resp.Body)
	}
	if st := resp.status(t); st.Reason != metav1.StatusReasonInvalid || st.Details == nil || !cmp.Equal(st.Details.Causes, []metav1.StatusCause{want}) ||
		st.Message != `CustomResourceDefinition.apiextensions.k8s.io "things.example.com" is invalid: status.storedVersions[0]: `+want.Message {
		t.Errorf("PUT without v1: %+v; want kube's Invalid with the cause %+v", st, want)
	}

	// A status write may set any storedVersions (kube validates only the
	// accepted names there), even without the storage version, which the
	// next write of the spec adds again.
	status := s.getCRD(t, crd.Name)
	status.Status.StoredVersions = []string{"v1"}
	status = s.putCRDStatus(t, status)
	if !cmp.Equal(status.Status.StoredVersions, []string{"v1"}) {
		t.Errorf("status written with storedVersions [v1]: %v", status.Status.StoredVersions)
	}
	status.Labels = map[string]string{"spec": "written"}
	if got := s.putCRD(t, status).Status.StoredVersions; !cmp.Equal(got, []string{"v1", "v2"}) {
		t.Errorf("storedVersions after a write of the CRD: %v; want [v1 v2]", got)
	}

	// A migration's status write removes v1; then v1 can go.
	status = s.getCRD(t, crd.Name)
	status.Status.StoredVersions = []string{"v2"}
	s.putCRDStatus(t, status)
	crd = s.getCRD(t, crd.Name)
	crd.Spec.Versions = slices.DeleteFunc(crd.Spec.Versions, func(v apiextensionsv1.CustomResourceDefinitionVersion) bool { return v.Name == "v1" })
	crd = s.putCRD(t, crd)
	if !cmp.Equal(crd.Status.StoredVersions, []string{"v2"}) || len(crd.Spec.Versions) != 1 {
		t.Errorf("after v1 was removed: versions %+v, storedVersions %v; want v2 only", crd.Spec.Versions, crd.Status.StoredVersions)
	}
	eventually(t, "example.com/v1 gone from discovery", func() (bool, string) {
		resp := s.do(t, http.MethodGet, "/apis/example.com/v1", nil)
		return resp.Code == http.StatusNotFound, resp.Header.Get("Content-Type")
	})
}

// putCRDStatus writes crd's status, which must be accepted.
func (s *testServer) putCRDStatus(t *testing.T, crd *apiextensionsv1.CustomResourceDefinition) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	body, err := json.Marshal(crd)
	if err != nil {
		t.Fatal(err)
	}
	resp := s.do(t, http.MethodPut, crds+"/"+crd.Name+"/status", body)
	if resp.Code != http.StatusOK {
		t.Fatalf("PUT the status of CRD %s: %d %s", crd.Name, resp.Code, resp.Body)
	}
	var out apiextensionsv1.CustomResourceDefinition
	resp.decode(t, &out)
	return &out
}

// formatsCRD has a schema whose formats kube does not recognize (foo, on a
// string; int32 on a string is refused too) and a list-type set of atomic
// objects, which kube accepts with warnings.
const formatsCRD = `{"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition",
 "metadata":{"name":"formats.example.com"},
 "spec":{"group":"example.com","scope":"Namespaced","names":{"plural":"formats","kind":"Format"},
  "versions":[{"name":"v1","served":true,"storage":true,
   "schema":{"openAPIV3Schema":{"type":"object","properties":{"spec":{"type":"object","properties":{
    "a":{"type":"string","format":"foo"},
    "b":{"type":"string","format":"date-time"},
    "c":{"type":"string","format":"int32"},
    "ports":{"type":"array","x-kubernetes-list-type":"set","items":{"type":"object","x-kubernetes-map-type":"atomic","properties":{"port":{"type":"integer"}}}}}}}}}}]}}`

// TestCRDWarnings: a CRD's create and update answer kube 1.37's warnings
// (customresourcedefinition strategy's WarningsOnCreate and
// WarningsOnUpdate): `unrecognized format "foo"` for each format kube's
// validation does not know, and one for a list-type set of non-scalar
// items; an update warns only of what the stored CRD did not have, a status
// write of nothing, a refused create of nothing.
func TestCRDWarnings(t *testing.T) {
	s := startCRDServer(t)
	listWarning := `299 - "x-kubernetes-list-type: set for items of type \"object\" is not supported by server-side apply or CEL validation rules"`
	want := []string{`299 - "unrecognized format \"foo\""`, `299 - "unrecognized format \"int32\""`, listWarning} // sorted

	if resp := s.do(t, http.MethodPost, crds+"?dryRun=All", formatsCRD); resp.Code != http.StatusCreated || !cmp.Equal(resp.sortedWarnings(), want) {
		t.Errorf("dry-run create: %d %s, warnings %q; want 201 and %q", resp.Code, resp.Body, resp.warnings(), want)
	}
	refused := strings.Replace(formatsCRD, `"type":"object","properties":{"spec"`, `"type":"object","x-kubernetes-validations":[{"rule":"self.x =="}],"properties":{"spec"`, 1)
	if resp := s.do(t, http.MethodPost, crds, refused); resp.Code != http.StatusUnprocessableEntity || len(resp.warnings()) != 0 {
		t.Errorf("refused create: %d %s, warnings %q; want 422 and none", resp.Code, resp.Body, resp.warnings())
	}
	resp := s.do(t, http.MethodPost, crds, formatsCRD)
	if resp.Code != http.StatusCreated || !cmp.Equal(resp.sortedWarnings(), want) {
		t.Fatalf("create: %d %s, warnings %q; want 201 and %q", resp.Code, resp.Body, resp.warnings(), want)
	}
	var crd apiextensionsv1.CustomResourceDefinition
	resp.decode(t, &crd)
	s.waitServed(t, &crd)

	// A create that exists already: validated (and warned of), then 409,
	// as kube answers it.
	if resp := s.do(t, http.MethodPost, crds, formatsCRD); resp.Code != http.StatusConflict || !cmp.Equal(resp.sortedWarnings(), want) {
		t.Errorf("create again: %d, warnings %q; want 409 and %q", resp.Code, resp.warnings(), want)
	}

	// Unchanged formats are not warned of again; a new one is.
	crd = *s.getCRD(t, crd.Name)
	crd.Labels = map[string]string{"changed": "labels"}
	body, err := json.Marshal(&crd)
	if err != nil {
		t.Fatal(err)
	}
	resp = s.do(t, http.MethodPut, crds+"/"+crd.Name, body)
	if resp.Code != http.StatusOK || len(resp.warnings()) != 0 {
		t.Errorf("PUT with the same schema: %d %s, warnings %q; want 200 and none", resp.Code, resp.Body, resp.warnings())
	}
	crd = *s.getCRD(t, crd.Name)
	spec := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
	spec.Properties["d"] = apiextensionsv1.JSONSchemaProps{Type: "string", Format: "bar"}
	crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"] = spec
	body, err = json.Marshal(&crd)
	if err != nil {
		t.Fatal(err)
	}
	resp = s.do(t, http.MethodPut, crds+"/"+crd.Name, body)
	if want := []string{`299 - "unrecognized format \"bar\""`}; resp.Code != http.StatusOK || !cmp.Equal(resp.warnings(), want) {
		t.Errorf("PUT adding format bar: %d %s, warnings %q; want 200 and %q", resp.Code, resp.Body, resp.warnings(), want)
	}
	patch := `{"spec":{"versions":[{"name":"v1","served":true,"storage":true,"schema":{"openAPIV3Schema":{"type":"object","properties":{"spec":{"type":"object","properties":{"e":{"type":"integer","format":"uint8"}}}}}}}]}}`
	resp = s.do(t, http.MethodPatch, crds+"/"+crd.Name, patch, "Content-Type", "application/merge-patch+json")
	if want := []string{`299 - "unrecognized format \"uint8\""`}; resp.Code != http.StatusOK || !cmp.Equal(resp.warnings(), want) {
		t.Errorf("PATCH with format uint8 on an integer: %d %s, warnings %q; want 200 and %q", resp.Code, resp.Body, resp.warnings(), want)
	}

	// Past 4096 characters of warnings, kube's recorder sends no more: of
	// 300 formats (40 characters each), the first 103 (102 fit, the 103rd
	// goes over and is sent, the others are dropped).
	many := map[string]apiextensionsv1.JSONSchemaProps{}
	for i := range 300 {
		many[fmt.Sprintf("f%03d", i)] = apiextensionsv1.JSONSchemaProps{Type: "string", Format: fmt.Sprintf("unknown-format-%03d", i)}
	}
	crowded := s.getCRD(t, crd.Name)
	crowded.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"] = apiextensionsv1.JSONSchemaProps{Type: "object", Properties: many}
	body, err = json.Marshal(crowded)
	if err != nil {
		t.Fatal(err)
	}
	resp = s.do(t, http.MethodPut, crds+"/"+crd.Name+"?dryRun=All", body)
	if resp.Code != http.StatusOK || len(resp.warnings()) != 103 {
		t.Errorf("PUT with 300 unrecognized formats: %d, %d warnings; want 200 and 103", resp.Code, len(resp.warnings()))
	}

	// The status subresource warns of nothing (kube's status strategy).
	crd = *s.getCRD(t, crd.Name)
	body, err = json.Marshal(&crd)
	if err != nil {
		t.Fatal(err)
	}
	resp = s.do(t, http.MethodPut, crds+"/"+crd.Name+"/status", body)
	if resp.Code != http.StatusOK || len(resp.warnings()) != 0 {
		t.Errorf("PUT status: %d %s, warnings %q; want 200 and none", resp.Code, resp.Body, resp.warnings())
	}
}
