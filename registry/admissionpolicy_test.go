package registry

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/concord-dev/concord/etcdstore"
	"github.com/concord-dev/concord/etcdstore/etcdtest"
)

// policyStores are the stores of the four policy resources on one etcd.
type policyStores struct {
	vap, vapb, map_, mapb *Store
	etcd                  *etcdtest.Etcd
}

func newPolicyStores(t *testing.T) policyStores {
	t.Helper()
	e := etcdtest.Start(t)
	storage := etcdstore.New(e.Client, "/registry")
	s := policyStores{etcd: e}
	for _, p := range []struct {
		store **Store
		res   *Resource
	}{{&s.vap, ValidatingAdmissionPolicies}, {&s.vapb, ValidatingAdmissionPolicyBindings}, {&s.map_, MutatingAdmissionPolicies}, {&s.mapb, MutatingAdmissionPolicyBindings}} {
		*p.store = NewStore(storage, p.res, DefaultWatchConfig())
		t.Cleanup((*p.store).StopWatches)
	}
	return s
}

// configMapRules match creates of ConfigMaps, as a policy's
// matchConstraints.
func configMapRules(ops ...admissionregistrationv1.OperationType) []admissionregistrationv1.NamedRuleWithOperations {
	return []admissionregistrationv1.NamedRuleWithOperations{{RuleWithOperations: admissionregistrationv1.RuleWithOperations{
		Operations: ops,
		Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}},
	}}}
}

func validValidatingPolicy(name string) *admissionregistrationv1.ValidatingAdmissionPolicy {
	return &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: configMapRules(admissionregistrationv1.Create)},
			Validations:      []admissionregistrationv1.Validation{{Expression: "object.metadata.name != 'forbidden'"}},
		},
	}
}

func validMutatingPolicy(name string) *admissionregistrationv1.MutatingAdmissionPolicy {
	return &admissionregistrationv1.MutatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.MutatingAdmissionPolicySpec{
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: configMapRules(admissionregistrationv1.Create)},
			Mutations: []admissionregistrationv1.Mutation{{
				PatchType:          admissionregistrationv1.PatchTypeApplyConfiguration,
				ApplyConfiguration: &admissionregistrationv1.ApplyConfiguration{Expression: `Object{metadata: Object.metadata{labels: {"mutated": "yes"}}}`},
			}},
			ReinvocationPolicy: admissionregistrationv1.NeverReinvocationPolicy,
		},
	}
}

// causesOf is the "field: message" of each cause of a 422, or fails.
func causesOf(t *testing.T, err error) []string {
	t.Helper()
	var status *apierrors.StatusError
	if !errors.As(err, &status) || !apierrors.IsInvalid(err) || status.ErrStatus.Details == nil {
		t.Fatalf("%v; want 422 Invalid", err)
	}
	var causes []string
	for _, c := range status.ErrStatus.Details.Causes {
		causes = append(causes, c.Field+": "+c.Message)
	}
	return causes
}

