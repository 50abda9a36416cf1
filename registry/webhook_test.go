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

func newWebhookStores(t *testing.T) (validating, mutating *Store, e *etcdtest.Etcd) {
	t.Helper()
	e = etcdtest.Start(t)
	storage := etcdstore.New(e.Client, "/registry")
	validating = NewStore(storage, ValidatingWebhookConfigurations, DefaultWatchConfig())
	mutating = NewStore(storage, MutatingWebhookConfigurations, DefaultWatchConfig())
	t.Cleanup(validating.StopWatches)
	t.Cleanup(mutating.StopWatches)
	return validating, mutating, e
}

// TestWebhookDefaults: kube's v1 defaults fill every webhook, its rules
// and its service port, for both kinds; the generation starts at 1 and
// grows when the webhooks change.
func TestWebhookDefaults(t *testing.T) {
	validating, mutating, _ := newWebhookStores(t)
	ctx := testCtx(t)
	rules := []admissionregistrationv1.RuleWithOperations{{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
		Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}},
	}}
	service := &admissionregistrationv1.ServiceReference{Namespace: "system", Name: "webhooks", Path: ptr.To("/validate")}
	sideEffects := ptr.To(admissionregistrationv1.SideEffectClassNone)
	defaultedRules := []admissionregistrationv1.RuleWithOperations{{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
		Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}, Scope: ptr.To(admissionregistrationv1.AllScopes)},
	}}
	defaultedService := &admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{Namespace: "system", Name: "webhooks", Path: ptr.To("/validate"), Port: ptr.To[int32](443)}}

	created, err := validating.Create(ctx, "", &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "policy"},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{
			{Name: "svc.policy.example.com", ClientConfig: admissionregistrationv1.WebhookClientConfig{Service: service.DeepCopy()}, Rules: rules, SideEffects: sideEffects, AdmissionReviewVersions: []string{"v1"}},
			{Name: "url.policy.example.com", ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: ptr.To("https://hooks.example.com/validate")}, SideEffects: sideEffects, AdmissionReviewVersions: []string{"v1"}},
		},
	}, WriteOptions{})
	if err != nil {
		t.Fatalf("create validating: %v", err)
	}
	stored, err := validating.Get(ctx, "", "policy")
	if err != nil {
		t.Fatalf("get validating: %v", err)
	}
	wantValidating := []admissionregistrationv1.ValidatingWebhook{
		{
			Name: "svc.policy.example.com", ClientConfig: *defaultedService, Rules: defaultedRules,
			FailurePolicy: ptr.To(admissionregistrationv1.Fail), MatchPolicy: ptr.To(admissionregistrationv1.Equivalent),
			NamespaceSelector: &metav1.LabelSelector{}, ObjectSelector: &metav1.LabelSelector{},
			SideEffects: sideEffects, TimeoutSeconds: ptr.To[int32](10), AdmissionReviewVersions: []string{"v1"},
		},
		{
			Name: "url.policy.example.com", ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: ptr.To("https://hooks.example.com/validate")},
			FailurePolicy: ptr.To(admissionregistrationv1.Fail), MatchPolicy: ptr.To(admissionregistrationv1.Equivalent),
			NamespaceSelector: &metav1.LabelSelector{}, ObjectSelector: &metav1.LabelSelector{},
			SideEffects: sideEffects, TimeoutSeconds: ptr.To[int32](10), AdmissionReviewVersions: []string{"v1"},
		},
	}
	for what, obj := range map[string]Object{"created": created, "stored": stored} {
		if diff := cmp.Diff(obj.(*admissionregistrationv1.ValidatingWebhookConfiguration).Webhooks, wantValidating); diff != "" {
			t.Errorf("%s validating webhooks (-got +want):\n%s", what, diff)
		}
		if obj.GetGeneration() != 1 {
			t.Errorf("%s validating generation %d; want 1", what, obj.GetGeneration())
		}
	}

	if _, err := mutating.Create(ctx, "", &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "inject"},
		Webhooks: []admissionregistrationv1.MutatingWebhook{
			{Name: "svc.inject.example.com", ClientConfig: admissionregistrationv1.WebhookClientConfig{Service: service.DeepCopy()}, Rules: rules, SideEffects: sideEffects, AdmissionReviewVersions: []string{"v1", "v1beta1"}},
		},
	}, WriteOptions{}); err != nil {
		t.Fatalf("create mutating: %v", err)
	}
	got, err := mutating.Get(ctx, "", "inject")
	if err != nil {
		t.Fatalf("get mutating: %v", err)
	}
	m := got.(*admissionregistrationv1.MutatingWebhookConfiguration)
	wantMutating := []admissionregistrationv1.MutatingWebhook{{
		Name: "svc.inject.example.com", ClientConfig: *defaultedService, Rules: defaultedRules,
		FailurePolicy: ptr.To(admissionregistrationv1.Fail), MatchPolicy: ptr.To(admissionregistrationv1.Equivalent),
		NamespaceSelector: &metav1.LabelSelector{}, ObjectSelector: &metav1.LabelSelector{},
		SideEffects: sideEffects, TimeoutSeconds: ptr.To[int32](10), AdmissionReviewVersions: []string{"v1", "v1beta1"},
		ReinvocationPolicy: ptr.To(admissionregistrationv1.NeverReinvocationPolicy),
	}}
	if diff := cmp.Diff(m.Webhooks, wantMutating); diff != "" {
		t.Errorf("stored mutating webhooks (-got +want):\n%s", diff)
	}

	// A replace that leaves out what was defaulted is defaulted again, and
	// is no change of the webhooks: the generation stays.
	m.Webhooks[0].FailurePolicy, m.Webhooks[0].TimeoutSeconds, m.Webhooks[0].ReinvocationPolicy, m.Webhooks[0].ClientConfig.Service.Port = nil, nil, nil, nil
	m.Labels = map[string]string{"touched": "yes"}
	updated, _, err := mutating.Update(ctx, "", "inject", m, WriteOptions{})
	if err != nil {
		t.Fatalf("update mutating: %v", err)
	}
	if diff := cmp.Diff(updated.(*admissionregistrationv1.MutatingWebhookConfiguration).Webhooks, wantMutating); diff != "" || updated.GetGeneration() != 1 {
		t.Errorf("updated mutating webhooks, generation %d; want 1 (-got +want):\n%s", updated.GetGeneration(), diff)
	}
	m = updated.(*admissionregistrationv1.MutatingWebhookConfiguration)
	m.Webhooks[0].TimeoutSeconds = ptr.To[int32](5)
	updated, _, err = mutating.Update(ctx, "", "inject", m, WriteOptions{})
	if err != nil {
		t.Fatalf("update mutating timeout: %v", err)
	}
	if updated.GetGeneration() != 2 {
		t.Errorf("generation after a webhook change %d; want 2", updated.GetGeneration())
	}
}

