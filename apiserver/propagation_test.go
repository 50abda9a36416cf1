package apiserver_test

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestDeletePropagation: a DELETE's propagationPolicy (or the deprecated
// orphanDependents), in the body or the query, becomes the garbage
// collector's finalizers as kube's generic store makes them: Foreground and
// Orphan mark the object (deletionTimestamp) and keep it, Background
// deletes it at once; on an object being deleted already the finalizers
// are switched, and one left without finalizers is deleted.
func TestDeletePropagation(t *testing.T) {
	s := startServer(t)
	s.namespace(t, "prop")
	cases := []struct {
		name       string
		finalizers []string // the object's, before
		// deletes are sent in turn: a body (JSON), "?query", or "" (none).
		deletes []string
		want    []string // finalizers after them; nil: gone
	}{
		{"background by default", nil, []string{""}, nil},
		{"background", nil, []string{`{"propagationPolicy":"Background"}`}, nil},
		{"foreground", nil, []string{`{"propagationPolicy":"Foreground"}`}, []string{"foregroundDeletion"}},
		{"orphan", nil, []string{`{"propagationPolicy":"Orphan"}`}, []string{"orphan"}},
		{"orphanDependents true", nil, []string{`{"orphanDependents":true}`}, []string{"orphan"}},
		{"orphanDependents false", nil, []string{`{"orphanDependents":false}`}, nil},
		{"foreground in the query", nil, []string{"?propagationPolicy=Foreground"}, []string{"foregroundDeletion"}},
		{"kept with other finalizers", []string{"example.com/hold"}, []string{`{"propagationPolicy":"Orphan"}`}, []string{"example.com/hold", "orphan"}},
		{"background keeps other finalizers", []string{"example.com/hold"}, []string{""}, []string{"example.com/hold"}},
		{"the object's GC finalizer decides without options", []string{"orphan"}, []string{""}, []string{"orphan"}},
		{"foreground then orphan", nil, []string{`{"propagationPolicy":"Foreground"}`, `{"propagationPolicy":"Orphan"}`}, []string{"orphan"}},
		{"orphan then foreground", nil, []string{`{"propagationPolicy":"Orphan"}`, `{"propagationPolicy":"Foreground"}`}, []string{"foregroundDeletion"}},
		{"foreground then background deletes", nil, []string{`{"propagationPolicy":"Foreground"}`, `{"propagationPolicy":"Background"}`}, nil},
		{"orphan then no options keeps it", nil, []string{`{"propagationPolicy":"Orphan"}`, ""}, []string{"orphan"}},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			name := fmt.Sprintf("cm%d", i)
			path := "/api/v1/namespaces/prop/configmaps/" + name
			cm := map[string]any{"metadata": map[string]any{"name": name, "finalizers": tc.finalizers}}
			if resp := s.do(t, http.MethodPost, "/api/v1/namespaces/prop/configmaps", cm); resp.Code != http.StatusCreated {
				t.Fatalf("create: %d %s", resp.Code, resp.Body)
			}
			for _, del := range tc.deletes {
				if resp := deleteWith(t, s, path, del); resp.Code != http.StatusOK {
					t.Fatalf("DELETE %q: %d %s", del, resp.Code, resp.Body)
				}
			}
			got := s.do(t, http.MethodGet, path, nil)
			if tc.want == nil {
				if got.Code != http.StatusNotFound {
					t.Fatalf("GET after delete: %d %s; want 404", got.Code, got.Body)
				}
				return
			}
			var obj corev1.ConfigMap
			got.decode(t, &obj)
			if !slices.Equal(obj.Finalizers, tc.want) || obj.DeletionTimestamp == nil {
				t.Errorf("finalizers %q, deletionTimestamp %v; want %q, set", obj.Finalizers, obj.DeletionTimestamp, tc.want)
			}
			// Removing the finalizers deletes it (the update that empties them).
			obj.Finalizers = nil
			if resp := s.do(t, http.MethodPut, path, obj); resp.Code != http.StatusOK {
				t.Fatalf("PUT without finalizers: %d %s", resp.Code, resp.Body)
			}
			if resp := s.do(t, http.MethodGet, path, nil); resp.Code != http.StatusNotFound {
				t.Errorf("GET after the last finalizer went: %d; want 404", resp.Code)
			}
		})
	}
}

