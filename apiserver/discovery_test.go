package apiserver_test

import (
	"encoding/json"
	"net/http"
	"sort"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"

	"github.com/concord-dev/concord/registry"
)

const aggregatedDiscoveryType = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"

// kubectlDiscoveryAccept is what kubectl v1.32 sends to /api and /apis.
const kubectlDiscoveryAccept = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json"

var allVerbs = metav1.Verbs{"create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"}

// kubeVerbs are the verbs kube-apiserver lists for res: all, except that
// namespaces have no deletecollection.
func kubeVerbs(res *registry.Resource) metav1.Verbs {
	if res.Plural == "namespaces" {
		return metav1.Verbs{"create", "delete", "get", "list", "patch", "update", "watch"}
	}
	return allVerbs
}

// responseTypes records the Content-Type of the answers to each path.
type responseTypes struct {
	mu   sync.Mutex
	seen map[string]string
	next http.RoundTripper
}

func (r *responseTypes) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := r.next.RoundTrip(req)
	if err == nil {
		r.mu.Lock()
		r.seen[req.URL.Path] = resp.Header.Get("Content-Type")
		r.mu.Unlock()
	}
	return resp, err
}

func (r *responseTypes) get(path string) (string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ct, ok := r.seen[path]
	return ct, ok
}

// kubeStorageVersionHashes are the storageVersionHash values of kube-apiserver
// 1.37 (pkg/controlplane/storageversionhashdata/data.go), by
// group/version/resource; events.k8s.io/v1 Events are stored as core/v1 ones
// and hash as them. Concord stores CustomResourceDefinitions as
// apiextensions.k8s.io/v1 and hashes them as such; kube stores them as
// v1beta1 and answers jfWCUB31mvA=.
var kubeStorageVersionHashes = map[string]string{
	"v1/configmaps":                 "qFsyl6wFWjQ=",
	"v1/events":                     "r2yiGXH7wu8=",
	"v1/namespaces":                 "Q3oi5N2YM8M=",
	"v1/secrets":                    "S6u1pOWzb84=",
	"v1/serviceaccounts":            "pbx9ZvyFpBE=",
	"coordination.k8s.io/v1/leases": "gqkMMb/YqFM=",
	"events.k8s.io/v1/events":       "r2yiGXH7wu8=",
	"apiextensions.k8s.io/v1/customresourcedefinitions":               "M5uH+AlWATY=",
	"rbac.authorization.k8s.io/v1/clusterrolebindings":                "48tpQ8gZHFc=",
	"rbac.authorization.k8s.io/v1/clusterroles":                       "bYE5ZWDrJ44=",
	"rbac.authorization.k8s.io/v1/rolebindings":                       "eGsCzGH6b1g=",
	"rbac.authorization.k8s.io/v1/roles":                              "7FuwZcIIItM=",
	"admissionregistration.k8s.io/v1/mutatingwebhookconfigurations":   "Sqi0GUgDaX0=",
	"admissionregistration.k8s.io/v1/validatingwebhookconfigurations": "B0wHjQmsGNk=",
	// kube 1.37's data.go lists the validating policies; the mutating
	// ones, served at v1 since 1.36, hash by the same rule.
	"admissionregistration.k8s.io/v1/validatingadmissionpolicies":       "6OxvlMmQ6is=",
	"admissionregistration.k8s.io/v1/validatingadmissionpolicybindings": "v9715VZqakg=",
	"admissionregistration.k8s.io/v1/mutatingadmissionpolicies":         "mHCkTKpUTrE=",
	"admissionregistration.k8s.io/v1/mutatingadmissionpolicybindings":   "ZKgZT1uTmZ0=",
}

