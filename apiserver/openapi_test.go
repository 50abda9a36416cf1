package apiserver_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	openapi_v2 "github.com/google/gnostic-models/openapiv2"
	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"k8s.io/kube-openapi/pkg/spec3"
	"k8s.io/kube-openapi/pkg/validation/spec"

	"github.com/concord-dev/concord/internal/syncbuf"
	"github.com/concord-dev/concord/registry"
)

// gvk is the x-kubernetes-group-version-kind of an operation.
type gvk struct {
	Group   string `json:"group"`
	Version string `json:"version"`
	Kind    string `json:"kind"`
}

// operationGVK decodes an operation's x-kubernetes-group-version-kind.
func operationGVK(t *testing.T, ext spec.Extensions) gvk {
	t.Helper()
	raw, err := json.Marshal(ext["x-kubernetes-group-version-kind"])
	if err != nil {
		t.Fatal(err)
	}
	var g gvk
	if err := json.Unmarshal(raw, &g); err != nil {
		t.Fatalf("x-kubernetes-group-version-kind %s: %v", raw, err)
	}
	return g
}

// schemaGVKs decodes a schema's x-kubernetes-group-version-kind list.
func schemaGVKs(t *testing.T, ext spec.Extensions) []gvk {
	t.Helper()
	raw, err := json.Marshal(ext["x-kubernetes-group-version-kind"])
	if err != nil {
		t.Fatal(err)
	}
	var gs []gvk
	if err := json.Unmarshal(raw, &gs); err != nil {
		t.Fatalf("x-kubernetes-group-version-kind %s: %v", raw, err)
	}
	return gs
}

func hasQueryParam(op *spec3.Operation, name string) bool {
	for _, p := range op.Parameters {
		if p.Name == name && p.In == "query" {
			return true
		}
	}
	return false
}

// v3Index fetches /openapi/v3.
func v3Index(t *testing.T, s *testServer) map[string]string {
	t.Helper()
	resp := s.do(t, http.MethodGet, "/openapi/v3", nil)
	if resp.Code != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		t.Fatalf("GET /openapi/v3: %d %s: %s", resp.Code, resp.Header.Get("Content-Type"), resp.Body)
	}
	var index struct {
		Paths map[string]struct {
			ServerRelativeURL string `json:"serverRelativeURL"`
		} `json:"paths"`
	}
	resp.decode(t, &index)
	urls := map[string]string{}
	for k, v := range index.Paths {
		urls[k] = v.ServerRelativeURL
	}
	return urls
}

// v3Doc fetches and parses one group version's OpenAPI v3 document.
func v3Doc(t *testing.T, s *testServer, relativeURL string) *spec3.OpenAPI {
	t.Helper()
	resp := s.do(t, http.MethodGet, relativeURL, nil)
	if resp.Code != http.StatusOK || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("GET %s: %d %s: %.300s", relativeURL, resp.Code, resp.Header.Get("Content-Type"), resp.Body)
	}
	doc := &spec3.OpenAPI{}
	if err := json.Unmarshal(resp.Body, doc); err != nil {
		t.Fatalf("GET %s: not an OpenAPI v3 document: %v", relativeURL, err)
	}
	if !strings.HasPrefix(doc.Version, "3.") || doc.Paths == nil || doc.Components == nil {
		t.Fatalf("GET %s: openapi %q, paths %v, components %v; want a 3.x document with both", relativeURL, doc.Version, doc.Paths != nil, doc.Components != nil)
	}
	return doc
}

