package e2e

// Helpers of the server-side apply tests (apply_*_test.go): reading
// managedFields and the causes of an apply conflict.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"
)

// managedBy is the managedFields entry of manager with operation op, or
// nil; it fails the test if there are several.
func managedBy(t *testing.T, entries []metav1.ManagedFieldsEntry, manager string, op metav1.ManagedFieldsOperationType) *metav1.ManagedFieldsEntry {
	t.Helper()
	var found *metav1.ManagedFieldsEntry
	for i := range entries {
		e := &entries[i]
		if e.Manager == manager && e.Operation == op && e.Subresource == "" {
			if found != nil {
				t.Errorf("managedFields hold two %s entries of %q: %s", op, manager, describeManaged(entries))
			}
			found = e
		}
	}
	return found
}

// applyManagers are the managers of the Apply entries, sorted.
func applyManagers(entries []metav1.ManagedFieldsEntry) []string {
	var names []string
	for _, e := range entries {
		if e.Operation == metav1.ManagedFieldsOperationApply {
			names = append(names, e.Manager)
		}
	}
	sort.Strings(names)
	return names
}

// fieldsOf decodes an entry's fieldsV1.
func fieldsOf(t *testing.T, e *metav1.ManagedFieldsEntry) map[string]any {
	t.Helper()
	if e.FieldsV1 == nil {
		t.Errorf("managedFields entry of %q (%s) has no fieldsV1", e.Manager, e.Operation)
		return nil
	}
	var m map[string]any
	if err := json.Unmarshal(e.FieldsV1.Raw, &m); err != nil {
		t.Errorf("managedFields entry of %q: fieldsV1 %s: %v", e.Manager, e.FieldsV1.Raw, err)
	}
	return m
}

// fieldKeys are the keys of the field set at path (each element a key of
// fieldsV1 such as "f:data"), sorted; nil when the path is absent.
func fieldKeys(set map[string]any, path ...string) []string {
	cur := set
	for _, p := range path {
		next, ok := cur[p].(map[string]any)
		if !ok {
			return nil
		}
		cur = next
	}
	keys := make([]string, 0, len(cur))
	for k := range cur {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// ownedDataKeys are the f:data keys an entry owns ("f:" cut), sorted.
func ownedDataKeys(t *testing.T, e *metav1.ManagedFieldsEntry) []string {
	t.Helper()
	var keys []string
	for _, k := range fieldKeys(fieldsOf(t, e), "f:data") {
		if k != "." {
			keys = append(keys, strings.TrimPrefix(k, "f:"))
		}
	}
	return keys
}

// wantApplyEntry checks that manager has an Apply entry in apiVersion v1
// with fieldsType FieldsV1, and that it owns exactly dataKeys of data.
func wantApplyEntry(t *testing.T, what string, entries []metav1.ManagedFieldsEntry, manager string, dataKeys ...string) {
	t.Helper()
	e := managedBy(t, entries, manager, metav1.ManagedFieldsOperationApply)
	if e == nil {
		t.Errorf("%s: no Apply entry of %q in managedFields: %s", what, manager, describeManaged(entries))
		return
	}
	// The time is not checked: kube sets it only when the apply changed
	// the object (managedFieldsUpdater), not when it made a co-owner.
	if e.APIVersion != "v1" || e.FieldsType != "FieldsV1" {
		t.Errorf("%s: Apply entry of %q: apiVersion %q fieldsType %q; want v1 and FieldsV1", what, manager, e.APIVersion, e.FieldsType)
	}
	sort.Strings(dataKeys)
	if got := ownedDataKeys(t, e); !slices.Equal(got, dataKeys) {
		t.Errorf("%s: %q owns data keys %q; want %q; managedFields: %s", what, manager, got, dataKeys, describeManaged(entries))
	}
}

// describeManaged prints managedFields for failure messages.
func describeManaged(entries []metav1.ManagedFieldsEntry) string {
	var b strings.Builder
	for _, e := range entries {
		fields := ""
		if e.FieldsV1 != nil {
			fields = string(e.FieldsV1.Raw)
		}
		fmt.Fprintf(&b, "\n  {manager %q op %s apiVersion %q subresource %q fields %s}", e.Manager, e.Operation, e.APIVersion, e.Subresource, fields)
	}
	if b.Len() == 0 {
		return "(none)"
	}
	return b.String()
}

// conflictCauses checks that err is an apply conflict as kube-apiserver
// answers it (409, reason Conflict, causes of type FieldManagerConflict)
// and returns its causes.
func conflictCauses(t *testing.T, what string, err error) []metav1.StatusCause {
	t.Helper()
	if err == nil {
		t.Errorf("%s: succeeded; want a 409 apply conflict", what)
		return nil
	}
	var status apierrors.APIStatus
	if !apierrors.IsConflict(err) || !errors.As(err, &status) {
		t.Errorf("%s: %v (%T); want a 409 apply conflict", what, err, err)
		return nil
	}
	st := status.Status()
	if st.Code != 409 || st.Reason != metav1.StatusReasonConflict || st.Details == nil || len(st.Details.Causes) == 0 {
		t.Errorf("%s: status %+v; want code 409, reason Conflict and causes", what, st)
		return nil
	}
	for _, c := range st.Details.Causes {
		if c.Type != metav1.CauseTypeFieldManagerConflict {
			t.Errorf("%s: cause %+v; want type FieldManagerConflict", what, c)
		}
	}
	return st.Details.Causes
}

// wantOneConflict checks that err is an apply conflict on exactly field
// with manager (as kube prints it: "\"a\"" for an applier, "\"a\" using
// v1" for an updater), and its message.
func wantOneConflict(t *testing.T, what string, err error, manager, field string) {
	t.Helper()
	causes := conflictCauses(t, what, err)
	if causes == nil {
		return
	}
	want := metav1.StatusCause{Type: metav1.CauseTypeFieldManagerConflict, Message: "conflict with " + manager, Field: field}
	if len(causes) != 1 || causes[0] != want {
		t.Errorf("%s: causes %+v; want exactly %+v", what, causes, want)
	}
	if msg := fmt.Sprintf("Apply failed with 1 conflict: conflict with %s: %s", manager, field); err.Error() != msg {
		t.Errorf("%s: message %q; want %q", what, err.Error(), msg)
	}
}

// createCRD creates the CRD of manifest and waits until it is
// established.
func createCRD(t *testing.T, ctx context.Context, cfg *rest.Config, manifest string) {
	t.Helper()
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.UnmarshalStrict([]byte(manifest), &crd); err != nil {
		t.Fatal(err)
	}
	client, err := apiextensionsclient.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, &crd, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create the CRD %s: %v", crd.Name, err)
	}
	for {
		got, err := client.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, crd.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("get the CRD %s: %v", crd.Name, err)
		}
		for _, c := range got.Status.Conditions {
			if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
				return
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the CRD %s is not established: %+v", crd.Name, got.Status)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// gadgetsCRDManifest: namespaced Gadgets in example.com/v1 whose
// spec.items is an associative list keyed by name
// (x-kubernetes-list-type map), with a status subresource.
const gadgetsCRDManifest = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: gadgets.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {plural: gadgets, singular: gadget, kind: Gadget}
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {status: {}}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              owner: {type: string}
              items:
                type: array
                x-kubernetes-list-type: map
                x-kubernetes-list-map-keys: [name]
                items:
                  type: object
                  required: [name]
                  properties:
                    name: {type: string}
                    value: {type: string}
          status:
            type: object
            properties:
              ready: {type: boolean}
              phase: {type: string}
`
