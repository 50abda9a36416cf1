package admission

import (
	"math/rand/v2"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/admission/plugin/policy/generic"
	"k8s.io/apiserver/pkg/admission/plugin/policy/matching"
	"k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	"k8s.io/apiserver/pkg/authentication/user"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/utils/ptr"
)

// The prefilter (prefilter.go) must leave out only hooks kube's matcher
// never matches. These tests draw policies and requests from small
// alphabets that cover the rule forms ("*", "res/sub", "*/sub", "res/*"),
// groups, versions, operations, scopes, selectors and exclusions, and
// check that every hook left out is one kube's matcher does not match,
// with no error.

var (
	prefilterResources   = []string{"configmaps", "secrets", "widgets", "*", "configmaps/status", "*/status", "configmaps/*", "*/*", "widgets/scale"}
	prefilterGroups      = []string{"", "*", "example.com", "apps"}
	prefilterVersions    = []string{"v1", "*", "v2"}
	prefilterOperations  = []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update, admissionregistrationv1.Delete, admissionregistrationv1.OperationAll}
	prefilterScopes      = []admissionregistrationv1.ScopeType{admissionregistrationv1.AllScopes, admissionregistrationv1.ClusterScope, admissionregistrationv1.NamespacedScope}
	prefilterSelectors   = []*metav1.LabelSelector{{}, {MatchLabels: map[string]string{"env": "prod"}}, {MatchLabels: map[string]string{"env": "dev"}}}
	prefilterRequests    = []schema.GroupVersionResource{{Version: "v1", Resource: "configmaps"}, {Version: "v1", Resource: "secrets"}, {Group: "example.com", Version: "v1", Resource: "widgets"}, {Group: "coordination.k8s.io", Version: "v1", Resource: "leases"}, {Version: "v1", Resource: "namespaces"}}
	prefilterSubresource = []string{"", "status", "scale"}
	prefilterOps         = []admission.Operation{admission.Create, admission.Update, admission.Delete}
)

// choices draws from a byte string (the fuzz input), or at random.
type choices struct {
	data []byte
	rng  *rand.Rand
}

func (c *choices) pick(n int) int {
	if c.rng != nil {
		return c.rng.IntN(n)
	}
	if len(c.data) == 0 {
		return 0
	}
	b := c.data[0]
	c.data = c.data[1:]
	return int(b) % n
}

func pickOf[T any](c *choices, from []T) T { return from[c.pick(len(from))] }

func (c *choices) rules() []admissionregistrationv1.NamedRuleWithOperations {
	rules := make([]admissionregistrationv1.NamedRuleWithOperations, c.pick(3))
	for i := range rules {
		resources := make([]string, 1+c.pick(2))
		for j := range resources {
			resources[j] = pickOf(c, prefilterResources)
		}
		rules[i] = admissionregistrationv1.NamedRuleWithOperations{RuleWithOperations: admissionregistrationv1.RuleWithOperations{
			Operations: []admissionregistrationv1.OperationType{pickOf(c, prefilterOperations)},
			Rule: admissionregistrationv1.Rule{
				APIGroups: []string{pickOf(c, prefilterGroups)}, APIVersions: []string{pickOf(c, prefilterVersions)},
				Resources: resources, Scope: ptr.To(pickOf(c, prefilterScopes)),
			},
		}}
	}
	return rules
}

func (c *choices) constraints() *admissionregistrationv1.MatchResources {
	return &admissionregistrationv1.MatchResources{
		NamespaceSelector: pickOf(c, prefilterSelectors), ObjectSelector: pickOf(c, prefilterSelectors),
		MatchPolicy:          ptr.To(admissionregistrationv1.Equivalent),
		ResourceRules:        c.rules(),
		ExcludeResourceRules: c.rules(),
	}
}

func (c *choices) request() admission.Attributes {
	gvr := pickOf(c, prefilterRequests)
	namespace := ""
	if gvr.Resource != "namespaces" && c.pick(4) > 0 {
		namespace = "ns"
	}
	obj := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x", Namespace: namespace, Labels: map[string]string{"env": "prod"}}}
	return admission.NewAttributesRecord(obj, nil, gvr.GroupVersion().WithKind("Thing"), namespace, "x", gvr, pickOf(c, prefilterSubresource), pickOf(c, prefilterOps), nil, false, &user.DefaultInfo{})
}