// TestAdmissionPolicyDefaults: kube's v1 defaults fill the policies' and
// bindings' failurePolicy and match resources (scope of every rule), on
// create and again on a replace that leaves them out, which is then no
// change of the spec: the generation stays.
func TestAdmissionPolicyDefaults(t *testing.T) {
	s := newPolicyStores(t)
	ctx := testCtx(t)
	wantMatch := &admissionregistrationv1.MatchResources{
		NamespaceSelector: &metav1.LabelSelector{}, ObjectSelector: &metav1.LabelSelector{},
		MatchPolicy:   ptr.To(admissionregistrationv1.Equivalent),
		ResourceRules: configMapRules(admissionregistrationv1.Create),
	}
	wantMatch.ResourceRules[0].Scope = ptr.To(admissionregistrationv1.AllScopes)

	vap := validValidatingPolicy("vap")
	vap.Spec.MatchConstraints.ExcludeResourceRules = configMapRules(admissionregistrationv1.Update)
	created, err := s.vap.Create(ctx, "", vap, WriteOptions{})
	if err != nil {
		t.Fatalf("create validating policy: %v", err)
	}
	want := wantMatch.DeepCopy()
	want.ExcludeResourceRules = configMapRules(admissionregistrationv1.Update)
	want.ExcludeResourceRules[0].Scope = ptr.To(admissionregistrationv1.AllScopes)
	got := created.(*admissionregistrationv1.ValidatingAdmissionPolicy)
	if diff := cmp.Diff(got.Spec.MatchConstraints, want); diff != "" {
		t.Errorf("validating policy matchConstraints (-got +want):\n%s", diff)
	}
	if got.Spec.FailurePolicy == nil || *got.Spec.FailurePolicy != admissionregistrationv1.Fail || got.Generation != 1 {
		t.Errorf("validating policy failurePolicy %v, generation %d; want Fail, 1", got.Spec.FailurePolicy, got.Generation)
	}
	got.Spec.FailurePolicy, got.Spec.MatchConstraints.MatchPolicy, got.Spec.MatchConstraints.ResourceRules[0].Scope = nil, nil, nil
	got.Labels = map[string]string{"touched": "yes"}
	updated, _, err := s.vap.Update(ctx, "", "vap", got, WriteOptions{})
	if err != nil {
		t.Fatalf("update validating policy: %v", err)
	}
	u := updated.(*admissionregistrationv1.ValidatingAdmissionPolicy)
	if diff := cmp.Diff(u.Spec.MatchConstraints, want); diff != "" || u.Generation != 1 || *u.Spec.FailurePolicy != admissionregistrationv1.Fail {
		t.Errorf("updated validating policy generation %d (want 1), matchConstraints (-got +want):\n%s", u.Generation, diff)
	}

	createdMAP, err := s.map_.Create(ctx, "", validMutatingPolicy("map"), WriteOptions{})
	if err != nil {
		t.Fatalf("create mutating policy: %v", err)
	}
	m := createdMAP.(*admissionregistrationv1.MutatingAdmissionPolicy)
	if diff := cmp.Diff(m.Spec.MatchConstraints, wantMatch); diff != "" || *m.Spec.FailurePolicy != admissionregistrationv1.Fail {
		t.Errorf("mutating policy failurePolicy %s, matchConstraints (-got +want):\n%s", *m.Spec.FailurePolicy, diff)
	}

	createdB, err := s.vapb.Create(ctx, "", &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "vapb"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName: "vap", ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
			MatchResources: &admissionregistrationv1.MatchResources{ResourceRules: configMapRules(admissionregistrationv1.Create)},
			ParamRef:       &admissionregistrationv1.ParamRef{Name: "p", ParameterNotFoundAction: ptr.To(admissionregistrationv1.DenyAction)},
		},
	}, WriteOptions{})
	if err != nil {
		t.Fatalf("create validating binding: %v", err)
	}
	if diff := cmp.Diff(createdB.(*admissionregistrationv1.ValidatingAdmissionPolicyBinding).Spec.MatchResources, wantMatch); diff != "" || createdB.GetGeneration() != 1 {
		t.Errorf("validating binding generation %d, matchResources (-got +want):\n%s", createdB.GetGeneration(), diff)
	}
	createdMB, err := s.mapb.Create(ctx, "", &admissionregistrationv1.MutatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "mapb"},
		Spec:       admissionregistrationv1.MutatingAdmissionPolicyBindingSpec{PolicyName: "map", MatchResources: &admissionregistrationv1.MatchResources{}},
	}, WriteOptions{})
	if err != nil {
		t.Fatalf("create mutating binding: %v", err)
	}
	wantEmpty := &admissionregistrationv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{}, ObjectSelector: &metav1.LabelSelector{}, MatchPolicy: ptr.To(admissionregistrationv1.Equivalent)}
	if diff := cmp.Diff(createdMB.(*admissionregistrationv1.MutatingAdmissionPolicyBinding).Spec.MatchResources, wantEmpty); diff != "" {
		t.Errorf("mutating binding matchResources (-got +want):\n%s", diff)
	}
}

