package apiserver_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// compactFields compares managedFields' fieldsV1 as JSON: pretty output
// indents them too.
var compactFields = cmp.Transformer("compact", func(f metav1.FieldsV1) string {
	var b bytes.Buffer
	if err := json.Compact(&b, f.Raw); err != nil {
		return string(f.Raw)
	}
	return b.String()
})

// TestListJSONFastPathAnswersWhatDecodingAnswers: a plain JSON list passes
// the stored JSON through; it must equal, page for page, what the decoding
// path (taken here by asking for pretty output) answers.
func TestListJSONFastPathAnswersWhatDecodingAnswers(t *testing.T) {
	s := startServer(t)
	s.namespace(t, "other")
	for i := range 5 {
		c := s.create(t, "default", "cm-"+strconv.Itoa(i), map[string]string{"i": strconv.Itoa(i)})
		c.Data = map[string]string{"edited": "yes", "quote": `"metadata":{`}
		s.put(t, c)
	}
	s.create(t, "other", "x", nil)
	for _, q := range []url.Values{
		{},
		{"limit": {"2"}},
		{"resourceVersion": {"0"}},
	} {
		for _, path := range []string{nsPath, "/api/v1/configmaps"} {
			token := ""
			for page := 0; page < 5; page++ {
				query := url.Values{}
				for k, v := range q {
					query[k] = v
				}
				if token != "" {
					query.Set("continue", token)
				}
				fast := s.do(t, http.MethodGet, path+"?"+query.Encode(), nil)
				query.Set("pretty", "true")
				slow := s.do(t, http.MethodGet, path+"?"+query.Encode(), nil)
				var a, b corev1.ConfigMapList
				fast.decode(t, &a)
				slow.decode(t, &b)
				if fast.Code != http.StatusOK || fast.Header.Get("Content-Type") != "application/json" {
					t.Fatalf("%s?%s: %d %q", path, query.Encode(), fast.Code, fast.Header.Get("Content-Type"))
				}
				if diff := cmp.Diff(a, b, compactFields); diff != "" {
					t.Fatalf("%s?%s: fast path differs from decoding (-fast +decoded):\n%s", path, query.Encode(), diff)
				}
				if len(a.Items) > 0 && a.Items[0].ResourceVersion == "" {
					t.Fatalf("%s: items without resourceVersion", path)
				}
				if token = a.Continue; token == "" {
					break
				}
			}
		}
	}
}

// TestGetJSONFastPathAnswersWhatDecodingAnswers: the same for one object,
// including the ETag and a following write that starts from what was read.
func TestGetJSONFastPathAnswersWhatDecodingAnswers(t *testing.T) {
	s := startServer(t)
	c := s.create(t, "default", "flags", map[string]string{"app": "x"})
	c.Data = map[string]string{"quote": `"metadata":{`}
	s.put(t, c)
	fast := s.do(t, http.MethodGet, flagsPath, nil)
	slow := s.do(t, http.MethodGet, flagsPath+"?pretty=true", nil)
	var a, b corev1.ConfigMap
	fast.decode(t, &a)
	slow.decode(t, &b)
	if diff := cmp.Diff(a, b, compactFields); diff != "" {
		t.Fatalf("fast path differs from decoding (-fast +decoded):\n%s", diff)
	}
	if fast.Header.Get("ETag") != slow.Header.Get("ETag") || fast.Header.Get("ETag") != quoted(a.ResourceVersion) || fast.Header.Get("Content-Type") != "application/json" {
		t.Errorf("fast GET headers %v; want the ETag of %s and application/json", fast.Header, a.ResourceVersion)
	}
	if resp := s.do(t, http.MethodGet, flagsPath, nil, "If-None-Match", quoted(a.ResourceVersion)); resp.Code != http.StatusNotModified {
		t.Errorf("fast GET with a matching If-None-Match: %d; want 304", resp.Code)
	}
	// A write after a JSON read starts from the remembered, undecoded state.
	a.Data = map[string]string{"after": "read"}
	if got := s.put(t, a); got.Data["after"] != "read" || got.UID != c.UID {
		t.Errorf("PUT after a JSON read: %+v", got)
	}
}