func deleteWith(t *testing.T, s *testServer, path, opts string) response {
	t.Helper()
	if strings.HasPrefix(opts, "?") {
		return s.do(t, http.MethodDelete, path+opts, nil)
	}
	if opts == "" {
		return s.do(t, http.MethodDelete, path, nil)
	}
	return s.do(t, http.MethodDelete, path, opts)
}

// TestDeleteOptionsInvalid: options kube refuses are 422 Invalid on kind
// DeleteOptions, for an object and a collection, and nothing changes; a
// missing object is 404 first, as kube reads it before the options.
func TestDeleteOptionsInvalid(t *testing.T) {
	s := startServer(t)
	s.namespace(t, "badopts")
	cm := map[string]any{"metadata": map[string]any{"name": "keep"}}
	if resp := s.do(t, http.MethodPost, "/api/v1/namespaces/badopts/configmaps", cm); resp.Code != http.StatusCreated {
		t.Fatalf("create: %d %s", resp.Code, resp.Body)
	}
	before := s.storedKeys(t, "/registry/configmaps/badopts/")
	cases := []struct {
		name, path, opts string
		code             int
		field            string
	}{
		{"unknown policy", "/keep", `{"propagationPolicy":"Sideways"}`, 422, "propagationPolicy"},
		{"unknown policy in the query", "/keep", "?propagationPolicy=Sideways", 422, "propagationPolicy"},
		{"both orphanDependents and propagationPolicy", "/keep", `{"orphanDependents":true,"propagationPolicy":"Orphan"}`, 422, "propagationPolicy"},
		{"collection: unknown policy", "", `{"propagationPolicy":"Sideways"}`, 422, "propagationPolicy"},
		{"collection: both", "", `{"orphanDependents":false,"propagationPolicy":"Background"}`, 422, "propagationPolicy"},
		{"missing object", "/nothere", `{"propagationPolicy":"Sideways"}`, 404, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			resp := deleteWith(t, s, "/api/v1/namespaces/badopts/configmaps"+tc.path, tc.opts)
			if resp.Code != tc.code {
				t.Fatalf("DELETE: %d %s; want %d", resp.Code, resp.Body, tc.code)
			}
			st := resp.status(t)
			if tc.code == 422 {
				if st.Reason != metav1.StatusReasonInvalid || st.Details == nil || st.Details.Kind != "DeleteOptions" || st.Details.Group != "meta.k8s.io" ||
					len(st.Details.Causes) == 0 || st.Details.Causes[0].Field != tc.field {
					t.Errorf("Status %+v; want Invalid on meta.k8s.io DeleteOptions, cause on %s", st, tc.field)
				}
			}
		})
	}
	after := s.storedKeys(t, "/registry/configmaps/badopts/")
	if fmt.Sprint(before) != fmt.Sprint(after) {
		t.Errorf("stored after the refused deletes:\n%v\nwant unchanged:\n%v", after, before)
	}
}

// TestDeleteCollectionPropagation: a DELETE of a collection with Foreground
// marks every object it selects.
func TestDeleteCollectionPropagation(t *testing.T) {
	s := startServer(t)
	s.namespace(t, "coll")
	for _, name := range []string{"a", "b"} {
		cm := map[string]any{"metadata": map[string]any{"name": name}}
		if resp := s.do(t, http.MethodPost, "/api/v1/namespaces/coll/configmaps", cm); resp.Code != http.StatusCreated {
			t.Fatalf("create: %d %s", resp.Code, resp.Body)
		}
	}
	if resp := s.do(t, http.MethodDelete, "/api/v1/namespaces/coll/configmaps", `{"propagationPolicy":"Foreground"}`); resp.Code != http.StatusOK {
		t.Fatalf("DELETE collection: %d %s", resp.Code, resp.Body)
	}
	var list corev1.ConfigMapList
	s.do(t, http.MethodGet, "/api/v1/namespaces/coll/configmaps", nil).decode(t, &list)
	if len(list.Items) != 2 {
		t.Fatalf("%d ConfigMaps after a foreground DELETE of the collection; want 2, marked", len(list.Items))
	}
	for _, cm := range list.Items {
		if cm.DeletionTimestamp == nil || !slices.Equal(cm.Finalizers, []string{"foregroundDeletion"}) {
			t.Errorf("%s: deletionTimestamp %v, finalizers %q; want set, [foregroundDeletion]", cm.Name, cm.DeletionTimestamp, cm.Finalizers)
		}
	}
}