// TestAdmissionPolicyValidation: kube's validation of the four resources,
// each refusal a 422 with exactly kube's causes, and nothing stored.
func TestAdmissionPolicyValidation(t *testing.T) {
	s := newPolicyStores(t)
	vap := func(change func(p *admissionregistrationv1.ValidatingAdmissionPolicy)) Object {
		p := validValidatingPolicy("x")
		change(p)
		return p
	}
	mp := func(change func(p *admissionregistrationv1.MutatingAdmissionPolicy)) Object {
		p := validMutatingPolicy("x")
		change(p)
		return p
	}
	vb := func(change func(b *admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec)) Object {
		b := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: "x"}, Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName: "policy", ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
		}}
		change(&b.Spec)
		return b
	}
	mb := func(change func(b *admissionregistrationv1.MutatingAdmissionPolicyBindingSpec)) Object {
		b := &admissionregistrationv1.MutatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: "x"}, Spec: admissionregistrationv1.MutatingAdmissionPolicyBindingSpec{PolicyName: "policy"}}
		change(&b.Spec)
		return b
	}
	paramRef := func(name string, sel *metav1.LabelSelector, action string) *admissionregistrationv1.ParamRef {
		r := &admissionregistrationv1.ParamRef{Name: name, Selector: sel}
		if action != "" {
			r.ParameterNotFoundAction = ptr.To(admissionregistrationv1.ParameterNotFoundActionType(action))
		}
		return r
	}
	withParams := func(p *admissionregistrationv1.ValidatingAdmissionPolicy) {
		p.Spec.ParamKind = &admissionregistrationv1.ParamKind{APIVersion: "v1", Kind: "ConfigMap"}
	}
	for _, tc := range []struct {
		name   string
		store  *Store
		obj    Object
		causes []string // field: message; none: accepted
	}{
		// ValidatingAdmissionPolicy
		{name: "validating policy valid", store: s.vap, obj: vap(func(*admissionregistrationv1.ValidatingAdmissionPolicy) {})},
		{name: "validating policy with params, variables, messages and audit annotations", store: s.vap, obj: vap(func(p *admissionregistrationv1.ValidatingAdmissionPolicy) {
			withParams(p)
			p.Spec.MatchConditions = []admissionregistrationv1.MatchCondition{{Name: "has-params", Expression: "params != null"}}
			p.Spec.Variables = []admissionregistrationv1.Variable{{Name: "name", Expression: "object.metadata.name"}}
			p.Spec.Validations = []admissionregistrationv1.Validation{{
				Expression: "variables.name != params.data.forbidden", MessageExpression: "'name ' + variables.name + ' is forbidden'",
				Reason: ptr.To(metav1.StatusReasonForbidden),
			}}
			p.Spec.AuditAnnotations = []admissionregistrationv1.AuditAnnotation{{Key: "name", ValueExpression: "string(variables.name)"}}
		})},
		{name: "validating policy without validations or audit annotations", store: s.vap, obj: vap(func(p *admissionregistrationv1.ValidatingAdmissionPolicy) { p.Spec.Validations = nil }),
			causes: []string{
				"spec.validations: Required value: validations or auditAnnotations must contain at least one item",
				"spec.auditAnnotations: Required value: validations or auditAnnotations must contain at least one item",
			}},
		{name: "validating policy without matchConstraints", store: s.vap, obj: vap(func(p *admissionregistrationv1.ValidatingAdmissionPolicy) { p.Spec.MatchConstraints = nil }),
			causes: []string{"spec.matchConstraints: Required value"}},
		{name: "validating policy without resourceRules", store: s.vap, obj: vap(func(p *admissionregistrationv1.ValidatingAdmissionPolicy) {
			p.Spec.MatchConstraints.ResourceRules = nil
		}),
			causes: []string{"spec.matchConstraints.resourceRules: Required value"}},
		{name: "validating policy with unknown policies and bad rules", store: s.vap, obj: vap(func(p *admissionregistrationv1.ValidatingAdmissionPolicy) {
			p.Spec.FailurePolicy = ptr.To(admissionregistrationv1.FailurePolicyType("Sometimes"))
			p.Spec.MatchConstraints.MatchPolicy = ptr.To(admissionregistrationv1.MatchPolicyType("Fuzzy"))
			p.Spec.MatchConstraints.ObjectSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "-bad-"}}
			p.Spec.MatchConstraints.ResourceRules[0].Operations = []admissionregistrationv1.OperationType{"PATCH"}
			p.Spec.MatchConstraints.ResourceRules[0].ResourceNames = []string{"a/b", "c", "c"}
			p.Spec.MatchConstraints.ExcludeResourceRules = []admissionregistrationv1.NamedRuleWithOperations{{}}
		}), causes: []string{
			`spec.failurePolicy: Unsupported value: "Sometimes": supported values: "Fail", "Ignore"`,
			`spec.matchConstraints.matchPolicy: Unsupported value: "Fuzzy": supported values: "Equivalent", "Exact"`,
			`spec.matchConstraints.objectSelector.matchLabels: Invalid value: "-bad-": a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')`,
			`spec.matchConstraints.resourceRules[0].resourceNames[0]: Invalid value: "a/b": may not contain '/'`,
			`spec.matchConstraints.resourceRules[0].resourceNames[2]: Duplicate value: "c"`,
			`spec.matchConstraints.resourceRules[0].operations[0]: Unsupported value: "PATCH": supported values: "*", "CONNECT", "CREATE", "DELETE", "UPDATE"`,
			"spec.matchConstraints.excludeResourceRules[0].operations: Required value",
			"spec.matchConstraints.excludeResourceRules[0].apiGroups: Required value",
			"spec.matchConstraints.excludeResourceRules[0].apiVersions: Required value",
			"spec.matchConstraints.excludeResourceRules[0].resources: Required value",
		}},
		{name: "validating policy with bad paramKinds", store: s.vap, obj: vap(func(p *admissionregistrationv1.ValidatingAdmissionPolicy) {
			p.Spec.ParamKind = &admissionregistrationv1.ParamKind{APIVersion: "a/b/c", Kind: "Config_Map"}
		}), causes: []string{
			`spec.paramKind.apiVersion: Invalid value: "a/b/c": unexpected GroupVersion string: a/b/c`,
			`spec.paramKind.kind: Invalid value: "Config_Map": may have mixed case, but should otherwise match: a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')`,
		}},
		{name: "validating policy paramKind without kind and version", store: s.vap, obj: vap(func(p *admissionregistrationv1.ValidatingAdmissionPolicy) {
			p.Spec.ParamKind = &admissionregistrationv1.ParamKind{APIVersion: "example.com/"}
		}), causes: []string{
			`spec.paramKind.apiVersion: Invalid value: "example.com/": version must be specified`,
			"spec.paramKind.kind: Required value",
		}},
		{name: "validations that do not compile, and bad messages and reason", store: s.vap, obj: vap(func(p *admissionregistrationv1.ValidatingAdmissionPolicy) {
			p.Spec.Validations = []admissionregistrationv1.Validation{
				{Expression: "object.metadata.name", Message: "two\nlines"},
				{Expression: "1 +", MessageExpression: "  ", Reason: ptr.To(metav1.StatusReason("Teapot"))},
				{Expression: "params.x == 1", MessageExpression: "object.metadata.generation", Message: " "},
				{Expression: " "},
			}
		}), causes: []string{
			`spec.validations[0].expression: Invalid value: "object.metadata.name": must evaluate to bool but got dyn`,
			`spec.validations[0].message: Invalid value: "two\nlines": message must not contain line breaks`,
			"spec.validations[1].expression: Invalid value: \"1 +\": compilation failed: ERROR: <input>:1:4: Syntax error: mismatched input '<EOF>' expecting {'[', '{', '(', '.', '-', '!', 'true', 'false', 'null', NUM_FLOAT, NUM_INT, NUM_UINT, STRING, BYTES, IDENTIFIER}\n | 1 +\n | ...^",
			`spec.validations[1].messageExpression: Invalid value: "  ": must be non-empty if specified`,
			`spec.validations[1].reason: Unsupported value: "Teapot": supported values: "Forbidden", "Invalid", "RequestEntityTooLarge"`,
			"spec.validations[2].expression: Invalid value: \"params.x == 1\": compilation failed: ERROR: <input>:1:1: undeclared reference to 'params' (in container '')\n | params.x == 1\n | ^",
			`spec.validations[2].messageExpression: Invalid value: "object.metadata.generation": must evaluate to string but got dyn`,
			`spec.validations[2].message: Invalid value: " ": message must be non-empty if specified`,
			"spec.validations[3].expression: Required value: expression is not specified",
		}},
		{name: "variables: bad names, no expression, not compiling", store: s.vap, obj: vap(func(p *admissionregistrationv1.ValidatingAdmissionPolicy) {
			p.Spec.Variables = []admissionregistrationv1.Variable{
				{Name: "1x", Expression: "1"},
				{Name: "in", Expression: " "},
				{Name: "", Expression: "object.nope("},
			}
		}), causes: []string{
			`spec.variables[0].name: Invalid value: "1x": name is not a valid CEL identifier`,
			`spec.variables[1].name: Invalid value: "in": name is not a valid CEL identifier`,
			"spec.variables[1].expression: Required value: expression is not specified",
			"spec.variables[2].name: Required value: name is not specified",
			"spec.variables[2].expression: Invalid value: \"object.nope(\": compilation failed: ERROR: <input>:1:13: Syntax error: mismatched input '<EOF>' expecting {'[', '{', '(', ')', '.', '-', '!', 'true', 'false', 'null', NUM_FLOAT, NUM_INT, NUM_UINT, STRING, BYTES, IDENTIFIER}\n | object.nope(\n | ............^",
		}},
		{name: "audit annotations: bad and duplicate keys, bad values", store: s.vap, obj: vap(func(p *admissionregistrationv1.ValidatingAdmissionPolicy) {
			p.Spec.Validations = nil
			p.Spec.AuditAnnotations = []admissionregistrationv1.AuditAnnotation{
				{Key: "bad key", ValueExpression: "'v'"},
				{Key: "k", ValueExpression: " "},
				{Key: "k", ValueExpression: "1"},
			}
		}), causes: []string{
			`spec.auditAnnotations[0].key: Invalid value: "x/bad key": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')`,
			"spec.auditAnnotations[1].valueExpression: Required value: valueExpression is not specified",
			`spec.auditAnnotations[2].valueExpression: Invalid value: "1": must evaluate to one of [string null_type] but got int`,
			`spec.auditAnnotations[2].key: Duplicate value: "k"`,
		}},
		{name: "match conditions without params, bad names", store: s.vap, obj: vap(func(p *admissionregistrationv1.ValidatingAdmissionPolicy) {
			p.Spec.MatchConditions = []admissionregistrationv1.MatchCondition{
				{Name: "params", Expression: "params != null"},
				{Name: "params", Expression: "true"},
			}
		}), causes: []string{
			"spec.matchConditions[0].expression: Invalid value: \"params != null\": compilation failed: ERROR: <input>:1:1: undeclared reference to 'params' (in container '')\n | params != null\n | ^",
			`spec.matchConditions[1].name: Duplicate value: "params"`,
		}},
		{name: "validating policy reserved static name", store: s.vap, obj: func() Object {
			p := validValidatingPolicy("deny.static.k8s.io")
			return p
		}(), causes: []string{`metadata.name: Invalid value: "deny.static.k8s.io": names ending with ".static.k8s.io" are reserved for static manifest-based configurations and cannot be managed via the API`}},

		// ValidatingAdmissionPolicyBinding
		{name: "validating binding valid", store: s.vapb, obj: vb(func(b *admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec) {
			b.ParamRef = paramRef("", &metav1.LabelSelector{MatchLabels: map[string]string{"a": "b"}}, "Allow")
			b.ValidationActions = []admissionregistrationv1.ValidationAction{admissionregistrationv1.Warn, admissionregistrationv1.Audit}
		})},
		{name: "validating binding empty", store: s.vapb, obj: vb(func(b *admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec) {
			*b = admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{}
		}),
			causes: []string{
				"spec.policyName: Required value",
				"spec.validationActions: Required value: at least one validation action is required",
			}},
		{name: "validating binding bad policyName and actions", store: s.vapb, obj: vb(func(b *admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec) {
			b.PolicyName = "Policy_1"
			b.ValidationActions = []admissionregistrationv1.ValidationAction{"Deny", "Warn", "Deny", "Shout"}
		}), causes: []string{
			`spec.policyName: Invalid value: "Policy_1": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')`,
			`spec.validationActions[2]: Duplicate value: "Deny"`,
			`spec.validationActions[3]: Unsupported value: "Shout": supported values: "Audit", "Deny", "Warn"`,
			`spec.validationActions: Invalid value: ["Deny","Warn","Deny","Shout"]: must not contain both Deny and Warn (repeating the same validation failure information in the API response and headers serves no purpose)`,
		}},
		{name: "validating binding paramRef with name and selector, no action", store: s.vapb, obj: vb(func(b *admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec) {
			b.ParamRef = paramRef("a/b", &metav1.LabelSelector{}, "")
		}), causes: []string{
			`spec.paramRef.name: Invalid value: "a/b": may not contain '/'`,
			"spec.paramRef.name: Forbidden: name and selector are mutually exclusive",
			"spec.paramRef.selector: Forbidden: name and selector are mutually exclusive",
			"spec.paramRef.parameterNotFoundAction: Required value",
		}},
		{name: "validating binding paramRef with neither, unknown action", store: s.vapb, obj: vb(func(b *admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec) {
			b.ParamRef = paramRef("", nil, "Maybe")
		}), causes: []string{
			"spec.paramRef: Required value: one of name or selector must be specified",
			`spec.paramRef.parameterNotFoundAction: Unsupported value: "Maybe": supported values: "Deny", "Allow"`,
		}},
		{name: "validating binding bad matchResources", store: s.vapb, obj: vb(func(b *admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec) {
			b.MatchResources = &admissionregistrationv1.MatchResources{MatchPolicy: ptr.To(admissionregistrationv1.MatchPolicyType("Fuzzy"))}
		}), causes: []string{`spec.matchResources.matchPolicy: Unsupported value: "Fuzzy": supported values: "Equivalent", "Exact"`}},

		// MutatingAdmissionPolicy
		{name: "mutating policy valid, JSONPatch with params and variables", store: s.map_, obj: mp(func(p *admissionregistrationv1.MutatingAdmissionPolicy) {
			p.Spec.ParamKind = &admissionregistrationv1.ParamKind{APIVersion: "v1", Kind: "ConfigMap"}
			p.Spec.Variables = []admissionregistrationv1.Variable{{Name: "value", Expression: "params.data.value"}}
			p.Spec.Mutations = []admissionregistrationv1.Mutation{{PatchType: admissionregistrationv1.PatchTypeJSONPatch, JSONPatch: &admissionregistrationv1.JSONPatch{
				Expression: `[JSONPatch{op: "add", path: "/data/value", value: variables.value}]`,
			}}}
			p.Spec.ReinvocationPolicy = admissionregistrationv1.IfNeededReinvocationPolicy
		})},
		{name: "mutating policy without mutations or reinvocationPolicy", store: s.map_, obj: mp(func(p *admissionregistrationv1.MutatingAdmissionPolicy) {
			p.Spec.Mutations, p.Spec.ReinvocationPolicy = nil, ""
		}), causes: []string{
			"spec.mutations: Required value: mutations must contain at least one item",
			"spec.reinvocationPolicy: Required value",
		}},
		{name: "mutating policy matching DELETE, unknown reinvocationPolicy", store: s.map_, obj: mp(func(p *admissionregistrationv1.MutatingAdmissionPolicy) {
			p.Spec.MatchConstraints.ResourceRules[0].Operations = []admissionregistrationv1.OperationType{admissionregistrationv1.Delete}
			p.Spec.ReinvocationPolicy = "Always"
		}), causes: []string{
			`spec.matchConstraints.resourceRules.operations: Unsupported value: "DELETE": supported values: "*", "CONNECT", "CREATE", "UPDATE"`,
			`spec.reinvocationPolicy: Unsupported value: "Always": supported values: "IfNeeded", "Never"`,
		}},
		{name: "mutations: bad patch types and expressions", store: s.map_, obj: mp(func(p *admissionregistrationv1.MutatingAdmissionPolicy) {
			p.Spec.Mutations = []admissionregistrationv1.Mutation{
				{},
				{PatchType: "Merge"},
				{PatchType: admissionregistrationv1.PatchTypeJSONPatch, ApplyConfiguration: &admissionregistrationv1.ApplyConfiguration{Expression: "Object{}"}},
				{PatchType: admissionregistrationv1.PatchTypeApplyConfiguration, ApplyConfiguration: &admissionregistrationv1.ApplyConfiguration{Expression: " "}, JSONPatch: &admissionregistrationv1.JSONPatch{}},
				{PatchType: admissionregistrationv1.PatchTypeApplyConfiguration, ApplyConfiguration: &admissionregistrationv1.ApplyConfiguration{Expression: "object"}},
				{PatchType: admissionregistrationv1.PatchTypeJSONPatch, JSONPatch: &admissionregistrationv1.JSONPatch{Expression: "[1]"}},
			}
		}), causes: []string{
			"spec.mutations[0].patchType: Required value",
			`spec.mutations[1].patchType: Unsupported value: "Merge": supported values: "ApplyConfiguration", "JSONPatch"`,
			"spec.mutations[2].jsonPatch: Required value: must be specified when patchType is JSONPatch",
			`spec.mutations[2].applyConfiguration: Invalid value: "{applyConfiguration}": must not be specified when patchType is JSONPatch`,
			"spec.mutations[3].applyConfiguration.expression: Required value",
			`spec.mutations[3].jsonPatch: Invalid value: "{jsonPatch}": must not be specified when patchType is ApplyConfiguration`,
			`spec.mutations[4].applyConfiguration.expression: Invalid value: "object": must evaluate to Object but got dyn`,
			`spec.mutations[5].jsonPatch.expression: Invalid value: "[1]": must evaluate to list(JSONPatch) but got list(int)`,
		}},

		// MutatingAdmissionPolicyBinding
		{name: "mutating binding valid", store: s.mapb, obj: mb(func(b *admissionregistrationv1.MutatingAdmissionPolicyBindingSpec) {
			b.ParamRef = paramRef("settings", nil, "Deny")
		})},
		{name: "mutating binding matching DELETE, no policyName", store: s.mapb, obj: mb(func(b *admissionregistrationv1.MutatingAdmissionPolicyBindingSpec) {
			b.PolicyName = ""
			b.MatchResources = &admissionregistrationv1.MatchResources{ResourceRules: configMapRules(admissionregistrationv1.Delete)}
		}), causes: []string{
			"spec.policyName: Required value",
			`spec.matchResources.resourceRules.operations: Unsupported value: "DELETE": supported values: "*", "CONNECT", "CREATE", "UPDATE"`,
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := tc.obj.GetName()
			t.Cleanup(func() { _, _ = tc.store.Delete(testCtx(t), "", name, nil, WriteOptions{}) })
			_, err := tc.store.Create(testCtx(t), "", tc.obj, WriteOptions{})
			if len(tc.causes) == 0 {
				if err != nil {
					t.Fatalf("create: %v; want it stored", err)
				}
				return
			}
			if diff := cmp.Diff(causesOf(t, err), tc.causes); diff != "" {
				t.Errorf("causes (-got +want):\n%s", diff)
			}
			key := "/registry/" + AdmissionPolicyStoragePrefix + "/" + tc.store.Resource.Plural + "/" + name
			if resp, err := s.etcd.Client.Get(testCtx(t), key); err != nil || len(resp.Kvs) != 0 {
				t.Fatalf("etcd %s: %v, %d keys; want nothing stored", key, err, len(resp.Kvs))
			}
		})
	}
}

