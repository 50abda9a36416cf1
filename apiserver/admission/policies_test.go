package admission

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/utils/ptr"

	"github.com/concord-dev/concord/apiserver/filters"
	"github.com/concord-dev/concord/etcdstore"
	"github.com/concord-dev/concord/etcdstore/etcdtest"
	"github.com/concord-dev/concord/registry"
)

// policyEnv is a real etcd, the registry's stores (the policy resources'
// writes bump their generation key, as the server's; every write admitted
// by chain) and the policies' admission over them, running.
type policyEnv struct {
	ctx                                  context.Context
	p                                    *Policies
	chain                                *Chain
	vaps, vapBindings, maps, mapBindings *registry.Store
	configmaps, namespaces               *registry.Store
	catalogStores                        Stores
	catalog                              *registry.Catalog
}

func newPolicyEnv(t *testing.T) *policyEnv {
	t.Helper()
	e := etcdtest.Start(t)
	storage := etcdstore.NewWithOptions(e.Client, "/registry", etcdstore.Options{Bump: registry.AdmissionPolicyBump()})
	chain := &Chain{}
	stores := registry.NewStores(storage, registry.DefaultWatchConfig(), registry.WithAdmission(chain))
	catalog := registry.NewCatalog(stores)
	lookup := func(res *registry.Resource) *registry.Store {
		s, ok := catalog.Lookup(res.GroupVersion.Group, res.GroupVersion.Version, res.Plural)
		if !ok {
			t.Fatalf("no store of %s", res.Plural)
		}
		return s
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	if err := registry.EnsureSystemNamespaces(ctx, stores); err != nil {
		t.Fatal(err)
	}
	v := &policyEnv{
		ctx:         ctx,
		vaps:        lookup(registry.ValidatingAdmissionPolicies),
		vapBindings: lookup(registry.ValidatingAdmissionPolicyBindings),
		maps:        lookup(registry.MutatingAdmissionPolicies),
		mapBindings: lookup(registry.MutatingAdmissionPolicyBindings),
		configmaps:  lookup(registry.ConfigMaps),
		namespaces:  lookup(registry.Namespaces),
		chain:       chain,

		catalogStores: catalog.Stores,
		catalog:       catalog,
	}
	v.p = NewPolicies(PolicyConfig{
		Storage:            storage,
		ValidatingPolicies: v.vaps, ValidatingBindings: v.vapBindings,
		MutatingPolicies: v.maps, MutatingBindings: v.mapBindings,
		Namespaces: lookup(registry.Namespaces),
		Stores:     catalog.Stores,
		Subscribe:  catalog.Subscribe,
		Generation: func(ctx context.Context) (int64, error) { return registry.AdmissionPolicyGenerationOf(ctx, storage) },
		Authorizer: filters.AlwaysAllow,
		Log:        slog.New(slog.DiscardHandler),
	})
	chain.Policies = v.p
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		v.p.Run(runCtx)
	}()
	t.Cleanup(func() {
		stop()
		<-done
	})
	select {
	case <-v.p.Synced():
	case <-time.After(10 * time.Second):
		t.Fatal("the admission policies' view did not sync in 10 s")
	}
	return v
}

// configMapRules match ConfigMap creates and updates, with the selectors
// and matchPolicy the defaulting would give.
func configMapRules() *admissionregistrationv1.MatchResources {
	return &admissionregistrationv1.MatchResources{
		NamespaceSelector: &metav1.LabelSelector{}, ObjectSelector: &metav1.LabelSelector{},
		MatchPolicy: ptr.To(admissionregistrationv1.Equivalent),
		ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{RuleWithOperations: admissionregistrationv1.RuleWithOperations{
			Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
			Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}, Scope: ptr.To(admissionregistrationv1.AllScopes)},
		}}},
	}
}

// everything is a binding's matchResources that narrow nothing.
func everything() *admissionregistrationv1.MatchResources {
	return &admissionregistrationv1.MatchResources{
		NamespaceSelector: &metav1.LabelSelector{}, ObjectSelector: &metav1.LabelSelector{},
		MatchPolicy: ptr.To(admissionregistrationv1.Equivalent),
	}
}

// noDataPolicy is ValidatingAdmissionPolicy name refusing ConfigMaps with
// data, with paramKind.
func noDataPolicy(name string, failure admissionregistrationv1.FailurePolicyType, paramKind *admissionregistrationv1.ParamKind) *admissionregistrationv1.ValidatingAdmissionPolicy {
	return &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy:    ptr.To(failure),
			ParamKind:        paramKind,
			MatchConstraints: configMapRules(),
			Validations:      []admissionregistrationv1.Validation{{Expression: "!has(object.data)", Message: "no data"}},
		},
	}
}

