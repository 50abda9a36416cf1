package apiserver_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	admissionregistrationv1ac "k8s.io/client-go/applyconfigurations/admissionregistration/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

const webhooksPath = "/apis/admissionregistration.k8s.io/v1"

// envtestWebhook is a webhook as controller-runtime's envtest installs it
// (WebhookInstallOptions): a URL on the local webhook server, its CA, and
// the fields it must set.
func envtestWebhook(name string) admissionregistrationv1.ValidatingWebhook {
	return admissionregistrationv1.ValidatingWebhook{
		Name:                    name,
		ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: ptr("https://127.0.0.1:9443/validate"), CABundle: []byte("-----BEGIN CERTIFICATE-----")},
		SideEffects:             ptr(admissionregistrationv1.SideEffectClassNone),
		AdmissionReviewVersions: []string{"v1"},
		Rules: []admissionregistrationv1.RuleWithOperations{{
			Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
			Rule:       admissionregistrationv1.Rule{APIGroups: []string{"example.com"}, APIVersions: []string{"v1"}, Resources: []string{"widgets"}},
		}},
	}
}

// TestWebhookConfigurationsWithClientGo: client-go's typed client (protobuf,
// as envtest's) creates, reads, lists, watches, replaces, patches, applies
// (as Helm 4 does) and deletes both kinds; what it created comes back with
// kube's defaults.
func TestWebhookConfigurationsWithClientGo(t *testing.T) {
	s := startServer(t)
	client, err := kubernetes.NewForConfig(&rest.Config{Host: s.URL})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	vwcs := client.AdmissionregistrationV1().ValidatingWebhookConfigurations()

	empty, err := vwcs.List(ctx, metav1.ListOptions{})
	if err != nil || len(empty.Items) != 0 {
		t.Fatalf("List: %v, %d items; want none", err, len(empty.Items))
	}
	w, err := vwcs.Watch(ctx, metav1.ListOptions{ResourceVersion: empty.ResourceVersion})
	if err != nil {
		t.Fatalf("Watch: %v", err)
	}
	defer w.Stop()

	created, err := vwcs.Create(ctx, &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "widgets"},
		Webhooks:   []admissionregistrationv1.ValidatingWebhook{envtestWebhook("vwidget.example.com")},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	want := envtestWebhook("vwidget.example.com")
	want.FailurePolicy = ptr(admissionregistrationv1.Fail)
	want.MatchPolicy = ptr(admissionregistrationv1.Equivalent)
	want.NamespaceSelector, want.ObjectSelector = &metav1.LabelSelector{}, &metav1.LabelSelector{}
	want.TimeoutSeconds = ptr[int32](10)
	want.Rules[0].Scope = ptr(admissionregistrationv1.AllScopes)
	if diff := cmp.Diff(created.Webhooks, []admissionregistrationv1.ValidatingWebhook{want}); diff != "" {
		t.Errorf("created webhooks (-got +want):\n%s", diff)
	}
	if created.Generation != 1 || created.UID == "" || created.ResourceVersion == "" {
		t.Errorf("created generation %d uid %q rv %q; want 1 and both set", created.Generation, created.UID, created.ResourceVersion)
	}
	if _, err := vwcs.Create(ctx, &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "widgets"}}, metav1.CreateOptions{}); !apierrors.IsAlreadyExists(err) {
		t.Errorf("second Create = %v; want AlreadyExists", err)
	}

	got, err := vwcs.Get(ctx, "widgets", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	if diff := cmp.Diff(got, created); diff != "" {
		t.Errorf("Get differs from Create's answer (-got +want):\n%s", diff)
	}

	got.Webhooks[0].FailurePolicy = ptr(admissionregistrationv1.Ignore)
	updated, err := vwcs.Update(ctx, got, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("Update: %v", err)
	}
	if *updated.Webhooks[0].FailurePolicy != admissionregistrationv1.Ignore || updated.Generation != 2 {
		t.Errorf("Update: failurePolicy %s, generation %d; want Ignore, 2", *updated.Webhooks[0].FailurePolicy, updated.Generation)
	}
	stale := created.DeepCopy()
	stale.Webhooks[0].TimeoutSeconds = ptr[int32](3)
	if _, err := vwcs.Update(ctx, stale, metav1.UpdateOptions{}); !apierrors.IsConflict(err) {
		t.Errorf("stale Update = %v; want Conflict", err)
	}
	unconditional := updated.DeepCopy()
	unconditional.ResourceVersion = ""
	var refusal apierrors.APIStatus
	if _, err := vwcs.Update(ctx, unconditional, metav1.UpdateOptions{}); !errors.As(err, &refusal) || refusal.Status().Code != http.StatusPreconditionRequired {
		t.Errorf("Update without a resourceVersion = %v; want 428 (kube's strategy refuses it)", err)
	}

	// kubectl's default patch: the webhooks merge by name.
	patched, err := vwcs.Patch(ctx, "widgets", types.StrategicMergePatchType, []byte(`{"webhooks":[{"name":"vwidget.example.com","timeoutSeconds":5}]}`), metav1.PatchOptions{})
	if err != nil {
		t.Fatalf("Patch: %v", err)
	}
	if len(patched.Webhooks) != 1 || *patched.Webhooks[0].TimeoutSeconds != 5 || *patched.Webhooks[0].FailurePolicy != admissionregistrationv1.Ignore {
		t.Errorf("Patch: %+v; want the one webhook with timeout 5, failurePolicy kept", patched.Webhooks)
	}
	if _, err := vwcs.Patch(ctx, "widgets", types.MergePatchType, []byte(`{"webhooks":[{"name":"vwidget.example.com","sideEffects":"Some","admissionReviewVersions":["v1"],"clientConfig":{"url":"https://127.0.0.1:9443/v"}}]}`), metav1.PatchOptions{}); !apierrors.IsInvalid(err) {
		t.Errorf("Patch to sideEffects Some = %v; want Invalid", err)
	}

	list, err := vwcs.List(ctx, metav1.ListOptions{})
	if err != nil || len(list.Items) != 1 || list.Items[0].Name != "widgets" || list.ResourceVersion != patched.ResourceVersion {
		t.Errorf("List = %v, %+v; want widgets at rv %s", err, list, patched.ResourceVersion)
	}
	if err := vwcs.Delete(ctx, "widgets", metav1.DeleteOptions{}); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if _, err := vwcs.Get(ctx, "widgets", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("Get after Delete = %v; want NotFound", err)
	}

	type event struct {
		Type       watch.EventType
		Generation int64
	}
	var events []event
	for len(events) < 4 {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatalf("watch ended after %v", events)
			}
			c, isConfig := ev.Object.(*admissionregistrationv1.ValidatingWebhookConfiguration)
			if !isConfig || c.Name != "widgets" {
				t.Fatalf("watch event %s of %T %v", ev.Type, ev.Object, ev.Object)
			}
			events = append(events, event{ev.Type, c.Generation})
		case <-ctx.Done():
			t.Fatalf("watch: only %v", events)
		}
	}
	if diff := cmp.Diff(events, []event{{watch.Added, 1}, {watch.Modified, 2}, {watch.Modified, 3}, {watch.Deleted, 3}}); diff != "" {
		t.Errorf("watch events (-got +want):\n%s", diff)
	}

	// Server-side apply, Helm 4's default: created, then owned and changed
	// field by field.
	mwcs := client.AdmissionregistrationV1().MutatingWebhookConfigurations()
	hook := func(timeout int32) *admissionregistrationv1ac.MutatingWebhookConfigurationApplyConfiguration {
		return admissionregistrationv1ac.MutatingWebhookConfiguration("inject").WithWebhooks(admissionregistrationv1ac.MutatingWebhook().
			WithName("inject.example.com").
			WithClientConfig(admissionregistrationv1ac.WebhookClientConfig().WithService(admissionregistrationv1ac.ServiceReference().WithNamespace("system").WithName("webhooks").WithPath("/mutate"))).
			WithSideEffects(admissionregistrationv1.SideEffectClassNoneOnDryRun).
			WithAdmissionReviewVersions("v1", "v1beta1").
			WithTimeoutSeconds(timeout))
	}
	applied, err := mwcs.Apply(ctx, hook(7), metav1.ApplyOptions{FieldManager: "helm"})
	if err != nil {
		t.Fatalf("Apply (create): %v", err)
	}
	m := applied.Webhooks[0]
	if *m.ClientConfig.Service.Port != 443 || *m.ReinvocationPolicy != admissionregistrationv1.NeverReinvocationPolicy || *m.TimeoutSeconds != 7 {
		t.Errorf("applied webhook %+v; want port 443, reinvocationPolicy Never, timeout 7", m)
	}
	applied, err = mwcs.Apply(ctx, hook(9), metav1.ApplyOptions{FieldManager: "helm"})
	if err != nil || *applied.Webhooks[0].TimeoutSeconds != 9 || applied.Generation != 2 {
		t.Fatalf("Apply (change): %v, %+v; want timeout 9 at generation 2", err, applied)
	}
	if len(applied.ManagedFields) != 1 || applied.ManagedFields[0].Manager != "helm" || applied.ManagedFields[0].Operation != metav1.ManagedFieldsOperationApply {
		t.Errorf("managedFields %+v; want helm's Apply entry only", applied.ManagedFields)
	}
	if err := mwcs.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		t.Fatalf("DeleteCollection: %v", err)
	}
	if left, err := mwcs.List(ctx, metav1.ListOptions{}); err != nil || len(left.Items) != 0 {
		t.Errorf("List after DeleteCollection: %v, %d items; want none", err, len(left.Items))
	}
}

