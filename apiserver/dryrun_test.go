package apiserver_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/serializer"

	"github.com/concord-dev/concord/registry"
)

// dryRunFormats are the answers a client may ask for.
var dryRunFormats = []struct{ name, accept string }{
	{"json", "application/json"},
	{"yaml", "application/yaml"},
	{"protobuf", "application/vnd.kubernetes.protobuf"},
	{"table", kubectlTableAccept},
}

// comparable decodes an answer in any format and keeps what must be the
// same in a dry run and the real write: everything but the fields only a
// real write sets (resourceVersion, and on create uid and
// creationTimestamp) or that tell the time (deletionTimestamp is kept as
// set or not; a Table's Age cell is dropped).
func comparable(t *testing.T, resp response) map[string]any {
	t.Helper()
	obj, _, err := serializer.NewCodecFactory(registry.Scheme).UniversalDeserializer().Decode(resp.Body, nil, nil)
	if err != nil {
		// Tables and Status are meta.k8s.io types the scheme may not
		// know in every encoding; they come as JSON.
		var m map[string]any
		if jerr := json.Unmarshal(resp.Body, &m); jerr != nil {
			t.Fatalf("decode answer: %v (%v): %q", err, jerr, resp.Body)
		}
		return normalize(m)
	}
	data, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	return normalize(m)
}

func normalize(m map[string]any) map[string]any {
	clean := func(meta map[string]any) {
		for _, k := range []string{"resourceVersion", "uid", "creationTimestamp"} {
			delete(meta, k)
		}
		if _, ok := meta["deletionTimestamp"]; ok {
			meta["deletionTimestamp"] = "set"
		}
		// An entry's time is the second of its write: the dry run and
		// the real write can fall on either side of one.
		if entries, ok := meta["managedFields"].([]any); ok {
			for _, e := range entries {
				if entry, ok := e.(map[string]any); ok && entry["time"] != nil {
					entry["time"] = "set"
				}
			}
		}
	}
	if meta, ok := m["metadata"].(map[string]any); ok {
		clean(meta)
	}
	if rows, ok := m["rows"].([]any); ok {
		for _, r := range rows {
			row := r.(map[string]any)
			if cells, ok := row["cells"].([]any); ok && len(cells) > 0 {
				row["cells"] = cells[:len(cells)-1] // Age
			}
			if obj, ok := row["object"].(map[string]any); ok {
				if meta, ok := obj["metadata"].(map[string]any); ok {
					clean(meta)
				}
			}
		}
	}
	return m
}

