package apiserver_test

import (
	"net/http"
	"slices"
	"testing"
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
