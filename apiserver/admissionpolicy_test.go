package apiserver_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// policiesPath is where the CEL admission policies are served.
const policiesPath = "/apis/admissionregistration.k8s.io/v1"

// TestAdmissionPoliciesBadInput: kube's validation of the policies and
// their bindings over HTTP — a 422 naming the object, with kube's causes,
// and nothing stored.
func TestAdmissionPoliciesBadInput(t *testing.T) {
	s := startServer(t)
	type cause struct{ Field, Message string }
	rules := []map[string]any{{"operations": []string{"CREATE"}, "apiGroups": []string{""}, "apiVersions": []string{"v1"}, "resources": []string{"configmaps"}}}
	for _, tc := range []struct {
		name, resource, kind string
		spec                 map[string]any
		causes               []cause
	}{
		{"validating policy without validations", "validatingadmissionpolicies", "ValidatingAdmissionPolicy",
			map[string]any{"matchConstraints": map[string]any{"resourceRules": rules}},
			[]cause{
				{"spec.validations", "Required value: validations or auditAnnotations must contain at least one item"},
				{"spec.auditAnnotations", "Required value: validations or auditAnnotations must contain at least one item"},
			}},
		{"validating policy whose expression is not a bool", "validatingadmissionpolicies", "ValidatingAdmissionPolicy",
			map[string]any{"validations": []map[string]any{{"expression": "size(object.metadata.name)", "reason": "Teapot"}}},
			[]cause{
				{"spec.matchConstraints", "Required value"},
				{"spec.validations[0].expression", `Invalid value: "size(object.metadata.name)": must evaluate to bool but got int`},
				{"spec.validations[0].reason", `Unsupported value: "Teapot": supported values: "Forbidden", "Invalid", "RequestEntityTooLarge"`},
			}},
		{"validating binding without policy or actions", "validatingadmissionpolicybindings", "ValidatingAdmissionPolicyBinding",
			map[string]any{"paramRef": map[string]any{"name": "limits", "selector": map[string]any{}}},
			[]cause{
				{"spec.policyName", "Required value"},
				{"spec.paramRef.name", "Forbidden: name and selector are mutually exclusive"},
				{"spec.paramRef.selector", "Forbidden: name and selector are mutually exclusive"},
				{"spec.paramRef.parameterNotFoundAction", "Required value"},
				{"spec.validationActions", "Required value: at least one validation action is required"},
			}},
		{"mutating policy matching DELETE", "mutatingadmissionpolicies", "MutatingAdmissionPolicy",
			map[string]any{
				"matchConstraints":   map[string]any{"resourceRules": []map[string]any{{"operations": []string{"DELETE"}, "apiGroups": []string{""}, "apiVersions": []string{"v1"}, "resources": []string{"configmaps"}}}},
				"mutations":          []map[string]any{{"patchType": "JSONPatch", "jsonPatch": map[string]any{"expression": "[1]"}}},
				"reinvocationPolicy": "Never",
			},
			[]cause{
				{"spec.matchConstraints.resourceRules.operations", `Unsupported value: "DELETE": supported values: "*", "CONNECT", "CREATE", "UPDATE"`},
				{"spec.mutations[0].jsonPatch.expression", `Invalid value: "[1]": must evaluate to list(JSONPatch) but got list(int)`},
			}},
		{"mutating binding without policy", "mutatingadmissionpolicybindings", "MutatingAdmissionPolicyBinding",
			map[string]any{}, []cause{{"spec.policyName", "Required value"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := s.do(t, http.MethodPost, policiesPath+"/"+tc.resource, map[string]any{"metadata": map[string]any{"name": "x"}, "spec": tc.spec})
			if resp.Code != http.StatusUnprocessableEntity {
				t.Fatalf("POST %s: %d %s; want 422", tc.resource, resp.Code, resp.Body)
			}
			st := resp.status(t)
			if st.Reason != metav1.StatusReasonInvalid || st.Details == nil || st.Details.Kind != tc.kind || st.Details.Group != "admissionregistration.k8s.io" || st.Details.Name != "x" {
				t.Fatalf("status %+v; want Invalid of %s x", st, tc.kind)
			}
			if !strings.HasPrefix(st.Message, tc.kind+`.admissionregistration.k8s.io "x" is invalid: `) {
				t.Errorf("message %q; want kube's", st.Message)
			}
			var causes []cause
			for _, c := range st.Details.Causes {
				causes = append(causes, cause{c.Field, c.Message})
			}
			if diff := cmp.Diff(causes, tc.causes); diff != "" {
				t.Errorf("causes (-got +want):\n%s", diff)
			}
			if stored := s.storedKeys(t, "/registry/admissionregistration.k8s.io/"+tc.resource+"/"); len(stored) != 0 {
				t.Errorf("stored %v; want nothing", stored)
			}
		})
	}
}

// TestAdmissionPoliciesTable: kubectl get's Table of each resource has
// kube's columns and cells.
func TestAdmissionPoliciesTable(t *testing.T) {
	s := startServer(t)
	rules := []map[string]any{{"operations": []string{"CREATE"}, "apiGroups": []string{""}, "apiVersions": []string{"v1"}, "resources": []string{"configmaps"}}}
	for _, create := range []struct {
		resource string
		body     map[string]any
	}{
		{"validatingadmissionpolicies", map[string]any{"metadata": map[string]any{"name": "limits"}, "spec": map[string]any{
			"paramKind":        map[string]any{"apiVersion": "v1", "kind": "ConfigMap"},
			"matchConstraints": map[string]any{"resourceRules": rules},
			"validations":      []map[string]any{{"expression": "true"}, {"expression": "params != null"}},
		}}},
		{"validatingadmissionpolicybindings", map[string]any{"metadata": map[string]any{"name": "limits"}, "spec": map[string]any{
			"policyName": "limits", "validationActions": []string{"Deny"},
			"paramRef": map[string]any{"name": "limits", "parameterNotFoundAction": "Deny"},
		}}},
		{"mutatingadmissionpolicies", map[string]any{"metadata": map[string]any{"name": "label"}, "spec": map[string]any{
			"matchConstraints":   map[string]any{"resourceRules": rules},
			"mutations":          []map[string]any{{"patchType": "ApplyConfiguration", "applyConfiguration": map[string]any{"expression": `Object{metadata: Object.metadata{labels: {"a": "b"}}}`}}},
			"reinvocationPolicy": "Never",
		}}},
		{"mutatingadmissionpolicybindings", map[string]any{"metadata": map[string]any{"name": "label"}, "spec": map[string]any{"policyName": "label"}}},
	} {
		if resp := s.do(t, http.MethodPost, policiesPath+"/"+create.resource, create.body); resp.Code != http.StatusCreated {
			t.Fatalf("create %s: %d %s", create.resource, resp.Code, resp.Body)
		}
	}
	// The writer owns the defaults kube's decoder applied, as in kube; the
	// defaulted matchConstraints are atomic, owned whole.
	resp := s.do(t, http.MethodGet, policiesPath+"/validatingadmissionpolicies/limits", nil)
	var policy struct {
		Metadata metav1.ObjectMeta `json:"metadata"`
	}
	resp.decode(t, &policy)
	if len(policy.Metadata.ManagedFields) != 1 || policy.Metadata.ManagedFields[0].FieldsV1 == nil {
		t.Fatalf("managedFields %+v; want the creator's", policy.Metadata.ManagedFields)
	}
	owned := string(policy.Metadata.ManagedFields[0].FieldsV1.Raw)
	if want := `{"f:spec":{"f:failurePolicy":{},"f:matchConstraints":{},"f:paramKind":{},"f:validations":{}}}`; owned != want {
		t.Errorf("managedFields %s; want %s", owned, want)
	}
	for _, tc := range []struct {
		path    string
		columns []string
		cells   []any // without Age
	}{
		{policiesPath + "/validatingadmissionpolicies", []string{"Name:string", "Validations:integer", "ParamKind:string", "Age:string"}, []any{"limits", float64(2), "v1/ConfigMap"}},
		{policiesPath + "/validatingadmissionpolicybindings/limits", []string{"Name:string", "PolicyName:string", "ParamRef:string", "Age:string"}, []any{"limits", "limits", "*/limits"}},
		{policiesPath + "/mutatingadmissionpolicies", []string{"Name:string", "Mutations:integer", "ParamKind:string", "Age:string"}, []any{"label", float64(1), "<unset>"}},
		{policiesPath + "/mutatingadmissionpolicybindings", []string{"Name:string", "PolicyName:string", "ParamRef:string", "Age:string"}, []any{"label", "label", "<unset>"}},
	} {
		resp := s.do(t, http.MethodGet, tc.path, nil, "Accept", kubectlTableAccept)
		var table metav1.Table
		resp.decode(t, &table)
		if resp.Code != http.StatusOK || table.Kind != "Table" {
			t.Fatalf("%s: %d %s; want a Table", tc.path, resp.Code, resp.Body)
		}
		var columns []string
		for _, c := range table.ColumnDefinitions {
			columns = append(columns, c.Name+":"+c.Type)
		}
		if diff := cmp.Diff(columns, tc.columns); diff != "" {
			t.Errorf("%s columns (-got +want):\n%s", tc.path, diff)
		}
		if len(table.Rows) != 1 {
			t.Fatalf("%s: %d rows; want 1", tc.path, len(table.Rows))
		}
		cells := table.Rows[0].Cells
		if diff := cmp.Diff(cells[:len(cells)-1], tc.cells); diff != "" {
			t.Errorf("%s row (-got +want):\n%s", tc.path, diff)
		}
		if age, _ := cells[len(cells)-1].(string); !strings.HasSuffix(age, "s") {
			t.Errorf("%s age %v; want seconds", tc.path, cells[len(cells)-1])
		}
	}
}
