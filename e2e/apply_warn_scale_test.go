package e2e

// Server-side apply where an earlier implementation answered otherwise than
// kube-apiserver 1.37 (see each test).

import (
	"context"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
)

// TestApplyDuplicateFieldsWarn: with the default fieldValidation
// (Warn), a key set twice in the applied YAML is a warning (kube's
// applyPatcher: addStrictDecodingWarnings), whether the apply creates the
// object or changes it.
func TestApplyDuplicateFieldsWarn(t *testing.T) {
	t.Parallel()
	srv := startConcord(t, "concord", t.TempDir())
	body := "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: dup\ndata:\n  k: a\n  k: b\n"
	// kube: addStrictDecodingWarnings, one warning per YAML error line:
	// 299 - "line 7: key \"k\" already set in map".
	const want = `299 - "line 7: key \"k\" already set in map"`
	for _, step := range []struct {
		what string
		code int
	}{{"creating", http.StatusCreated}, {"existing", http.StatusOK}} {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPatch, configMapURL(srv.url, "dup")+"?fieldManager=t", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", applyPatchType)
		res, err := httpClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if warnings := res.Header.Values("Warning"); res.StatusCode != step.code || !slices.Equal(warnings, []string{want}) {
			t.Errorf("apply with a duplicate key (fieldValidation Warn), %s object: %d, warnings %q; want %d and the warning %q", step.what, res.StatusCode, warnings, step.code, want)
		}
	}
}

// TestApplyOfACustomResourceScale: kube-apiserver 1.37 serves server-side
// apply on a custom resource's /scale (apiextensions-apiserver's
// crdHandler offers application/apply-patch+yaml there, with a field
// manager typed by the CRD's models, which hold autoscaling/v1 Scale; the
// scale handler maps .spec.replicas to the specReplicasPath): a Scale
// applied by another manager conflicts with the owner of spec.replicas,
// and with force moves it, recorded as the scale subresource's.
func TestApplyOfACustomResourceScale(t *testing.T) {
	t.Parallel()
	srv := startConcord(t, "concord", t.TempDir())
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	createCRD(t, ctx, &rest.Config{Host: srv.url, Timeout: requestTimeout}, replicatorsCRDManifest)
	url := srv.url + "/apis/example.com/v1/namespaces/default/replicators/r"
	var code int
	var body []byte
	for {
		var err error
		code, body, err = requestPatch(ctx, url+"?fieldManager=user", applyPatchType, "apiVersion: example.com/v1\nkind: Replicator\nmetadata:\n  name: r\nspec:\n  replicas: 1\n  image: x\n")
		if err != nil {
			t.Fatal(err)
		}
		if code != http.StatusNotFound || ctx.Err() != nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if code != http.StatusCreated {
		t.Fatalf("apply creating r: %d %s", code, body)
	}
	scale := "apiVersion: autoscaling/v1\nkind: Scale\nmetadata:\n  name: r\nspec:\n  replicas: 3\n"
	code, body, err := requestPatch(ctx, url+"/scale?fieldManager=hpa", applyPatchType, scale)
	if err != nil {
		t.Fatal(err)
	}
	st, _ := decodeStatus(body)
	want := metav1.StatusCause{Type: metav1.CauseTypeFieldManagerConflict, Message: `conflict with "user"`, Field: ".spec.replicas"}
	if code != http.StatusConflict || st == nil || st.Details == nil || !reflect.DeepEqual(st.Details.Causes, []metav1.StatusCause{want}) {
		t.Errorf("apply of r/scale by hpa (replicas 3 over user's 1): %d %s; want 409 with the cause %+v", code, body, want)
	}
	code, body, err = requestPatch(ctx, url+"/scale?fieldManager=hpa&force=true", applyPatchType, scale)
	if err != nil {
		t.Fatal(err)
	}
	if code != http.StatusOK || !strings.Contains(string(body), `"kind":"Scale"`) || !strings.Contains(string(body), `"replicas":3`) {
		t.Fatalf("forced apply of r/scale by hpa: %d %s; want 200 and the Scale with replicas 3", code, body)
	}
	code, body = do(t, http.MethodGet, url, nil)
	var r unstructured.Unstructured
	if code != http.StatusOK || r.UnmarshalJSON(body) != nil {
		t.Fatalf("GET r: %d %s", code, body)
	}
	if n, _, _ := unstructured.NestedInt64(r.Object, "spec", "replicas"); n != 3 {
		t.Errorf("after the forced scale apply: spec.replicas %d; want 3", n)
	}
	var hpa, user *metav1.ManagedFieldsEntry
	for i, e := range r.GetManagedFields() {
		switch {
		case e.Manager == "hpa" && e.Operation == metav1.ManagedFieldsOperationApply && e.Subresource == "scale":
			hpa = &r.GetManagedFields()[i]
		case e.Manager == "user" && e.Operation == metav1.ManagedFieldsOperationApply && e.Subresource == "":
			user = &r.GetManagedFields()[i]
		}
	}
	if hpa == nil || !slices.Equal(fieldKeys(fieldsOf(t, hpa), "f:spec"), []string{"f:replicas"}) {
		t.Errorf("after the forced scale apply: managedFields %s; want hpa's Apply entry of subresource scale owning spec.replicas", describeManaged(r.GetManagedFields()))
	}
	if user == nil || !slices.Equal(fieldKeys(fieldsOf(t, user), "f:spec"), []string{"f:image"}) {
		t.Errorf("after the forced scale apply: managedFields %s; want user's Apply entry owning spec.image only", describeManaged(r.GetManagedFields()))
	}
}
