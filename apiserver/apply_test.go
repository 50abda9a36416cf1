package apiserver_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const applyYAML = "application/apply-patch+yaml"

// managed is a managedFields entry as the API answers it, without its
// time (checked to be set but for the scale subresource's: kube's
// ScaleHandler keeps the object's time of a manager, none for a new one).
type managed struct {
	Manager, Operation, APIVersion, Subresource string
	Fields                                      string
}

func managedOf(t *testing.T, obj metav1.Object) []managed {
	t.Helper()
	var out []managed
	for _, e := range obj.GetManagedFields() {
		if e.FieldsType != "FieldsV1" || e.FieldsV1 == nil || (e.Time == nil && e.Subresource != "scale") {
			t.Errorf("managedFields entry %+v: want fieldsType FieldsV1, fieldsV1 and a time", e)
			continue
		}
		out = append(out, managed{e.Manager, string(e.Operation), e.APIVersion, e.Subresource, string(e.FieldsV1.Raw)})
	}
	return out
}

// wantManaged checks obj's managedFields: in kube's order (operation,
// then time in seconds, then manager, apiVersion, subresource) by their own
// times, and holding want, compared in that order without the times, which
// only decide it when two writes fall in different seconds.
func wantManaged(t *testing.T, what string, obj metav1.Object, want ...managed) {
	t.Helper()
	mf := obj.GetManagedFields()
	less := func(p, q managed) bool {
		if p.Operation != q.Operation {
			return p.Operation < q.Operation
		}
		if p.Manager != q.Manager {
			return p.Manager < q.Manager
		}
		if p.APIVersion != q.APIVersion {
			return p.APIVersion < q.APIVersion
		}
		return p.Subresource < q.Subresource
	}
	if !sort.SliceIsSorted(mf, func(i, j int) bool {
		p, q := mf[i], mf[j]
		if ps, qs := unixOf(p.Time), unixOf(q.Time); p.Operation == q.Operation && ps != qs {
			return ps < qs
		}
		return less(managed{p.Manager, string(p.Operation), p.APIVersion, p.Subresource, ""}, managed{q.Manager, string(q.Operation), q.APIVersion, q.Subresource, ""})
	}) {
		t.Errorf("%s: managedFields not in kube's order: %+v", what, mf)
	}
	timeless := func(ms []managed) []managed {
		out := slices.Clone(ms)
		sort.SliceStable(out, func(i, j int) bool { return less(out[i], out[j]) })
		return out
	}
	if diff := cmp.Diff(timeless(want), timeless(managedOf(t, obj))); diff != "" {
		t.Errorf("%s: managedFields (-want +got):\n%s", what, diff)
	}
}

// wantFailure checks an error answer: code, reason, message, causes.
func wantFailure(t *testing.T, what string, resp response, code int, reason metav1.StatusReason, message string, causes ...metav1.StatusCause) {
	t.Helper()
	if resp.Code != code {
		t.Fatalf("%s: %d %s; want %d", what, resp.Code, resp.Body, code)
	}
	st := resp.status(t)
	if st.Reason != reason || st.Message != message {
		t.Errorf("%s: %s %q; want %s %q", what, st.Reason, st.Message, reason, message)
	}
	var got []metav1.StatusCause
	if st.Details != nil {
		got = st.Details.Causes
	}
	if diff := cmp.Diff(causes, got); diff != "" {
		t.Errorf("%s: causes (-want +got):\n%s", what, diff)
	}
}

func (s *testServer) apply(t *testing.T, path, query, body string, header ...string) response {
	t.Helper()
	if query != "" {
		path += "?" + query
	}
	return s.do(t, http.MethodPatch, path, body, append([]string{"Content-Type", applyYAML}, header...)...)
}

func configMapApply(name, data string) string {
	return "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: " + name + "\ndata: " + data + "\n"
}

