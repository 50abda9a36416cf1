package admissionpolicystatus_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/concord-dev/concord/etcdstore"
	"github.com/concord-dev/concord/etcdstore/etcdtest"
	"github.com/concord-dev/concord/registry"
	"github.com/concord-dev/concord/registry/controller/admissionpolicystatus"
)

// widgetCRD defines example.com/v1 widgets with spec.size, an integer.
const widgetCRD = `{"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition","metadata":{"name":"widgets.example.com"},
"spec":{"group":"example.com","scope":"Namespaced","names":{"plural":"widgets","singular":"widget","kind":"Widget","listKind":"WidgetList"},
"versions":[{"name":"v1","served":true,"storage":true,"schema":{"openAPIV3Schema":{"type":"object","properties":{"spec":{"type":"object","properties":{"size":{"type":"integer"}}}}}}}]}}`

// newPolicies starts the controller over a catalog of the built-in stores
// and example.com/v1 widgets (a custom resource, served as a CRD is) on a
// real embedded etcd, and returns the policy store.
func newPolicies(t *testing.T) *registry.Store {
	t.Helper()
	e := etcdtest.Start(t)
	storage := etcdstore.New(e.Client, "/registry")
	catalog := registry.NewCatalog(registry.NewStores(storage, registry.DefaultWatchConfig()))
	var crd apiextensionsv1.CustomResourceDefinition
	if err := json.Unmarshal([]byte(widgetCRD), &crd); err != nil {
		t.Fatal(err)
	}
	res, err := registry.CustomResource(&crd, "v1")
	if err != nil {
		t.Fatal(err)
	}
	if err := catalog.Add(registry.NewStore(storage, res, registry.DefaultWatchConfig())); err != nil {
		t.Fatal(err)
	}
	policies, ok := catalog.Lookup("admissionregistration.k8s.io", "v1", "validatingadmissionpolicies")
	if !ok {
		t.Fatal("validatingadmissionpolicies are not served")
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		admissionpolicystatus.New(policies, catalog, slog.New(slog.NewTextHandler(io.Discard, nil))).Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		for _, s := range catalog.Stores() {
			s.StopWatches()
		}
	})
	return policies
}

// policy matches CREATE and UPDATE of resource in group/v1.
func policy(name, group, resource string, validations ...admissionregistrationv1.Validation) *admissionregistrationv1.ValidatingAdmissionPolicy {
	fail, equivalent, all := admissionregistrationv1.Fail, admissionregistrationv1.Equivalent, admissionregistrationv1.AllScopes
	return &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: &fail,
			MatchConstraints: &admissionregistrationv1.MatchResources{
				NamespaceSelector: &metav1.LabelSelector{},
				ObjectSelector:    &metav1.LabelSelector{},
				MatchPolicy:       &equivalent,
				ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{group}, APIVersions: []string{"v1"}, Resources: []string{resource}, Scope: &all},
				}}},
			},
			Validations: validations,
		},
	}
}

