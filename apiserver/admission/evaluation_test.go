package admission

import (
	"fmt"
	"net/http"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// TestPolicyCostLimit: an expression that runs past kube's runtime cost
// budget for one write is an evaluation error, which failurePolicy
// decides (kube's dispatcher and CEL library count the cost): Fail
// refuses with kube's message, Ignore admits.
func TestPolicyCostLimit(t *testing.T) {
	v := newPolicyEnv(t)
	costly := func(name string, failure admissionregistrationv1.FailurePolicyType) *admissionregistrationv1.ValidatingAdmissionPolicy {
		return &admissionregistrationv1.ValidatingAdmissionPolicy{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
				FailurePolicy:    ptr.To(failure),
				MatchConstraints: configMapRules(),
				Validations: []admissionregistrationv1.Validation{{
					Expression: "object.data.all(a, object.data.all(b, object.data.all(c, a + b + c != '')))",
				}},
			},
		}
	}
	data := map[string]string{}
	for i := range 300 {
		data[fmt.Sprintf("k%03d", i)] = "v"
	}
	req := v.createConfigMap("big")
	req.Object.(*corev1.ConfigMap).Data = data

	v.store(t, v.vaps, costly("costly", admissionregistrationv1.Fail))
	v.store(t, v.vapBindings, validatingBinding("b", "costly"))
	wantRefused(t, v.chain.Validate(v.ctx, req), http.StatusUnprocessableEntity, metav1.StatusReasonInvalid, `configmaps "big" is forbidden: ValidatingAdmissionPolicy 'costly' with binding 'b' denied request: expression 'object.data.all(a, object.data.all(b, object.data.all(c, a + b + c != '')))' resulted in error: operation cancelled: actual cost limit exceeded`)
	v.remove(t, v.vapBindings, "b")
	v.store(t, v.vaps, costly("ignored", admissionregistrationv1.Ignore))
	v.store(t, v.vapBindings, validatingBinding("b", "ignored"))
	if err := v.chain.Validate(v.ctx, req); err != nil {
		t.Fatalf("failurePolicy Ignore: refused: %v", err)
	}
}

// TestPolicyReasonAndExclusions: a validation's reason makes the
// refusal's code, as kube's dispatcher makes it; an object excluded by
// excludeResourceRules (by name) is not checked.
func TestPolicyReasonAndExclusions(t *testing.T) {
	v := newPolicyEnv(t)
	rules := configMapRules()
	rules.ExcludeResourceRules = []admissionregistrationv1.NamedRuleWithOperations{{
		ResourceNames:      []string{"skip"},
		RuleWithOperations: rules.ResourceRules[0].RuleWithOperations,
	}}
	v.store(t, v.vaps, &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "p"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy:    ptr.To(admissionregistrationv1.Fail),
			MatchConstraints: rules,
			Validations: []admissionregistrationv1.Validation{{
				Expression: "!has(object.data)", Message: "no data", Reason: ptr.To(metav1.StatusReasonForbidden),
			}},
		},
	})
	v.store(t, v.vapBindings, validatingBinding("b", "p"))
	err := v.chain.Validate(v.ctx, v.createConfigMap("cm"))
	wantRefused(t, err, http.StatusForbidden, metav1.StatusReasonForbidden, `configmaps "cm" is forbidden: ValidatingAdmissionPolicy 'p' with binding 'b' denied request: no data`)
	if err := v.chain.Validate(v.ctx, v.createConfigMap("skip")); err != nil {
		t.Fatalf("the excluded ConfigMap: refused: %v", err)
	}
}