// wantResources is what discovery must say of every declared resource,
// by group version, and of the reviews (create only, as kube-apiserver's).
// wantResources are the resources and subresources discovery lists;
// client-go gives a subresource its resource's singular name from
// aggregated discovery (aggregated), none from the legacy documents; only
// the legacy documents have storageVersionHash (kube's, of the stored
// resources only).
func wantResources(aggregated bool) map[string][]metav1.APIResource {
	want := map[string][]metav1.APIResource{
		"authentication.k8s.io/v1": {{Name: "selfsubjectreviews", SingularName: "selfsubjectreview", Kind: "SelfSubjectReview", Verbs: metav1.Verbs{"create"}}},
		"authorization.k8s.io/v1": {
			{Name: "selfsubjectaccessreviews", SingularName: "selfsubjectaccessreview", Kind: "SelfSubjectAccessReview", Verbs: metav1.Verbs{"create"}},
			{Name: "selfsubjectrulesreviews", SingularName: "selfsubjectrulesreview", Kind: "SelfSubjectRulesReview", Verbs: metav1.Verbs{"create"}},
			{Name: "subjectaccessreviews", SingularName: "subjectaccessreview", Kind: "SubjectAccessReview", Verbs: metav1.Verbs{"create"}},
			{Name: "localsubjectaccessreviews", SingularName: "localsubjectaccessreview", Namespaced: true, Kind: "LocalSubjectAccessReview", Verbs: metav1.Verbs{"create"}},
		},
	}
	for _, res := range registry.Resources {
		gv := res.GroupVersion.String()
		hash := kubeStorageVersionHashes[gv+"/"+res.Plural]
		if aggregated {
			hash = ""
		}
		want[gv] = append(want[gv], metav1.APIResource{
			Name:               res.Plural,
			SingularName:       res.Singular,
			Namespaced:         res.Namespaced,
			Kind:               res.Kind,
			Verbs:              kubeVerbs(res),
			ShortNames:         res.ShortNames,
			Categories:         res.Categories,
			StorageVersionHash: hash,
		})
		if res.StatusStrategy != nil {
			status := metav1.APIResource{Name: res.Plural + "/status", Namespaced: res.Namespaced, Kind: res.Kind, Verbs: metav1.Verbs{"get", "patch", "update"}}
			if aggregated {
				status.SingularName = res.Singular
			}
			want[gv] = append(want[gv], status)
		}
		if res == registry.ServiceAccounts {
			// kube's TokenRequest subresource, of authentication.k8s.io/v1.
			token := metav1.APIResource{Name: "serviceaccounts/token", Namespaced: true, Kind: "TokenRequest", Verbs: metav1.Verbs{"create"}}
			if aggregated {
				token.SingularName = res.Singular
			}
			want[gv] = append(want[gv], token)
		}
		if res == registry.Namespaces {
			// kube's finalize subresource, update only.
			finalize := metav1.APIResource{Name: "namespaces/finalize", Kind: "Namespace", Verbs: metav1.Verbs{"update"}}
			if aggregated {
				finalize.SingularName = res.Singular
			}
			want[gv] = append(want[gv], finalize)
		}
	}
	return want
}

func gotResources(lists []*metav1.APIResourceList) map[string][]metav1.APIResource {
	got := map[string][]metav1.APIResource{}
	for _, l := range lists {
		for _, r := range l.APIResources {
			// Aggregated discovery fills in group and version; legacy
			// leaves them empty. Both mean the list's group version.
			r.Group, r.Version = "", ""
			got[l.GroupVersion] = append(got[l.GroupVersion], r)
		}
	}
	return got
}

var sortResources = cmpopts.SortSlices(func(a, b metav1.APIResource) bool { return a.Name < b.Name })

