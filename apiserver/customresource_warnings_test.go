package apiserver_test

import (
	"net/http"
	"slices"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
)

// TestCustomObjectFinalizerWarnings: as kube, a create or replace of a
// custom object warns of each finalizer it adds whose name is not
// domain-qualified (kube's standard finalizers excepted); a status write
// warns of nothing.
func TestCustomObjectFinalizerWarnings(t *testing.T) {
	s := startCRDServer(t)
	s.createCRD(t, gadgetsCRD)
	body := gadget("a", map[string]any{"size": 1})
	body["metadata"].(map[string]any)["finalizers"] = []string{"foo", "example.com/ok", "a.b", "kubernetes", "orphan"}
	resp := s.do(t, http.MethodPost, gadgets, body)
	if resp.Code != http.StatusCreated {
		t.Fatalf("create: %d %s", resp.Code, resp.Body)
	}
	want := []string{
		`299 - "metadata.finalizers: \"a.b\": prefer a domain-qualified finalizer name including a path (/) to avoid accidental conflicts with other finalizer writers"`,
		`299 - "metadata.finalizers: \"foo\": prefer a domain-qualified finalizer name to avoid accidental conflicts with other finalizer writers"`,
	}
	if got := resp.Header.Values("Warning"); !slices.Equal(got, want) {
		t.Errorf("create's warnings:\n%q\nwant\n%q", got, want)
	}
	obj := resp.object(t)
	obj.SetFinalizers(append(obj.GetFinalizers(), "bar"))
	resp = s.do(t, http.MethodPut, gadgets+"/a", obj.Object)
	want = []string{`299 - "metadata.finalizers: \"bar\": prefer a domain-qualified finalizer name to avoid accidental conflicts with other finalizer writers"`}
	if got := resp.Header.Values("Warning"); resp.Code != http.StatusOK || !slices.Equal(got, want) {
		t.Errorf("replace adding a finalizer: %d, warnings %q; want 200, %q", resp.Code, got, want)
	}
	obj = resp.object(t)
	obj.Object["status"] = map[string]any{"ready": true}
	resp = s.do(t, http.MethodPut, gadgets+"/a/status", obj.Object)
	if got := resp.Header.Values("Warning"); resp.Code != http.StatusOK || len(got) != 0 {
		t.Errorf("status write: %d, warnings %q; want 200, none", resp.Code, got)
	}
}

// TestCustomObjectRatchetingWarnings: as kube, a replace that keeps a value
// a CEL rule of the current schema fails passes (ratcheting) and answers
// the rule's error as a warning; a replace that changes the value fails.
func TestCustomObjectRatchetingWarnings(t *testing.T) {
	s := startCRDServer(t)
	s.createCRD(t, gadgetsCRD)
	if resp := s.do(t, http.MethodPost, gadgets, gadget("a", map[string]any{"size": 8})); resp.Code != http.StatusCreated {
		t.Fatalf("create: %d %s", resp.Code, resp.Body)
	}
	var crd apiextensionsv1.CustomResourceDefinition
	s.do(t, http.MethodGet, crds+"/gadgets.example.com", nil).decode(t, &crd)
	spec := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
	spec.XValidations[0] = apiextensionsv1.ValidationRule{Rule: "self.size <= 5", Message: "size must be at most 5"}
	crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"] = spec
	if resp := s.do(t, http.MethodPut, crds+"/gadgets.example.com", crd); resp.Code != http.StatusOK {
		t.Fatalf("PUT the CRD with a stricter rule: %d %s", resp.Code, resp.Body)
	}
	obj := s.do(t, http.MethodGet, gadgets+"/a", nil).object(t)
	obj.SetLabels(map[string]string{"x": "y"})
	resp := s.do(t, http.MethodPut, gadgets+"/a", obj.Object)
	for deadline := time.Now().Add(10 * time.Second); resp.Code == http.StatusServiceUnavailable && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond) // the replica is catching up with the CRD: send it again, as told
		resp = s.do(t, http.MethodPut, gadgets+"/a", obj.Object)
	}
	want := []string{`299 - "spec: Invalid value: size must be at most 5"`}
	if got := resp.Header.Values("Warning"); resp.Code != http.StatusOK || !slices.Equal(got, want) {
		t.Fatalf("replace keeping a value the new rule fails: %d %s, warnings %q; want 200 and %q", resp.Code, resp.Body, got, want)
	}
	obj = resp.object(t)
	obj.Object["spec"].(map[string]any)["size"] = int64(9)
	if resp := s.do(t, http.MethodPut, gadgets+"/a", obj.Object); resp.Code != http.StatusUnprocessableEntity {
		t.Errorf("replace changing the value to one the rule fails: %d %s; want 422", resp.Code, resp.Body)
	}
}