func TestOpenAPIV3IndexAndDocuments(t *testing.T) {
	s := startServer(t)
	index := v3Index(t, s)
	for _, key := range []string{"api/v1", "apis/coordination.k8s.io/v1"} {
		u, ok := index[key]
		if !ok {
			t.Fatalf("/openapi/v3 lists %v; want %s", index, key)
		}
		if !strings.HasPrefix(u, "/openapi/v3/"+key+"?hash=") {
			t.Errorf("/openapi/v3 %s: serverRelativeURL %q; want /openapi/v3/%s?hash=…", key, u, key)
		}
	}

	docs := map[string]*spec3.OpenAPI{}
	for key, u := range index {
		docs[key] = v3Doc(t, s, u)
	}

	// The field validation check of kubectl (cli-runtime's
	// supportsQueryParamV3): a PATCH operation with the object's GVK and a
	// fieldValidation query parameter.
	core := docs["api/v1"]
	item := core.Paths.Paths["/api/v1/namespaces/{namespace}/configmaps/{name}"]
	if item == nil || item.Patch == nil {
		t.Fatalf("api/v1 has no PATCH /api/v1/namespaces/{namespace}/configmaps/{name}")
	}
	if got, want := operationGVK(t, item.Patch.Extensions), (gvk{"", "v1", "ConfigMap"}); got != want {
		t.Errorf("PATCH configmaps x-kubernetes-group-version-kind = %+v; want %+v", got, want)
	}
	if got := item.Patch.Extensions["x-kubernetes-action"]; got != "patch" {
		t.Errorf("PATCH configmaps x-kubernetes-action = %v; want patch", got)
	}
	for _, p := range []string{"fieldValidation", "dryRun", "fieldManager", "force"} {
		if !hasQueryParam(item.Patch, p) {
			t.Errorf("PATCH configmaps has no %s query parameter", p)
		}
	}
	if item.Patch.RequestBody == nil {
		t.Fatal("PATCH configmaps has no request body")
	}
	for _, ct := range []string{"application/json-patch+json", "application/merge-patch+json", "application/strategic-merge-patch+json", "application/apply-patch+yaml"} {
		if _, ok := item.Patch.RequestBody.Content[ct]; !ok {
			t.Errorf("PATCH configmaps request body has no %s", ct)
		}
	}
	collection := core.Paths.Paths["/api/v1/namespaces/{namespace}/configmaps"]
	if collection == nil || collection.Post == nil || collection.Get == nil || collection.Delete == nil {
		t.Fatalf("api/v1 lacks GET/POST/DELETE /api/v1/namespaces/{namespace}/configmaps: %+v", collection)
	}
	if !hasQueryParam(collection.Post, "fieldValidation") || !hasQueryParam(item.Put, "fieldValidation") {
		t.Error("POST and PUT configmaps must take fieldValidation")
	}
	actions := map[string]any{
		"list": collection.Get.Extensions["x-kubernetes-action"], "post": collection.Post.Extensions["x-kubernetes-action"],
		"deletecollection": collection.Delete.Extensions["x-kubernetes-action"], "get": item.Get.Extensions["x-kubernetes-action"],
		"put": item.Put.Extensions["x-kubernetes-action"], "delete": item.Delete.Extensions["x-kubernetes-action"],
	}
	for want, got := range actions {
		if got != want {
			t.Errorf("x-kubernetes-action = %v; want %s", got, want)
		}
	}

	// Every served resource has its paths, in its group version's document,
	// derived from the registry's declarations.
	for _, res := range registry.Resources {
		key, base := "api/v1", "/api/v1"
		if g := res.GroupVersion.Group; g != "" {
			key, base = "apis/"+res.GroupVersion.String(), "/apis/"+res.GroupVersion.String()
		}
		doc := docs[key]
		if doc == nil {
			t.Errorf("%s: no OpenAPI v3 document %s", res.Plural, key)
			continue
		}
		itemPath := base + "/" + res.Plural + "/{name}"
		if res.Namespaced {
			itemPath = base + "/namespaces/{namespace}/" + res.Plural + "/{name}"
		}
		p := doc.Paths.Paths[itemPath]
		if p == nil || p.Patch == nil || p.Get == nil || p.Put == nil || p.Delete == nil {
			t.Errorf("%s: %s lacks GET/PUT/PATCH/DELETE", res.Plural, itemPath)
			continue
		}
		want := gvk{res.GroupVersion.Group, res.GroupVersion.Version, res.Kind}
		if got := operationGVK(t, p.Patch.Extensions); got != want || !hasQueryParam(p.Patch, "fieldValidation") {
			t.Errorf("%s: PATCH %s has GVK %+v, fieldValidation %v; want %+v and true", res.Plural, itemPath, got, hasQueryParam(p.Patch, "fieldValidation"), want)
		}
		for _, kind := range []string{res.Kind, res.Kind + "List"} {
			group, _, _ := strings.Cut(res.GroupVersion.Group, ".") // kube names them by their Go package: rbac.authorization.k8s.io is rbac
			if group == "" {
				group = "core"
			}
			name := "io.k8s.api." + group + "." + res.GroupVersion.Version + "." + kind
			if res.GroupVersion.Group == "apiextensions.k8s.io" { // kube names them by their Go package
				name = "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions." + res.GroupVersion.Version + "." + kind
			}
			schema := doc.Components.Schemas[name]
			if schema == nil {
				t.Errorf("%s: no schema %s", res.Plural, name)
				continue
			}
			gvks := schemaGVKs(t, schema.Extensions)
			if len(gvks) != 1 || gvks[0] != (gvk{res.GroupVersion.Group, res.GroupVersion.Version, kind}) {
				t.Errorf("schema %s x-kubernetes-group-version-kind = %+v; want [%s %s %s]", name, gvks, res.GroupVersion.Group, res.GroupVersion.Version, kind)
			}
		}
	}

	cm := core.Components.Schemas["io.k8s.api.core.v1.ConfigMap"]
	if cm == nil {
		t.Fatal("no io.k8s.api.core.v1.ConfigMap schema")
	}
	for _, prop := range []string{"data", "binaryData", "immutable", "metadata"} {
		if _, ok := cm.Properties[prop]; !ok {
			t.Errorf("ConfigMap schema has no property %s", prop)
		}
	}
	if got := cm.Properties["data"].AdditionalProperties; got == nil || got.Schema == nil || !got.Schema.Type.Contains("string") {
		t.Errorf("ConfigMap.data is not a map of strings: %+v", cm.Properties["data"])
	}
	lease := docs["apis/coordination.k8s.io/v1"].Components.Schemas["io.k8s.api.coordination.v1.LeaseSpec"]
	if lease == nil || lease.Properties["holderIdentity"].Type == nil {
		t.Errorf("no LeaseSpec schema with holderIdentity: %+v", lease)
	}
}

