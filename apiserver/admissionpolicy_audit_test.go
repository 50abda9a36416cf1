package apiserver_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestAdmissionPolicyAuditLine: a binding with validationActions Audit
// admits a write that fails its policy, and the write's audit line
// carries, as kube's audit event does, the failure
// (validation.policy.admission.k8s.io/validation_failure) and the
// policy's auditAnnotations (<policy>/<key>); a write no policy
// annotates has none.
func TestAdmissionPolicyAuditLine(t *testing.T) {
	s := startAuthServer(t, false)
	admin := func(method, path, body string) response {
		t.Helper()
		resp := s.doWith(t, s.client(nil), method, path, body, "Authorization", "Bearer admin-token")
		if resp.Code >= 300 {
			t.Fatalf("%s %s: %d %s", method, path, resp.Code, resp.Body)
		}
		return resp
	}
	admin(http.MethodPost, "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies", `{
		"metadata":{"name":"keys"},
		"spec":{"matchConstraints":{"resourceRules":[{"apiGroups":[""],"apiVersions":["v1"],"operations":["CREATE"],"resources":["configmaps"]}]},
		"validations":[{"expression":"!has(object.data) || size(object.data) <= 1","message":"at most one key"}],
		"auditAnnotations":[{"key":"keys","valueExpression":"string(has(object.data) ? size(object.data) : 0)"}]}}`)
	admin(http.MethodPost, "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings", `{
		"metadata":{"name":"keys-audit"},"spec":{"policyName":"keys","validationActions":["Audit"]}}`)
	admin(http.MethodPost, "/api/v1/namespaces/team/configmaps", `{"metadata":{"name":"two"},"data":{"a":"1","b":"2"}}`)
	admin(http.MethodPost, "/api/v1/namespaces/team/secrets", `{"metadata":{"name":"s"}}`)

	annotations := map[string]map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(s.auditLog(t)), "\n") {
		var ev struct {
			Verb, Resource, URI string
			Annotations         map[string]string
		}
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("audit line %q: %v", line, err)
		}
		if ev.Verb == "create" && (ev.Resource == "configmaps" || ev.Resource == "secrets") {
			annotations[ev.Resource] = ev.Annotations
		}
	}
	want := map[string]map[string]string{
		"configmaps": {
			"keys/keys": "2",
			"validation.policy.admission.k8s.io/validation_failure": `[{"message":"at most one key","policy":"keys","binding":"keys-audit","expressionIndex":0,"validationActions":["Audit"]}]`,
		},
		"secrets": {},
	}
	if diff := cmp.Diff(want, annotations); diff != "" {
		t.Errorf("the audit lines' annotations (-want +got):\n%s\n%s", diff, s.auditLog(t))
	}
	// Audit does not refuse: the ConfigMap is stored.
	admin(http.MethodGet, "/api/v1/namespaces/team/configmaps/two", "")
}

// TestAdmissionPolicyMetrics: /metrics serves kube's admission policy
// metrics (counted in component-base's registry by kube's dispatcher)
// next to Concord's own: a denial is counted by policy, binding, error
// type and action, as kube counts it (kube counts no admitted write of a
// Deny binding).
func TestAdmissionPolicyMetrics(t *testing.T) {
	s := startServer(t)
	want := func(r response, code int) {
		t.Helper()
		if r.Code != code {
			t.Fatalf("%d %s; want %d", r.Code, r.Body, code)
		}
	}
	want(s.do(t, http.MethodPost, "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies", `{
		"metadata":{"name":"metrics-keys"},
		"spec":{"matchConstraints":{"resourceRules":[{"apiGroups":[""],"apiVersions":["v1"],"operations":["CREATE"],"resources":["configmaps"]}]},
		"validations":[{"expression":"!has(object.data) || size(object.data) <= 1","message":"at most one key"}]}}`), http.StatusCreated)
	want(s.do(t, http.MethodPost, "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings", `{
		"metadata":{"name":"metrics-keys-deny"},"spec":{"policyName":"metrics-keys","validationActions":["Deny"]}}`), http.StatusCreated)
	want(s.do(t, http.MethodPost, nsPath, `{"metadata":{"name":"metrics-two"},"data":{"a":"1","b":"2"}}`), http.StatusUnprocessableEntity)
	want(s.do(t, http.MethodPost, nsPath, `{"metadata":{"name":"metrics-one"},"data":{"a":"1"}}`), http.StatusCreated)

	body := string(s.do(t, http.MethodGet, "/metrics", nil).Body)
	for _, want := range []string{
		`apiserver_validating_admission_policy_check_total{enforcement_action="deny",error_type="invalid_error",policy="metrics-keys",policy_binding="metrics-keys-deny"} 1`,
		`apiserver_validating_admission_policy_check_duration_seconds_count{enforcement_action="deny",error_type="invalid_error",policy="metrics-keys",policy_binding="metrics-keys-deny"} 1`,
		`# TYPE apiserver_request_total counter`, // Concord's own, still there
	} {
		if !strings.Contains(body, want) {
			var admission []string
			for _, line := range strings.Split(body, "\n") {
				if strings.Contains(line, "admission") {
					admission = append(admission, line)
				}
			}
			t.Errorf("/metrics has no line %s; its admission lines:\n%s", want, strings.Join(admission, "\n"))
		}
	}
}