func validatingBinding(name, policy string) *admissionregistrationv1.ValidatingAdmissionPolicyBinding {
	return &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName: policy, ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
			MatchResources: everything(),
		},
	}
}

// labelPolicy is MutatingAdmissionPolicy name adding the label
// mutated=yes to ConfigMaps, with paramKind.
func labelPolicy(name string, paramKind *admissionregistrationv1.ParamKind) *admissionregistrationv1.MutatingAdmissionPolicy {
	return &admissionregistrationv1.MutatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.MutatingAdmissionPolicySpec{
			FailurePolicy:      ptr.To(admissionregistrationv1.Fail),
			ReinvocationPolicy: admissionregistrationv1.NeverReinvocationPolicy,
			ParamKind:          paramKind,
			MatchConstraints:   configMapRules(),
			Mutations: []admissionregistrationv1.Mutation{{
				PatchType:          admissionregistrationv1.PatchTypeApplyConfiguration,
				ApplyConfiguration: &admissionregistrationv1.ApplyConfiguration{Expression: `Object{metadata: Object.metadata{labels: {"mutated": "yes"}}}`},
			}},
		},
	}
}

func mutatingBinding(name, policy string) *admissionregistrationv1.MutatingAdmissionPolicyBinding {
	return &admissionregistrationv1.MutatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       admissionregistrationv1.MutatingAdmissionPolicyBindingSpec{PolicyName: policy, MatchResources: everything()},
	}
}

// store and remove write a policy or binding and wait until the view has
// it: the tests that call the chain directly (no write, so no guard) see
// what a guarded write would be admitted on.
func (v *policyEnv) store(t *testing.T, s *registry.Store, obj registry.Object) {
	t.Helper()
	if _, err := s.Create(v.ctx, "", obj, registry.WriteOptions{}); err != nil {
		t.Fatalf("create %s %s: %v", s.Resource.Kind, obj.GetName(), err)
	}
	v.caughtUp(t)
}

func (v *policyEnv) remove(t *testing.T, s *registry.Store, name string) {
	t.Helper()
	if _, err := s.Delete(v.ctx, "", name, &metav1.DeleteOptions{}, registry.WriteOptions{}); err != nil {
		t.Fatalf("delete %s %s: %v", s.Resource.Kind, name, err)
	}
	v.caughtUp(t)
}

// caughtUp waits until the view has the policies' current generation.
func (v *policyEnv) caughtUp(t *testing.T) {
	t.Helper()
	gen, err := v.p.cfg.Generation(v.ctx)
	if err == nil {
		err = v.p.AwaitRevision(v.ctx, gen)
	}
	if err != nil {
		t.Fatalf("the view did not catch up: %v", err)
	}
}

// createConfigMap is the admission request of creating ConfigMap
// default/name, with data.
func (v *policyEnv) createConfigMap(name string) *registry.AdmissionRequest {
	return &registry.AdmissionRequest{
		Operation: admission.Create, Resource: v.configmaps.Resource, Namespace: "default", Name: name,
		Object:  &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}, Data: map[string]string{"k": "v"}},
		Options: &metav1.CreateOptions{},
	}
}

// TestPolicyBindings: a policy is enforced by its bindings only; a write
// right after a binding's create or delete returned sees it (no wait: the
// write waits until the view is as current as etcd).
func TestPolicyBindings(t *testing.T) {
	v := newPolicyEnv(t)
	admitted := func(what string) {
		t.Helper()
		if err := v.chain.Validate(v.ctx, v.createConfigMap("cm")); err != nil {
			t.Fatalf("%s: refused: %v", what, err)
		}
	}
	v.store(t, v.vaps, noDataPolicy("p", admissionregistrationv1.Fail, nil))
	// Not even its configuration error counts (kube builds no hook).
	v.store(t, v.vaps, noDataPolicy("unbound", admissionregistrationv1.Fail, &admissionregistrationv1.ParamKind{APIVersion: "example.com/v1", Kind: "Nope"}))
	admitted("policies without a binding")
	v.store(t, v.vapBindings, validatingBinding("other", "not-p"))
	admitted("a policy and a binding of another policy")
	for round := range 3 {
		v.store(t, v.vapBindings, validatingBinding("b", "p"))
		wantRefused(t, v.chain.Validate(v.ctx, v.createConfigMap("cm")), http.StatusUnprocessableEntity, metav1.StatusReasonInvalid,
			`configmaps "cm" is forbidden: ValidatingAdmissionPolicy 'p' with binding 'b' denied request: no data`)
		v.remove(t, v.vapBindings, "b")
		admitted(fmt.Sprintf("the binding deleted, round %d", round))
	}
	v.store(t, v.vapBindings, validatingBinding("b", "p"))
	v.remove(t, v.vaps, "p")
	v.remove(t, v.vaps, "unbound")
	admitted("the policy deleted, its binding kept")
	v.p.mu.RLock()
	hooks := len(v.p.hooks.validating.all)
	compiled := len(v.p.compiledV)
	v.p.mu.RUnlock()
	if hooks != 0 || compiled != 0 {
		t.Fatalf("with no policy stored: %d validating hooks, %d compiled policies; want none", hooks, compiled)
	}
}

