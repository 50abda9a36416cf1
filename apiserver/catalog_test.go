package apiserver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/concord-dev/concord/etcdstore"
	"github.com/concord-dev/concord/registry"
)

// widgets declares example.com/v1 widgets with ConfigMap's Go types and
// strategy: a resource that is not built in, as a CRD's is.
func widgets() *registry.Resource {
	res := *registry.ConfigMaps
	res.GroupVersion = schema.GroupVersion{Group: "example.com", Version: "v1"}
	res.Kind, res.Plural, res.Singular, res.ShortNames = "Widget", "widgets", "widget", []string{"wd"}
	return &res
}

// aggregatedETag returns the ETag of /apis's aggregated discovery and the
// groups it lists.
func aggregatedETag(t *testing.T, s *testServer) (string, []string) {
	t.Helper()
	resp := s.do(t, http.MethodGet, "/apis", nil, "Accept", aggregatedDiscoveryType)
	if resp.Code != http.StatusOK || resp.Header.Get("ETag") == "" {
		t.Fatalf("GET /apis (aggregated): %d, ETag %q", resp.Code, resp.Header.Get("ETag"))
	}
	var list struct {
		Items []struct {
			Metadata struct{ Name string } `json:"metadata"`
		} `json:"items"`
	}
	resp.decode(t, &list)
	var groups []string
	for _, g := range list.Items {
		groups = append(groups, g.Metadata.Name)
	}
	return resp.Header.Get("ETag"), groups
}

// legacyGroups returns the groups of /apis (APIGroupList).
func legacyGroups(t *testing.T, s *testServer) []string {
	t.Helper()
	resp := s.do(t, http.MethodGet, "/apis", nil)
	if resp.Code != http.StatusOK {
		t.Fatalf("GET /apis: %d %s", resp.Code, resp.Body)
	}
	var list metav1.APIGroupList
	resp.decode(t, &list)
	var groups []string
	for _, g := range list.Groups {
		groups = append(groups, g.Name)
	}
	return groups
}