// TestWebhookConfigurationsBadInput: kube's validation over HTTP — a 422
// Invalid with kube's message and one cause per field — and nothing stored.
func TestWebhookConfigurationsBadInput(t *testing.T) {
	s := startServer(t)
	// valid is a webhook that passes; each case replaces its fields.
	valid := map[string]any{
		"name":                    "check.example.com",
		"clientConfig":            map[string]any{"url": "https://hooks.example.com/check"},
		"sideEffects":             "None",
		"admissionReviewVersions": []string{"v1"},
	}
	with := func(fields map[string]any) map[string]any {
		h := map[string]any{}
		for k, v := range valid {
			h[k] = v
		}
		for k, v := range fields {
			if v == nil {
				delete(h, k)
				continue
			}
			h[k] = v
		}
		return h
	}
	type cause struct{ Field, Message string }
	for _, tc := range []struct {
		name     string
		resource string
		hooks    []map[string]any
		message  string // after `<Kind>.admissionregistration.k8s.io "x" is invalid: `
		causes   []cause
	}{
		{"webhook without a name", "validatingwebhookconfigurations", []map[string]any{with(map[string]any{"name": nil})},
			"webhooks[0].name: Required value",
			[]cause{{"webhooks[0].name", "Required value"}}},
		{"webhook name not fully qualified", "mutatingwebhookconfigurations", []map[string]any{with(map[string]any{"name": "check"})},
			`webhooks[0].name: Invalid value: "check": should be a domain with at least three segments separated by dots`,
			[]cause{{"webhooks[0].name", `Invalid value: "check": should be a domain with at least three segments separated by dots`}}},
		{"duplicate webhook names", "validatingwebhookconfigurations", []map[string]any{valid, valid},
			`webhooks[1].name: Duplicate value: "check.example.com"`,
			[]cause{{"webhooks[1].name", `Duplicate value: "check.example.com"`}}},
		{"no sideEffects, no admissionReviewVersions", "validatingwebhookconfigurations", []map[string]any{with(map[string]any{"sideEffects": nil, "admissionReviewVersions": nil})},
			"[webhooks[0].sideEffects: Required value: must specify one of None, NoneOnDryRun, webhooks[0].admissionReviewVersions: Required value: must specify one of v1, v1beta1]",
			[]cause{
				{"webhooks[0].sideEffects", "Required value: must specify one of None, NoneOnDryRun"},
				{"webhooks[0].admissionReviewVersions", "Required value: must specify one of v1, v1beta1"},
			}},
		{"sideEffects Unknown", "mutatingwebhookconfigurations", []map[string]any{with(map[string]any{"sideEffects": "Unknown"})},
			`webhooks[0].sideEffects: Unsupported value: "Unknown": supported values: "None", "NoneOnDryRun"`,
			[]cause{{"webhooks[0].sideEffects", `Unsupported value: "Unknown": supported values: "None", "NoneOnDryRun"`}}},
		{"no recognized admissionReviewVersion", "validatingwebhookconfigurations", []map[string]any{with(map[string]any{"admissionReviewVersions": []string{"v2"}})},
			`webhooks[0].admissionReviewVersions: Invalid value: ["v2"]: must include at least one of v1, v1beta1`,
			[]cause{{"webhooks[0].admissionReviewVersions", `Invalid value: ["v2"]: must include at least one of v1, v1beta1`}}},
		{"timeout of 60", "validatingwebhookconfigurations", []map[string]any{with(map[string]any{"timeoutSeconds": 60})},
			"webhooks[0].timeoutSeconds: Invalid value: 60: the timeout value must be between 1 and 30 seconds",
			[]cause{{"webhooks[0].timeoutSeconds", "Invalid value: 60: the timeout value must be between 1 and 30 seconds"}}},
		{"failurePolicy and reinvocationPolicy unknown", "mutatingwebhookconfigurations", []map[string]any{with(map[string]any{"failurePolicy": "Retry", "reinvocationPolicy": "Always"})},
			`[webhooks[0].failurePolicy: Unsupported value: "Retry": supported values: "Fail", "Ignore", webhooks[0].reinvocationPolicy: Unsupported value: "Always": supported values: "IfNeeded", "Never"]`,
			[]cause{
				{"webhooks[0].failurePolicy", `Unsupported value: "Retry": supported values: "Fail", "Ignore"`},
				{"webhooks[0].reinvocationPolicy", `Unsupported value: "Always": supported values: "IfNeeded", "Never"`},
			}},
		{"both url and service", "validatingwebhookconfigurations", []map[string]any{with(map[string]any{"clientConfig": map[string]any{"url": "https://a.example.com", "service": map[string]any{"namespace": "a", "name": "b"}}})},
			"webhooks[0].clientConfig: Required value: exactly one of url or service is required",
			[]cause{{"webhooks[0].clientConfig", "Required value: exactly one of url or service is required"}}},
		{"url over http", "validatingwebhookconfigurations", []map[string]any{with(map[string]any{"clientConfig": map[string]any{"url": "http://hooks.example.com/check"}})},
			`webhooks[0].clientConfig.url: Invalid value: "http": 'https' is the only allowed URL scheme; desired format: https://host[/path]`,
			[]cause{{"webhooks[0].clientConfig.url", `Invalid value: "http": 'https' is the only allowed URL scheme; desired format: https://host[/path]`}}},
		{"service without namespace, on port 0", "mutatingwebhookconfigurations", []map[string]any{with(map[string]any{"clientConfig": map[string]any{"service": map[string]any{"name": "webhooks", "port": 0}}})},
			"[webhooks[0].clientConfig.service.namespace: Required value, webhooks[0].clientConfig.service.port: Invalid value: 0: port is not valid: must be between 1 and 65535, inclusive]",
			[]cause{
				{"webhooks[0].clientConfig.service.namespace", "Required value"},
				{"webhooks[0].clientConfig.service.port", "Invalid value: 0: port is not valid: must be between 1 and 65535, inclusive"},
			}},
		{"rule with an unknown operation and scope", "validatingwebhookconfigurations", []map[string]any{with(map[string]any{"rules": []map[string]any{{"operations": []string{"PATCH"}, "apiGroups": []string{""}, "apiVersions": []string{"v1"}, "resources": []string{"pods"}, "scope": "Everywhere"}}})},
			`[webhooks[0].rules[0].operations[0]: Unsupported value: "PATCH": supported values: "*", "CONNECT", "CREATE", "DELETE", "UPDATE", webhooks[0].rules[0].scope: Unsupported value: "Everywhere": supported values: "*", "Cluster", "Namespaced"]`,
			[]cause{
				{"webhooks[0].rules[0].operations[0]", `Unsupported value: "PATCH": supported values: "*", "CONNECT", "CREATE", "DELETE", "UPDATE"`},
				{"webhooks[0].rules[0].scope", `Unsupported value: "Everywhere": supported values: "*", "Cluster", "Namespaced"`},
			}},
		{"selector with an unknown operator", "validatingwebhookconfigurations", []map[string]any{with(map[string]any{"objectSelector": map[string]any{"matchExpressions": []map[string]any{{"key": "app", "operator": "Like"}}}})},
			`webhooks[0].objectSelector.matchExpressions[0].operator: Invalid value: "Like": not a valid selector operator`,
			[]cause{{"webhooks[0].objectSelector.matchExpressions[0].operator", `Invalid value: "Like": not a valid selector operator`}}},
		{"match condition that is not a bool", "mutatingwebhookconfigurations", []map[string]any{with(map[string]any{"matchConditions": []map[string]any{{"name": "size", "expression": "size(object.metadata.name)"}}})},
			`webhooks[0].matchConditions[0].expression: Invalid value: "size(object.metadata.name)": must evaluate to bool but got int`,
			[]cause{{"webhooks[0].matchConditions[0].expression", `Invalid value: "size(object.metadata.name)": must evaluate to bool but got int`}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := map[string]any{"metadata": map[string]any{"name": "x"}, "webhooks": tc.hooks}
			resp := s.do(t, http.MethodPost, webhooksPath+"/"+tc.resource, body)
			if resp.Code != http.StatusUnprocessableEntity {
				t.Fatalf("POST %s: %d %s; want 422", tc.resource, resp.Code, resp.Body)
			}
			st := resp.status(t)
			kind := map[string]string{"validatingwebhookconfigurations": "ValidatingWebhookConfiguration", "mutatingwebhookconfigurations": "MutatingWebhookConfiguration"}[tc.resource]
			if want := kind + `.admissionregistration.k8s.io "x" is invalid: ` + tc.message; st.Message != want {
				t.Errorf("message\n%s\nwant\n%s", st.Message, want)
			}
			if st.Reason != metav1.StatusReasonInvalid || st.Details == nil || st.Details.Kind != kind || st.Details.Group != "admissionregistration.k8s.io" || st.Details.Name != "x" {
				t.Errorf("status %+v; want Invalid of %s x", st, kind)
			}
			var causes []cause
			if st.Details != nil {
				for _, c := range st.Details.Causes {
					causes = append(causes, cause{c.Field, c.Message})
				}
			}
			if diff := cmp.Diff(causes, tc.causes); diff != "" {
				t.Errorf("causes (-got +want):\n%s", diff)
			}
			if stored := s.storedKeys(t, "/registry/"+tc.resource+"/"); len(stored) != 0 {
				t.Errorf("stored %v; want nothing", stored)
			}
		})
	}
}