// TestPolicyParamKindNotServed: a bound policy whose paramKind is not
// served is kube's configuration error, refused under Fail and skipped
// under Ignore; a mutating one refuses with the mutating plugin's message.
func TestPolicyParamKindNotServed(t *testing.T) {
	v := newPolicyEnv(t)
	nope := &admissionregistrationv1.ParamKind{APIVersion: "example.com/v1", Kind: "Nope"}
	v.store(t, v.vaps, noDataPolicy("p", admissionregistrationv1.Fail, nope))
	v.store(t, v.vapBindings, validatingBinding("b", "p"))
	wantRefused(t, v.chain.Validate(v.ctx, v.createConfigMap("cm")), http.StatusUnprocessableEntity, metav1.StatusReasonInvalid,
		`configmaps "cm" is forbidden: ValidatingAdmissionPolicy 'p' denied request: failed to configure policy: failed to find resource referenced by paramKind: 'example.com/v1, Kind=Nope'`)
	ignored := noDataPolicy("ignored", admissionregistrationv1.Ignore, nope)
	v.remove(t, v.vapBindings, "b")
	v.store(t, v.vaps, ignored)
	v.store(t, v.vapBindings, validatingBinding("b", "ignored"))
	if err := v.chain.Validate(v.ctx, v.createConfigMap("cm")); err != nil {
		t.Fatalf("failurePolicy Ignore: refused: %v", err)
	}
	// (A paramKind apiVersion that does not parse is refused when the
	// policy is written, as kube's validation refuses it.)

	v.store(t, v.maps, labelPolicy("m", nope))
	v.store(t, v.mapBindings, mutatingBinding("mb", "m"))
	req := v.createConfigMap("cm")
	msg := `policy "m" denied request: failed to configure policy: failed to find resource referenced by paramKind: 'example.com/v1, Kind=Nope'`
	err := v.chain.Mutate(v.ctx, req)
	wantRefused(t, err, http.StatusForbidden, metav1.StatusReasonForbidden, msg)
	if causes := statusOf(t, err).Details.Causes; len(causes) != 1 || causes[0].Message != msg {
		t.Fatalf("causes %+v; want one, the message", causes)
	}
	if labels := req.Object.(*corev1.ConfigMap).Labels; labels != nil {
		t.Fatalf("the refused ConfigMap was changed: labels %v", labels)
	}
}

// TestPolicyParamKindServedLater: the hooks follow the served resources:
// a policy whose paramKind stops being served is a configuration error
// from then on, and works again once it is served again (a CRD created
// after its policy), with no change to the policy or binding.
func TestPolicyParamKindServedLater(t *testing.T) {
	v := newPolicyEnv(t)
	leases, ok := v.catalog.Lookup("coordination.k8s.io", "v1", "leases")
	if !ok {
		t.Fatal("no leases served")
	}
	lease := &admissionregistrationv1.ParamKind{APIVersion: "coordination.k8s.io/v1", Kind: "Lease"}
	v.store(t, v.vaps, noDataPolicy("p", admissionregistrationv1.Fail, lease))
	v.store(t, v.vapBindings, validatingBinding("b", "p"))
	// No paramRef: the policy runs without params, and refuses data.
	wantRefused(t, v.chain.Validate(v.ctx, v.createConfigMap("cm")), http.StatusUnprocessableEntity, metav1.StatusReasonInvalid,
		`configmaps "cm" is forbidden: ValidatingAdmissionPolicy 'p' with binding 'b' denied request: no data`)
	v.catalog.Remove(leases.Resource.GroupResource())
	wantRefused(t, v.chain.Validate(v.ctx, v.createConfigMap("cm")), http.StatusUnprocessableEntity, metav1.StatusReasonInvalid,
		`configmaps "cm" is forbidden: ValidatingAdmissionPolicy 'p' denied request: failed to configure policy: failed to find resource referenced by paramKind: 'coordination.k8s.io/v1, Kind=Lease'`)
	if err := v.catalog.Add(leases); err != nil {
		t.Fatal(err)
	}
	wantRefused(t, v.chain.Validate(v.ctx, v.createConfigMap("cm")), http.StatusUnprocessableEntity, metav1.StatusReasonInvalid,
		`configmaps "cm" is forbidden: ValidatingAdmissionPolicy 'p' with binding 'b' denied request: no data`)
}

