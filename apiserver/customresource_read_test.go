package apiserver_test

import (
	"encoding/json"
	"net/http"
	"reflect"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
)

// TestCustomObjectsAreReadAsServed: the JSON of a custom object — a GET
// (passed through from the cache when reading changes nothing), a write's
// answer — is always the object as its schema serves it now, the object
// the decoding path (?pretty=true) gives, also once a new default makes the
// stored bytes stale.
func TestCustomObjectsAreReadAsServed(t *testing.T) {
	s := startCRDServer(t)
	s.createCRD(t, gadgetsCRD)
	created := s.do(t, http.MethodPost, gadgets, gadget("a", map[string]any{"size": 8}))
	if created.Code != http.StatusCreated {
		t.Fatalf("create: %d %s", created.Code, created.Body)
	}
	same := func(what string, got []byte) {
		t.Helper()
		pretty := s.do(t, http.MethodGet, gadgets+"/a?pretty=true", nil)
		var gotObj, wantObj map[string]any
		if err := json.Unmarshal(pretty.Body, &wantObj); err != nil {
			t.Fatalf("pretty GET: %v %s", err, pretty.Body)
		}
		if err := json.Unmarshal(got, &gotObj); err != nil || !reflect.DeepEqual(gotObj, wantObj) {
			t.Errorf("%s (%v):\n%s\nwant (as decoded and encoded):\n%s", what, err, got, pretty.Body)
		}
	}
	// A list's items too: passed through, or decoded and encoded again.
	sameList := func(what string) {
		t.Helper()
		items := func(query string) []any {
			var list struct{ Items []any }
			resp := s.do(t, http.MethodGet, gadgets+query, nil)
			if err := json.Unmarshal(resp.Body, &list); err != nil || resp.Code != http.StatusOK {
				t.Fatalf("list %s: %d %v %s", query, resp.Code, err, resp.Body)
			}
			return list.Items
		}
		if got, want := items(""), items("?pretty=true"); len(got) != 1 || !reflect.DeepEqual(got, want) {
			t.Errorf("%s: list items %v; want (as decoded and encoded) %v", what, got, want)
		}
	}
	same("the create's answer", created.Body)
	sameList("list")
	for i := range 2 { // the second from the cache's decided entry
		get := s.do(t, http.MethodGet, gadgets+"/a", nil)
		same("GET "+string(rune('1'+i)), get.Body)
	}

	// A default for a field the stored object lacks: reading adds it.
	var crd apiextensionsv1.CustomResourceDefinition
	s.do(t, http.MethodGet, crds+"/gadgets.example.com", nil).decode(t, &crd)
	color := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"].Properties["color"]
	color.Default = &apiextensionsv1.JSON{Raw: []byte(`"blue"`)}
	crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"].Properties["color"] = color
	if resp := s.do(t, http.MethodPut, crds+"/gadgets.example.com", crd); resp.Code != http.StatusOK {
		t.Fatalf("PUT the CRD with a default: %d %s", resp.Code, resp.Body)
	}
	deadline := time.Now().Add(10 * time.Second)
	var get response
	for {
		get = s.do(t, http.MethodGet, gadgets+"/a", nil)
		if o := get.object(t); o.Object["spec"].(map[string]any)["color"] == "blue" || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if color := get.object(t).Object["spec"].(map[string]any)["color"]; color != "blue" {
		t.Fatalf("GET after the new default: color %v; want blue (defaulted on read)\n%s", color, get.Body)
	}
	same("GET after the new default", get.Body)
	for range 20 { // and once the new store's cache serves it
		time.Sleep(20 * time.Millisecond)
		same("GET after the new default", s.do(t, http.MethodGet, gadgets+"/a", nil).Body)
		sameList("list after the new default")
	}
	obj := get.object(t)
	obj.SetLabels(map[string]string{"x": "y"})
	updated := s.do(t, http.MethodPut, gadgets+"/a", obj.Object)
	if updated.Code != http.StatusOK {
		t.Fatalf("PUT: %d %s", updated.Code, updated.Body)
	}
	same("the replace's answer", updated.Body)
	same("GET after the replace", s.do(t, http.MethodGet, gadgets+"/a", nil).Body)
}