// prodNamespaces: every namespace is labelled env=prod.
type prodNamespaces struct{ corelisters.NamespaceLister }

func (prodNamespaces) Get(name string) (*corev1.Namespace, error) {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"env": "prod"}}}, nil
}

// checkPrefilter fails t if the prefilter leaves out a policy with
// constraints that kube's matcher matches a request of attrs with, or
// answers with an error.
func checkPrefilter(t *testing.T, constraints *admissionregistrationv1.MatchResources, attrs admission.Attributes) {
	t.Helper()
	if filterOf(constraints).mayMatch(attrs.GetResource().Resource) {
		return // kube decides
	}
	m := generic.NewPolicyMatcher(matching.NewMatcher(prodNamespaces{}, nil))
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{MatchConstraints: constraints}}
	matches, _, _, err := m.DefinitionMatches(attrs, customObjects, validating.NewValidatingAdmissionPolicyAccessor(policy))
	if matches || err != nil {
		t.Fatalf("left out a policy kube's matcher matches (%v, %v):\nrules %+v\nexclusions %+v\nrequest %v %q %s in %q", matches, err,
			constraints.ResourceRules, constraints.ExcludeResourceRules, attrs.GetResource(), attrs.GetSubresource(), attrs.GetOperation(), attrs.GetNamespace())
	}
}

// TestPrefilterAgreesWithKube: 20,000 random policies and requests.
func TestPrefilterAgreesWithKube(t *testing.T) {
	c := &choices{rng: rand.New(rand.NewPCG(1, 2))}
	left := 0
	for range 20000 {
		constraints, attrs := c.constraints(), c.request()
		if !filterOf(constraints).mayMatch(attrs.GetResource().Resource) {
			left++
		}
		checkPrefilter(t, constraints, attrs)
	}
	// The draw must exercise the fast path, or the test proves nothing.
	if left < 2000 {
		t.Fatalf("the prefilter left out %d of 20000 policies; want a draw where it leaves out many", left)
	}
}

// TestPrefilterCases are the forms one by one.
func TestPrefilterCases(t *testing.T) {
	rule := func(resources ...string) []admissionregistrationv1.NamedRuleWithOperations {
		return []admissionregistrationv1.NamedRuleWithOperations{{RuleWithOperations: admissionregistrationv1.RuleWithOperations{
			Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.OperationAll},
			Rule:       admissionregistrationv1.Rule{APIGroups: []string{"*"}, APIVersions: []string{"*"}, Resources: resources},
		}}}
	}
	for _, tc := range []struct {
		constraints *admissionregistrationv1.MatchResources
		resource    string
		want        bool
	}{
		{nil, "configmaps", true},
		{&admissionregistrationv1.MatchResources{}, "configmaps", true},
		{&admissionregistrationv1.MatchResources{ResourceRules: rule("configmaps")}, "configmaps", true},
		{&admissionregistrationv1.MatchResources{ResourceRules: rule("configmaps/status")}, "configmaps", true},
		{&admissionregistrationv1.MatchResources{ResourceRules: rule("secrets")}, "configmaps", false},
		{&admissionregistrationv1.MatchResources{ResourceRules: rule("secrets", "*/status")}, "configmaps", true},
		{&admissionregistrationv1.MatchResources{ResourceRules: rule("*")}, "configmaps", true},
		{&admissionregistrationv1.MatchResources{ResourceRules: rule("secrets/*")}, "configmaps", false},
	} {
		if got := filterOf(tc.constraints).mayMatch(tc.resource); got != tc.want {
			t.Errorf("filterOf(%+v).mayMatch(%q) = %v; want %v", tc.constraints, tc.resource, got, tc.want)
		}
	}
}

// FuzzPrefilter: what a fuzzer draws, checked the same way.
//
//	go test ./apiserver/admission -run '^$' -fuzz FuzzPrefilter -fuzztime 20000x
func FuzzPrefilter(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16})
	f.Add([]byte{2, 1, 1, 1, 1, 1, 1, 4, 2, 0, 1, 1, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		c := &choices{data: data}
		checkPrefilter(t, c.constraints(), c.request())
	})
}