// validWebhook is a validating webhook that passes validation; each case
// of TestWebhookValidation breaks one thing of it.
func validWebhook() admissionregistrationv1.ValidatingWebhook {
	return admissionregistrationv1.ValidatingWebhook{
		Name:                    "check.example.com",
		ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: ptr.To("https://hooks.example.com/check")},
		SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
		AdmissionReviewVersions: []string{"v1"},
		Rules: []admissionregistrationv1.RuleWithOperations{{
			Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.OperationAll},
			Rule:       admissionregistrationv1.Rule{APIGroups: []string{"*"}, APIVersions: []string{"*"}, Resources: []string{"*"}},
		}},
	}
}

// TestWebhookValidation: kube's v1 validation of both kinds, each refusal a
// 422 with exactly kube's causes (but for a service's missing name, which
// Concord names where kube names the namespace), and nothing stored.
func TestWebhookValidation(t *testing.T) {
	validating, mutating, e := newWebhookStores(t)
	hook := func(change func(h *admissionregistrationv1.ValidatingWebhook)) []admissionregistrationv1.ValidatingWebhook {
		h := validWebhook()
		change(&h)
		return []admissionregistrationv1.ValidatingWebhook{h}
	}
	for _, tc := range []struct {
		name     string
		mutating bool
		config   string // metadata.name; "" is "x"
		hooks    []admissionregistrationv1.ValidatingWebhook
		// reinvocationPolicy, when set, is the mutating webhooks'.
		reinvocationPolicy admissionregistrationv1.ReinvocationPolicyType
		causes             []string // field: message; none: accepted
	}{
		{name: "valid", hooks: hook(func(*admissionregistrationv1.ValidatingWebhook) {})},
		{name: "no webhooks", hooks: nil},
		{name: "webhook without a name", hooks: hook(func(h *admissionregistrationv1.ValidatingWebhook) { h.Name = "" }),
			causes: []string{"webhooks[0].name: Required value"}},
		{name: "webhook name of two segments", hooks: hook(func(h *admissionregistrationv1.ValidatingWebhook) { h.Name = "check.example" }),
			causes: []string{`webhooks[0].name: Invalid value: "check.example": should be a domain with at least three segments separated by dots`}},
		{name: "duplicate webhook names", hooks: append(hook(func(*admissionregistrationv1.ValidatingWebhook) {}), validWebhook()),
			causes: []string{`webhooks[1].name: Duplicate value: "check.example.com"`}},
		{name: "no admissionReviewVersions", hooks: hook(func(h *admissionregistrationv1.ValidatingWebhook) { h.AdmissionReviewVersions = nil }),
			causes: []string{"webhooks[0].admissionReviewVersions: Required value: must specify one of v1, v1beta1"}},
		{name: "only unknown admissionReviewVersions", hooks: hook(func(h *admissionregistrationv1.ValidatingWebhook) { h.AdmissionReviewVersions = []string{"v2", "v2"} }),
			causes: []string{
				`webhooks[0].admissionReviewVersions[1]: Invalid value: "v2": duplicate version`,
				`webhooks[0].admissionReviewVersions: Invalid value: ["v2","v2"]: must include at least one of v1, v1beta1`,
			}},
		{name: "no sideEffects", hooks: hook(func(h *admissionregistrationv1.ValidatingWebhook) { h.SideEffects = nil }),
			causes: []string{"webhooks[0].sideEffects: Required value: must specify one of None, NoneOnDryRun"}},
		{name: "sideEffects Unknown", hooks: hook(func(h *admissionregistrationv1.ValidatingWebhook) {
			h.SideEffects = ptr.To(admissionregistrationv1.SideEffectClassUnknown)
		}), causes: []string{`webhooks[0].sideEffects: Unsupported value: "Unknown": supported values: "None", "NoneOnDryRun"`}},
		{name: "sideEffects Some", mutating: true, hooks: hook(func(h *admissionregistrationv1.ValidatingWebhook) {
			h.SideEffects = ptr.To(admissionregistrationv1.SideEffectClassSome)
		}), causes: []string{`webhooks[0].sideEffects: Unsupported value: "Some": supported values: "None", "NoneOnDryRun"`}},
		{name: "unknown policies", hooks: hook(func(h *admissionregistrationv1.ValidatingWebhook) {
			h.FailurePolicy = ptr.To(admissionregistrationv1.FailurePolicyType("Sometimes"))
			h.MatchPolicy = ptr.To(admissionregistrationv1.MatchPolicyType("Fuzzy"))
		}), causes: []string{
			`webhooks[0].failurePolicy: Unsupported value: "Sometimes": supported values: "Fail", "Ignore"`,
			`webhooks[0].matchPolicy: Unsupported value: "Fuzzy": supported values: "Equivalent", "Exact"`,
		}},
		{name: "timeout above 30", hooks: hook(func(h *admissionregistrationv1.ValidatingWebhook) { h.TimeoutSeconds = ptr.To[int32](31) }),
			causes: []string{"webhooks[0].timeoutSeconds: Invalid value: 31: the timeout value must be between 1 and 30 seconds"}},
		{name: "timeout of 0", mutating: true, hooks: hook(func(h *admissionregistrationv1.ValidatingWebhook) { h.TimeoutSeconds = ptr.To[int32](0) }),
			causes: []string{"webhooks[0].timeoutSeconds: Invalid value: 0: the timeout value must be between 1 and 30 seconds"}},
		{name: "neither url nor service", hooks: hook(func(h *admissionregistrationv1.ValidatingWebhook) { h.ClientConfig.URL = nil }),
			causes: []string{"webhooks[0].clientConfig: Required value: exactly one of url or service is required"}},
		{name: "both url and service", hooks: hook(func(h *admissionregistrationv1.ValidatingWebhook) {
			h.ClientConfig.Service = &admissionregistrationv1.ServiceReference{Namespace: "a", Name: "b"}
		}), causes: []string{"webhooks[0].clientConfig: Required value: exactly one of url or service is required"}},
		{name: "url over http, with user, query and fragment", hooks: hook(func(h *admissionregistrationv1.ValidatingWebhook) {
			h.ClientConfig.URL = ptr.To("http://me@hooks.example.com/check?x=1#top")
		}), causes: []string{
			`webhooks[0].clientConfig.url: Invalid value: "http": 'https' is the only allowed URL scheme; desired format: https://host[/path]`,
			`webhooks[0].clientConfig.url: Invalid value: "me": user information is not permitted in the URL`,
			`webhooks[0].clientConfig.url: Invalid value: "top": fragments are not permitted in the URL`,
			`webhooks[0].clientConfig.url: Invalid value: "x=1": query parameters are not permitted in the URL`,
		}},
		{name: "relative url", hooks: hook(func(h *admissionregistrationv1.ValidatingWebhook) { h.ClientConfig.URL = ptr.To("/check") }),
			causes: []string{
				`webhooks[0].clientConfig.url: Invalid value: "": 'https' is the only allowed URL scheme; desired format: https://host[/path]`,
				`webhooks[0].clientConfig.url: Invalid value: "": host must be specified; desired format: https://host[/path]`,
			}},
		{name: "service without name, a bad port and a relative path", mutating: true, hooks: hook(func(h *admissionregistrationv1.ValidatingWebhook) {
			h.ClientConfig = admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{Namespace: "system", Port: ptr.To[int32](70000), Path: ptr.To("check")}}
		}), causes: []string{
			"webhooks[0].clientConfig.service.name: Required value",
			"webhooks[0].clientConfig.service.port: Invalid value: 70000: port is not valid: must be between 1 and 65535, inclusive",
			`webhooks[0].clientConfig.service.path: Invalid value: "check": must start with a '/'`,
		}},
		{name: "service without namespace", hooks: hook(func(h *admissionregistrationv1.ValidatingWebhook) {
			h.ClientConfig = admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{Name: "webhooks"}}
		}), causes: []string{"webhooks[0].clientConfig.service.namespace: Required value"}},
		{name: "unknown operation and scope", hooks: hook(func(h *admissionregistrationv1.ValidatingWebhook) {
			h.Rules[0].Operations = []admissionregistrationv1.OperationType{"PATCH"}
			h.Rules[0].Scope = ptr.To(admissionregistrationv1.ScopeType("Global"))
		}), causes: []string{
			`webhooks[0].rules[0].operations[0]: Unsupported value: "PATCH": supported values: "*", "CONNECT", "CREATE", "DELETE", "UPDATE"`,
			`webhooks[0].rules[0].scope: Unsupported value: "Global": supported values: "*", "Cluster", "Namespaced"`,
		}},
		{name: "empty rule", hooks: hook(func(h *admissionregistrationv1.ValidatingWebhook) {
			h.Rules[0] = admissionregistrationv1.RuleWithOperations{}
		}),
			causes: []string{
				"webhooks[0].rules[0].operations: Required value",
				"webhooks[0].rules[0].apiGroups: Required value",
				"webhooks[0].rules[0].apiVersions: Required value",
				"webhooks[0].rules[0].resources: Required value",
			}},
		{name: "wildcards among others", hooks: hook(func(h *admissionregistrationv1.ValidatingWebhook) {
			h.Rules[0].Operations = []admissionregistrationv1.OperationType{"*", "CREATE"}
			h.Rules[0].Resources = []string{"*", "configmaps"}
		}), causes: []string{
			`webhooks[0].rules[0].operations: Invalid value: ["*","CREATE"]: if '*' is present, must not specify other operations`,
			`webhooks[0].rules[0].resources: Invalid value: ["*","configmaps"]: if '*' is present, must not specify other resources without subresources`,
		}},
		{name: "bad selectors", hooks: hook(func(h *admissionregistrationv1.ValidatingWebhook) {
			h.NamespaceSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "team", Operator: "Like", Values: []string{"a"}}}}
			h.ObjectSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "-bad-"}}
		}), causes: []string{
			`webhooks[0].namespaceSelector.matchExpressions[0].operator: Invalid value: "Like": not a valid selector operator`,
			`webhooks[0].objectSelector.matchLabels: Invalid value: "-bad-": a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')`,
		}},
		{name: "unknown reinvocationPolicy", mutating: true, hooks: hook(func(*admissionregistrationv1.ValidatingWebhook) {}), reinvocationPolicy: "Always",
			causes: []string{`webhooks[0].reinvocationPolicy: Unsupported value: "Always": supported values: "IfNeeded", "Never"`}},
		{name: "match conditions: duplicate, unnamed, not a bool, not CEL", hooks: hook(func(h *admissionregistrationv1.ValidatingWebhook) {
			h.MatchConditions = []admissionregistrationv1.MatchCondition{
				{Name: "exclude-leases", Expression: `request.resource.resource != "leases"`},
				{Name: "exclude-leases", Expression: "object.metadata.name"},
				{Name: "", Expression: "true"},
				{Name: "bad/name/", Expression: "1 +"},
			}
		}), causes: []string{
			`webhooks[0].matchConditions[1].expression: Invalid value: "object.metadata.name": must evaluate to bool but got dyn`,
			`webhooks[0].matchConditions[1].name: Duplicate value: "exclude-leases"`,
			"webhooks[0].matchConditions[2].name: Required value",
			"webhooks[0].matchConditions[3].expression: Invalid value: \"1 +\": compilation failed: ERROR: <input>:1:4: Syntax error: mismatched input '<EOF>' expecting {'[', '{', '(', '.', '-', '!', 'true', 'false', 'null', NUM_FLOAT, NUM_INT, NUM_UINT, STRING, BYTES, IDENTIFIER}\n | 1 +\n | ...^",
			`webhooks[0].matchConditions[3].name: Invalid value: "bad/name/": a valid label key must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')`,
		}},
		{name: "reserved static name", config: "policy.static.k8s.io", hooks: hook(func(*admissionregistrationv1.ValidatingWebhook) {}),
			causes: []string{`metadata.name: Invalid value: "policy.static.k8s.io": names ending with ".static.k8s.io" are reserved for static manifest-based configurations and cannot be managed via the API`}},
		{name: "configuration name not a DNS subdomain", mutating: true, config: "Policy_1", hooks: hook(func(*admissionregistrationv1.ValidatingWebhook) {}),
			causes: []string{`metadata.name: Invalid value: "Policy_1": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := tc.config
			if name == "" {
				name = "x"
			}
			store, obj := validating, Object(&admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: name}, Webhooks: tc.hooks})
			if tc.mutating {
				m := &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: name}}
				for _, h := range tc.hooks {
					mh := admissionregistrationv1.MutatingWebhook{
						Name: h.Name, ClientConfig: h.ClientConfig, Rules: h.Rules, FailurePolicy: h.FailurePolicy, MatchPolicy: h.MatchPolicy,
						NamespaceSelector: h.NamespaceSelector, ObjectSelector: h.ObjectSelector, SideEffects: h.SideEffects,
						TimeoutSeconds: h.TimeoutSeconds, AdmissionReviewVersions: h.AdmissionReviewVersions, MatchConditions: h.MatchConditions,
					}
					if tc.reinvocationPolicy != "" {
						mh.ReinvocationPolicy = &tc.reinvocationPolicy
					}
					m.Webhooks = append(m.Webhooks, mh)
				}
				store, obj = mutating, m
			}
			t.Cleanup(func() { _, _ = store.Delete(testCtx(t), "", name, nil, WriteOptions{}) })
			_, err := store.Create(testCtx(t), "", obj, WriteOptions{})
			if len(tc.causes) == 0 {
				if err != nil {
					t.Fatalf("create: %v; want it stored", err)
				}
				return
			}
			var status *apierrors.StatusError
			if !errors.As(err, &status) || !apierrors.IsInvalid(err) || status.ErrStatus.Details == nil {
				t.Fatalf("create: %v; want 422 Invalid", err)
			}
			var causes []string
			for _, c := range status.ErrStatus.Details.Causes {
				causes = append(causes, c.Field+": "+c.Message)
			}
			if diff := cmp.Diff(causes, tc.causes); diff != "" {
				t.Errorf("causes (-got +want):\n%s", diff)
			}
			if status.ErrStatus.Details.Kind != store.Resource.Kind || status.ErrStatus.Details.Group != "admissionregistration.k8s.io" {
				t.Errorf("details %+v; want kind %s of admissionregistration.k8s.io", status.ErrStatus.Details, store.Resource.Kind)
			}
			key := "/registry/" + store.Resource.Plural + "/" + name
			if resp, err := e.Client.Get(testCtx(t), key); err != nil || len(resp.Kvs) != 0 {
				t.Fatalf("etcd %s: %v, %d keys; want nothing stored", key, err, len(resp.Kvs))
			}
		})
	}
}

// TestWebhookUpdateRatchets: kube's update validation is relaxed by the
// stored object. One that an older server stored with sideEffects Unknown
// and an AdmissionReview version this one does not send can still be
// updated (even to sideEffects Some), while a create with them is refused;
// stored matchConditions are not compiled again.
func TestWebhookUpdateRatchets(t *testing.T) {
	validating, _, e := newWebhookStores(t)
	ctx := testCtx(t)
	legacy := `{"apiVersion":"admissionregistration.k8s.io/v1","kind":"ValidatingWebhookConfiguration",` +
		`"metadata":{"name":"legacy","uid":"u-legacy","generation":1,"creationTimestamp":"2020-01-02T03:04:05Z"},` +
		`"webhooks":[{"name":"legacy.example.com","clientConfig":{"url":"https://hooks.example.com/legacy"},"sideEffects":"Unknown",` +
		`"admissionReviewVersions":["v0"],"matchConditions":[{"name":"broken","expression":"1 +"}],"failurePolicy":"Fail","matchPolicy":"Equivalent","namespaceSelector":{},"objectSelector":{},"timeoutSeconds":10}]}`
	if _, err := e.Client.Put(ctx, "/registry/validatingwebhookconfigurations/legacy", legacy); err != nil {
		t.Fatal(err)
	}
	got, err := validating.Get(ctx, "", "legacy")
	if err != nil {
		t.Fatalf("get: %v", err)
	}
	c := got.(*admissionregistrationv1.ValidatingWebhookConfiguration)
	c.Webhooks[0].SideEffects = ptr.To(admissionregistrationv1.SideEffectClassSome)
	updated, _, err := validating.Update(ctx, "", "legacy", c, WriteOptions{})
	if err != nil {
		t.Fatalf("update of a legacy configuration (kube's update validation allows it): %v", err)
	}
	if updated.GetGeneration() != 2 {
		t.Errorf("generation %d; want 2", updated.GetGeneration())
	}

	fresh := c.DeepCopy()
	fresh.ObjectMeta = metav1.ObjectMeta{Name: "fresh"}
	_, err = validating.Create(ctx, "", fresh, WriteOptions{})
	var status *apierrors.StatusError
	if !errors.As(err, &status) || status.ErrStatus.Details == nil {
		t.Fatalf("create with the legacy webhook: %v; want 422", err)
	}
	var fields []string
	for _, c := range status.ErrStatus.Details.Causes {
		fields = append(fields, c.Field)
	}
	if diff := cmp.Diff(fields, []string{"webhooks[0].sideEffects", "webhooks[0].matchConditions[0].expression", "webhooks[0].admissionReviewVersions"}); diff != "" {
		t.Errorf("create with the legacy webhook: causes (-got +want):\n%s", diff)
	}

	// An update that leaves no webhook without side effects behind is held
	// to the strict rules from then on.
	c = updated.(*admissionregistrationv1.ValidatingWebhookConfiguration)
	c.Webhooks[0].SideEffects = ptr.To(admissionregistrationv1.SideEffectClassNone)
	c.Webhooks[0].AdmissionReviewVersions = []string{"v1"}
	c.Webhooks[0].MatchConditions = nil
	updated, _, err = validating.Update(ctx, "", "legacy", c, WriteOptions{})
	if err != nil {
		t.Fatalf("update to a valid webhook: %v", err)
	}
	c = updated.(*admissionregistrationv1.ValidatingWebhookConfiguration)
	c.Webhooks[0].SideEffects = ptr.To(admissionregistrationv1.SideEffectClassUnknown)
	_, _, err = validating.Update(ctx, "", "legacy", c, WriteOptions{})
	if !apierrors.IsInvalid(err) || !errors.As(err, &status) || len(status.ErrStatus.Details.Causes) != 1 ||
		status.ErrStatus.Details.Causes[0].Message != `Unsupported value: "Unknown": supported values: "None", "NoneOnDryRun"` {
		t.Fatalf("update back to Unknown: %v; want 422 sideEffects", err)
	}
}