// TestAdmissionPolicyTableCells: kube's printers' cells, between Name and
// Age: "<unset>" without a paramKind or paramRef, a named param without a
// namespace in any ("*/name"), a selector as kube prints it.
func TestAdmissionPolicyTableCells(t *testing.T) {
	withKind := validValidatingPolicy("p")
	withKind.Spec.ParamKind = &admissionregistrationv1.ParamKind{APIVersion: "example.com/v1", Kind: "Limits"}
	withKind.Spec.Validations = append(withKind.Spec.Validations, admissionregistrationv1.Validation{Expression: "true"})
	vb := func(r *admissionregistrationv1.ParamRef) Object {
		return &admissionregistrationv1.ValidatingAdmissionPolicyBinding{Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: "p", ParamRef: r}}
	}
	for _, tc := range []struct {
		name string
		res  *Resource
		obj  Object
		want []any
	}{
		{"validating policy without paramKind", ValidatingAdmissionPolicies, validValidatingPolicy("p"), []any{int64(1), "<unset>"}},
		{"validating policy with paramKind", ValidatingAdmissionPolicies, withKind, []any{int64(2), "example.com/v1/Limits"}},
		{"mutating policy", MutatingAdmissionPolicies, validMutatingPolicy("m"), []any{int64(1), "<unset>"}},
		{"binding without paramRef", ValidatingAdmissionPolicyBindings, vb(nil), []any{"p", "<unset>"}},
		{"binding with a named param", ValidatingAdmissionPolicyBindings, vb(&admissionregistrationv1.ParamRef{Name: "limits", Namespace: "team"}), []any{"p", "team/limits"}},
		{"binding with a named param in any namespace", ValidatingAdmissionPolicyBindings, vb(&admissionregistrationv1.ParamRef{Name: "limits"}), []any{"p", "*/limits"}},
		{"binding with a selector", ValidatingAdmissionPolicyBindings, vb(&admissionregistrationv1.ParamRef{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "gold"}}}),
			[]any{"p", "&LabelSelector{MatchLabels:map[string]string{tier: gold,},MatchExpressions:[]LabelSelectorRequirement{},}"}},
		{"mutating binding", MutatingAdmissionPolicyBindings, &admissionregistrationv1.MutatingAdmissionPolicyBinding{Spec: admissionregistrationv1.MutatingAdmissionPolicyBindingSpec{
			PolicyName: "m", ParamRef: &admissionregistrationv1.ParamRef{Name: "x", Namespace: "y"},
		}}, []any{"m", "y/x"}},
	} {
		if diff := cmp.Diff(tc.res.TableCells(tc.obj), tc.want); diff != "" {
			t.Errorf("%s: cells (-got +want):\n%s", tc.name, diff)
		}
	}
	var names []string
	for _, res := range AdmissionPolicyResources {
		for _, c := range res.TableColumns {
			names = append(names, res.Kind+"."+c.Name+":"+c.Type)
		}
	}
	if diff := cmp.Diff(names, []string{
		"ValidatingAdmissionPolicy.Validations:integer", "ValidatingAdmissionPolicy.ParamKind:string",
		"ValidatingAdmissionPolicyBinding.PolicyName:string", "ValidatingAdmissionPolicyBinding.ParamRef:string",
		"MutatingAdmissionPolicy.Mutations:integer", "MutatingAdmissionPolicy.ParamKind:string",
		"MutatingAdmissionPolicyBinding.PolicyName:string", "MutatingAdmissionPolicyBinding.ParamRef:string",
	}); diff != "" {
		t.Errorf("columns (-got +want):\n%s", diff)
	}
}