// TestDryRunAnswersWhatTheWriteWouldStore: every dry-run write answers, in
// every format, what the same write then answers for real (but the fields
// only a real write sets), and stores nothing; a dry-run update answers the
// stored resourceVersion, a dry-run create none.
func TestDryRunAnswersWhatTheWriteWouldStore(t *testing.T) {
	s := startServer(t)
	const cms = "/api/v1/namespaces/default/configmaps"
	for _, f := range dryRunFormats {
		verbs := []struct {
			name string
			// setup makes what the write starts from.
			setup func(name string)
			send  func(name string) (method, path string, body any, header []string)
			code  int
		}{
			{"create", nil, func(name string) (string, string, any, []string) {
				return http.MethodPost, cms, map[string]any{"metadata": map[string]any{"name": name, "labels": map[string]string{"a": "1"}}, "data": map[string]string{"k": "v"}}, nil
			}, http.StatusCreated},
			{"replace", func(name string) { s.create(t, "default", name, nil) }, func(name string) (string, string, any, []string) {
				var cm metav1.PartialObjectMetadata
				s.do(t, http.MethodGet, cms+"/"+name, nil).decode(t, &cm)
				rv := cm.ResourceVersion
				return http.MethodPut, cms + "/" + name, map[string]any{"metadata": map[string]any{"name": name, "resourceVersion": rv}, "data": map[string]string{"k": "replaced"}}, nil
			}, http.StatusOK},
			{"patch", func(name string) { s.create(t, "default", name, nil) }, func(name string) (string, string, any, []string) {
				return http.MethodPatch, cms + "/" + name, `{"data":{"k":"patched"},"metadata":{"labels":{"p":"1"}}}`, []string{"Content-Type", "application/merge-patch+json"}
			}, http.StatusOK},
			{"strategic patch", func(name string) { s.create(t, "default", name, nil) }, func(name string) (string, string, any, []string) {
				return http.MethodPatch, cms + "/" + name, `{"data":{"k":"patched"}}`, []string{"Content-Type", "application/strategic-merge-patch+json"}
			}, http.StatusOK},
			{"delete", func(name string) { s.create(t, "default", name, nil) }, func(name string) (string, string, any, []string) {
				return http.MethodDelete, cms + "/" + name, nil, nil
			}, http.StatusOK},
			{"delete of an object with a finalizer", func(name string) {
				body := map[string]any{"metadata": map[string]any{"name": name, "finalizers": []string{"example.com/hold"}}}
				if resp := s.do(t, http.MethodPost, cms, body); resp.Code != http.StatusCreated {
					t.Fatalf("create %s: %d %s", name, resp.Code, resp.Body)
				}
			}, func(name string) (string, string, any, []string) {
				return http.MethodDelete, cms + "/" + name, nil, nil
			}, http.StatusOK},
			{"delete of a namespace", func(name string) { s.namespace(t, name) }, func(name string) (string, string, any, []string) {
				return http.MethodDelete, "/api/v1/namespaces/" + name, nil, nil
			}, http.StatusOK},
		}
		for i, v := range verbs {
			if f.name == "table" && (v.name == "delete" || v.name == "delete of a namespace") {
				continue // a Status has no Table form
			}
			name := fmt.Sprintf("dry-%s-%d", f.name, i)
			t.Run(v.name+"/"+f.name, func(t *testing.T) {
				if v.setup != nil {
					v.setup(name)
				}
				before := s.storedKeys(t, "/registry/")
				beforeRev := s.revision(t)
				method, path, body, header := v.send(name)
				dry := s.do(t, method, path+"?dryRun=All", body, append([]string{"Accept", f.accept}, header...)...)
				if dry.Code != v.code {
					t.Fatalf("dry run: %d %s; want %d", dry.Code, dry.Body, v.code)
				}
				if diff := cmp.Diff(before, s.storedKeys(t, "/registry/")); diff != "" || s.revision(t) != beforeRev {
					t.Fatalf("the dry run wrote to etcd (-before +after):\n%s", diff)
				}
				method, path, body, header = v.send(name)
				real := s.do(t, method, path, body, append([]string{"Accept", f.accept}, header...)...)
				if real.Code != v.code {
					t.Fatalf("real write: %d %s; want %d", real.Code, real.Body, v.code)
				}
				if diff := cmp.Diff(comparable(t, real), comparable(t, dry)); diff != "" {
					t.Errorf("dry run answered other than the write (-real +dry):\n%s", diff)
				}
				if f.name == "json" {
					checkDryRunVersion(t, v.name, dry, beforeRev)
				}
			})
		}
	}
}

// checkDryRunVersion: as kube, a dry-run create answers no resourceVersion
// and a dry-run update the stored one (not a new revision).
func checkDryRunVersion(t *testing.T, verb string, dry response, beforeRev int64) {
	t.Helper()
	var obj metav1.PartialObjectMetadata
	dry.decode(t, &obj)
	if obj.Kind == "Status" {
		return
	}
	rv, err := strconv.ParseInt(obj.ResourceVersion, 10, 64)
	switch {
	case verb == "create" && obj.ResourceVersion != "":
		t.Errorf("dry-run create answered resourceVersion %q; want none", obj.ResourceVersion)
	case verb != "create" && (err != nil || rv <= 0 || rv > beforeRev):
		t.Errorf("dry-run %s answered resourceVersion %q; want the stored one (etcd at %d)", verb, obj.ResourceVersion, beforeRev)
	}
}
