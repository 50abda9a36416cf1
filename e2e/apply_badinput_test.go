package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/rest"
)

const applyPatchType = "application/apply-patch+yaml"

// TestApplyBadInput sends server-side applies kube-apiserver refuses, as
// plain HTTP to the binary, and checks each answer (a Status with kube's
// code, reason and message) and that nothing was stored.
func TestApplyBadInput(t *testing.T) {
	t.Parallel()
	srv := startConcord(t, "concord", t.TempDir())
	base := srv.url + "/api/v1/namespaces/default/configmaps/"
	cm := func(name string) string {
		return "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: " + name + "\ndata:\n  k: v\n"
	}
	cases := []struct {
		name        string
		url         string // after base, or a path from /
		contentType string
		body        string
		code        int
		reason      metav1.StatusReason
		message     string // exact, or a prefix when it ends in "…"
		causes      []metav1.StatusCause
		absent      []string // paths (after srv.url) that must answer 404 afterwards
		alsoKube500 bool     // kube 1.37's 500 without reason is accepted too
	}{{
		// kube: ValidatePatchOptions, before the body is read as YAML.
		name: "no fieldManager", url: "bad1", body: cm("bad1"),
		code: 422, reason: metav1.StatusReasonInvalid,
		message: `PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: is required for apply patch`,
		causes:  []metav1.StatusCause{{Type: metav1.CauseTypeFieldValueRequired, Message: "Required value: is required for apply patch", Field: "fieldManager"}},
		absent:  []string{"/api/v1/namespaces/default/configmaps/bad1"},
	}, {
		name: "empty fieldManager", url: "bad1?fieldManager=", body: cm("bad1"),
		code: 422, reason: metav1.StatusReasonInvalid,
		message: `PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: is required for apply patch`,
		absent:  []string{"/api/v1/namespaces/default/configmaps/bad1"},
	}, {
		// kube: validateAndTranscodePatch (yaml.ToJSON).
		name: "malformed YAML", url: "bad2?fieldManager=t", body: "apiVersion: v1\nkind: ConfigMap\ndata: [unclosed\n",
		code: 400, reason: metav1.StatusReasonBadRequest,
		message: "error encoding patch: yaml: line 3: did not find expected ',' or ']'",
		absent:  []string{"/api/v1/namespaces/default/configmaps/bad2"},
	}, {
		// kube: applyPatcher's decoding into an object.
		name: "YAML not an object", url: "bad2?fieldManager=t", body: "- a\n- b\n",
		code: 400, reason: metav1.StatusReasonBadRequest,
		message: "error decoding patch: …",
		absent:  []string{"/api/v1/namespaces/default/configmaps/bad2"},
	}, {
		// kube: the field manager's version check.
		name: "another kind", url: "bad3?fieldManager=t", body: "apiVersion: v1\nkind: Secret\nmetadata:\n  name: bad3\nstringData:\n  k: v\n",
		code: 400, reason: metav1.StatusReasonBadRequest,
		message: "invalid object type: /v1, Kind=Secret",
		absent:  []string{"/api/v1/namespaces/default/configmaps/bad3", "/api/v1/namespaces/default/secrets/bad3"},
	}, {
		name: "another version", url: "bad3?fieldManager=t", body: "apiVersion: v2\nkind: ConfigMap\nmetadata:\n  name: bad3\n",
		code: 400, reason: metav1.StatusReasonBadRequest,
		message: "invalid object type: /v2, Kind=ConfigMap",
		absent:  []string{"/api/v1/namespaces/default/configmaps/bad3"},
	}, {
		name: "no kind", url: "bad3?fieldManager=t", body: "metadata:\n  name: bad3\ndata:\n  k: v\n",
		code: 400, reason: metav1.StatusReasonBadRequest,
		message: "invalid object type: /, Kind=",
		absent:  []string{"/api/v1/namespaces/default/configmaps/bad3"},
	}, {
		// kube: checkName, after the patch is applied.
		name: "another name", url: "bad4?fieldManager=t", body: cm("other"),
		code: 400, reason: metav1.StatusReasonBadRequest,
		message: "the name of the object (other) does not match the name on the URL (bad4)",
		absent:  []string{"/api/v1/namespaces/default/configmaps/bad4", "/api/v1/namespaces/default/configmaps/other"},
	}, {
		name: "another namespace", url: "bad5?fieldManager=t", body: "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: bad5\n  namespace: kube-system\ndata:\n  k: v\n",
		code: 400, reason: metav1.StatusReasonBadRequest,
		message: "the namespace of the provided object does not match the namespace sent on the request",
		absent:  []string{"/api/v1/namespaces/default/configmaps/bad5", "/api/v1/namespaces/kube-system/configmaps/bad5"},
	}, {
		name: "managedFields in the body", url: "bad6?fieldManager=t",
		body: "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: bad6\n  managedFields:\n  - manager: x\n    operation: Apply\n    apiVersion: v1\n    fieldsType: FieldsV1\n    fieldsV1: {f:data: {f:k: {}}}\ndata:\n  k: v\n",
		code: 400, reason: metav1.StatusReasonBadRequest,
		message: "metadata.managedFields must be nil",
		absent:  []string{"/api/v1/namespaces/default/configmaps/bad6"},
	}, {
		// kube: the namespace lifecycle admission.
		name: "no such namespace", url: "/api/v1/namespaces/nope/configmaps/bad8?fieldManager=t", body: cm("bad8"),
		code: 404, reason: metav1.StatusReasonNotFound,
		message: `namespaces "nope" not found`,
		absent:  []string{"/api/v1/namespaces/nope/configmaps/bad8"},
	}, {
		// kube: the field manager's conversion of the applied object (its
		// namespace unset: "/bad9") to its type fails. kube 1.37 answers
		// that error, not a Status, as a 500 without reason
		// (kubernetes/kubernetes#139253); its fix (#139255) makes it a
		// 400 BadRequest with the same message, which Concord answers.
		name: "unknown field", url: "bad9?fieldManager=t", body: "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: bad9\nspec:\n  x: 1\n",
		code: 400, reason: metav1.StatusReasonBadRequest, alsoKube500: true,
		message: "failed to create typed patch object (/bad9; /v1, Kind=ConfigMap): .spec: field not declared in schema",
		absent:  []string{"/api/v1/namespaces/default/configmaps/bad9"},
	}, {
		name: "force on a merge patch", url: "bad7?fieldManager=t&force=true", contentType: "application/merge-patch+json", body: `{"data":{"k":"v"}}`,
		code: 422, reason: metav1.StatusReasonInvalid,
		message: `PatchOptions.meta.k8s.io "" is invalid: force: Forbidden: may not be specified for non-apply patch`,
		causes:  []metav1.StatusCause{{Type: metav1.CauseType(field.ErrorTypeForbidden), Message: "Forbidden: may not be specified for non-apply patch", Field: "force"}},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ct := tc.contentType
			if ct == "" {
				ct = applyPatchType
			}
			url := base + tc.url
			if strings.HasPrefix(tc.url, "/") {
				url = srv.url + tc.url
			}
			code, body, err := requestPatch(t.Context(), url, ct, tc.body)
			if err != nil {
				t.Fatal(err)
			}
			st, err := decodeStatus(body)
			if err != nil {
				t.Fatalf("code %d: %v", code, err)
			}
			if tc.alsoKube500 && code == http.StatusInternalServerError && st.Code == http.StatusInternalServerError && st.Reason == metav1.StatusReasonUnknown {
				tc.code, tc.reason = code, st.Reason
			}
			if code != tc.code || st.Kind != "Status" || st.Status != metav1.StatusFailure || st.Code != int32(tc.code) || st.Reason != tc.reason {
				t.Errorf("code %d, Status kind %q status %q code %d reason %q; want %d, a Failure Status with reason %q\nbody: %s", code, st.Kind, st.Status, st.Code, st.Reason, tc.code, tc.reason, body)
			}
			if prefix, ok := strings.CutSuffix(tc.message, "…"); ok {
				if !strings.HasPrefix(st.Message, prefix) {
					t.Errorf("message %q; want it to start with %q", st.Message, prefix)
				}
			} else if st.Message != tc.message {
				t.Errorf("message %q; want %q", st.Message, tc.message)
			}
			if tc.causes != nil {
				if st.Details == nil || !reflect.DeepEqual(st.Details.Causes, tc.causes) {
					t.Errorf("details %+v; want causes %+v", st.Details, tc.causes)
				}
			}
			for _, path := range tc.absent {
				if code, body := do(t, http.MethodGet, srv.url+path, nil); code != http.StatusNotFound {
					t.Errorf("GET %s after the refused apply: %d %s; want 404", path, code, body)
				}
			}
		})
	}

	// Refused applies to an existing object leave it as it was.
	url := base + "kept?fieldManager=t"
	code, body, err := requestPatch(t.Context(), url, applyPatchType, cm("kept"))
	if err != nil || code != http.StatusCreated {
		t.Fatalf("apply creating kept: %d %s %v; want 201", code, body, err)
	}
	before := doConfigMap(t, http.MethodGet, configMapURL(srv.url, "kept"), nil, http.StatusOK)
	for _, bad := range []struct{ name, url, body string }{
		{"another name", url, cm("renamed")},
		{"another kind", url, "apiVersion: v1\nkind: Secret\nmetadata:\n  name: kept\n"},
		{"malformed YAML", url, "data: [unclosed\n"},
		{"no fieldManager", base + "kept", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: kept\ndata:\n  k: changed\n"},
	} {
		code, body, err := requestPatch(t.Context(), bad.url, applyPatchType, bad.body)
		if err != nil {
			t.Fatal(err)
		}
		if code != http.StatusBadRequest && code != http.StatusUnprocessableEntity {
			t.Errorf("apply to the existing kept (%s): %d %s; want 400 or 422", bad.name, code, body)
		}
	}
	after := doConfigMap(t, http.MethodGet, configMapURL(srv.url, "kept"), nil, http.StatusOK)
	if after.ResourceVersion != before.ResourceVersion || !reflect.DeepEqual(after.Data, before.Data) || !reflect.DeepEqual(after.ManagedFields, before.ManagedFields) {
		t.Errorf("kept after the refused applies: rv %s data %v managedFields %s; want unchanged (rv %s data %v managedFields %s)",
			after.ResourceVersion, after.Data, describeManaged(after.ManagedFields), before.ResourceVersion, before.Data, describeManaged(before.ManagedFields))
	}
	if code, body := do(t, http.MethodGet, configMapURL(srv.url, "renamed"), nil); code != http.StatusNotFound {
		t.Errorf("GET renamed: %d %s; want 404", code, body)
	}
}