// TestDiscoveryClientAggregated: client-go's discovery client (as kubectl
// uses it) gets aggregated discovery from /api and /apis, and every
// declared resource with its verbs, names and scope.
func TestDiscoveryClientAggregated(t *testing.T) {
	s := startServer(t)
	recorder := &responseTypes{seen: map[string]string{}}
	dc, err := discovery.NewDiscoveryClientForConfig(&rest.Config{Host: s.URL, WrapTransport: func(rt http.RoundTripper) http.RoundTripper {
		recorder.next = rt
		return recorder
	}})
	if err != nil {
		t.Fatal(err)
	}
	groups, lists, err := dc.ServerGroupsAndResources()
	if err != nil {
		t.Fatalf("ServerGroupsAndResources: %v", err)
	}
	for _, path := range []string{"/api", "/apis"} {
		if ct, _ := recorder.get(path); ct != aggregatedDiscoveryType {
			t.Errorf("%s answered Content-Type %q; want %q", path, ct, aggregatedDiscoveryType)
		}
	}
	for _, path := range []string{"/api/v1", "/apis/coordination.k8s.io/v1"} {
		if _, ok := recorder.get(path); ok {
			t.Errorf("client-go fetched %s; aggregated discovery should have made that unnecessary", path)
		}
	}
	var names []string
	for _, g := range groups {
		names = append(names, g.Name+"/"+g.PreferredVersion.Version)
	}
	if diff := cmp.Diff([]string{"/v1", "admissionregistration.k8s.io/v1", "apiextensions.k8s.io/v1", "authentication.k8s.io/v1", "authorization.k8s.io/v1", "coordination.k8s.io/v1", "events.k8s.io/v1", "rbac.authorization.k8s.io/v1"}, names); diff != "" {
		t.Errorf("groups (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(wantResources(true), gotResources(lists), sortResources, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("resources (-want +got):\n%s", diff)
	}

	// Spot checks of what kubectl relies on.
	byName := map[string]metav1.APIResource{}
	for _, rs := range gotResources(lists) {
		for _, r := range rs {
			byName[r.Name] = r
		}
	}
	if ns := byName["namespaces"]; ns.Namespaced || ns.Kind != "Namespace" {
		t.Errorf("namespaces: %+v; want cluster-scoped Namespace", ns)
	}
	if cm := byName["configmaps"]; !cm.Namespaced || cm.SingularName != "configmap" || !cmp.Equal(cm.ShortNames, []string{"cm"}) {
		t.Errorf("configmaps: %+v; want namespaced, singular configmap, short name cm", cm)
	}
	for _, name := range []string{"secrets", "leases"} {
		if r, ok := byName[name]; !ok || !r.Namespaced {
			t.Errorf("%s: %+v (found %v); want namespaced", name, r, ok)
		}
	}
}

// TestDiscoveryClientLegacy: a client that wants the legacy documents gets
// APIVersions, APIGroupList and the APIResourceLists.
func TestDiscoveryClientLegacy(t *testing.T) {
	s := startServer(t)
	recorder := &responseTypes{seen: map[string]string{}}
	dc, err := discovery.NewDiscoveryClientForConfig(&rest.Config{Host: s.URL, WrapTransport: func(rt http.RoundTripper) http.RoundTripper {
		recorder.next = rt
		return recorder
	}})
	if err != nil {
		t.Fatal(err)
	}
	dc.UseLegacyDiscovery = true
	_, lists, err := dc.ServerGroupsAndResources()
	if err != nil {
		t.Fatalf("ServerGroupsAndResources (legacy): %v", err)
	}
	for _, path := range []string{"/api", "/apis", "/api/v1", "/apis/coordination.k8s.io/v1"} {
		if ct, _ := recorder.get(path); ct != "application/json" {
			t.Errorf("%s answered Content-Type %q; want application/json", path, ct)
		}
	}
	if diff := cmp.Diff(wantResources(false), gotResources(lists), sortResources, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("resources (-want +got):\n%s", diff)
	}

	resp := s.do(t, http.MethodGet, "/api", nil, "Accept", "application/json")
	var versions metav1.APIVersions
	resp.decode(t, &versions)
	if resp.Header.Get("Content-Type") != "application/json" || versions.Kind != "APIVersions" || !cmp.Equal(versions.Versions, []string{"v1"}) {
		t.Errorf("GET /api (application/json): %s %+v; want APIVersions [v1]", resp.Header.Get("Content-Type"), versions)
	}
	resp = s.do(t, http.MethodGet, "/apis", nil, "Accept", "application/json")
	var groups metav1.APIGroupList
	resp.decode(t, &groups)
	var groupNames []string
	for _, g := range groups.Groups {
		groupNames = append(groupNames, g.Name)
	}
	if groups.Kind != "APIGroupList" || !cmp.Equal(groupNames, []string{"admissionregistration.k8s.io", "apiextensions.k8s.io", "authentication.k8s.io", "authorization.k8s.io", "coordination.k8s.io", "events.k8s.io", "rbac.authorization.k8s.io"}) {
		t.Errorf("GET /apis (application/json): %+v; want APIGroupList with admissionregistration.k8s.io, apiextensions.k8s.io, authentication.k8s.io, authorization.k8s.io, coordination.k8s.io, events.k8s.io and rbac.authorization.k8s.io", groups)
	}
}

// TestDiscoveryAggregatedNegotiation checks the Accept handling of /api and
// /apis directly, and the aggregated documents themselves.
func TestDiscoveryAggregatedNegotiation(t *testing.T) {
	s := startServer(t)
	for _, tc := range []struct {
		accept     string
		aggregated bool
	}{
		{kubectlDiscoveryAccept, true},
		{aggregatedDiscoveryType + ";profile=nopeer," + aggregatedDiscoveryType + ",application/json", true},
		{"application/json", false},
		{"", false},
		{"*/*", false},
		// Only v2beta1, which Concord does not serve: the legacy answer.
		{"application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json", false},
		// The client prefers JSON.
		{"application/json," + aggregatedDiscoveryType + ";q=0.5", false},
	} {
		for _, path := range []string{"/api", "/apis"} {
			resp := s.do(t, http.MethodGet, path, nil, "Accept", tc.accept)
			ct := resp.Header.Get("Content-Type")
			if resp.Code != http.StatusOK || (ct == aggregatedDiscoveryType) != tc.aggregated {
				t.Errorf("GET %s Accept %q: %d %s; want aggregated %v", path, tc.accept, resp.Code, ct, tc.aggregated)
			}
		}
	}

	resp := s.do(t, http.MethodGet, "/api", nil, "Accept", kubectlDiscoveryAccept)
	var core apidiscoveryv2.APIGroupDiscoveryList
	resp.decode(t, &core)
	if core.Kind != "APIGroupDiscoveryList" || core.APIVersion != "apidiscovery.k8s.io/v2" || len(core.Items) != 1 || core.Items[0].Name != "" {
		t.Fatalf("GET /api aggregated: %s", resp.Body)
	}
	if v := core.Items[0].Versions; len(v) != 1 || v[0].Version != "v1" || v[0].Freshness != apidiscoveryv2.DiscoveryFreshnessCurrent {
		t.Fatalf("GET /api aggregated versions: %+v", v)
	}
	got := map[string]apidiscoveryv2.APIResourceDiscovery{}
	for _, r := range core.Items[0].Versions[0].Resources {
		got[r.Resource] = r
	}
	for _, res := range registry.Resources {
		if res.GroupVersion.Group != "" {
			continue
		}
		scope := apidiscoveryv2.ScopeCluster
		if res.Namespaced {
			scope = apidiscoveryv2.ScopeNamespace
		}
		want := apidiscoveryv2.APIResourceDiscovery{
			Resource:         res.Plural,
			ResponseKind:     &metav1.GroupVersionKind{Group: "", Version: "v1", Kind: res.Kind},
			Scope:            scope,
			SingularResource: res.Singular,
			Verbs:            kubeVerbs(res),
			ShortNames:       res.ShortNames,
			Categories:       res.Categories,
		}
		if res == registry.ServiceAccounts {
			want.Subresources = []apidiscoveryv2.APISubresourceDiscovery{{
				Subresource:  "token",
				ResponseKind: &metav1.GroupVersionKind{Group: "authentication.k8s.io", Version: "v1", Kind: "TokenRequest"},
				Verbs:        []string{"create"},
			}}
		}
		if res == registry.Namespaces {
			want.Subresources = []apidiscoveryv2.APISubresourceDiscovery{{
				Subresource:  "finalize",
				ResponseKind: &metav1.GroupVersionKind{Group: "", Version: "v1", Kind: "Namespace"},
				Verbs:        []string{"update"},
			}}
		}
		if diff := cmp.Diff(want, got[res.Plural], cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("/api aggregated %s (-want +got):\n%s", res.Plural, diff)
		}
	}

	resp = s.do(t, http.MethodGet, "/apis", nil, "Accept", kubectlDiscoveryAccept)
	var apis apidiscoveryv2.APIGroupDiscoveryList
	resp.decode(t, &apis)
	var groupNames []string
	for _, g := range apis.Items {
		groupNames = append(groupNames, g.Name)
	}
	sort.Strings(groupNames)
	if !cmp.Equal(groupNames, []string{"admissionregistration.k8s.io", "apiextensions.k8s.io", "authentication.k8s.io", "authorization.k8s.io", "coordination.k8s.io", "events.k8s.io", "rbac.authorization.k8s.io"}) {
		t.Errorf("/apis aggregated groups %v; want [admissionregistration.k8s.io apiextensions.k8s.io authentication.k8s.io authorization.k8s.io coordination.k8s.io events.k8s.io rbac.authorization.k8s.io]", groupNames)
	}
	for _, g := range apis.Items {
		if g.Name != "coordination.k8s.io" {
			continue
		}
		v := g.Versions
		if len(v) != 1 || v[0].Version != "v1" || len(v[0].Resources) != 1 ||
			v[0].Resources[0].Resource != "leases" || v[0].Resources[0].Scope != apidiscoveryv2.ScopeNamespace {
			raw, _ := json.Marshal(v)
			t.Errorf("/apis aggregated coordination.k8s.io: %s; want v1 with namespaced leases", raw)
		}
	}

	// The ETag lets a client revalidate.
	etag := resp.Header.Get("ETag")
	if etag == "" {
		t.Fatal("aggregated /apis has no ETag")
	}
	if again := s.do(t, http.MethodGet, "/apis", nil, "Accept", kubectlDiscoveryAccept, "If-None-Match", etag); again.Code != http.StatusNotModified {
		t.Errorf("GET /apis If-None-Match its ETag: %d; want 304", again.Code)
	}
}

func TestDiscoveryVersion(t *testing.T) {
	s := startServer(t)
	dc, err := discovery.NewDiscoveryClientForConfig(&rest.Config{Host: s.URL})
	if err != nil {
		t.Fatal(err)
	}
	info, err := dc.ServerVersion()
	if err != nil || info.Major != "1" || info.GitVersion == "" {
		t.Errorf("ServerVersion: %+v, %v", info, err)
	}
}

// TestDiscoveryRootsWithATrailingSlash: /api/ and /apis/ answer as /api and
// /apis do, as kube-apiserver's (its conformance tests read /apis/).
func TestDiscoveryRootsWithATrailingSlash(t *testing.T) {
	s := startServer(t)
	for _, path := range []string{"/api", "/apis"} {
		for _, accept := range []string{"application/json", aggregatedDiscoveryType} {
			plain := s.do(t, http.MethodGet, path, nil, "Accept", accept)
			slash := s.do(t, http.MethodGet, path+"/", nil, "Accept", accept)
			if slash.Code != http.StatusOK || plain.Code != http.StatusOK ||
				slash.Header.Get("Content-Type") != plain.Header.Get("Content-Type") || string(slash.Body) != string(plain.Body) {
				t.Errorf("GET %s/ (%s): %d %q %s; want %s's %d %q %s", path, accept, slash.Code, slash.Header.Get("Content-Type"), slash.Body,
					path, plain.Code, plain.Header.Get("Content-Type"), plain.Body)
			}
		}
	}
}