// TestApplyHTTP: server-side apply of ConfigMaps over HTTP — create (201),
// change, conflicts (409 with kube's causes), force, dry run — and the
// managedFields every write keeps.
func TestApplyHTTP(t *testing.T) {
	s := startServer(t)
	item := nsPath + "/cm"

	resp := s.apply(t, item, "fieldManager=a", configMapApply("cm", `{k: "1"}`))
	if resp.Code != http.StatusCreated || resp.Header.Get("ETag") == "" {
		t.Fatalf("apply of a missing ConfigMap: %d %s; want 201 with an ETag", resp.Code, resp.Body)
	}
	var cm corev1.ConfigMap
	resp.decode(t, &cm)
	wantManaged(t, "created", &cm, managed{"a", "Apply", "v1", "", `{"f:data":{"f:k":{}}}`})
	var got corev1.ConfigMap
	s.do(t, http.MethodGet, item, nil).decode(t, &got)
	if diff := cmp.Diff(cm, got); diff != "" {
		t.Errorf("GET differs from the apply's answer (-apply +get):\n%s", diff)
	}

	resp = s.apply(t, item, "fieldManager=b", configMapApply("cm", `{k: "2", l: "2"}`))
	wantFailure(t, "conflicting apply", resp, http.StatusConflict, metav1.StatusReasonConflict,
		`Apply failed with 1 conflict: conflict with "a": .data.k`,
		metav1.StatusCause{Type: metav1.CauseTypeFieldManagerConflict, Message: `conflict with "a"`, Field: ".data.k"})
	if !strings.Contains(string(resp.Body), `"causes":[{"reason":"FieldManagerConflict","message":"conflict with \"a\"","field":".data.k"}]`) {
		t.Errorf("the 409's body: %s; want kube's causes", resp.Body)
	}

	resp = s.apply(t, item, "fieldManager=b&force=true&dryRun=All", configMapApply("cm", `{k: "2", l: "2"}`))
	if resp.Code != http.StatusOK {
		t.Fatalf("dry-run forced apply: %d %s", resp.Code, resp.Body)
	}
	s.do(t, http.MethodGet, item, nil).decode(t, &got)
	if got.ResourceVersion != cm.ResourceVersion || got.Data["k"] != "1" {
		t.Errorf("after a dry run: %+v; want it unchanged", got)
	}

	resp = s.apply(t, item, "fieldManager=b&force=true", configMapApply("cm", `{k: "2", l: "2"}`))
	if resp.Code != http.StatusOK {
		t.Fatalf("forced apply: %d %s", resp.Code, resp.Body)
	}
	resp.decode(t, &got)
	if got.Data["k"] != "2" || got.Data["l"] != "2" {
		t.Errorf("forced apply: data %v", got.Data)
	}
	wantManaged(t, "forced", &got, managed{"b", "Apply", "v1", "", `{"f:data":{"f:k":{},"f:l":{}}}`})

	// b stops applying l, which it alone owned: it is removed.
	resp = s.apply(t, item, "fieldManager=b", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"cm"},"data":{"k":"2"}}`)
	var dropped corev1.ConfigMap
	resp.decode(t, &dropped)
	if _, ok := dropped.Data["l"]; ok || resp.Code != http.StatusOK {
		t.Errorf("apply without l: %d, data %v; want l removed", resp.Code, dropped.Data)
	}

	// A resourceVersion in the patch or If-Match is a precondition.
	resp = s.apply(t, item, "fieldManager=b", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"cm","resourceVersion":"1"},"data":{"k":"3"}}`)
	wantFailure(t, "stale resourceVersion", resp, http.StatusConflict, metav1.StatusReasonConflict,
		`Operation cannot be fulfilled on configmaps "cm": the object has been modified; please apply your changes to the latest version and try again`)
	resp = s.apply(t, item, "fieldManager=b", configMapApply("cm", `{k: "3"}`), "If-Match", `"1"`)
	if resp.Code != http.StatusPreconditionFailed {
		t.Errorf("apply with a stale If-Match: %d %s; want 412", resp.Code, resp.Body)
	}
}