// TestPoliciesMayMutate: only a bound mutating policy may mutate, once the
// view is loaded.
func TestPoliciesMayMutate(t *testing.T) {
	v := newPolicyEnv(t)
	if fresh := NewPolicies(PolicyConfig{}); !fresh.MayMutate(registry.ConfigMaps) {
		t.Fatal("MayMutate before the view was loaded: false; want true")
	}
	mayMutate := func(want bool, what string) {
		t.Helper()
		// MayMutate does not wait for the view; a write does.
		if err := v.chain.Mutate(v.ctx, v.createConfigMap("cm")); err != nil {
			t.Fatal(err)
		}
		if got := v.p.MayMutate(registry.ConfigMaps); got != want {
			t.Fatalf("%s: MayMutate %v; want %v", what, got, want)
		}
		if got := v.chain.MayMutate(registry.ConfigMaps); got != want {
			t.Fatalf("%s: the chain's MayMutate %v; want %v", what, got, want)
		}
	}
	mayMutate(false, "nothing stored")
	v.store(t, v.vaps, noDataPolicy("p", admissionregistrationv1.Fail, nil))
	v.store(t, v.vapBindings, validatingBinding("b", "p"))
	v.store(t, v.maps, labelPolicy("m", nil))
	mayMutate(false, "a validating policy bound, a mutating one not")
	v.store(t, v.mapBindings, mutatingBinding("mb", "m"))
	mayMutate(true, "a mutating policy bound")
	req := v.createConfigMap("cm")
	if err := v.chain.Mutate(v.ctx, req); err != nil {
		t.Fatal(err)
	}
	if labels := req.Object.(*corev1.ConfigMap).Labels; labels["mutated"] != "yes" {
		t.Fatalf("mutated ConfigMap: labels %v; want mutated=yes", labels)
	}
	v.remove(t, v.mapBindings, "mb")
	mayMutate(false, "the mutating binding deleted")
}

// TestPolicyReinvocation: a policy with reinvocationPolicy IfNeeded runs
// again when a policy after it changed the object, as kube's chain
// reinvokes; one with Never does not. Concord runs the policies in the
// order of their names.
func TestPolicyReinvocation(t *testing.T) {
	for _, tc := range []struct {
		reinvocation admissionregistrationv1.ReinvocationPolicyType
		copied       string
	}{
		{admissionregistrationv1.IfNeededReinvocationPolicy, "b"},
		{admissionregistrationv1.NeverReinvocationPolicy, "none"},
	} {
		t.Run(string(tc.reinvocation), func(t *testing.T) {
			v := newPolicyEnv(t)
			copier := labelPolicy("a-copy", nil)
			copier.Spec.ReinvocationPolicy = tc.reinvocation
			copier.Spec.Mutations[0].ApplyConfiguration.Expression = `Object{data: {"copy": has(object.data) && "source" in object.data ? object.data["source"] : "none"}}`
			source := labelPolicy("b-source", nil)
			source.Spec.Mutations[0].ApplyConfiguration.Expression = `Object{data: {"source": "b"}}`
			v.store(t, v.maps, copier)
			v.store(t, v.maps, source)
			v.store(t, v.mapBindings, mutatingBinding("a-copy", "a-copy"))
			v.store(t, v.mapBindings, mutatingBinding("b-source", "b-source"))
			req := v.createConfigMap("cm")
			if err := v.chain.Mutate(v.ctx, req); err != nil {
				t.Fatal(err)
			}
			want := map[string]string{"k": "v", "source": "b", "copy": tc.copied}
			if got := req.Object.(*corev1.ConfigMap).Data; !maps.Equal(got, want) {
				t.Fatalf("mutated data %v; want %v", got, want)
			}
		})
	}
}