// TestWriteJSONAnswersWhatDecodingAnswers: a JSON client's create, replace
// and patch are answered with the bytes just stored (resourceVersion
// inserted); the answer must equal the object read back through the
// decoding path at the same resourceVersion.
func TestWriteJSONAnswersWhatDecodingAnswers(t *testing.T) {
	s := startServer(t)
	for _, step := range []struct {
		method, path, body string
		header             []string
		code               int
	}{
		{http.MethodPost, nsPath, `{"metadata":{"name":"flags","labels":{"a":"b"}},"data":{"quote":"\"metadata\":{"}}`, nil, http.StatusCreated},
		{http.MethodPut, flagsPath, `{"metadata":{"name":"flags","resourceVersion":"RV"},"data":{"k":"v"}}`, nil, http.StatusOK},
		{http.MethodPatch, flagsPath, `{"data":{"p":"q"}}`, []string{"Content-Type", "application/merge-patch+json"}, http.StatusOK},
		{http.MethodPut, nsPath + "/fresh", `{"metadata":{"name":"fresh"},"data":{"k":"v"}}`, []string{"If-None-Match", "*"}, http.StatusCreated},
	} {
		var current corev1.ConfigMap
		if got := s.do(t, http.MethodGet, flagsPath, nil); got.Code == http.StatusOK {
			got.decode(t, &current)
		}
		body := strings.ReplaceAll(step.body, "RV", current.ResourceVersion)
		fast := s.do(t, step.method, step.path, body, step.header...)
		if fast.Code != step.code || fast.Header.Get("Content-Type") != "application/json" {
			t.Fatalf("%s %s: %d %q %s; want %d, application/json", step.method, step.path, fast.Code, fast.Header.Get("Content-Type"), fast.Body, step.code)
		}
		var written, read corev1.ConfigMap
		fast.decode(t, &written)
		path := step.path
		if step.method == http.MethodPost {
			path += "/" + written.Name
		}
		slow := s.do(t, http.MethodGet, path+"?pretty=true", nil)
		slow.decode(t, &read)
		if diff := cmp.Diff(written, read, compactFields); diff != "" {
			t.Fatalf("%s %s: the answer differs from the object read back (-answer +read):\n%s", step.method, step.path, diff)
		}
		if written.ResourceVersion == "" || fast.Header.Get("ETag") != quoted(written.ResourceVersion) {
			t.Fatalf("%s %s: resourceVersion %q, ETag %q", step.method, step.path, written.ResourceVersion, fast.Header.Get("ETag"))
		}
	}
}

// TestListItemsOfBuiltInsHaveNoTypeMeta: kube-apiserver's lists of built-in
// kinds leave out their items' kind and apiVersion (typed items), in every
// path Concord answers a list by (the stored JSON passed through, decoded
// objects for a selector or pretty output), while custom resources' items
// keep them (unstructured), and a watch's objects carry them.
func TestListItemsOfBuiltInsHaveNoTypeMeta(t *testing.T) {
	s := startCRDServer(t)
	s.create(t, "default", "cm", map[string]string{"app": "x"})
	s.waitServed(t, s.createCRD(t, gadgetsCRD))
	if resp := s.do(t, http.MethodPost, gadgets, gadget("a", nil)); resp.Code != http.StatusCreated {
		t.Fatalf("create: %d %s", resp.Code, resp.Body)
	}
	tests := []struct {
		name, path  string
		wantTypeMet bool
	}{
		{"stored JSON", nsPath, false},
		{"a page", nsPath + "?limit=1", false},
		{"selected", nsPath + "?labelSelector=app%3Dx", false},
		{"pretty", nsPath + "?pretty=true", false},
		{"all namespaces", "/api/v1/configmaps?fieldSelector=metadata.name%3Dcm", false},
		{"CRDs", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", false},
		{"custom", gadgets, true},
		{"custom selected", gadgets + "?labelSelector=x!%3Dy", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp := s.do(t, http.MethodGet, tc.path, nil)
			var list struct {
				Kind, APIVersion string
				Items            []map[string]json.RawMessage
			}
			resp.decode(t, &list)
			if resp.Code != http.StatusOK || list.Kind == "" || list.APIVersion == "" || len(list.Items) == 0 {
				t.Fatalf("%d %s", resp.Code, resp.Body)
			}
			for _, item := range list.Items {
				_, kind := item["kind"]
				_, apiVersion := item["apiVersion"]
				if kind != tc.wantTypeMet || apiVersion != tc.wantTypeMet {
					t.Errorf("item has kind %v, apiVersion %v; want %v: %s", kind, apiVersion, tc.wantTypeMet, resp.Body)
				}
				if _, ok := item["metadata"]; !ok {
					t.Errorf("item without metadata: %s", resp.Body)
				}
			}
		})
	}
	// A watch's objects carry their kind, as kube's.
	resp := s.do(t, http.MethodGet, nsPath+"?watch=true&timeoutSeconds=1&resourceVersion=0", nil)
	if resp.Code != http.StatusOK || !strings.Contains(string(resp.Body), `"object":{"kind":"ConfigMap","apiVersion":"v1",`) {
		t.Errorf("watch: %d %s", resp.Code, resp.Body)
	}
}
