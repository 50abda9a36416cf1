package apiserver_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// kube's discovery controller's verbs of a custom resource, in its order
// (customresource_discovery_controller.go), and those of a terminating CRD.
var (
	customVerbs      = []string{"delete", "deletecollection", "get", "list", "patch", "create", "update", "watch"}
	terminatingVerbs = []string{"delete", "deletecollection", "get", "list", "watch"}
)

// legacyResource is resource's entry in /apis/<group>/<version> (ok false
// when the document or the entry is not there).
func (s *testServer) legacyResource(t *testing.T, group, version, resource string) (metav1.APIResource, bool) {
	t.Helper()
	resp := s.do(t, http.MethodGet, "/apis/"+group+"/"+version, nil)
	if resp.Code != http.StatusOK {
		return metav1.APIResource{}, false
	}
	var list metav1.APIResourceList
	resp.decode(t, &list)
	i := slices.IndexFunc(list.APIResources, func(r metav1.APIResource) bool { return r.Name == resource })
	if i < 0 {
		return metav1.APIResource{}, false
	}
	return list.APIResources[i], true
}

// aggregatedGroups is the aggregated /apis document, by group.
func (s *testServer) aggregatedGroups(t *testing.T) map[string]apidiscoveryv2.APIGroupDiscovery {
	t.Helper()
	resp := s.do(t, http.MethodGet, "/apis", nil, "Accept", aggregatedDiscoveryType)
	if ct := resp.Header.Get("Content-Type"); resp.Code != http.StatusOK || ct != aggregatedDiscoveryType {
		t.Fatalf("GET /apis aggregated: %d %s %s", resp.Code, ct, resp.Body)
	}
	var list apidiscoveryv2.APIGroupDiscoveryList
	resp.decode(t, &list)
	out := map[string]apidiscoveryv2.APIGroupDiscovery{}
	for _, g := range list.Items {
		out[g.Name] = g
	}
	return out
}

// aggregatedResource is resource's entry in aggregated discovery.
func (s *testServer) aggregatedResource(t *testing.T, group, version, resource string) (apidiscoveryv2.APIResourceDiscovery, bool) {
	t.Helper()
	g, ok := s.aggregatedGroups(t)[group]
	if !ok {
		return apidiscoveryv2.APIResourceDiscovery{}, false
	}
	for _, v := range g.Versions {
		if v.Version != version {
			continue
		}
		for _, r := range v.Resources {
			if r.Resource == resource {
				return r, true
			}
		}
	}
	return apidiscoveryv2.APIResourceDiscovery{}, false
}