// TestApplyStatusOfCustomObject: a custom resource with a status
// subresource. An apply of the main resource that sets status creates the
// object (201) without it, and its manager owns no status field; the
// status is applied through /status, owned by that manager with
// subresource status; a later apply of the main resource with another
// status neither conflicts nor changes it (kube's reset fields); a second
// applier of /status with another value conflicts with the first.
func TestApplyStatusOfCustomObject(t *testing.T) {
	t.Parallel()
	srv := startConcord(t, "concord", t.TempDir())
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	createCRD(t, ctx, &rest.Config{Host: srv.url, Timeout: requestTimeout}, gadgetsCRDManifest)
	url := srv.url + "/apis/example.com/v1/namespaces/default/gadgets/g"
	manifest := func(owner string, ready bool) string {
		r := "false"
		if ready {
			r = "true"
		}
		return "apiVersion: example.com/v1\nkind: Gadget\nmetadata:\n  name: g\nspec:\n  owner: " + owner + "\nstatus:\n  ready: " + r + "\n  phase: Set\n"
	}
	applyTo := func(url, manager, body string) (int, []byte) {
		t.Helper()
		code, respBody, err := requestPatch(ctx, url+"?fieldManager="+manager, applyPatchType, body)
		if err != nil {
			t.Fatal(err)
		}
		return code, respBody
	}
	decode := func(what string, body []byte) *unstructured.Unstructured {
		t.Helper()
		var u unstructured.Unstructured
		if err := json.Unmarshal(body, &u.Object); err != nil {
			t.Fatalf("%s: %v: %s", what, err, body)
		}
		return &u
	}
	ownsStatus := func(u *unstructured.Unstructured, manager, subresource string) []string {
		t.Helper()
		for _, e := range u.GetManagedFields() {
			if e.Manager == manager && e.Operation == metav1.ManagedFieldsOperationApply && e.Subresource == subresource {
				return fieldKeys(fieldsOf(t, &e), "f:status")
			}
		}
		t.Errorf("no Apply entry of %q (subresource %q): %s", manager, subresource, describeManaged(u.GetManagedFields()))
		return nil
	}

	// The CRD may not be served yet (404).
	var code int
	var body []byte
	for {
		if code, body = applyTo(url, "user", manifest("u", true)); code != http.StatusNotFound || ctx.Err() != nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if code != http.StatusCreated {
		t.Fatalf("apply creating g with a status: %d %s; want 201", code, body)
	}
	created := decode("apply creating g", body)
	if _, found := created.Object["status"]; found {
		t.Errorf("apply creating g answered status %v; want none (create cannot set status)", created.Object["status"])
	}
	if got := ownsStatus(created, "user", ""); got != nil {
		t.Errorf("user owns status fields %q after creating; want none", got)
	}
	code, body = do(t, http.MethodGet, url, nil)
	if stored := decode("GET g", body); code != http.StatusOK || stored.Object["status"] != nil {
		t.Errorf("GET g: %d, status %v; want 200 and no status", code, stored.Object["status"])
	}

	code, body = applyTo(url+"/status", "controller", "apiVersion: example.com/v1\nkind: Gadget\nmetadata:\n  name: g\nstatus:\n  ready: true\n")
	if code != http.StatusOK {
		t.Fatalf("apply of g/status by controller: %d %s; want 200", code, body)
	}
	withStatus := decode("apply of g/status", body)
	if ready, _, _ := unstructured.NestedBool(withStatus.Object, "status", "ready"); !ready {
		t.Errorf("after the status apply: status %v; want ready true", withStatus.Object["status"])
	}
	if got := ownsStatus(withStatus, "controller", "status"); !reflect.DeepEqual(got, []string{"f:ready"}) {
		t.Errorf("controller owns status fields %q; want [f:ready]", got)
	}
	if owner, _, _ := unstructured.NestedString(withStatus.Object, "spec", "owner"); owner != "u" {
		t.Errorf("after the status apply: spec.owner %q; want u (a status apply leaves spec)", owner)
	}

	// The main resource's status is ignored: no conflict with
	// controller's status.ready, no change.
	code, body = applyTo(url, "user", manifest("u2", false))
	if code != http.StatusOK {
		t.Fatalf("apply of g by user with status.ready false: %d %s; want 200 (status ignored, no conflict)", code, body)
	}
	updated := decode("apply of g by user", body)
	if st := updated.Object["status"]; !reflect.DeepEqual(st, map[string]any{"ready": true}) {
		t.Errorf("after user's apply with another status: status %v; want map[ready:true] (kept)", st)
	}
	if owner, _, _ := unstructured.NestedString(updated.Object, "spec", "owner"); owner != "u2" {
		t.Errorf("after user's apply: spec.owner %q; want u2", owner)
	}
	if got := ownsStatus(updated, "user", ""); got != nil {
		t.Errorf("user owns status fields %q; want none", got)
	}

	code, body = applyTo(url+"/status", "other", "apiVersion: example.com/v1\nkind: Gadget\nmetadata:\n  name: g\nstatus:\n  ready: false\n")
	st, err := decodeStatus(body)
	if err != nil {
		t.Fatal(err)
	}
	want := metav1.StatusCause{Type: metav1.CauseTypeFieldManagerConflict, Message: `conflict with "controller" with subresource "status"`, Field: ".status.ready"}
	if code != http.StatusConflict || st.Reason != metav1.StatusReasonConflict || st.Details == nil || !reflect.DeepEqual(st.Details.Causes, []metav1.StatusCause{want}) ||
		st.Message != `Apply failed with 1 conflict: conflict with "controller" with subresource "status": .status.ready` {
		t.Errorf("apply of g/status by other with ready false: %d %s; want 409 with the cause %+v", code, body, want)
	}
	code, body = do(t, http.MethodGet, url, nil)
	if stored := decode("GET g", body); code != http.StatusOK || !reflect.DeepEqual(stored.Object["status"], map[string]any{"ready": true}) {
		t.Errorf("GET g at the end: %d, status %v; want ready true", code, stored.Object["status"])
	}
}