// TestManagedFieldsHTTP: POST, PUT and PATCH record their manager — the
// fieldManager given, else the User-Agent's first part — with kube's
// entries.
func TestManagedFieldsHTTP(t *testing.T) {
	s := startServer(t)
	item := nsPath + "/cm"
	resp := s.do(t, http.MethodPost, nsPath, `{"metadata":{"name":"cm"},"data":{"k":"1"}}`, "User-Agent", "kubectl/v1.37.2 (linux/amd64) kubernetes/abc")
	var cm corev1.ConfigMap
	resp.decode(t, &cm)
	wantManaged(t, "POST", &cm, managed{"kubectl", "Update", "v1", "", `{"f:data":{".":{},"f:k":{}}}`})

	put := fmt.Sprintf(`{"metadata":{"name":"cm","resourceVersion":%q,"labels":{"x":"y"}},"data":{"k":"1"}}`, cm.ResourceVersion)
	resp = s.do(t, http.MethodPut, item+"?fieldManager=editor", put)
	resp.decode(t, &cm)
	wantManaged(t, "PUT", &cm,
		managed{"editor", "Update", "v1", "", `{"f:metadata":{"f:labels":{".":{},"f:x":{}}}}`},
		managed{"kubectl", "Update", "v1", "", `{"f:data":{".":{},"f:k":{}}}`})

	resp = s.do(t, http.MethodPatch, item, `{"data":{"p":"1"}}`, "Content-Type", "application/merge-patch+json")
	resp.decode(t, &cm)
	got := managedOf(t, &cm)
	if len(got) != 3 || !cmp.Equal(got[0], managed{"Go-http-client", "Update", "v1", "", `{"f:data":{"f:p":{}}}`}) {
		t.Errorf("PATCH by Go's client: %+v; want its entry, named by its User-Agent", got)
	}
	stored := s.storedKeys(t, "/registry/configmaps/default/cm")["/registry/configmaps/default/cm"]
	var value struct {
		Metadata struct {
			ManagedFields []json.RawMessage `json:"managedFields"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal([]byte(stored), &value); err != nil || len(value.Metadata.ManagedFields) != 3 {
		t.Errorf("etcd holds %s; want the 3 entries", stored)
	}
}

// TestApplyBadInputHTTP: what kube refuses of an apply, with its codes and
// messages, nothing stored.
func TestApplyBadInputHTTP(t *testing.T) {
	s := startServer(t)
	item := nsPath + "/bad"
	for _, tc := range []struct {
		name, query, body, contentType string
		code                           int
		reason                         metav1.StatusReason
		message                        string
		causes                         []metav1.StatusCause
	}{
		{"no fieldManager", "", configMapApply("bad", "{}"), applyYAML, 422, metav1.StatusReasonInvalid,
			`PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: is required for apply patch`,
			[]metav1.StatusCause{{Type: metav1.CauseTypeFieldValueRequired, Message: "Required value: is required for apply patch", Field: "fieldManager"}}},
		{"force without apply", "force=true", `{"data":{}}`, "application/merge-patch+json", 422, metav1.StatusReasonInvalid,
			`PatchOptions.meta.k8s.io "" is invalid: force: Forbidden: may not be specified for non-apply patch`,
			[]metav1.StatusCause{{Type: metav1.CauseTypeForbidden, Message: "Forbidden: may not be specified for non-apply patch", Field: "force"}}},
		{"CBOR", "fieldManager=a", "\xa0", "application/apply-patch+cbor", 415, metav1.StatusReasonUnsupportedMediaType,
			"the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json, application/apply-patch+yaml", nil},
		{"malformed YAML", "fieldManager=a", "a: b: c", applyYAML, 400, metav1.StatusReasonBadRequest,
			"error encoding patch: yaml: mapping values are not allowed in this context", nil},
		{"another kind", "fieldManager=a", `{"apiVersion":"v1","kind":"Secret","metadata":{"name":"bad"}}`, applyYAML, 400, metav1.StatusReasonBadRequest,
			"invalid object type: /v1, Kind=Secret", nil},
		{"another apiVersion", "fieldManager=a", `{"apiVersion":"coordination.k8s.io/v1","kind":"ConfigMap","metadata":{"name":"bad"}}`, applyYAML, 400, metav1.StatusReasonBadRequest,
			"invalid object type: coordination.k8s.io/v1, Kind=ConfigMap", nil},
		{"another name", "fieldManager=a", configMapApply("other", "{}"), applyYAML, 400, metav1.StatusReasonBadRequest,
			"the name of the object (other) does not match the name on the URL (bad)", nil},
		{"generateName", "fieldManager=a", "apiVersion: v1\nkind: ConfigMap\nmetadata: {generateName: bad-}\n", applyYAML, 400, metav1.StatusReasonBadRequest,
			"the name of the object (bad based on URL) was undeterminable: name must be provided", nil},
		{"an undeclared field", "fieldManager=a", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: bad}\nspec: {}\n", applyYAML, 400, metav1.StatusReasonBadRequest,
			"failed to create typed patch object (/bad; /v1, Kind=ConfigMap): .spec: field not declared in schema", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := item
			if tc.query != "" {
				path += "?" + tc.query
			}
			resp := s.do(t, http.MethodPatch, path, tc.body, "Content-Type", tc.contentType)
			wantFailure(t, tc.name, resp, tc.code, tc.reason, tc.message, tc.causes...)
			if keys := s.storedKeys(t, "/registry/configmaps/default/bad"); len(keys) != 0 {
				t.Errorf("stored %v", keys)
			}
		})
	}
	// fieldValidation Warn (the default): a duplicate field is a warning
	// per YAML error line, as kube's.
	resp := s.apply(t, nsPath+"/dup", "fieldManager=a", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: dup\ndata:\n  k: a\n  k: b\n")
	if want := []string{`299 - "line 7: key \"k\" already set in map"`}; resp.Code != http.StatusCreated || !cmp.Equal(resp.Header.Values("Warning"), want) {
		t.Errorf("apply with a duplicate key: %d, warnings %q; want 201 and %q", resp.Code, resp.Header.Values("Warning"), want)
	}
	// A namespace that does not exist guards the create.
	resp = s.apply(t, "/api/v1/namespaces/missing/configmaps/bad", "fieldManager=a", configMapApply("bad", "{}"))
	if resp.Code != http.StatusNotFound || !strings.Contains(string(resp.Body), `namespaces \"missing\" not found`) {
		t.Errorf("apply in a missing namespace: %d %s; want 404 naming it", resp.Code, resp.Body)
	}
}

// TestApplyConcurrentHTTP: 8 managers applying disjoint fields at once all
// succeed; 8 applying other values of one field: one succeeds, the others
// get 409 naming it.
func TestApplyConcurrentHTTP(t *testing.T) {
	s := startServer(t)
	const n = 8
	codes := make([]int, n)
	bodies := make([][]byte, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			resp := s.apply(t, nsPath+"/disjoint", fmt.Sprintf("fieldManager=m%d", i), configMapApply("disjoint", fmt.Sprintf(`{k%d: "v"}`, i)))
			codes[i], bodies[i] = resp.Code, resp.Body
		})
	}
	wg.Wait()
	created := 0
	for i, code := range codes {
		switch code {
		case http.StatusCreated:
			created++
		case http.StatusOK:
		default:
			t.Errorf("m%d: %d %s", i, code, bodies[i])
		}
	}
	var cm corev1.ConfigMap
	s.do(t, http.MethodGet, nsPath+"/disjoint", nil).decode(t, &cm)
	if created != 1 || len(cm.Data) != n || len(cm.ManagedFields) != n {
		t.Errorf("%d creates, data %v, %d managedFields entries; want 1 create, %d keys and entries", created, cm.Data, len(cm.ManagedFields), n)
	}

	s.apply(t, nsPath+"/same", "fieldManager=owner", configMapApply("same", `{other: "x"}`))
	for i := range n {
		wg.Go(func() {
			resp := s.apply(t, nsPath+"/same", fmt.Sprintf("fieldManager=m%d", i), configMapApply("same", fmt.Sprintf(`{k: "v%d"}`, i)))
			codes[i], bodies[i] = resp.Code, resp.Body
		})
	}
	wg.Wait()
	s.do(t, http.MethodGet, nsPath+"/same", nil).decode(t, &cm)
	winner := strings.TrimPrefix(cm.Data["k"], "v")
	for i, code := range codes {
		if fmt.Sprint(i) == winner {
			if code != http.StatusOK {
				t.Errorf("the winner m%d: %d", i, code)
			}
			continue
		}
		var st metav1.Status
		if err := json.Unmarshal(bodies[i], &st); err != nil || code != http.StatusConflict || st.Details == nil ||
			!cmp.Equal(st.Details.Causes, []metav1.StatusCause{{Type: metav1.CauseTypeFieldManagerConflict, Message: `conflict with "m` + winner + `"`, Field: ".data.k"}}) {
			t.Errorf("m%d: %d %s; want 409 naming m%s", i, code, bodies[i], winner)
		}
	}
}