// TestOwnerReferencesValidated: metadata.ownerReferences are checked as
// kube checks them (apimachinery's ValidateOwnerReferences), on create and
// on update: 422 with kube's causes, nothing stored. A cluster-scoped
// object may name a namespaced owner (kube's collector, not validation,
// treats that as unresolvable).
func TestOwnerReferencesValidated(t *testing.T) {
	s := startServer(t)
	s.namespace(t, "owners")
	ref := func(change func(r map[string]any)) map[string]any {
		r := map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": "6b3a9c2e-0d2b-4bd6-9a53-1a1c7f6e2b11"}
		if change != nil {
			change(r)
		}
		return r
	}
	yes := true
	cases := []struct {
		name  string
		refs  []map[string]any
		code  int
		cause string // "field: type" of the first cause
	}{
		{"valid", []map[string]any{ref(nil)}, 201, ""},
		{"no uid", []map[string]any{ref(func(r map[string]any) { delete(r, "uid") })}, 422, "metadata.ownerReferences[0].uid: FieldValueRequired"},
		{"no apiVersion", []map[string]any{ref(func(r map[string]any) { delete(r, "apiVersion") })}, 422, "metadata.ownerReferences[0].apiVersion: FieldValueRequired"},
		{"no kind", []map[string]any{ref(func(r map[string]any) { delete(r, "kind") })}, 422, "metadata.ownerReferences[0].kind: FieldValueRequired"},
		{"no name", []map[string]any{ref(func(r map[string]any) { delete(r, "name") })}, 422, "metadata.ownerReferences[0].name: FieldValueRequired"},
		{"two controllers", []map[string]any{
			ref(func(r map[string]any) { r["controller"] = yes }),
			ref(func(r map[string]any) {
				r["controller"], r["uid"], r["name"] = yes, "0c1d3c5e-7b52-4d4e-8e0b-5c2f1c0f9a22", "other"
			}),
		}, 422, "metadata.ownerReferences: FieldValueInvalid"},
		{"an Event as owner", []map[string]any{ref(func(r map[string]any) { r["kind"] = "Event" })}, 422, "metadata.ownerReferences[0]: FieldValueInvalid"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			name := fmt.Sprintf("dep%d", i)
			cm := map[string]any{"metadata": map[string]any{"name": name, "ownerReferences": tc.refs}}
			resp := s.do(t, http.MethodPost, "/api/v1/namespaces/owners/configmaps", cm)
			if resp.Code != tc.code {
				t.Fatalf("create: %d %s; want %d", resp.Code, resp.Body, tc.code)
			}
			if tc.code != 422 {
				return
			}
			st := resp.status(t)
			if st.Details == nil || len(st.Details.Causes) == 0 || fmt.Sprintf("%s: %s", st.Details.Causes[0].Field, st.Details.Causes[0].Type) != tc.cause {
				t.Errorf("causes %+v; want first %s", st.Details, tc.cause)
			}
			if got := s.storedKeys(t, "/registry/configmaps/owners/"+name); len(got) != 0 {
				t.Errorf("stored %v after a refused create", got)
			}
			// The same references are refused on update.
			plain := map[string]any{"metadata": map[string]any{"name": name}}
			created := s.do(t, http.MethodPost, "/api/v1/namespaces/owners/configmaps", plain)
			if created.Code != http.StatusCreated {
				t.Fatalf("create without references: %d %s", created.Code, created.Body)
			}
			var obj map[string]any
			created.decode(t, &obj)
			obj["metadata"].(map[string]any)["ownerReferences"] = tc.refs
			if resp := s.do(t, http.MethodPut, "/api/v1/namespaces/owners/configmaps/"+name, obj); resp.Code != 422 {
				t.Errorf("update: %d %s; want 422", resp.Code, resp.Body)
			}
		})
	}
	// A cluster-scoped object with a namespaced owner is accepted, as kube
	// accepts it.
	ns := map[string]any{"metadata": map[string]any{"name": "owned-ns", "ownerReferences": []map[string]any{ref(nil)}}}
	if resp := s.do(t, http.MethodPost, "/api/v1/namespaces", ns); resp.Code != http.StatusCreated {
		t.Errorf("create a Namespace owned by a ConfigMap: %d %s; want 201", resp.Code, resp.Body)
	}
}
