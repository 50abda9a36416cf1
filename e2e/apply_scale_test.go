package e2e

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
)

// TestApplyAndScaleWrites: kube's ownership of a custom object's
// spec.replicas across the main resource and the scale subresource (as in
// kube's test/integration/apiserver/apply/scale_test.go): a merge patch
// of /scale takes spec.replicas from its applier, recorded as the scale
// subresource's; the applier's next apply then conflicts with it, and with
// force takes it back.
func TestApplyAndScaleWrites(t *testing.T) {
	t.Parallel()
	srv := startConcord(t, "concord", t.TempDir())
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	createCRD(t, ctx, &rest.Config{Host: srv.url, Timeout: requestTimeout}, replicatorsCRDManifest)
	url := srv.url + "/apis/example.com/v1/namespaces/default/replicators/r"
	manifest := "apiVersion: example.com/v1\nkind: Replicator\nmetadata:\n  name: r\nspec:\n  replicas: 1\n  image: x\n"
	var code int
	var body []byte
	for {
		var err error
		if code, body, err = requestPatch(ctx, url+"?fieldManager=apply_test", applyPatchType, manifest); err != nil {
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
	replicasOwners := func() (int64, []string) {
		t.Helper()
		code, body := do(t, http.MethodGet, url, nil)
		var r unstructured.Unstructured
		if code != http.StatusOK || r.UnmarshalJSON(body) != nil {
			t.Fatalf("GET r: %d %s", code, body)
		}
		n, _, _ := unstructured.NestedInt64(r.Object, "spec", "replicas")
		var owners []string
		for _, e := range r.GetManagedFields() {
			if fieldKeys(fieldsOf(t, &e), "f:spec", "f:replicas") != nil {
				owners = append(owners, e.Manager+"/"+string(e.Operation)+"/"+e.Subresource)
			}
		}
		return n, owners
	}
	if n, owners := replicasOwners(); n != 1 || strings.Join(owners, " ") != "apply_test/Apply/" {
		t.Errorf("after the apply: replicas %d owned by %q; want 1, apply_test's Apply", n, owners)
	}
	code, body, err := requestPatch(ctx, url+"/scale?fieldManager=scale_test", "application/merge-patch+json", `{"spec":{"replicas":5}}`)
	if err != nil || code != http.StatusOK {
		t.Fatalf("merge patch of r/scale: %d %s %v", code, body, err)
	}
	if n, owners := replicasOwners(); n != 5 || strings.Join(owners, " ") != "scale_test/Update/scale" {
		t.Errorf("after the scale patch: replicas %d owned by %q; want 5, scale_test's Update of subresource scale", n, owners)
	}
	code, body, err = requestPatch(ctx, url+"?fieldManager=apply_test", applyPatchType, manifest)
	if err != nil {
		t.Fatal(err)
	}
	st, _ := decodeStatus(body)
	if code != http.StatusConflict || st == nil || st.Details == nil || len(st.Details.Causes) != 1 || st.Details.Causes[0].Field != ".spec.replicas" || !strings.Contains(st.Details.Causes[0].Message, `"scale_test" with subresource "scale"`) {
		t.Errorf("re-apply of replicas 1 after the scale: %d %s; want 409, one cause on .spec.replicas naming scale_test with subresource scale", code, body)
	}
	code, body, err = requestPatch(ctx, url+"?fieldManager=apply_test&force=true", applyPatchType, manifest)
	if err != nil || code != http.StatusOK {
		t.Fatalf("forced re-apply: %d %s %v", code, body, err)
	}
	if n, owners := replicasOwners(); n != 1 || strings.Join(owners, " ") != "apply_test/Apply/" {
		t.Errorf("after the forced re-apply: replicas %d owned by %q; want 1, apply_test's Apply only", n, owners)
	}
}

// replicatorsCRDManifest: Replicators with a scale subresource
// (.spec.replicas, .status.replicas) and a status subresource.
const replicatorsCRDManifest = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: replicators.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {plural: replicators, singular: replicator, kind: Replicator}
  versions:
  - name: v1
    served: true
    storage: true
    subresources:
      status: {}
      scale: {specReplicasPath: .spec.replicas, statusReplicasPath: .status.replicas}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              replicas: {type: integer}
              image: {type: string}
          status:
            type: object
            properties:
              replicas: {type: integer}
`