func ctxFor(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// observed waits (bounded) until the policy name's status is of its
// generation, and returns the policy.
func observed(t *testing.T, ctx context.Context, policies *registry.Store, name string) *admissionregistrationv1.ValidatingAdmissionPolicy {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		obj, err := policies.Get(ctx, "", name)
		if err != nil {
			t.Fatalf("get %s: %v", name, err)
		}
		p := obj.(*admissionregistrationv1.ValidatingAdmissionPolicy)
		if p.Status.ObservedGeneration == p.Generation {
			return p
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: status %+v still not of generation %d", name, p.Status, p.Generation)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// statusJSON is the status as a client reads it.
func statusJSON(t *testing.T, p *admissionregistrationv1.ValidatingAdmissionPolicy) string {
	t.Helper()
	b, err := json.Marshal(p.Status)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestTypeChecking: each policy gets kube's status: observedGeneration,
// and typeChecking with one warning per expression that does not check
// against the schema of a kind it matches (kube's text: the kind, then
// CEL's issues), or an empty typeChecking.
func TestTypeChecking(t *testing.T) {
	ctx := ctxFor(t)
	policies := newPolicies(t)
	cases := []struct {
		name   string
		policy *admissionregistrationv1.ValidatingAdmissionPolicy
		want   []admissionregistrationv1.ExpressionWarning
	}{
		{
			name:   "missing field of a built-in kind",
			policy: policy("missing-field", "", "configmaps", admissionregistrationv1.Validation{Expression: "object.foo == 'x'"}),
			want: []admissionregistrationv1.ExpressionWarning{{
				FieldRef: "spec.validations[0].expression",
				Warning:  "/v1, Kind=ConfigMap: ERROR: <input>:1:7: undefined field 'foo'\n | object.foo == 'x'\n | ......^\n",
			}},
		},
		{
			name:   "correct built-in",
			policy: policy("correct", "", "configmaps", admissionregistrationv1.Validation{Expression: "object.data['x'] == 'y'"}),
		},
		{
			name: "type mismatch and bad message expression",
			policy: policy("mismatch", "", "configmaps",
				admissionregistrationv1.Validation{Expression: "true"},
				admissionregistrationv1.Validation{Expression: "object.metadata.name == 1", MessageExpression: "object.bar + 'x'"}),
			want: []admissionregistrationv1.ExpressionWarning{
				{
					FieldRef: "spec.validations[1].expression",
					Warning:  "/v1, Kind=ConfigMap: ERROR: <input>:1:22: found no matching overload for '_==_' applied to '(string, int)'\n | object.metadata.name == 1\n | .....................^\n",
				},
				{
					FieldRef: "spec.validations[1].messageExpression",
					Warning:  "/v1, Kind=ConfigMap: ERROR: <input>:1:7: undefined field 'bar'\n | object.bar + 'x'\n | ......^\n",
				},
			},
		},
		{
			name:   "missing field of a custom resource",
			policy: policy("custom-missing", "example.com", "widgets", admissionregistrationv1.Validation{Expression: "object.spec.color == 'red'"}),
			want: []admissionregistrationv1.ExpressionWarning{{
				FieldRef: "spec.validations[0].expression",
				Warning:  "example.com/v1, Kind=Widget: ERROR: <input>:1:12: undefined field 'color'\n | object.spec.color == 'red'\n | ...........^\n",
			}},
		},
		{
			name:   "correct custom resource",
			policy: policy("custom-correct", "example.com", "widgets", admissionregistrationv1.Validation{Expression: "object.spec.size > 1"}),
		},
		// As kube: a kind not served, or a wildcard, is not checked.
		{
			name:   "kind not served",
			policy: policy("not-served", "apps", "deployments", admissionregistrationv1.Validation{Expression: "object.foo == 'x'"}),
		},
		{
			name:   "wildcard",
			policy: policy("wildcard", "", "*", admissionregistrationv1.Validation{Expression: "object.foo == 'x'"}),
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := policies.Create(ctx, "", tc.policy, registry.WriteOptions{}); err != nil {
				t.Fatal(err)
			}
			p := observed(t, ctx, policies, tc.policy.Name)
			if p.Status.ObservedGeneration != 1 || p.Status.TypeChecking == nil {
				t.Fatalf("status %s; want observedGeneration 1 and typeChecking", statusJSON(t, p))
			}
			if diff := cmp.Diff(tc.want, p.Status.TypeChecking.ExpressionWarnings); diff != "" {
				t.Errorf("expressionWarnings (-want +got):\n%s", diff)
			}
			if len(tc.want) == 0 {
				if got, want := statusJSON(t, p), `{"observedGeneration":1,"typeChecking":{}}`; got != want {
					t.Errorf("status %s; want %s", got, want)
				}
			}
		})
	}
}

// TestUpdated: a policy corrected loses its warning at its new
// generation; the status write changes neither the spec nor the
// generation, and records the controller in managedFields.
func TestUpdated(t *testing.T) {
	ctx := ctxFor(t)
	policies := newPolicies(t)
	created, err := policies.Create(ctx, "", policy("fixed", "", "configmaps", admissionregistrationv1.Validation{Expression: "object.foo == 'x'"}), registry.WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p := observed(t, ctx, policies, "fixed")
	if n := len(p.Status.TypeChecking.ExpressionWarnings); n != 1 {
		t.Fatalf("status %s; want one warning", statusJSON(t, p))
	}
	if diff := cmp.Diff(created.(*admissionregistrationv1.ValidatingAdmissionPolicy).Spec, p.Spec); diff != "" || p.Generation != 1 {
		t.Errorf("after the status write: generation %d, spec (-created +stored):\n%s", p.Generation, diff)
	}
	var managers []string
	for _, f := range p.ManagedFields {
		if f.Subresource == "status" {
			managers = append(managers, f.Manager)
		}
	}
	if diff := cmp.Diff([]string{admissionpolicystatus.FieldManager}, managers); diff != "" {
		t.Errorf("managers of the status (-want +got):\n%s", diff)
	}

	fixed := p.DeepCopy()
	fixed.Spec.Validations[0].Expression = "object.data['foo'] == 'x'"
	if _, _, err := policies.Update(ctx, "", "fixed", fixed, registry.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	p = observed(t, ctx, policies, "fixed")
	if got, want := statusJSON(t, p), `{"observedGeneration":2,"typeChecking":{}}`; got != want || p.Generation != 2 {
		t.Errorf("after the fix: generation %d, status %s; want 2, %s", p.Generation, got, want)
	}
	if diff := cmp.Diff(fixed.Spec, p.Spec); diff != "" {
		t.Errorf("after the fix: spec (-sent +stored):\n%s", diff)
	}
}
