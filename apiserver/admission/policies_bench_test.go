package admission

import (
	"context"
	"fmt"
	"strings"
	"testing"

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

// benchPolicies are Policies over a real etcd's stores whose view holds
// policies, bound, as given (no watch: the hooks are built at once).
func benchPolicies(b *testing.B, policies ...*admissionregistrationv1.ValidatingAdmissionPolicy) (*Policies, *registry.Store) {
	b.Helper()
	e := etcdtest.Start(b)
	stores := registry.NewStores(etcdstore.New(e.Client, "/registry"), registry.DefaultWatchConfig())
	catalog := registry.NewCatalog(stores)
	if err := registry.EnsureSystemNamespaces(context.Background(), stores); err != nil {
		b.Fatal(err)
	}
	store := func(r *registry.Resource) *registry.Store {
		s, _ := catalog.Lookup(r.GroupVersion.Group, r.GroupVersion.Version, r.Plural)
		return s
	}
	p := NewPolicies(PolicyConfig{Namespaces: store(registry.Namespaces), Stores: catalog.Stores, Authorizer: filters.AlwaysAllow})
	for i, policy := range policies {
		policy.ResourceVersion = fmt.Sprint(i + 1)
		p.objects[registry.ValidatingAdmissionPolicies.Plural+"/"+policy.Name] = policy
		binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
			ObjectMeta: metav1.ObjectMeta{Name: policy.Name, ResourceVersion: fmt.Sprint(i + 1)},
			Spec:       admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: policy.Name, ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}},
		}
		p.objects[registry.ValidatingAdmissionPolicyBindings.Plural+"/"+binding.Name] = binding
	}
	p.rebuildLocked()
	p.loaded = true
	close(p.syncedCh)
	return p, store(registry.ConfigMaps)
}

// benchPolicy is a validating policy of two expressions on resource.
func benchPolicy(name, resource string) *admissionregistrationv1.ValidatingAdmissionPolicy {
	return &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionregistrationv1.Fail),
			MatchConstraints: &admissionregistrationv1.MatchResources{
				NamespaceSelector: &metav1.LabelSelector{}, ObjectSelector: &metav1.LabelSelector{},
				MatchPolicy: ptr.To(admissionregistrationv1.Equivalent),
				ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{resource}, Scope: ptr.To(admissionregistrationv1.AllScopes)},
				}}},
			},
			Validations: []admissionregistrationv1.Validation{
				{Expression: "!has(object.data) || size(object.data) <= 8", Message: "too many keys"},
				{Expression: "object.metadata.name.startsWith('cm')", Message: "bad name"},
			},
		},
	}
}

// BenchmarkPolicyValidate is the validating policies' step of one write
// of a 1 KiB ConfigMap (the view current; no etcd read but the
// namespace's, from the read cache): none bound, one bound policy of two
// expressions that the ConfigMap passes, and 100 bound policies that do
// not match it.
//
//	go test ./apiserver/admission -run '^$' -bench BenchmarkPolicyValidate
func BenchmarkPolicyValidate(b *testing.B) {
	many := make([]*admissionregistrationv1.ValidatingAdmissionPolicy, 100)
	for i := range many {
		many[i] = benchPolicy(fmt.Sprintf("secrets-%d", i), "secrets")
	}
	for _, bc := range []struct {
		name     string
		policies []*admissionregistrationv1.ValidatingAdmissionPolicy
	}{
		{"none", nil},
		{"one-bound-policy", []*admissionregistrationv1.ValidatingAdmissionPolicy{benchPolicy("one", "configmaps")}},
		{"100-policies-not-matching", many},
	} {
		b.Run(bc.name, func(b *testing.B) {
			p, configMaps := benchPolicies(b, bc.policies...)
			ctx := registry.WithRevisionMemo(context.Background())
			req := &registry.AdmissionRequest{
				Operation: admission.Create, Resource: configMaps.Resource, Namespace: "default", Name: "cm",
				Object:  &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm", Namespace: "default"}, Data: map[string]string{"v": strings.Repeat("x", 1024)}},
				Options: &metav1.CreateOptions{},
			}
			b.ReportAllocs()
			for b.Loop() {
				attrs, o := attributes(ctx, req)
				if err := p.validate(ctx, attrs, o); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