// TestCatalogResourceAddedAndRemoved: a resource added to the catalog while
// the server runs is routed (every path shape, watches included), listed in
// discovery (legacy and aggregated, whose ETag changes), documented in
// OpenAPI v2 and v3 and counted in the metrics; once removed, its paths are
// 404, its watches end, and discovery and OpenAPI are as before.
func TestCatalogResourceAddedAndRemoved(t *testing.T) {
	s := startServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const item = "/apis/example.com/v1/namespaces/default/widgets/w1"

	etagBefore, groupsBefore := aggregatedETag(t, s)
	if slices.Contains(groupsBefore, "example.com") {
		t.Fatalf("example.com is served before it is added: %v", groupsBefore)
	}
	for _, path := range []string{item, "/apis/example.com/v1/widgets", "/apis/example.com/v1", "/apis/example.com", "/openapi/v3/apis/example.com/v1"} {
		if resp := s.do(t, http.MethodGet, path, nil); resp.Code != http.StatusNotFound {
			t.Errorf("GET %s before the resource is added: %d; want 404", path, resp.Code)
		}
	}

	store := registry.NewStore(etcdstore.New(s.Etcd.Client, "/registry"), widgets(), registry.DefaultWatchConfig())
	if err := s.Catalog.Add(store); err != nil {
		t.Fatalf("Add(widgets): %v", err)
	}
	// A watch of the collection from now on, open while the resource is
	// removed later.
	watch := s.watch(t, "/apis/example.com/v1/namespaces/default/widgets", url.Values{"watch": {"1"}})

	// The objects are written through the store: ConfigMap's Go types are
	// not registered as example.com/v1 Widget, so the server cannot decode
	// a request body of this kind.
	if _, err := store.Create(ctx, "default", &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "w1"}, Data: map[string]string{"a": "b"}}, registry.WriteOptions{}); err != nil {
		t.Fatalf("create widget: %v", err)
	}
	if _, err := store.Create(ctx, "default", &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "w2"}}, registry.WriteOptions{}); err != nil {
		t.Fatalf("create widget: %v", err)
	}
	if ev, ok := watch.next(t, 10*time.Second); !ok || ev.Type != "ADDED" || ev.Object.Name != "w1" {
		t.Errorf("watch: %v, %v; want ADDED default/w1", ev, ok)
	}

	resp := s.do(t, http.MethodGet, item, nil)
	var got corev1.ConfigMap
	if resp.Code != http.StatusOK {
		t.Fatalf("GET %s: %d %s", item, resp.Code, resp.Body)
	}
	resp.decode(t, &got)
	if got.Name != "w1" || got.Data["a"] != "b" || got.APIVersion != "example.com/v1" || got.Kind != "Widget" {
		t.Errorf("GET %s = %s %s %s %v; want example.com/v1 Widget w1 with a=b", item, got.APIVersion, got.Kind, got.Name, got.Data)
	}
	for _, path := range []string{"/apis/example.com/v1/namespaces/default/widgets", "/apis/example.com/v1/widgets"} {
		resp := s.do(t, http.MethodGet, path, nil)
		var list corev1.ConfigMapList
		if resp.Code != http.StatusOK {
			t.Fatalf("GET %s: %d %s", path, resp.Code, resp.Body)
		}
		resp.decode(t, &list)
		if len(list.Items) != 2 {
			t.Errorf("GET %s: %d items; want 2", path, len(list.Items))
		}
	}
	if resp := s.do(t, http.MethodGet, "/apis/example.com/v1/watch/namespaces/default/widgets/w1?timeoutSeconds=1", nil); resp.Code != http.StatusOK {
		t.Errorf("GET the legacy watch path: %d %s", resp.Code, resp.Body)
	}
	if resp := s.do(t, http.MethodDelete, "/apis/example.com/v1/namespaces/default/widgets/w2", nil); resp.Code != http.StatusOK {
		t.Errorf("DELETE widget w2: %d %s", resp.Code, resp.Body)
	}
	if resp := s.do(t, http.MethodGet, "/apis/example.com/v1/namespaces/default/widgets/w2", nil); resp.Code != http.StatusNotFound || resp.status(t).Details.Kind != "widgets" {
		t.Errorf("GET widget w2 after its deletion: %d %s; want 404 of widgets", resp.Code, resp.Body)
	}
	// A path shape that is not a namespaced resource's is 404.
	if resp := s.do(t, http.MethodGet, "/apis/example.com/v1/widgets/w1", nil); resp.Code != http.StatusNotFound {
		t.Errorf("GET /apis/example.com/v1/widgets/w1 (no namespace): %d; want 404", resp.Code)
	}

	// Discovery.
	etagAdded, groups := aggregatedETag(t, s)
	if !slices.Contains(groups, "example.com") {
		t.Errorf("aggregated /apis lists %v; want example.com among them", groups)
	}
	if etagAdded == etagBefore {
		t.Errorf("aggregated /apis has the same ETag %s before and after widgets were added", etagAdded)
	}
	if resp := s.do(t, http.MethodGet, "/apis", nil, "Accept", aggregatedDiscoveryType, "If-None-Match", etagBefore); resp.Code != http.StatusOK {
		t.Errorf("GET /apis If-None-Match the ETag before the change: %d; want 200", resp.Code)
	}
	if groups := legacyGroups(t, s); !slices.Contains(groups, "example.com") {
		t.Errorf("/apis lists %v; want example.com among them", groups)
	}
	resp = s.do(t, http.MethodGet, "/apis/example.com/v1", nil)
	var list metav1.APIResourceList
	if resp.Code != http.StatusOK {
		t.Fatalf("GET /apis/example.com/v1: %d %s", resp.Code, resp.Body)
	}
	resp.decode(t, &list)
	if len(list.APIResources) != 1 || list.APIResources[0].Name != "widgets" || list.APIResources[0].Kind != "Widget" || !list.APIResources[0].Namespaced {
		t.Errorf("GET /apis/example.com/v1 = %+v; want namespaced widgets of kind Widget", list.APIResources)
	}
	resp = s.do(t, http.MethodGet, "/apis/example.com", nil)
	var group metav1.APIGroup
	if resp.Code != http.StatusOK {
		t.Fatalf("GET /apis/example.com: %d %s", resp.Code, resp.Body)
	}
	resp.decode(t, &group)
	if group.PreferredVersion.GroupVersion != "example.com/v1" {
		t.Errorf("GET /apis/example.com: preferred version %q; want example.com/v1", group.PreferredVersion.GroupVersion)
	}

	// OpenAPI.
	index := v3Index(t, s)
	u, ok := index["apis/example.com/v1"]
	if !ok {
		t.Fatalf("/openapi/v3 lists %v; want apis/example.com/v1", index)
	}
	doc := v3Doc(t, s, u)
	if _, ok := doc.Paths.Paths["/apis/example.com/v1/namespaces/{namespace}/widgets/{name}"]; !ok {
		t.Errorf("the OpenAPI v3 document of example.com/v1 has no path of a widget")
	}
	resp = s.do(t, http.MethodGet, "/openapi/v2", nil)
	var v2 struct {
		Paths map[string]json.RawMessage `json:"paths"`
	}
	resp.decode(t, &v2)
	if _, ok := v2.Paths["/apis/example.com/v1/namespaces/{namespace}/widgets"]; !ok {
		t.Errorf("/openapi/v2 has no path of widgets")
	}

	// Metrics.
	families := scrape(t, s)
	if n := value(t, families, "apiserver_resource_objects", map[string]string{"group": "example.com", "resource": "widgets"}); n != 1 {
		t.Errorf("apiserver_resource_objects of widgets = %v; want 1", n)
	}
	if n := value(t, families, "apiserver_request_total", map[string]string{"verb": "GET", "dry_run": "", "group": "example.com", "version": "v1", "resource": "widgets", "subresource": "", "scope": "namespace", "component": "apiserver", "code": "200"}); n != 1 {
		t.Errorf("apiserver_request_total of GET widget = %v; want 1", n)
	}
	if _, ok := find(families, "concord_storage_corrupt_objects_total", map[string]string{"group": "example.com", "resource": "widgets"}); !ok {
		t.Errorf("concord_storage_corrupt_objects_total has no series for widgets")
	}

	// Removed.
	s.Catalog.Remove(schema.GroupResource{Group: "example.com", Resource: "widgets"})
	for {
		ev, ok := watch.next(t, 10*time.Second)
		if !ok {
			break // the watch ended
		}
		if ev.Type != "ADDED" && ev.Type != "DELETED" && ev.Type != "ERROR" {
			t.Errorf("watch after Remove: %v", ev)
		}
	}
	for _, path := range []string{item, "/apis/example.com/v1/widgets", "/apis/example.com/v1/watch/widgets", "/apis/example.com/v1", "/apis/example.com", "/openapi/v3/apis/example.com/v1"} {
		resp := s.do(t, http.MethodGet, path, nil)
		if resp.Code != http.StatusNotFound {
			t.Errorf("GET %s after the resource was removed: %d; want 404", path, resp.Code)
			continue
		}
		if path != "/openapi/v3/apis/example.com/v1" {
			resp.status(t)
		}
	}
	if etag, groups := aggregatedETag(t, s); etag != etagBefore || slices.Contains(groups, "example.com") {
		t.Errorf("aggregated /apis after Remove: ETag %s, groups %v; want %s and the groups before", etag, groups, etagBefore)
	}
	if groups := legacyGroups(t, s); slices.Contains(groups, "example.com") {
		t.Errorf("/apis lists %v after Remove", groups)
	}
	if _, ok := v3Index(t, s)["apis/example.com/v1"]; ok {
		t.Errorf("/openapi/v3 lists apis/example.com/v1 after Remove")
	}
	if _, ok := find(scrape(t, s), "concord_storage_corrupt_objects_total", map[string]string{"group": "example.com", "resource": "widgets"}); ok {
		t.Errorf("concord_storage_corrupt_objects_total keeps a series for widgets after Remove")
	}
}