// TestWebhookConfigurationsDiscovery: the webhook configurations and the
// admission policies as kube-apiserver 1.37 lists them: cluster-scoped,
// every verb, in the api-extensions category, without short names, with
// kube's storageVersionHash; ValidatingAdmissionPolicies have a status.
func TestWebhookConfigurationsDiscovery(t *testing.T) {
	s := startServer(t)
	var list metav1.APIResourceList
	s.do(t, http.MethodGet, webhooksPath, nil, "Accept", "application/json").decode(t, &list)
	verbs := metav1.Verbs{"create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"}
	want := []metav1.APIResource{
		{Name: "mutatingadmissionpolicies", SingularName: "mutatingadmissionpolicy", Kind: "MutatingAdmissionPolicy", Verbs: verbs, Categories: []string{"api-extensions"}, StorageVersionHash: "mHCkTKpUTrE="},
		{Name: "mutatingadmissionpolicybindings", SingularName: "mutatingadmissionpolicybinding", Kind: "MutatingAdmissionPolicyBinding", Verbs: verbs, Categories: []string{"api-extensions"}, StorageVersionHash: "ZKgZT1uTmZ0="},
		{Name: "mutatingwebhookconfigurations", SingularName: "mutatingwebhookconfiguration", Kind: "MutatingWebhookConfiguration", Verbs: verbs, Categories: []string{"api-extensions"}, StorageVersionHash: "Sqi0GUgDaX0="},
		{Name: "validatingadmissionpolicies", SingularName: "validatingadmissionpolicy", Kind: "ValidatingAdmissionPolicy", Verbs: verbs, Categories: []string{"api-extensions"}, StorageVersionHash: "6OxvlMmQ6is="},
		{Name: "validatingadmissionpolicies/status", Kind: "ValidatingAdmissionPolicy", Verbs: metav1.Verbs{"get", "patch", "update"}},
		{Name: "validatingadmissionpolicybindings", SingularName: "validatingadmissionpolicybinding", Kind: "ValidatingAdmissionPolicyBinding", Verbs: verbs, Categories: []string{"api-extensions"}, StorageVersionHash: "v9715VZqakg="},
		{Name: "validatingwebhookconfigurations", SingularName: "validatingwebhookconfiguration", Kind: "ValidatingWebhookConfiguration", Verbs: verbs, Categories: []string{"api-extensions"}, StorageVersionHash: "B0wHjQmsGNk="},
	}
	if list.GroupVersion != "admissionregistration.k8s.io/v1" {
		t.Errorf("groupVersion %q; want admissionregistration.k8s.io/v1", list.GroupVersion)
	}
	if diff := cmp.Diff(list.APIResources, want); diff != "" {
		t.Errorf("GET %s resources (-got +want):\n%s", webhooksPath, diff)
	}
}