// TestApplyCustomResourceHTTP: a custom object is applied and its status
// and scale subresources too, each write recorded as its subresource's (a
// Scale's managers are the object's managers of its spec replicas); a
// strategic merge patch is 415.
func TestApplyCustomResourceHTTP(t *testing.T) {
	s := startCRDServer(t)
	s.createCRD(t, gadgetsCRD)
	item := gadgets + "/g"
	resp := s.apply(t, item, "fieldManager=a", `{"apiVersion":"example.com/v1","kind":"Gadget","metadata":{"name":"g"},"spec":{"replicas":1,"color":"red"}}`)
	if resp.Code != http.StatusCreated {
		t.Fatalf("apply: %d %s", resp.Code, resp.Body)
	}
	obj := resp.object(t)
	if size, _, _ := unstructuredInt(obj.Object, "spec", "size"); size != 1 {
		t.Errorf("applied object %v; want the default size", obj.Object)
	}
	wantManaged(t, "applied", obj, managed{"a", "Apply", "example.com/v1", "", `{"f:spec":{"f:color":{},"f:replicas":{}}}`})

	resp = s.apply(t, item+"/status", "fieldManager=c", `{"apiVersion":"example.com/v1","kind":"Gadget","metadata":{"name":"g"},"status":{"ready":true}}`)
	if resp.Code != http.StatusOK {
		t.Fatalf("status apply: %d %s", resp.Code, resp.Body)
	}
	wantManaged(t, "status applied", resp.object(t),
		managed{"a", "Apply", "example.com/v1", "", `{"f:spec":{"f:color":{},"f:replicas":{}}}`},
		managed{"c", "Apply", "example.com/v1", "status", `{"f:status":{"f:ready":{}}}`})

	resp = s.do(t, http.MethodPatch, item+"/scale?fieldManager=scaler", `{"spec":{"replicas":3}}`, "Content-Type", "application/merge-patch+json")
	if resp.Code != http.StatusOK {
		t.Fatalf("scale patch: %d %s", resp.Code, resp.Body)
	}
	got := s.do(t, http.MethodGet, item, nil).object(t)
	wantManaged(t, "scaled", got,
		managed{"a", "Apply", "example.com/v1", "", `{"f:spec":{"f:color":{}}}`},
		managed{"c", "Apply", "example.com/v1", "status", `{"f:status":{"f:ready":{}}}`},
		managed{"scaler", "Update", "example.com/v1", "scale", `{"f:spec":{"f:replicas":{}}}`})

	scale := `{"apiVersion":"autoscaling/v1","kind":"Scale","metadata":{"name":"g"},"spec":{"replicas":2}}`
	wantFailure(t, "apply of a Scale", s.apply(t, item+"/scale", "fieldManager=a", scale),
		http.StatusConflict, metav1.StatusReasonConflict,
		`Apply failed with 1 conflict: conflict with "scaler" with subresource "scale" using autoscaling/v1: .spec.replicas`,
		metav1.StatusCause{Type: metav1.CauseTypeFieldManagerConflict, Message: `conflict with "scaler" with subresource "scale" using autoscaling/v1`, Field: ".spec.replicas"})
	resp = s.apply(t, item+"/scale", "fieldManager=a&force=true", scale)
	if resp.Code != http.StatusOK || !strings.Contains(string(resp.Body), `"kind":"Scale"`) || !strings.Contains(string(resp.Body), `"replicas":2`) {
		t.Fatalf("forced apply of the Scale: %d %s", resp.Code, resp.Body)
	}
	got = s.do(t, http.MethodGet, item, nil).object(t)
	if replicas, _, _ := unstructuredInt(got.Object, "spec", "replicas"); replicas != 2 {
		t.Errorf("replicas %d after the forced Scale apply; want 2", replicas)
	}
	// Without a time, a's scale entry sorts first; scaler's went with the
	// replicas.
	wantManaged(t, "scale applied", got,
		managed{"a", "Apply", "example.com/v1", "scale", `{"f:spec":{"f:replicas":{}}}`},
		managed{"a", "Apply", "example.com/v1", "", `{"f:spec":{"f:color":{}}}`},
		managed{"c", "Apply", "example.com/v1", "status", `{"f:status":{"f:ready":{}}}`})
	wantFailure(t, "apply of a Scale of another name", s.apply(t, item+"/scale", "fieldManager=a", strings.Replace(scale, `"g"`, `"h"`, 1)),
		http.StatusBadRequest, metav1.StatusReasonBadRequest, "the name of the object (h) does not match the name on the URL (g)")
	wantFailure(t, "apply of a Scale without fieldManager", s.apply(t, item+"/scale", "", scale),
		http.StatusUnprocessableEntity, metav1.StatusReasonInvalid,
		`PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: is required for apply patch`,
		metav1.StatusCause{Type: metav1.CauseTypeFieldValueRequired, Message: "Required value: is required for apply patch", Field: "fieldManager"})
	wantFailure(t, "strategic merge patch", s.do(t, http.MethodPatch, item, `{}`, "Content-Type", "application/strategic-merge-patch+json"),
		http.StatusUnsupportedMediaType, metav1.StatusReasonUnsupportedMediaType,
		"the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml")
	wantFailure(t, "an undeclared field", s.apply(t, item, "fieldManager=a", `{"apiVersion":"example.com/v1","kind":"Gadget","metadata":{"name":"g"},"spec":{"x":1}}`),
		http.StatusBadRequest, metav1.StatusReasonBadRequest,
		"failed to create typed patch object (/g; example.com/v1, Kind=Gadget): .spec.x: field not declared in schema")
	wantFailure(t, "another version", s.apply(t, item, "fieldManager=a", `{"apiVersion":"example.com/v2","kind":"Gadget","metadata":{"name":"g"}}`),
		http.StatusBadRequest, metav1.StatusReasonBadRequest, "invalid object type: example.com/v2, Kind=Gadget")
	wantFailure(t, "a value the schema refuses", s.apply(t, item, "fieldManager=a", `{"apiVersion":"example.com/v1","kind":"Gadget","metadata":{"name":"g"},"spec":{"size":11}}`),
		http.StatusUnprocessableEntity, metav1.StatusReasonInvalid,
		`Gadget.example.com "g" is invalid: spec: Invalid value: size must be at most 10`,
		metav1.StatusCause{Type: metav1.CauseTypeFieldValueInvalid, Message: `Invalid value: size must be at most 10`, Field: "spec"})
}

func unstructuredInt(obj map[string]any, fields ...string) (int64, bool, error) {
	var v any = obj
	for _, f := range fields {
		m, ok := v.(map[string]any)
		if !ok {
			return 0, false, nil
		}
		v = m[f]
	}
	switch n := v.(type) {
	case int64:
		return n, true, nil
	case float64:
		return int64(n), true, nil
	}
	return 0, false, nil
}

// unixOf is a managedFields time in seconds, 0 for none, as kube sorts them.
func unixOf(t *metav1.Time) int64 {
	if t == nil {
		return 0
	}
	return t.Unix()
}