// eventually retries check until it reports true, for up to 10 s; the test
// fails with check's last description otherwise.
func eventually(t *testing.T, what string, check func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ok, got := check()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10s; last: %s", what, got)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestCRDDiscoveryTerminating: while a CRD is terminating (an object's
// finalizer holds it), legacy and aggregated discovery list its resource
// with kube's verbs delete, deletecollection, get, list and watch only; its
// subresources keep theirs. Once the CRD is gone, so is its group.
func TestCRDDiscoveryTerminating(t *testing.T) {
	s := startCRDServer(t)
	s.createCRD(t, gadgetsCRD)
	held := gadget("held", nil)
	held["metadata"].(map[string]any)["finalizers"] = []string{"example.com/hold"}
	if resp := s.do(t, http.MethodPost, gadgets, held); resp.Code != http.StatusCreated {
		t.Fatalf("create a gadget with a finalizer: %d %s", resp.Code, resp.Body)
	}

	legacy, ok := s.legacyResource(t, "example.com", "v1", "gadgets")
	aggregated, aok := s.aggregatedResource(t, "example.com", "v1", "gadgets")
	if !ok || !aok || !slices.Equal(legacy.Verbs, customVerbs) || !slices.Equal(aggregated.Verbs, customVerbs) {
		t.Fatalf("gadgets before the CRD's deletion: legacy %v (%v), aggregated %v (%v); want %v", legacy.Verbs, ok, aggregated.Verbs, aok, customVerbs)
	}

	if resp := s.do(t, http.MethodDelete, crds+"/gadgets.example.com", nil); resp.Code != http.StatusOK {
		t.Fatalf("DELETE the CRD: %d %s", resp.Code, resp.Body)
	}
	eventually(t, "legacy discovery of the terminating CRD's gadgets", func() (bool, string) {
		r, ok := s.legacyResource(t, "example.com", "v1", "gadgets")
		return ok && slices.Equal(r.Verbs, terminatingVerbs), fmt.Sprintf("%+v (listed %v)", r, ok)
	})
	legacy, _ = s.legacyResource(t, "example.com", "v1", "gadgets")
	if legacy.StorageVersionHash != "ggWp2HxsL0Q=" || legacy.SingularName != "gadget" || !cmp.Equal(legacy.ShortNames, []string{"gd"}) {
		t.Errorf("terminating gadgets: %+v; want the storageVersionHash, singular name and short names unchanged", legacy)
	}
	for _, sub := range []string{"gadgets/status", "gadgets/scale"} {
		if r, ok := s.legacyResource(t, "example.com", "v1", sub); !ok || !slices.Equal(r.Verbs, []string{"get", "patch", "update"}) {
			t.Errorf("terminating CRD's %s: %+v (listed %v); want get, patch, update", sub, r, ok)
		}
	}
	aggregated, aok = s.aggregatedResource(t, "example.com", "v1", "gadgets")
	if !aok || !slices.Equal(aggregated.Verbs, terminatingVerbs) || len(aggregated.Subresources) != 2 {
		t.Errorf("aggregated discovery of the terminating CRD's gadgets: %+v (listed %v); want verbs %v and both subresources", aggregated, aok, terminatingVerbs)
	}
	// What discovery says is what is served: no create, the rest as kube.
	if resp := s.do(t, http.MethodPost, gadgets, gadget("new", nil)); resp.Code != http.StatusForbidden {
		t.Errorf("create while the CRD terminates: %d %s; want 403", resp.Code, resp.Body)
	}
	if resp := s.do(t, http.MethodGet, gadgets+"/held", nil); resp.Code != http.StatusOK {
		t.Errorf("get while the CRD terminates: %d %s", resp.Code, resp.Body)
	}

	// The finalizer goes, then the object, then the CRD, then its group.
	resp := s.do(t, http.MethodPatch, gadgets+"/held", `{"metadata":{"finalizers":null}}`, "Content-Type", "application/merge-patch+json")
	if resp.Code != http.StatusOK {
		t.Fatalf("remove the finalizer: %d %s", resp.Code, resp.Body)
	}
	eventually(t, "example.com gone from discovery", func() (bool, string) {
		resp := s.do(t, http.MethodGet, "/apis/example.com/v1", nil)
		_, listed := s.aggregatedGroups(t)["example.com"]
		return resp.Code == http.StatusNotFound && !listed, fmt.Sprintf("/apis/example.com/v1 %d, aggregated lists example.com: %v", resp.Code, listed)
	})
}

// widgetsVersionsCRD is cluster-scoped Widgets of stable.example.com in
// five versions, given out of kube's order: v1alpha1 not served, v1 the
// storage version; explicit singular, short names and categories.
const widgetsVersionsCRD = `{"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition",
 "metadata":{"name":"widgets.stable.example.com"},
 "spec":{"group":"stable.example.com","scope":"Cluster",
  "names":{"plural":"widgets","singular":"widgetsingular","kind":"Widget","shortNames":["wg","wgt"],"categories":["all","toys"]},
  "versions":[
   {"name":"v1alpha1","served":false,"storage":false,"schema":{"openAPIV3Schema":{"type":"object","x-kubernetes-preserve-unknown-fields":true}}},
   {"name":"v2alpha1","served":true,"storage":false,"schema":{"openAPIV3Schema":{"type":"object","x-kubernetes-preserve-unknown-fields":true}}},
   {"name":"v1beta1","served":true,"storage":false,"schema":{"openAPIV3Schema":{"type":"object","x-kubernetes-preserve-unknown-fields":true}}},
   {"name":"v1","served":true,"storage":true,"schema":{"openAPIV3Schema":{"type":"object","x-kubernetes-preserve-unknown-fields":true}}},
   {"name":"v2","served":true,"storage":false,"schema":{"openAPIV3Schema":{"type":"object","x-kubernetes-preserve-unknown-fields":true}}}]}}`

// TestCRDDiscoveryVersions: the served versions of a CRD in kube's order
// (version.CompareKubeAwareVersionStrings: v2, v1, v1beta1, v2alpha1), the
// first preferred, an unserved one not listed; each lists the resource with
// the accepted names, categories and the storage version's hash, which
// changes with the storage version; a CRD with no served version leaves no
// group.
func TestCRDDiscoveryVersions(t *testing.T) {
	s := startCRDServer(t)
	crd := s.createCRD(t, widgetsVersionsCRD)
	wantVersions := []string{"v2", "v1", "v1beta1", "v2alpha1"}

	var group metav1.APIGroup
	s.do(t, http.MethodGet, "/apis/stable.example.com", nil).decode(t, &group)
	group.TypeMeta = metav1.TypeMeta{}
	var versions []string
	for _, v := range group.Versions {
		versions = append(versions, v.Version)
		if v.GroupVersion != "stable.example.com/"+v.Version {
			t.Errorf("/apis/stable.example.com version %+v", v)
		}
	}
	if !cmp.Equal(versions, wantVersions) || group.PreferredVersion.Version != "v2" {
		t.Errorf("/apis/stable.example.com: versions %v, preferred %v; want %v, v2", versions, group.PreferredVersion, wantVersions)
	}
	var groups metav1.APIGroupList
	s.do(t, http.MethodGet, "/apis", nil, "Accept", "application/json").decode(t, &groups)
	if i := slices.IndexFunc(groups.Groups, func(g metav1.APIGroup) bool { return g.Name == "stable.example.com" }); i < 0 || !cmp.Equal(groups.Groups[i], group) {
		t.Errorf("/apis lists stable.example.com as %+v; want %+v", groups.Groups, group)
	}
	agg := s.aggregatedGroups(t)["stable.example.com"]
	versions = nil
	for _, v := range agg.Versions {
		versions = append(versions, v.Version)
	}
	if !cmp.Equal(versions, wantVersions) {
		t.Errorf("aggregated stable.example.com versions %v; want %v", versions, wantVersions)
	}
	if resp := s.do(t, http.MethodGet, "/apis/stable.example.com/v1alpha1", nil); resp.Code != http.StatusNotFound {
		t.Errorf("discovery of the unserved v1alpha1: %d %s; want 404", resp.Code, resp.Body)
	}

	checkVersions := func(hash string) {
		t.Helper()
		for _, v := range wantVersions {
			want := metav1.APIResource{
				Name: "widgets", SingularName: "widgetsingular", Namespaced: false, Kind: "Widget", Verbs: customVerbs,
				ShortNames: []string{"wg", "wgt"}, Categories: []string{"all", "toys"}, StorageVersionHash: hash,
			}
			got, ok := s.legacyResource(t, "stable.example.com", v, "widgets")
			if diff := cmp.Diff(want, got); !ok || diff != "" {
				t.Errorf("/apis/stable.example.com/%s widgets (listed %v) (-want +got):\n%s", v, ok, diff)
			}
			wantAgg := apidiscoveryv2.APIResourceDiscovery{
				Resource: "widgets", SingularResource: "widgetsingular", Scope: apidiscoveryv2.ScopeCluster,
				ResponseKind: &metav1.GroupVersionKind{Group: "stable.example.com", Version: v, Kind: "Widget"},
				Verbs:        customVerbs, ShortNames: []string{"wg", "wgt"}, Categories: []string{"all", "toys"},
			}
			gotAgg, ok := s.aggregatedResource(t, "stable.example.com", v, "widgets")
			if diff := cmp.Diff(wantAgg, gotAgg); !ok || diff != "" {
				t.Errorf("aggregated stable.example.com/%s widgets (listed %v) (-want +got):\n%s", v, ok, diff)
			}
		}
	}
	// kube's discovery.StorageVersionHash("stable.example.com", "v1", "Widget").
	checkVersions("2vCiI1Gcs2s=")

	// v2 becomes the storage version: every version's hash is v2's.
	crd = s.getCRD(t, crd.Name)
	for i := range crd.Spec.Versions {
		crd.Spec.Versions[i].Storage = crd.Spec.Versions[i].Name == "v2"
	}
	s.putCRD(t, crd)
	eventually(t, "the storage version hash of v2", func() (bool, string) {
		r, _ := s.legacyResource(t, "stable.example.com", "v1beta1", "widgets")
		return r.StorageVersionHash == "3VS0F8VrYVc=", r.StorageVersionHash
	})
	checkVersions("3VS0F8VrYVc=")

	// No version served: the group is gone, as kube's discovery controller
	// removes a group without served versions.
	crd = s.getCRD(t, crd.Name)
	for i := range crd.Spec.Versions {
		crd.Spec.Versions[i].Served = false
	}
	s.putCRD(t, crd)
	eventually(t, "stable.example.com gone from discovery", func() (bool, string) {
		var got []string
		for _, path := range []string{"/apis/stable.example.com", "/apis/stable.example.com/v1", "/apis/stable.example.com/v2"} {
			if resp := s.do(t, http.MethodGet, path, nil); resp.Code != http.StatusNotFound {
				got = append(got, fmt.Sprintf("%s %d", path, resp.Code))
			}
		}
		var groups metav1.APIGroupList
		s.do(t, http.MethodGet, "/apis", nil, "Accept", "application/json").decode(t, &groups)
		if slices.ContainsFunc(groups.Groups, func(g metav1.APIGroup) bool { return g.Name == "stable.example.com" }) {
			got = append(got, "/apis lists it")
		}
		if _, ok := s.aggregatedGroups(t)["stable.example.com"]; ok {
			got = append(got, "aggregated /apis lists it")
		}
		return len(got) == 0, strings.Join(got, ", ")
	})
}

// getCRD reads the CRD name.
func (s *testServer) getCRD(t *testing.T, name string) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	resp := s.do(t, http.MethodGet, crds+"/"+name, nil)
	if resp.Code != http.StatusOK {
		t.Fatalf("GET CRD %s: %d %s", name, resp.Code, resp.Body)
	}
	var crd apiextensionsv1.CustomResourceDefinition
	resp.decode(t, &crd)
	return &crd
}

// putCRD replaces the CRD with crd, which must be accepted.
func (s *testServer) putCRD(t *testing.T, crd *apiextensionsv1.CustomResourceDefinition) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	body, err := json.Marshal(crd)
	if err != nil {
		t.Fatal(err)
	}
	resp := s.do(t, http.MethodPut, crds+"/"+crd.Name, body)
	if resp.Code != http.StatusOK {
		t.Fatalf("PUT CRD %s: %d %s", crd.Name, resp.Code, resp.Body)
	}
	var out apiextensionsv1.CustomResourceDefinition
	resp.decode(t, &out)
	return &out
}