// TestWebhookConfigurationsTable: kubectl get prints kube's columns, NAME,
// WEBHOOKS and AGE, for both kinds.
func TestWebhookConfigurationsTable(t *testing.T) {
	s := startServer(t)
	hooks := []admissionregistrationv1.ValidatingWebhook{envtestWebhook("a.example.com"), envtestWebhook("b.example.com")}
	if resp := s.do(t, http.MethodPost, webhooksPath+"/validatingwebhookconfigurations", map[string]any{"metadata": map[string]any{"name": "two"}, "webhooks": hooks}); resp.Code != http.StatusCreated {
		t.Fatalf("create validating: %d %s", resp.Code, resp.Body)
	}
	if resp := s.do(t, http.MethodPost, webhooksPath+"/mutatingwebhookconfigurations", `{"metadata":{"name":"none"}}`); resp.Code != http.StatusCreated {
		t.Fatalf("create mutating: %d %s", resp.Code, resp.Body)
	}
	for _, tc := range []struct {
		path  string
		cells []any // without Age
	}{
		{webhooksPath + "/validatingwebhookconfigurations", []any{"two", float64(2)}},
		{webhooksPath + "/validatingwebhookconfigurations/two", []any{"two", float64(2)}},
		{webhooksPath + "/mutatingwebhookconfigurations", []any{"none", float64(0)}},
	} {
		resp := s.do(t, http.MethodGet, tc.path, nil, "Accept", kubectlTableAccept)
		var table metav1.Table
		resp.decode(t, &table)
		if resp.Code != http.StatusOK || table.Kind != "Table" {
			t.Fatalf("%s: %d %s; want a Table", tc.path, resp.Code, resp.Body)
		}
		var columns []string
		for _, c := range table.ColumnDefinitions {
			columns = append(columns, c.Name+":"+c.Type)
		}
		if diff := cmp.Diff(columns, []string{"Name:string", "Webhooks:integer", "Age:string"}); diff != "" {
			t.Errorf("%s columns (-got +want):\n%s", tc.path, diff)
		}
		if len(table.Rows) != 1 {
			t.Fatalf("%s: %d rows; want 1", tc.path, len(table.Rows))
		}
		cells := table.Rows[0].Cells
		if diff := cmp.Diff(cells[:len(cells)-1], tc.cells); diff != "" {
			t.Errorf("%s row (-got +want):\n%s", tc.path, diff)
		}
		if age, _ := cells[len(cells)-1].(string); !strings.HasSuffix(age, "s") {
			t.Errorf("%s age %v; want seconds", tc.path, cells[len(cells)-1])
		}
	}
	// The stored value is the v1 JSON kube-apiserver would read.
	var stored map[string]any
	if err := json.Unmarshal([]byte(s.storedKeys(t, "/registry/validatingwebhookconfigurations/two")["/registry/validatingwebhookconfigurations/two"]), &stored); err != nil {
		t.Fatalf("stored value: %v", err)
	}
	if stored["apiVersion"] != "admissionregistration.k8s.io/v1" || stored["kind"] != "ValidatingWebhookConfiguration" {
		t.Errorf("stored %v; want admissionregistration.k8s.io/v1 ValidatingWebhookConfiguration", stored)
	}
}