// TestOpenAPIV3Caching: the documents carry an ETag, their hashed URL is
// cacheable for good, a stale hash redirects, an unknown group is 404.
func TestOpenAPIV3Caching(t *testing.T) {
	s := startServer(t)
	u := v3Index(t, s)["api/v1"]
	resp := s.do(t, http.MethodGet, u, nil)
	etag := resp.Header.Get("ETag")
	if resp.Code != http.StatusOK || etag == "" || !strings.Contains(resp.Header.Get("Cache-Control"), "immutable") {
		t.Fatalf("GET %s: %d, ETag %q, Cache-Control %q; want 200, an ETag, immutable", u, resp.Code, etag, resp.Header.Get("Cache-Control"))
	}
	parsed, _ := url.Parse(u)
	if got := strings.Trim(etag, `"`); got != parsed.Query().Get("hash") {
		t.Errorf("ETag %s; want the hash of the index %s", etag, parsed.Query().Get("hash"))
	}
	if resp := s.do(t, http.MethodGet, u, nil, "If-None-Match", etag); resp.Code != http.StatusNotModified {
		t.Errorf("GET %s If-None-Match its ETag: %d; want 304", u, resp.Code)
	}
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	redirect, err := client.Get(s.URL + "/openapi/v3/api/v1?hash=stale")
	if err != nil {
		t.Fatal(err)
	}
	redirect.Body.Close()
	if redirect.StatusCode != http.StatusMovedPermanently || redirect.Header.Get("Location") != u {
		t.Errorf("stale hash: %d Location %q; want 301 to %s", redirect.StatusCode, redirect.Header.Get("Location"), u)
	}
	if resp := s.do(t, http.MethodGet, "/openapi/v3/apis/apps/v1", nil); resp.Code != http.StatusNotFound {
		t.Errorf("GET /openapi/v3/apis/apps/v1: %d; want 404", resp.Code)
	}
}

// TestOpenAPIV2JSONAndProtobuf: /openapi/v2 is Swagger 2.0 JSON by default
// and protobuf when asked, as kubectl asks (through client-go).
func TestOpenAPIV2JSONAndProtobuf(t *testing.T) {
	s := startServer(t)
	resp := s.do(t, http.MethodGet, "/openapi/v2", nil)
	if resp.Code != http.StatusOK || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("GET /openapi/v2: %d %s", resp.Code, resp.Header.Get("Content-Type"))
	}
	var swagger spec.Swagger
	resp.decode(t, &swagger)
	if swagger.Swagger != "2.0" || swagger.Paths == nil {
		t.Fatalf("GET /openapi/v2: swagger %q; want 2.0 with paths", swagger.Swagger)
	}
	patch := swagger.Paths.Paths["/api/v1/namespaces/{namespace}/configmaps/{name}"].Patch
	if patch == nil {
		t.Fatal("v2: no PATCH configmaps")
	}
	if got := operationGVK(t, patch.Extensions); got != (gvk{"", "v1", "ConfigMap"}) {
		t.Errorf("v2 PATCH configmaps GVK = %+v", got)
	}
	if _, ok := swagger.Paths.Paths["/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}"]; !ok {
		t.Error("v2: no leases path")
	}
	cm, ok := swagger.Definitions["io.k8s.api.core.v1.ConfigMap"]
	if !ok || len(schemaGVKs(t, cm.Extensions)) != 1 {
		t.Errorf("v2: ConfigMap definition %v with GVK %v", ok, cm.Extensions)
	}

	// client-go's OpenAPISchema asks for protobuf and parses it.
	dc, err := discovery.NewDiscoveryClientForConfig(&rest.Config{Host: s.URL})
	if err != nil {
		t.Fatal(err)
	}
	doc, err := dc.OpenAPISchema()
	if err != nil {
		t.Fatalf("OpenAPISchema (protobuf v2): %v", err)
	}
	found := false
	for _, p := range doc.GetPaths().GetPath() {
		if p.GetName() == "/api/v1/namespaces/{namespace}/configmaps/{name}" && p.GetValue().GetPatch() != nil {
			found = true
		}
	}
	if !found {
		t.Error("protobuf v2 document has no PATCH configmaps")
	}
	pb := s.do(t, http.MethodGet, "/openapi/v2", nil, "Accept", "application/com.github.proto-openapi.spec.v2@v1.0+protobuf")
	if pb.Code != http.StatusOK || pb.Header.Get("Content-Type") != "application/com.github.proto-openapi.spec.v2.v1.0+protobuf" {
		t.Fatalf("GET /openapi/v2 as protobuf: %d %s", pb.Code, pb.Header.Get("Content-Type"))
	}
	var parsed openapi_v2.Document
	if err := proto.Unmarshal(pb.Body, &parsed); err != nil || parsed.GetSwagger() != "2.0" {
		t.Errorf("protobuf v2: %v, swagger %q", err, parsed.GetSwagger())
	}
}