// TestCatalogChangesUnderLoad: requests for discovery, OpenAPI and the
// resource while it is added and removed again and again (run with -race)
// are answered 200 or 404, never with an error.
func TestCatalogChangesUnderLoad(t *testing.T) {
	s := startServer(t)
	storage := etcdstore.New(s.Etcd.Client, "/registry")
	gr := schema.GroupResource{Group: "example.com", Resource: "widgets"}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	codes := make(chan string, 1000)
	for _, req := range []struct{ path, accept string }{
		{"/apis", aggregatedDiscoveryType},
		{"/apis", ""},
		{"/apis/example.com/v1", ""},
		{"/apis/example.com/v1/namespaces/default/widgets", ""},
		{"/openapi/v3", ""},
		{"/openapi/v3/apis/example.com/v1", ""},
		{"/openapi/v2", ""},
	} {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				// Not s.do: no t.Fatal off the test's goroutine.
				code, err := getCode(s.URL+req.path, req.accept)
				if err != nil || (code != http.StatusOK && code != http.StatusNotFound) {
					select {
					case codes <- fmt.Sprintf("GET %s: %d, %v", req.path, code, err):
					default:
					}
				}
			}
		})
	}
	for i := range 20 {
		if err := s.Catalog.Add(registry.NewStore(storage, widgets(), registry.DefaultWatchConfig())); err != nil {
			t.Fatalf("Add %d: %v", i, err)
		}
		time.Sleep(10 * time.Millisecond)
		s.Catalog.Remove(gr)
		time.Sleep(10 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	close(codes)
	for msg := range codes {
		t.Error(msg)
	}
}

// getCode sends a GET and returns its status code, having read the body.
func getCode(url, accept string) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return 0, err
	}
	return resp.StatusCode, nil
}