// TestValidatingAdmissionPolicyStatus: a status write keeps the stored spec
// and generation, and is validated as kube's: each type-checking warning
// has a warning and a fieldRef that is a JSONPath; the conditions are
// metav1's. A spec write keeps the stored status.
func TestValidatingAdmissionPolicyStatus(t *testing.T) {
	s := newPolicyStores(t)
	ctx := testCtx(t)
	created, err := s.vap.Create(ctx, "", validValidatingPolicy("p"), WriteOptions{})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	p := created.(*admissionregistrationv1.ValidatingAdmissionPolicy)
	p.Spec.Validations = []admissionregistrationv1.Validation{{Expression: "false"}}
	p.Status = admissionregistrationv1.ValidatingAdmissionPolicyStatus{
		ObservedGeneration: 1,
		TypeChecking: &admissionregistrationv1.TypeChecking{ExpressionWarnings: []admissionregistrationv1.ExpressionWarning{
			{FieldRef: "spec.validations[0].expression", Warning: "undefined field 'nope'"},
		}},
	}
	written, err := s.vap.UpdateStatus(ctx, "", "p", p, WriteOptions{})
	if err != nil {
		t.Fatalf("update status: %v", err)
	}
	w := written.(*admissionregistrationv1.ValidatingAdmissionPolicy)
	if diff := cmp.Diff(w.Spec.Validations, validValidatingPolicy("p").Spec.Validations); diff != "" || w.Generation != 1 {
		t.Errorf("after a status write: generation %d (want 1), validations (-got +want):\n%s", w.Generation, diff)
	}
	if diff := cmp.Diff(w.Status, p.Status); diff != "" {
		t.Errorf("written status (-got +want):\n%s", diff)
	}

	bad := w.DeepCopy()
	bad.Status.TypeChecking.ExpressionWarnings = []admissionregistrationv1.ExpressionWarning{{FieldRef: "spec.validations[0"}, {FieldRef: " ", Warning: "w"}}
	bad.Status.Conditions = []metav1.Condition{{Type: "Ready"}}
	_, err = s.vap.UpdateStatus(ctx, "", "p", bad, WriteOptions{})
	if diff := cmp.Diff(causesOf(t, err), []string{
		"status.typeChecking.expressionWarnings[0].warning: Required value",
		`status.typeChecking.expressionWarnings[0].fieldRef: Invalid value: "spec.validations[0": invalid JSONPath: unterminated array`,
		"status.typeChecking.expressionWarnings[1].fieldRef: Required value",
		"status.conditions[0].status: Required value",
		"status.conditions[0].lastTransitionTime: Required value",
		"status.conditions[0].reason: Required value",
	}); diff != "" {
		t.Errorf("bad status causes (-got +want):\n%s", diff)
	}

	// A spec write keeps the stored status and bumps the generation.
	w.Status = admissionregistrationv1.ValidatingAdmissionPolicyStatus{}
	w.Spec.Validations = []admissionregistrationv1.Validation{{Expression: "true"}}
	updated, _, err := s.vap.Update(ctx, "", "p", w, WriteOptions{})
	if err != nil {
		t.Fatalf("update: %v", err)
	}
	u := updated.(*admissionregistrationv1.ValidatingAdmissionPolicy)
	if diff := cmp.Diff(u.Status, p.Status); diff != "" || u.Generation != 2 {
		t.Errorf("after a spec write: generation %d (want 2), status (-got +want):\n%s", u.Generation, diff)
	}
}