// TestOpenAPIV3ClientGo reads the documents with client-go's OpenAPI v3
// client, which kubectl explain and apply use.
func TestOpenAPIV3ClientGo(t *testing.T) {
	s := startServer(t)
	dc, err := discovery.NewDiscoveryClientForConfig(&rest.Config{Host: s.URL})
	if err != nil {
		t.Fatal(err)
	}
	paths, err := dc.OpenAPIV3().Paths()
	if err != nil {
		t.Fatalf("OpenAPIV3().Paths(): %v", err)
	}
	gv, ok := paths["api/v1"]
	if !ok {
		t.Fatalf("OpenAPIV3().Paths() = %v; want api/v1", paths)
	}
	raw, err := gv.Schema("application/json")
	if err != nil {
		t.Fatalf("api/v1 Schema: %v", err)
	}
	var doc spec3.OpenAPI
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("api/v1 document: %v", err)
	}
	if _, ok := doc.Components.Schemas["io.k8s.api.core.v1.Secret"]; !ok {
		t.Error("api/v1 document has no Secret schema")
	}
}

// kubectlBin is the kubectl every machine has (shared/README.md).
const kubectlBin = "/usr/bin/kubectl"

// runKubectl runs the real kubectl against s, with its own cache.
func runKubectl(t *testing.T, kubeconfig, cacheDir string, stdin string, args ...string) (string, string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, kubectlBin, append([]string{"--kubeconfig", kubeconfig, "--cache-dir", cacheDir, "--request-timeout", "20s"}, args...)...)
	var out, errOut strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	err := cmd.Run()
	return out.String(), errOut.String(), err
}

