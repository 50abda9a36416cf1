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