// TestAdmissionPolicyUpdateRatchets: a policy an older server stored with
// a matchCondition that no longer compiles can still be updated while its
// matchConditions and paramKind stay, but a create with it is refused, as
// is an update that changes them; a replace without a resourceVersion is
// refused as kube's strategies refuse it.
func TestAdmissionPolicyUpdateRatchets(t *testing.T) {
	s := newPolicyStores(t)
	ctx := testCtx(t)
	legacy := `{"apiVersion":"admissionregistration.k8s.io/v1","kind":"ValidatingAdmissionPolicy",` +
		`"metadata":{"name":"legacy","uid":"u-legacy","generation":1,"creationTimestamp":"2020-01-02T03:04:05Z"},` +
		`"spec":{"failurePolicy":"Fail","matchConstraints":{"matchPolicy":"Equivalent","namespaceSelector":{},"objectSelector":{},` +
		`"resourceRules":[{"apiGroups":[""],"apiVersions":["v1"],"operations":["CREATE"],"resources":["configmaps"],"scope":"*"}]},` +
		`"matchConditions":[{"name":"broken","expression":"1 +"}],"validations":[{"expression":"true"}]}}`
	if _, err := s.etcd.Client.Put(ctx, "/registry/"+AdmissionPolicyStoragePrefix+"/validatingadmissionpolicies/legacy", legacy); err != nil {
		t.Fatal(err)
	}
	got, err := s.vap.Get(ctx, "", "legacy")
	if err != nil {
		t.Fatalf("get: %v", err)
	}
	p := got.(*admissionregistrationv1.ValidatingAdmissionPolicy)
	p.Spec.Validations = []admissionregistrationv1.Validation{{Expression: "false"}}
	updated, _, err := s.vap.Update(ctx, "", "legacy", p, WriteOptions{})
	if err != nil {
		t.Fatalf("update keeping the stored matchConditions: %v", err)
	}
	if updated.GetGeneration() != 2 {
		t.Errorf("generation %d; want 2", updated.GetGeneration())
	}

	fresh := p.DeepCopy()
	fresh.ObjectMeta = metav1.ObjectMeta{Name: "fresh"}
	_, err = s.vap.Create(ctx, "", fresh, WriteOptions{})
	want := []string{"spec.matchConditions[0].expression: Invalid value: \"1 +\": compilation failed: ERROR: <input>:1:4: Syntax error: mismatched input '<EOF>' expecting {'[', '{', '(', '.', '-', '!', 'true', 'false', 'null', NUM_FLOAT, NUM_INT, NUM_UINT, STRING, BYTES, IDENTIFIER}\n | 1 +\n | ...^"}
	if diff := cmp.Diff(causesOf(t, err), want); diff != "" {
		t.Errorf("create with the legacy matchCondition: causes (-got +want):\n%s", diff)
	}

	p = updated.(*admissionregistrationv1.ValidatingAdmissionPolicy)
	p.Spec.ParamKind = &admissionregistrationv1.ParamKind{APIVersion: "v1", Kind: "ConfigMap"}
	_, _, err = s.vap.Update(ctx, "", "legacy", p, WriteOptions{})
	if diff := cmp.Diff(causesOf(t, err), want); diff != "" {
		t.Errorf("update changing the paramKind: causes (-got +want):\n%s", diff)
	}

	// Even where Concord follows kube's strategies (--unconditional-update=kube),
	// each of the four refuses a replace without a version: 428.
	storage := etcdstore.New(s.etcd.Client, "/registry")
	for _, res := range AdmissionPolicyResources {
		if res.AllowUnconditionalUpdate || res.AllowCreateOnUpdate {
			t.Errorf("%s: AllowUnconditionalUpdate %t, AllowCreateOnUpdate %t; want neither, as kube's strategy", res.Kind, res.AllowUnconditionalUpdate, res.AllowCreateOnUpdate)
		}
	}
	kubeMode := NewStore(storage, ValidatingAdmissionPolicies, DefaultWatchConfig(), WithUnconditionalUpdate(UnconditionalKube))
	t.Cleanup(kubeMode.StopWatches)
	p.Spec.ParamKind = nil
	p.ResourceVersion = ""
	_, _, err = kubeMode.Update(ctx, "", "legacy", p, WriteOptions{})
	var status apierrors.APIStatus
	if !errors.As(err, &status) || status.Status().Code != 428 {
		t.Errorf("replace without a resourceVersion: %v; want 428", err)
	}
}
