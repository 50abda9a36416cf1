package admission

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/warning"
	"k8s.io/utils/ptr"

	"github.com/concord-dev/concord/registry"
)

// recorder keeps the warnings of one request, in order.
type recorder struct {
	mu       sync.Mutex
	warnings []string
}

func (r *recorder) AddWarning(_, text string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.warnings = append(r.warnings, text)
}

func (r *recorder) got() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.warnings...)
}

// withRecorder is a request's context with a recorder of its warnings.
func (v *policyEnv) withRecorder() (context.Context, *recorder) {
	rec := &recorder{}
	return warning.WithWarningRecorder(v.ctx, rec), rec
}

func (v *policyEnv) namespace(t *testing.T, name string, labels map[string]string) {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
	if _, err := v.namespaces.Create(v.ctx, "", ns, registry.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
}

func (v *policyEnv) configMap(t *testing.T, namespace, name string, labels, data map[string]string) {
	t.Helper()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: labels}, Data: data}
	if _, err := v.configmaps.Create(v.ctx, namespace, cm, registry.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
}

// noForbiddenKey is a policy that refuses ConfigMaps with a key named
// forbidden, with every field kube defaults set.
func noForbiddenKey(name string) *admissionregistrationv1.ValidatingAdmissionPolicy {
	return &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionregistrationv1.Fail),
			MatchConstraints: &admissionregistrationv1.MatchResources{
				NamespaceSelector: &metav1.LabelSelector{},
				ObjectSelector:    &metav1.LabelSelector{},
				MatchPolicy:       ptr.To(admissionregistrationv1.Equivalent),
				ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
					Rule: admissionregistrationv1.Rule{
						APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"},
						Scope: ptr.To(admissionregistrationv1.AllScopes),
					},
				}}},
			},
			Validations: []admissionregistrationv1.Validation{{
				Expression: "!has(object.data) || !('forbidden' in object.data)",
				Message:    "no key may be named forbidden",
			}},
		},
	}
}

// binding binds policy with validationActions [Warn]; selectors, when
// set, are its matchResources' namespace and object selectors.
func binding(name, policy string, namespaceSelector, objectSelector map[string]string) *admissionregistrationv1.ValidatingAdmissionPolicyBinding {
	b := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        policy,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Warn},
		},
	}
	if namespaceSelector != nil || objectSelector != nil {
		b.Spec.MatchResources = &admissionregistrationv1.MatchResources{
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: namespaceSelector},
			ObjectSelector:    &metav1.LabelSelector{MatchLabels: objectSelector},
			MatchPolicy:       ptr.To(admissionregistrationv1.Equivalent),
		}
	}
	return b
}

// noForbidden is noForbiddenKey's message.
const noForbidden = "no key may be named forbidden"

// denial is the warning of an object binding b of policy p would deny
// with msg.
func denial(b, p, object, msg string) string {
	return fmt.Sprintf("dry run of ValidatingAdmissionPolicyBinding '%s': would deny configmaps %s: ValidatingAdmissionPolicy '%s' with binding '%s' denied request: %s", b, object, p, b, msg)
}

func summary(b string, checked, denied int) string {
	return fmt.Sprintf("dry run of ValidatingAdmissionPolicyBinding '%s': checked %d objects, %d would be denied", b, checked, denied)
}