func writeKubeconfig(t *testing.T, dir, server string) string {
	t.Helper()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	content := `apiVersion: v1
kind: Config
clusters:
- name: concord
  cluster:
    server: ` + server + `
contexts:
- name: concord
  context:
    cluster: concord
    namespace: default
users:
- name: concord
  user: {}
current-context: concord
`
	if err := os.WriteFile(kubeconfig, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return kubeconfig
}

// TestOpenAPIKubectlStrictValidation drives the real kubectl with its
// default --validate=strict, which needs the OpenAPI documents.
func TestOpenAPIKubectlStrictValidation(t *testing.T) {
	if _, err := os.Stat(kubectlBin); err != nil {
		t.Skipf("needs kubectl: %v", err)
	}
	s := startServer(t)
	dir := t.TempDir()
	kubeconfig := writeKubeconfig(t, dir, s.URL)
	cacheDir := filepath.Join(dir, "cache")
	manifest := filepath.Join(dir, "cm.yaml")
	write := func(mode string) {
		t.Helper()
		data := "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: flags\n  namespace: default\ndata:\n  mode: " + mode + "\n"
		if err := os.WriteFile(manifest, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}

	// The first apply creates, the second patches (strategic merge patch,
	// built with the OpenAPI patch metadata).
	for i, mode := range []string{"blue", "green"} {
		write(mode)
		out, errOut, err := runKubectl(t, kubeconfig, cacheDir, "", "apply", "-f", manifest)
		if err != nil {
			t.Fatalf("kubectl apply #%d (strict validation): %v\nstdout: %s\nstderr: %s", i+1, err, out, errOut)
		}
		want := []string{"configmap/flags created", "configmap/flags configured"}[i]
		if !strings.Contains(out, want) {
			t.Errorf("kubectl apply #%d printed %q; want %q", i+1, out, want)
		}
		var cm corev1.ConfigMap
		s.do(t, http.MethodGet, "/api/v1/namespaces/default/configmaps/flags", nil).decode(t, &cm)
		if cm.Data["mode"] != mode {
			t.Errorf("after kubectl apply #%d: data.mode = %q; want %q", i+1, cm.Data["mode"], mode)
		}
	}

	// A Lease, from the other group version's document.
	lease := "apiVersion: coordination.k8s.io/v1\nkind: Lease\nmetadata:\n  name: leader\n  namespace: default\nspec:\n  holderIdentity: me\n  leaseDurationSeconds: 15\n"
	if out, errOut, err := runKubectl(t, kubeconfig, cacheDir, lease, "apply", "-f", "-"); err != nil {
		t.Fatalf("kubectl apply lease: %v\nstdout: %s\nstderr: %s", err, out, errOut)
	}

	// Strict validation found fieldValidation in the OpenAPI, so kubectl
	// leaves unknown fields to the server (?fieldValidation=Strict), which
	// refuses them with 400.
	bad := "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: bad\n  namespace: default\nspec:\n  x: 1\n"
	out, errOut, err := runKubectl(t, kubeconfig, cacheDir, bad, "create", "-f", "-")
	if err == nil || !strings.Contains(errOut, `strict decoding error: unknown field "spec"`) {
		t.Errorf("kubectl create with an unknown field: %v; want it refused with strict decoding error: unknown field \"spec\"\nstdout: %s\nstderr: %s", err, out, errOut)
	}
	if resp := s.do(t, http.MethodGet, "/api/v1/namespaces/default/configmaps/bad", nil); resp.Code != http.StatusNotFound {
		t.Errorf("after the refused create: GET bad = %d; want 404", resp.Code)
	}

	out, errOut, err = runKubectl(t, kubeconfig, cacheDir, "", "explain", "configmap.data")
	if err != nil {
		t.Fatalf("kubectl explain configmap.data: %v\nstdout: %s\nstderr: %s", err, out, errOut)
	}
	if !strings.Contains(out, "FIELD: data") || !strings.Contains(out, "Data contains the configuration data") {
		t.Errorf("kubectl explain configmap.data printed:\n%s", out)
	}
	out, errOut, err = runKubectl(t, kubeconfig, cacheDir, "", "explain", "leases.spec.holderIdentity")
	if err != nil || !strings.Contains(out, "holderIdentity") {
		t.Errorf("kubectl explain leases.spec.holderIdentity: %v\nstdout: %s\nstderr: %s", err, out, errOut)
	}
}

// TestOpenAPINotModifiedOverHTTP2: a conditional GET of each OpenAPI
// document over HTTP/2 (as kubectl sends them) is a 304 with no body, and
// the server logs no failed write: HTTP/2 refuses even an empty body on a
// 304, which the v3 documents used to write (a "write response" warning on
// almost every kubectl command).
func TestOpenAPINotModifiedOverHTTP2(t *testing.T) {
	logs := &syncbuf.Buffer{}
	s := startServerWithOptions(t, serverOptions{logOut: logs})
	srv := httptest.NewUnstartedServer(s.Handler)
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	client := srv.Client()
	get := func(path, etag string) (*http.Response, []byte) {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if etag != "" {
			req.Header.Set("If-None-Match", etag)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		return resp, body
	}
	for _, path := range []string{"/openapi/v3", "/openapi/v3/api/v1", "/openapi/v2"} {
		resp, body := get(path, "")
		etag := resp.Header.Get("ETag")
		if resp.StatusCode != http.StatusOK || resp.ProtoMajor != 2 || etag == "" || len(body) == 0 {
			t.Fatalf("GET %s: %d over %s, ETag %q, %d bytes; want 200 over HTTP/2 with an ETag and a body", path, resp.StatusCode, resp.Proto, etag, len(body))
		}
		resp, body = get(path, etag)
		if resp.StatusCode != http.StatusNotModified || len(body) != 0 {
			t.Errorf("GET %s with If-None-Match %s: %d, %d bytes; want 304 with no body", path, etag, resp.StatusCode, len(body))
		}
	}
	if strings.Contains(logs.String(), "write response") {
		t.Errorf("the server failed to write a response:\n%s", logs.String())
	}
}