// TestDryRunBinding: a dry-run create of a binding answers, as warnings,
// the stored objects its policy would deny, matched by kube's matcher
// (namespaceSelector, objectSelector), and the summary; nothing is
// stored. A binding of a policy not stored gets one warning saying so.
func TestDryRunBinding(t *testing.T) {
	v := newPolicyEnv(t)
	v.namespace(t, "team-a", map[string]string{"env": "prod"})
	v.namespace(t, "team-b", map[string]string{"env": "dev"})
	forbidden := map[string]string{"forbidden": "x"}
	v.configMap(t, "default", "bad-3", nil, forbidden)
	v.configMap(t, "team-a", "bad-1", map[string]string{"app": "web"}, forbidden)
	v.configMap(t, "team-a", "ok-1", map[string]string{"app": "web"}, map[string]string{"fine": "x"})
	v.configMap(t, "team-b", "bad-2", map[string]string{"app": "db"}, forbidden)
	v.configMap(t, "team-b", "empty", map[string]string{"app": "db"}, nil)
	if _, err := v.vaps.Create(v.ctx, "", noForbiddenKey("no-forbidden"), registry.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	// A policy whose key comes from its params (a ConfigMap, itself among
	// the configmaps checked), and whose message is an expression.
	paramKey := noForbiddenKey("param-key")
	paramKey.Spec.ParamKind = &admissionregistrationv1.ParamKind{APIVersion: "v1", Kind: "ConfigMap"}
	paramKey.Spec.Validations = []admissionregistrationv1.Validation{{
		Expression:        "!has(object.data) || !(params.data.key in object.data)",
		MessageExpression: "'key ' + params.data.key + ' is not allowed in ' + object.metadata.name",
	}}
	if _, err := v.vaps.Create(v.ctx, "", paramKey, registry.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	v.configMap(t, "kube-system", "rules", nil, map[string]string{"key": "forbidden"})
	withParams := binding("params", "param-key", nil, nil)
	withParams.Spec.ParamRef = &admissionregistrationv1.ParamRef{
		Name: "rules", Namespace: "kube-system", ParameterNotFoundAction: ptr.To(admissionregistrationv1.DenyAction),
	}
	missingParams := binding("no-params", "param-key", nil, map[string]string{"app": "web"})
	missingParams.Spec.ParamRef = &admissionregistrationv1.ParamRef{
		Name: "absent", Namespace: "kube-system", ParameterNotFoundAction: ptr.To(admissionregistrationv1.DenyAction),
	}

	tests := []struct {
		name    string
		binding *admissionregistrationv1.ValidatingAdmissionPolicyBinding
		want    []string
	}{{
		name:    "every configmap",
		binding: binding("all", "no-forbidden", nil, nil),
		want: []string{
			denial("all", "no-forbidden", "default/bad-3", noForbidden),
			denial("all", "no-forbidden", "team-a/bad-1", noForbidden),
			denial("all", "no-forbidden", "team-b/bad-2", noForbidden),
			summary("all", 6, 3),
		},
	}, {
		name:    "namespaceSelector",
		binding: binding("prod", "no-forbidden", map[string]string{"env": "prod"}, nil),
		want:    []string{denial("prod", "no-forbidden", "team-a/bad-1", noForbidden), summary("prod", 2, 1)},
	}, {
		name:    "objectSelector",
		binding: binding("db", "no-forbidden", nil, map[string]string{"app": "db"}),
		want:    []string{denial("db", "no-forbidden", "team-b/bad-2", noForbidden), summary("db", 2, 1)},
	}, {
		name:    "selecting nothing",
		binding: binding("none", "no-forbidden", map[string]string{"env": "staging"}, nil),
		want:    []string{summary("none", 0, 0)},
	}, {
		name:    "params and a messageExpression",
		binding: withParams,
		want: []string{
			denial("params", "param-key", "default/bad-3", "key forbidden is not allowed in bad-3"),
			denial("params", "param-key", "team-a/bad-1", "key forbidden is not allowed in bad-1"),
			denial("params", "param-key", "team-b/bad-2", "key forbidden is not allowed in bad-2"),
			summary("params", 6, 3),
		},
	}, {
		name:    "params not found",
		binding: missingParams,
		want: []string{
			denial("no-params", "param-key", "team-a/bad-1", "failed to configure binding: no params found for policy binding with `Deny` parameterNotFoundAction"),
			denial("no-params", "param-key", "team-a/ok-1", "failed to configure binding: no params found for policy binding with `Deny` parameterNotFoundAction"),
			summary("no-params", 2, 2),
		},
	}, {
		name:    "policy not stored",
		binding: binding("orphan", "missing", nil, nil),
		want:    []string{"dry run of ValidatingAdmissionPolicyBinding 'orphan': ValidatingAdmissionPolicy 'missing' not found, nothing checked"},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, rec := v.withRecorder()
			if _, err := v.vapBindings.Create(ctx, "", tc.binding, registry.WriteOptions{DryRun: true}); err != nil {
				t.Fatalf("dry-run create of binding %s: %v", tc.binding.Name, err)
			}
			if diff := cmp.Diff(tc.want, rec.got()); diff != "" {
				t.Errorf("warnings of the dry-run create of binding %s (-want +got):\n%s", tc.binding.Name, diff)
			}
			if _, err := v.vapBindings.Get(v.ctx, "", tc.binding.Name); !apierrors.IsNotFound(err) {
				t.Errorf("GET of binding %s after its dry run: %v; want NotFound", tc.binding.Name, err)
			}
		})
	}

	// A binding created for real gets no dry run; a dry-run update of it
	// to Deny does, and leaves it as it was.
	ctx, rec := v.withRecorder()
	if _, err := v.vapBindings.Create(ctx, "", binding("warn", "no-forbidden", nil, nil), registry.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := rec.got(); len(got) != 0 {
		t.Errorf("warnings of a create of binding warn: %q; want none", got)
	}
	obj, err := v.vapBindings.Get(v.ctx, "", "warn")
	if err != nil {
		t.Fatal(err)
	}
	stored := obj.(*admissionregistrationv1.ValidatingAdmissionPolicyBinding)
	deny := stored.DeepCopy()
	deny.Spec.ValidationActions = []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}
	ctx, rec = v.withRecorder()
	if _, _, err := v.vapBindings.Update(ctx, "", "warn", deny, registry.WriteOptions{DryRun: true}); err != nil {
		t.Fatalf("dry-run update of binding warn: %v", err)
	}
	want := []string{
		denial("warn", "no-forbidden", "default/bad-3", noForbidden),
		denial("warn", "no-forbidden", "team-a/bad-1", noForbidden),
		denial("warn", "no-forbidden", "team-b/bad-2", noForbidden),
		summary("warn", 6, 3),
	}
	if diff := cmp.Diff(want, rec.got()); diff != "" {
		t.Errorf("warnings of the dry-run update of binding warn (-want +got):\n%s", diff)
	}
	obj, err = v.vapBindings.Get(v.ctx, "", "warn")
	if err != nil {
		t.Fatal(err)
	}
	if got := obj.(*admissionregistrationv1.ValidatingAdmissionPolicyBinding).Spec.ValidationActions; !cmp.Equal(got, []admissionregistrationv1.ValidationAction{admissionregistrationv1.Warn}) {
		t.Errorf("stored binding warn after a dry-run update: validationActions %v; want [Warn]", got)
	}
}

// TestDryRunBounds: past the warnings' budget the objects that would be
// denied are counted, not named; past dryRunMaxPerResource objects of a
// resource, the rest are not checked, and a warning says so.
func TestDryRunBounds(t *testing.T) {
	v := newPolicyEnv(t)
	const objects, limit = 40, 30
	defer func(max int) { dryRunMaxPerResource = max }(dryRunMaxPerResource)
	dryRunMaxPerResource = limit
	v.namespace(t, "many", nil)
	for i := range objects {
		v.configMap(t, "many", fmt.Sprintf("bad-%02d", i), nil, map[string]string{"forbidden": "x"})
	}
	if _, err := v.vaps.Create(v.ctx, "", noForbiddenKey("no-forbidden"), registry.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	// The first denials whose warnings fit in dryRunDenialChars are named.
	var want []string
	chars := 0
	for i := range limit {
		w := denial("b", "no-forbidden", fmt.Sprintf("many/bad-%02d", i), noForbidden)
		if chars+len(w) > dryRunDenialChars {
			break
		}
		chars += len(w)
		want = append(want, w)
	}
	named := len(want)
	if named == 0 || named == limit {
		t.Fatalf("%d of %d denials fit in the budget; the test wants some but not all", named, limit)
	}
	want = append(want,
		fmt.Sprintf("dry run of ValidatingAdmissionPolicyBinding 'b': checked only the first %d configmaps", limit),
		fmt.Sprintf("dry run of ValidatingAdmissionPolicyBinding 'b': ... and %d more", limit-named),
		summary("b", limit, limit),
	)
	ctx, rec := v.withRecorder()
	if _, err := v.vapBindings.Create(ctx, "", binding("b", "no-forbidden", nil, nil), registry.WriteOptions{DryRun: true}); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, rec.got()); diff != "" {
		t.Errorf("warnings of the dry run (-want +got):\n%s", diff)
	}
}

// TestDryRunObjectsOnce: an Event, served at v1 and events.k8s.io/v1,
// is checked once by a policy that selects both.
func TestDryRunObjectsOnce(t *testing.T) {
	v := newPolicyEnv(t)
	events, ok := func() (*registry.Store, bool) {
		for _, s := range v.catalogStores() {
			if s.Resource == registry.Events {
				return s, true
			}
		}
		return nil, false
	}()
	if !ok {
		t.Fatal("no store of v1 events")
	}
	ev := &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Namespace: "default", Name: "started"},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: "default", Name: "p"},
		Reason:         "Started", Message: "started", Type: corev1.EventTypeNormal,
		Source: corev1.EventSource{Component: "test"},
	}
	if _, err := events.Create(v.ctx, "default", ev, registry.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	policy := noForbiddenKey("no-events")
	rule := &policy.Spec.MatchConstraints.ResourceRules[0].Rule
	rule.APIGroups, rule.Resources = []string{"", "events.k8s.io"}, []string{"events"}
	policy.Spec.Validations = []admissionregistrationv1.Validation{{Expression: "false", Message: "no events"}}
	if _, err := v.vaps.Create(v.ctx, "", policy, registry.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	ctx, rec := v.withRecorder()
	if _, err := v.vapBindings.Create(ctx, "", binding("b", "no-events", nil, nil), registry.WriteOptions{DryRun: true}); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"dry run of ValidatingAdmissionPolicyBinding 'b': would deny events default/started: ValidatingAdmissionPolicy 'no-events' with binding 'b' denied request: no events",
		summary("b", 1, 1),
	}
	if diff := cmp.Diff(want, rec.got()); diff != "" {
		t.Errorf("warnings of the dry run (-want +got):\n%s", diff)
	}
}
