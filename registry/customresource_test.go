package registry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"

	"github.com/concord-dev/concord/etcdstore"
	"github.com/concord-dev/concord/etcdstore/etcdtest"
)

// widgetCRD is example.com's Widget: two served versions (v1 stored, with
// a status subresource), defaults, an enum, a list-map, an embedded
// resource, a restriction of metadata.name, CEL rules (one with
// messageExpression, reason and fieldPath; one a transition rule), a
// selectable field and printer columns.
const widgetCRD = `
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget, listKind: WidgetList, shortNames: [wd], categories: [all]}
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {status: {}}
    selectableFields: [{jsonPath: .spec.size}]
    additionalPrinterColumns:
    - {name: Size, type: string, jsonPath: .spec.size}
    - {name: Replicas, type: integer, jsonPath: .spec.replicas}
    - {name: Max, type: integer, jsonPath: .spec.maxReplicas, priority: 1}
    - {name: Age, type: date, jsonPath: .metadata.creationTimestamp}
    schema:
      openAPIV3Schema: &schema
        type: object
        properties:
          metadata:
            type: object
            properties:
              name: {type: string, maxLength: 20}
          spec:
            type: object
            x-kubernetes-validations:
            - rule: self.replicas <= self.maxReplicas
              message: replicas must not exceed maxReplicas
            - rule: self.replicas != 13
              messageExpression: "'replicas ' + string(self.replicas) + ' is unlucky'"
              reason: FieldValueForbidden
              fieldPath: .replicas
            - rule: self.size == oldSelf.size
              message: size is immutable
            properties:
              size: {type: string, enum: [small, large], default: small}
              replicas: {type: integer, minimum: 0, default: 1}
              maxReplicas: {type: integer, default: 10}
              ports:
                type: array
                x-kubernetes-list-type: map
                x-kubernetes-list-map-keys: [name]
                items:
                  type: object
                  required: [name]
                  properties:
                    name: {type: string}
                    port: {type: integer, default: 80}
              template:
                type: object
                x-kubernetes-embedded-resource: true
                x-kubernetes-preserve-unknown-fields: true
              extra:
                type: object
                x-kubernetes-preserve-unknown-fields: true
              value:
                x-kubernetes-int-or-string: true
          status:
            type: object
            properties:
              phase: {type: string}
  - name: v2
    served: true
    storage: false
    schema:
      openAPIV3Schema: *schema
`

func widgetDefinition(t testing.TB) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.Unmarshal([]byte(widgetCRD), crd); err != nil {
		t.Fatalf("widget CRD: %v", err)
	}
	return crd
}

func widgetResource(t testing.TB, version string) *Resource {
	t.Helper()
	res, err := CustomResource(widgetDefinition(t), version)
	if err != nil {
		t.Fatalf("CustomResource(widgets, %s): %v", version, err)
	}
	return res
}

// widget is a custom object from JSON, decoded as apimachinery decodes
// unstructured objects (integers are int64).
func widget(t testing.TB, js string) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON([]byte(js)); err != nil {
		t.Fatalf("widget %s: %v", js, err)
	}
	return u
}

// widgetJSON is a v1 Widget named name with spec as its spec.
func widgetJSON(name, spec string) string {
	return `{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"` + name + `"},"spec":` + spec + `}`
}

type widgetFixture struct {
	etcd   *etcdtest.Etcd
	v1, v2 *Store
	// configMaps is the ConfigMap store, for comparison.
	configMaps *Store
	storage    Storage
	catalog    *Catalog
}

// newWidgetFixture serves widgets in both versions next to the built-ins,
// with the namespace "ns".
func newWidgetFixture(t testing.TB) *widgetFixture {
	t.Helper()
	e := etcdtest.Start(t)
	storage := etcdstore.New(e.Client, "/registry")
	builtins := NewStores(storage, DefaultWatchConfig())
	catalog := NewCatalog(builtins)
	f := &widgetFixture{etcd: e, storage: storage, catalog: catalog,
		v1: NewStore(storage, widgetResource(t, "v1"), DefaultWatchConfig()), v2: NewStore(storage, widgetResource(t, "v2"), DefaultWatchConfig())}
	if err := catalog.Add(f.v1, f.v2); err != nil {
		t.Fatal(err)
	}
	var namespaces *Store
	for _, s := range catalog.Stores() {
		t.Cleanup(s.StopWatches)
		switch s.Resource {
		case Namespaces:
			namespaces = s
		case ConfigMaps:
			f.configMaps = s
		}
	}
	ctx := context.Background()
	if _, err := namespaces.Create(ctx, "", &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ns"}}, WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	return f
}

// raw is the value etcd holds at key (under /registry), decoded.
func (f *widgetFixture) raw(t *testing.T, key string) map[string]any {
	t.Helper()
	resp, err := f.etcd.Client.Get(testCtx(t), "/registry/"+key)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("etcd get /registry/%s: %v, %d keys", key, err, len(resp.Kvs))
	}
	var m map[string]any
	if err := json.Unmarshal(resp.Kvs[0].Value, &m); err != nil {
		t.Fatalf("etcd value of /registry/%s: %v", key, err)
	}
	return m
}

// put writes value at key (under /registry) behind the store's back, as an
// older server or another version of the CRD would have stored it.
func (f *widgetFixture) put(t *testing.T, key, value string) {
	t.Helper()
	if _, err := f.etcd.Client.Put(testCtx(t), "/registry/"+key, value); err != nil {
		t.Fatal(err)
	}
}

func (f *widgetFixture) create(t *testing.T, js string) *unstructured.Unstructured {
	t.Helper()
	out, err := f.v1.Create(testCtx(t), "ns", widget(t, js), WriteOptions{})
	if err != nil {
		t.Fatalf("Create(%s): %v", js, err)
	}
	return out.(*unstructured.Unstructured)
}

func statusOf(t *testing.T, err error) metav1.Status {
	t.Helper()
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		t.Fatalf("error %v (%T) is not a Status", err, err)
	}
	return status.Status()
}

// TestCustomResourceDeclaration: the names, scope, key space, kinds,
// selectable fields and columns come from the CRD; versions that cannot
// be served are refused.
func TestCustomResourceDeclaration(t *testing.T) {
	v1, v2 := widgetResource(t, "v1"), widgetResource(t, "v2")
	type names struct {
		GroupVersion                      schema.GroupVersion
		Kind, ListKind, Plural, Singular  string
		StoragePrefix                     string
		ShortNames, Categories            []string
		Namespaced, Unconditional, Status bool
		SelectableFields                  []string
		Stored                            string
	}
	of := func(r *Resource) names {
		n := names{r.GroupVersion, r.Kind, r.ListGroupVersionKind().Kind, r.Plural, r.Singular, r.StoragePrefix, r.ShortNames, r.Categories,
			r.Namespaced, r.AllowUnconditionalUpdate, r.StatusStrategy != nil, r.SelectableFields, r.stored().GroupVersion.String()}
		return n
	}
	want := names{schema.GroupVersion{Group: "example.com", Version: "v1"}, "Widget", "WidgetList", "widgets", "widget", "example.com/widgets",
		[]string{"wd"}, []string{"all"}, true, false, true, []string{"metadata.name", "metadata.namespace", "spec.size"}, "example.com/v1"}
	if diff := cmp.Diff(want, of(v1)); diff != "" {
		t.Errorf("CustomResource(widgets, v1) (-want +got):\n%s", diff)
	}
	want.GroupVersion.Version, want.Status, want.SelectableFields = "v2", false, []string{"metadata.name", "metadata.namespace"}
	if diff := cmp.Diff(want, of(v2)); diff != "" {
		t.Errorf("CustomResource(widgets, v2) (-want +got):\n%s", diff)
	}
	if v1.NameValidation("Bad_Name", false) == nil || v1.NameValidation("a.b-c", false) != nil {
		t.Errorf("NameValidation is not kube's DNS subdomain rule for custom objects")
	}
	if got := v1.New().GetObjectKind().GroupVersionKind(); got != v1.GroupVersionKind() {
		t.Errorf("New() is a %s; want a %s", got, v1.GroupVersionKind())
	}

	// Accepted names win over spec.names, as kube serves them.
	crd := widgetDefinition(t)
	crd.Status.AcceptedNames = apiextensionsv1.CustomResourceDefinitionNames{Plural: "gadgets", Singular: "gadget", Kind: "Gadget", ListKind: "GadgetList"}
	if res, err := CustomResource(crd, "v1"); err != nil || res.Plural != "gadgets" || res.Kind != "Gadget" || res.StoragePrefix != "example.com/gadgets" {
		t.Errorf("CustomResource with accepted names = %+v, %v; want gadgets", res, err)
	}

	for _, tc := range []struct {
		name    string
		change  func(*apiextensionsv1.CustomResourceDefinition)
		version string
	}{
		{"unknown version", func(*apiextensionsv1.CustomResourceDefinition) {}, "v3"},
		{"neither served nor stored", func(c *apiextensionsv1.CustomResourceDefinition) { c.Spec.Versions[1].Served = false }, "v2"},
		{"conversion webhook", func(c *apiextensionsv1.CustomResourceDefinition) {
			c.Spec.Conversion = &apiextensionsv1.CustomResourceConversion{Strategy: apiextensionsv1.WebhookConverter}
		}, "v2"},
		{"no storage version", func(c *apiextensionsv1.CustomResourceDefinition) { c.Spec.Versions[0].Storage = false }, "v1"},
	} {
		crd := widgetDefinition(t)
		tc.change(crd)
		if res, err := CustomResource(crd, tc.version); err == nil {
			t.Errorf("%s: CustomResource(%s) = %v; want an error", tc.name, tc.version, res.GroupVersionKind())
		}
	}
}

// TestCustomResourceCreate: a create is stored in the storage version under
// /registry/<group>/<plural>/<ns>/<name>, with the schema's defaults
// applied, unknown fields (metadata's too) pruned, the status dropped (the
// status subresource owns it) and generation 1.
func TestCustomResourceCreate(t *testing.T) {
	f := newWidgetFixture(t)
	out := f.create(t, `{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"a","labels":{"k":"v"},"foo":1},
		"spec":{"x":1,"ports":[{"name":"p","bogus":2}],"extra":{"anything":{"goes":true}},"value":"50%","template":{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","bar":1},"spec":{"kept":1}}},
		"status":{"phase":"Running"}}`)
	wantSpec := map[string]any{
		"size": "small", "replicas": int64(1), "maxReplicas": int64(10),
		"ports":    []any{map[string]any{"name": "p", "port": int64(80)}},
		"extra":    map[string]any{"anything": map[string]any{"goes": true}},
		"value":    "50%",
		"template": map[string]any{"apiVersion": "v1", "kind": "Pod", "metadata": map[string]any{"name": "p"}, "spec": map[string]any{"kept": int64(1)}},
	}
	if diff := cmp.Diff(wantSpec, out.Object["spec"]); diff != "" {
		t.Errorf("created spec (-want +got):\n%s", diff)
	}
	if _, ok := out.Object["status"]; ok {
		t.Errorf("created object has a status %v; want none (the status subresource owns it)", out.Object["status"])
	}
	if out.GetGeneration() != 1 || out.GetUID() == "" || out.GetResourceVersion() == "" {
		t.Errorf("created generation %d, uid %q, resourceVersion %q; want 1 and both set", out.GetGeneration(), out.GetUID(), out.GetResourceVersion())
	}

	raw := f.raw(t, "example.com/widgets/ns/a")
	metadata := raw["metadata"].(map[string]any)
	if metadata["uid"] != string(out.GetUID()) || metadata["creationTimestamp"] == nil {
		t.Errorf("stored metadata %v lacks the uid or creationTimestamp", metadata)
	}
	delete(metadata, "uid")
	delete(metadata, "creationTimestamp")
	delete(metadata, "managedFields") // apply_test.go checks them
	want := map[string]any{
		"apiVersion": "example.com/v1", "kind": "Widget",
		"metadata": map[string]any{"name": "a", "namespace": "ns", "labels": map[string]any{"k": "v"}, "generation": float64(1)},
		"spec": map[string]any{
			"size": "small", "replicas": float64(1), "maxReplicas": float64(10),
			"ports":    []any{map[string]any{"name": "p", "port": float64(80)}},
			"extra":    map[string]any{"anything": map[string]any{"goes": true}},
			"value":    "50%",
			"template": map[string]any{"apiVersion": "v1", "kind": "Pod", "metadata": map[string]any{"name": "p"}, "spec": map[string]any{"kept": float64(1)}},
		},
	}
	if diff := cmp.Diff(want, raw); diff != "" {
		t.Errorf("stored value (-want +got):\n%s", diff)
	}

	got, err := f.v1.Get(testCtx(t), "ns", "a")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(out.Object, got.(*unstructured.Unstructured).Object); diff != "" {
		t.Errorf("Get after Create differs from the create's answer (-create +get):\n%s", diff)
	}
}

// rulesSkipped is kube's last cause when OpenAPI errors kept the CEL rules
// from running.
var rulesSkipped = metav1.StatusCause{Type: metav1.CauseTypeFieldValueInvalid, Field: "<nil>",
	Message: "Invalid value: null: some validation rules were not checked because the object was invalid; correct the existing errors to complete validation"}

// TestCustomResourceInvalid: objects the schema, the list types, the
// embedded resource rules, the metadata rules or a CEL rule refuse are 422
// with kube's causes, and nothing is stored.
func TestCustomResourceInvalid(t *testing.T) {
	f := newWidgetFixture(t)
	for _, tc := range []struct {
		name string
		body string
		want []metav1.StatusCause
	}{{
		name: "enum",
		body: widgetJSON("enum", `{"size":"medium"}`),
		want: []metav1.StatusCause{
			{Type: metav1.CauseTypeFieldValueNotSupported, Field: "spec.size", Message: `Unsupported value: "medium": supported values: "small", "large"`},
			rulesSkipped,
		},
	}, {
		name: "type",
		body: widgetJSON("type", `{"replicas":"three"}`),
		want: []metav1.StatusCause{
			{Type: metav1.CauseTypeTypeInvalid, Field: "spec.replicas", Message: `Invalid value: "string": spec.replicas in body must be of type integer: "string"`},
			rulesSkipped,
		},
	}, {
		name: "minimum, CEL rules still run",
		body: widgetJSON("minimum", `{"replicas":-1}`),
		want: []metav1.StatusCause{
			{Type: metav1.CauseTypeFieldValueInvalid, Field: "spec.replicas", Message: "Invalid value: -1: spec.replicas in body should be greater than or equal to 0"},
		},
	}, {
		name: "CEL rule",
		body: widgetJSON("cel", `{"replicas":20}`),
		want: []metav1.StatusCause{
			{Type: metav1.CauseTypeFieldValueInvalid, Field: "spec", Message: "Invalid value: replicas must not exceed maxReplicas"},
		},
	}, {
		name: "CEL messageExpression, reason and fieldPath",
		body: widgetJSON("unlucky", `{"replicas":13,"maxReplicas":20}`),
		want: []metav1.StatusCause{
			{Type: metav1.CauseTypeForbidden, Field: "spec.replicas", Message: "Forbidden: replicas 13 is unlucky"},
		},
	}, {
		name: "list map keys",
		body: widgetJSON("ports", `{"ports":[{"name":"a"},{"name":"a","port":81}]}`),
		want: []metav1.StatusCause{
			{Type: metav1.CauseTypeFieldValueDuplicate, Field: "spec.ports[1]", Message: `Duplicate value: {"name":"a"}`},
		},
	}, {
		name: "list map key required",
		body: widgetJSON("portname", `{"ports":[{"port":81}]}`),
		want: []metav1.StatusCause{
			{Type: metav1.CauseTypeFieldValueRequired, Field: "spec.ports[0].name", Message: "Required value"},
			rulesSkipped,
		},
	}, {
		name: "metadata.name restricted by the schema",
		body: widgetJSON("a-name-that-is-too-long", `{}`),
		want: []metav1.StatusCause{
			{Type: metav1.CauseTypeTooLong, Field: "metadata.name", Message: "Too long: may not be more than 20 bytes"},
			rulesSkipped,
		},
	}, {
		name: "name not a DNS subdomain",
		body: widgetJSON("Bad_Name", `{}`),
		want: []metav1.StatusCause{
			{Type: metav1.CauseTypeFieldValueInvalid, Field: "metadata.name", Message: `Invalid value: "Bad_Name": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')`},
		},
	}, {
		name: "embedded resource",
		body: widgetJSON("embedded", `{"template":{"metadata":{"name":"a/b","namespace":"x"}}}`),
		want: []metav1.StatusCause{
			{Type: metav1.CauseTypeFieldValueRequired, Field: "spec.template.apiVersion", Message: "Required value"},
			{Type: metav1.CauseTypeFieldValueRequired, Field: "spec.template.kind", Message: "Required value"},
			{Type: metav1.CauseTypeFieldValueInvalid, Field: "spec.template.metadata.name", Message: `Invalid value: "a/b": may not contain '/'`},
			rulesSkipped,
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			obj := widget(t, tc.body)
			_, err := f.v1.Create(testCtx(t), "ns", obj, WriteOptions{})
			if !apierrors.IsInvalid(err) {
				t.Fatalf("Create(%s) = %v; want 422 Invalid", tc.body, err)
			}
			st := statusOf(t, err)
			if st.Details.Group != "example.com" || st.Details.Kind != "Widget" || st.Details.Name != obj.GetName() {
				t.Errorf("details %+v; want example.com Widget %s", st.Details, obj.GetName())
			}
			if diff := cmp.Diff(tc.want, st.Details.Causes); diff != "" {
				t.Errorf("causes (-want +got):\n%s", diff)
			}
			if _, err := f.v1.Get(testCtx(t), "ns", obj.GetName()); !apierrors.IsNotFound(err) {
				t.Errorf("Get after a refused create = %v; want 404", err)
			}
		})
	}
}

// update replaces namespace ns's widget with js at resourceVersion rv.
func (f *widgetFixture) update(t *testing.T, s *Store, rv, js string) (*unstructured.Unstructured, error) {
	t.Helper()
	obj := widget(t, js)
	obj.SetResourceVersion(rv)
	out, _, err := s.Update(testCtx(t), "ns", obj.GetName(), obj, WriteOptions{})
	if err != nil {
		return nil, err
	}
	return out.(*unstructured.Unstructured), nil
}

// TestCustomResourceUpdate: a replace is decoded (pruned, defaulted) as a
// create is, keeps the stored status (status subresource), counts a new
// generation only when more than metadata changed, and is judged by the
// transition rules against the stored object, ratcheting on what it does
// not change.
func TestCustomResourceUpdate(t *testing.T) {
	f := newWidgetFixture(t)
	created := f.create(t, widgetJSON("a", `{"replicas":2}`))
	if _, err := f.v1.UpdateStatus(testCtx(t), "ns", "a", widget(t, `{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"a","resourceVersion":"`+created.GetResourceVersion()+`"},"status":{"phase":"Running","bogus":1}}`), WriteOptions{}); err != nil {
		t.Fatalf("UpdateStatus: %v", err)
	}
	current, err := f.v1.Get(testCtx(t), "ns", "a")
	if err != nil {
		t.Fatal(err)
	}
	rv := current.GetResourceVersion()
	if diff := cmp.Diff(map[string]any{"phase": "Running"}, current.(*unstructured.Unstructured).Object["status"]); diff != "" {
		t.Errorf("status after UpdateStatus (-want +got):\n%s", diff)
	}
	if current.GetGeneration() != 1 {
		t.Errorf("generation after a status write = %d; want 1", current.GetGeneration())
	}

	// Labels only, and a status the main resource may not write: the
	// stored status stays, the generation too; spec.replicas, left out,
	// is defaulted again, an unknown field is pruned.
	out, err := f.update(t, f.v1, rv, `{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"a","labels":{"l":"1"}},"spec":{"replicas":2,"x":1},"status":{"phase":"Failed"}}`)
	if err != nil {
		t.Fatalf("metadata-only update: %v", err)
	}
	if out.GetGeneration() != 1 || out.Object["status"].(map[string]any)["phase"] != "Running" {
		t.Errorf("after a labels-only update: generation %d, status %v; want 1 and the stored status", out.GetGeneration(), out.Object["status"])
	}
	if _, ok := out.Object["spec"].(map[string]any)["x"]; ok {
		t.Errorf("update kept the unknown field spec.x")
	}
	out, err = f.update(t, f.v1, out.GetResourceVersion(), widgetJSON("a", `{"maxReplicas":5}`))
	if err != nil {
		t.Fatalf("spec update: %v", err)
	}
	if out.GetGeneration() != 2 || out.Object["spec"].(map[string]any)["replicas"] != int64(1) {
		t.Errorf("after a spec update: generation %d, spec %v; want 2 and replicas defaulted to 1", out.GetGeneration(), out.Object["spec"])
	}

	// The transition rule: size may not change.
	_, err = f.update(t, f.v1, out.GetResourceVersion(), widgetJSON("a", `{"size":"large"}`))
	want := []metav1.StatusCause{{Type: metav1.CauseTypeFieldValueInvalid, Field: "spec", Message: "Invalid value: size is immutable"}}
	if !apierrors.IsInvalid(err) {
		t.Fatalf("update changing spec.size = %v; want 422", err)
	}
	if diff := cmp.Diff(want, statusOf(t, err).Details.Causes); diff != "" {
		t.Errorf("causes of the transition rule (-want +got):\n%s", diff)
	}

	// An object stored while a rule did not hold (replicas above
	// maxReplicas) may be updated without touching it (ratcheting), not
	// made worse.
	f.put(t, "example.com/widgets/ns/old", `{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"old","namespace":"ns","uid":"u1","generation":1,"creationTimestamp":"2026-01-01T00:00:00Z"},"spec":{"size":"small","replicas":20,"maxReplicas":10}}`)
	old, err := f.v1.Get(testCtx(t), "ns", "old")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.update(t, f.v1, old.GetResourceVersion(), `{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"old","labels":{"l":"1"}},"spec":{"size":"small","replicas":20,"maxReplicas":10}}`); err != nil {
		t.Errorf("update leaving the invalid spec as it is = %v; want it to ratchet", err)
	}
	if _, err := f.update(t, f.v1, "", ``+widgetJSON("old", `{"replicas":21,"maxReplicas":10}`)); err == nil {
		t.Errorf("update without a resourceVersion succeeded; want 428")
	}
	current, err = f.v1.Get(testCtx(t), "ns", "old")
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.update(t, f.v1, current.GetResourceVersion(), widgetJSON("old", `{"replicas":21,"maxReplicas":10}`))
	if diff := cmp.Diff([]metav1.StatusCause{{Type: metav1.CauseTypeFieldValueInvalid, Field: "spec", Message: "Invalid value: replicas must not exceed maxReplicas"}}, statusOf(t, err).Details.Causes); diff != "" {
		t.Errorf("causes of an update changing the invalid spec (-want +got):\n%s", diff)
	}
}

// TestCustomResourceConflicts: the version rules of every replace hold for
// custom objects, answered as for ConfigMaps: a stale resourceVersion is
// 409, none 428, and of 8 concurrent replaces from one version one wins.
func TestCustomResourceConflicts(t *testing.T) {
	f := newWidgetFixture(t)
	ctx := testCtx(t)
	created := f.create(t, widgetJSON("a", `{}`))
	cm, err := f.configMaps.Create(ctx, "ns", &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "a"}}, WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.update(t, f.v1, created.GetResourceVersion(), widgetJSON("a", `{"replicas":2}`)); err != nil {
		t.Fatal(err)
	}
	cmUpdate := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "a", ResourceVersion: cm.GetResourceVersion()}, Data: map[string]string{"k": "v"}}
	if _, _, err := f.configMaps.Update(ctx, "ns", "a", cmUpdate, WriteOptions{}); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name   string
		rv     string
		cmRV   string
		code   int32
		reason metav1.StatusReason
	}{
		{"stale resourceVersion", created.GetResourceVersion(), cm.GetResourceVersion(), 409, metav1.StatusReasonConflict},
		{"no resourceVersion", "", "", 428, "PreconditionRequired"},
	} {
		_, err := f.update(t, f.v1, tc.rv, widgetJSON("a", `{"replicas":3}`))
		got := statusOf(t, err)
		cmUpdate := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "a", ResourceVersion: tc.cmRV}, Data: map[string]string{"k": "w"}}
		_, _, cmErr := f.configMaps.Update(ctx, "ns", "a", cmUpdate, WriteOptions{})
		cmGot := statusOf(t, cmErr)
		if got.Code != tc.code || got.Reason != tc.reason {
			t.Errorf("%s: %d %s %q; want %d %s", tc.name, got.Code, got.Reason, got.Message, tc.code, tc.reason)
		}
		// The same answer as a ConfigMap's, but for the resource's names.
		cmGot.Message = strings.NewReplacer(`configmaps "a"`, `widgets.example.com "a"`, "ConfigMap", "Widget").Replace(cmGot.Message)
		if cmGot.Details != nil && got.Details != nil {
			cmGot.Details.Kind, cmGot.Details.Group = got.Details.Kind, got.Details.Group
		}
		if diff := cmp.Diff(cmGot, got); diff != "" {
			t.Errorf("%s: the widget's answer differs from the ConfigMap's (-configmap +widget):\n%s", tc.name, diff)
		}
	}

	current, err := f.v1.Get(ctx, "ns", "a")
	if err != nil {
		t.Fatal(err)
	}
	const writers = 8
	errs := make([]error, writers)
	var wg sync.WaitGroup
	for i := range writers {
		// 3..10: each differs from the stored 2 (an unchanged object would
		// be a write of nothing, and win) and passes the CEL rules.
		obj := widget(t, widgetJSON("a", fmt.Sprintf(`{"replicas":%d}`, i+3)))
		obj.SetResourceVersion(current.GetResourceVersion())
		wg.Go(func() { _, _, errs[i] = f.v1.Update(ctx, "ns", "a", obj, WriteOptions{}) })
	}
	wg.Wait()
	won, conflicts := 0, 0
	for _, err := range errs {
		switch {
		case err == nil:
			won++
		case apierrors.IsConflict(err):
			conflicts++
		default:
			t.Errorf("concurrent replace: %v", err)
		}
	}
	if won != 1 || conflicts != writers-1 {
		t.Errorf("%d concurrent replaces from one version: %d won, %d conflicts; want 1 and %d", writers, won, conflicts, writers-1)
	}
}

// TestCustomResourceWritePath: dry runs, generated names and finalizers
// work for custom objects as for every resource.
func TestCustomResourceWritePath(t *testing.T) {
	f := newWidgetFixture(t)
	ctx := testCtx(t)

	dry, err := f.v1.Create(ctx, "ns", widget(t, widgetJSON("dry", `{"x":1}`)), WriteOptions{DryRun: true})
	if err != nil || dry.(*unstructured.Unstructured).Object["spec"].(map[string]any)["replicas"] != int64(1) {
		t.Errorf("dry-run create = %v, %v; want the defaulted object", dry, err)
	}
	if _, err := f.v1.Get(ctx, "ns", "dry"); !apierrors.IsNotFound(err) {
		t.Errorf("Get after a dry-run create = %v; want 404", err)
	}

	gen := widget(t, `{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"generateName":"w-"},"spec":{}}`)
	out, err := f.v1.Create(ctx, "ns", gen, WriteOptions{})
	if err != nil || !strings.HasPrefix(out.GetName(), "w-") || len(out.GetName()) != len("w-")+5 {
		t.Fatalf("create with generateName = %v, %v; want w-xxxxx", out, err)
	}
	f.raw(t, "example.com/widgets/ns/"+out.GetName())

	held := f.create(t, `{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"held","finalizers":["example.com/hold"]},"spec":{}}`)
	marked, err := f.v1.Delete(ctx, "ns", "held", nil, WriteOptions{})
	if err != nil || marked.(Object).GetDeletionTimestamp() == nil {
		t.Fatalf("delete of an object with a finalizer = %v, %v; want it marked", marked, err)
	}
	release := widget(t, widgetJSON("held", `{}`))
	release.SetResourceVersion(marked.(Object).GetResourceVersion())
	if _, _, err := f.v1.Update(ctx, "ns", "held", release, WriteOptions{}); err != nil {
		t.Fatalf("update removing the last finalizer: %v", err)
	}
	if _, err := f.v1.Get(ctx, "ns", "held"); !apierrors.IsNotFound(err) {
		t.Errorf("Get after the last finalizer went = %v; want 404 (held was %s)", err, held.GetUID())
	}
}

// TestCustomResourceVersions: a second served version shares the key
// space; objects are stored in the storage version's apiVersion and read in
// the version asked for.
func TestCustomResourceVersions(t *testing.T) {
	f := newWidgetFixture(t)
	ctx := testCtx(t)
	obj := widget(t, `{"apiVersion":"example.com/v2","kind":"Widget","metadata":{"name":"a"},"spec":{"x":1}}`)
	out, err := f.v2.Create(ctx, "ns", obj, WriteOptions{})
	if err != nil {
		t.Fatalf("create through v2: %v", err)
	}
	if out.GetObjectKind().GroupVersionKind().Version != "v2" {
		t.Errorf("create through v2 answered %s", out.GetObjectKind().GroupVersionKind())
	}
	if raw := f.raw(t, "example.com/widgets/ns/a"); raw["apiVersion"] != "example.com/v1" {
		t.Errorf("stored apiVersion %v; want the storage version's, example.com/v1", raw["apiVersion"])
	}
	for _, s := range []*Store{f.v1, f.v2} {
		got, err := s.Get(ctx, "ns", "a")
		if err != nil {
			t.Fatal(err)
		}
		if got.GetObjectKind().GroupVersionKind() != s.Resource.GroupVersionKind() || got.GetResourceVersion() != out.GetResourceVersion() {
			t.Errorf("Get through %s = %s at %s; want %s at %s", s.Resource.GroupVersion, got.GetObjectKind().GroupVersionKind(), got.GetResourceVersion(), s.Resource.GroupVersionKind(), out.GetResourceVersion())
		}
		js, _, err := s.GetJSON(ctx, "ns", "a")
		if err != nil || !strings.Contains(string(js), `"apiVersion":"`+s.Resource.GroupVersion.String()+`"`) {
			t.Errorf("GetJSON through %s = %s, %v; want its apiVersion", s.Resource.GroupVersion, js, err)
		}
		list, err := s.List(ctx, "ns", &metainternalversion.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		items := list.(*unstructured.UnstructuredList)
		if items.GetKind() != "WidgetList" || items.GetAPIVersion() != s.Resource.GroupVersion.String() || len(items.Items) != 1 || items.Items[0].GetAPIVersion() != s.Resource.GroupVersion.String() {
			t.Errorf("List through %s = %s %s with %d items; want a WidgetList of its version", s.Resource.GroupVersion, items.GetAPIVersion(), items.GetKind(), len(items.Items))
		}
	}
	// A replace through v1 from the version v2 read conflicts as any.
	if _, err := f.update(t, f.v1, out.GetResourceVersion(), widgetJSON("a", `{"replicas":2}`)); err != nil {
		t.Fatalf("update through v1: %v", err)
	}
	obj = widget(t, `{"apiVersion":"example.com/v2","kind":"Widget","metadata":{"name":"a"},"spec":{}}`)
	obj.SetResourceVersion(out.GetResourceVersion())
	if _, _, err := f.v2.Update(ctx, "ns", "a", obj, WriteOptions{}); !apierrors.IsConflict(err) {
		t.Errorf("stale update through v2 = %v; want 409", err)
	}
}

// TestCustomResourceRead: objects are read as kube's storage codec reads
// them: defaulted and pruned with the schema of the version they were
// stored in (also an older storage version), a missing generation
// repaired; a value of another kind is a corrupt object.
func TestCustomResourceRead(t *testing.T) {
	f := newWidgetFixture(t)
	ctx := testCtx(t)
	for _, tc := range []struct {
		name, object, stored string
		wantSpec             map[string]any
		wantGeneration       int64
	}{
		{"defaults added since, a field dropped since, no generation", "a", `{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"a","namespace":"ns"},"spec":{"size":"large","gone":1}}`,
			map[string]any{"size": "large", "replicas": int64(1), "maxReplicas": int64(10)}, 1},
		{"stored in v2", "b", `{"apiVersion":"example.com/v2","kind":"Widget","metadata":{"name":"b","namespace":"ns","generation":3},"spec":{"replicas":4}}`,
			map[string]any{"size": "small", "replicas": int64(4), "maxReplicas": int64(10)}, 3},
	} {
		f.put(t, "example.com/widgets/ns/"+tc.object, tc.stored)
		for _, s := range []*Store{f.v1, f.v2} {
			got, err := s.Get(ctx, "ns", tc.object)
			if err != nil {
				t.Fatalf("%s: Get through %s: %v", tc.name, s.Resource.GroupVersion, err)
			}
			u := got.(*unstructured.Unstructured)
			if diff := cmp.Diff(tc.wantSpec, u.Object["spec"]); diff != "" {
				t.Errorf("%s: spec read through %s (-want +got):\n%s", tc.name, s.Resource.GroupVersion, diff)
			}
			if u.GetGeneration() != tc.wantGeneration || u.GetAPIVersion() != s.Resource.GroupVersion.String() {
				t.Errorf("%s: read through %s: generation %d, %s; want %d, %s", tc.name, s.Resource.GroupVersion, u.GetGeneration(), u.GetAPIVersion(), tc.wantGeneration, s.Resource.GroupVersion)
			}
			// The JSON reads are never the stored bytes passed through.
			js, _, err := s.GetJSON(ctx, "ns", tc.object)
			if err != nil {
				t.Fatal(err)
			}
			fromJSON := widget(t, string(js))
			fromJSON.SetResourceVersion(u.GetResourceVersion())
			if diff := cmp.Diff(u.Object, fromJSON.Object); diff != "" {
				t.Errorf("%s: GetJSON through %s differs from Get (-get +json):\n%s", tc.name, s.Resource.GroupVersion, diff)
			}
			// A JSON list's item is the object as read, not the stored bytes;
			// a version that is not the storage version lists decoded objects.
			list, served, err := s.ListJSON(ctx, "ns", &metainternalversion.ListOptions{})
			if err != nil || served != (s.Resource.Storage == nil) {
				t.Fatalf("%s: ListJSON through %s: served %v, %v; want served only by the storage version", tc.name, s.Resource.GroupVersion, served, err)
			}
			if !served {
				continue
			}
			found := false
			for _, item := range list.Items {
				listed := widget(t, string(item.appendJSON(nil)))
				if listed.GetName() != tc.object {
					continue
				}
				found = true
				if diff := cmp.Diff(u.Object, listed.Object); diff != "" {
					t.Errorf("%s: ListJSON's item through %s differs from Get (-get +list):\n%s", tc.name, s.Resource.GroupVersion, diff)
				}
			}
			if !found {
				t.Errorf("%s: ListJSON through %s has no item %s", tc.name, s.Resource.GroupVersion, tc.object)
			}
		}
	}
	f.put(t, "example.com/widgets/ns/c", `{"apiVersion":"example.com/v9","kind":"Widget","metadata":{"name":"c","namespace":"ns"}}`)
	if _, err := f.v1.Get(ctx, "ns", "c"); err == nil || !strings.Contains(err.Error(), "example.com/v9") {
		t.Errorf("Get of a value of an unknown version = %v; want the store's error naming it", err)
	}
}

// TestCustomResourceTable: kube's columns for custom resources — Name, then
// the version's printer columns with their types and priorities — and
// cells found by JSONPath, typed as the column says; a version without
// columns prints Name and Age.
func TestCustomResourceTable(t *testing.T) {
	v1 := widgetResource(t, "v1")
	type column struct {
		Name, Type, Format string
		Priority           int32
	}
	var columns []column
	for _, c := range v1.TableColumns {
		columns = append(columns, column{c.Name, c.Type, c.Format, c.Priority})
	}
	want := []column{{"Name", "string", "name", 0}, {"Size", "string", "", 0}, {"Replicas", "integer", "", 0}, {"Max", "integer", "", 1}, {"Age", "date", "", 0}}
	if diff := cmp.Diff(want, columns); diff != "" {
		t.Errorf("TableColumns (-want +got):\n%s", diff)
	}
	if !v1.TableColumnsOnly {
		t.Errorf("TableColumnsOnly is false: the store would add kube's Name and Age around the CRD's columns")
	}
	obj := widget(t, `{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"w","creationTimestamp":"2020-01-01T00:00:00Z"},"spec":{"size":"large","replicas":3}}`)
	cells := v1.TableCells(obj)
	if len(cells) != 5 {
		t.Fatalf("TableCells = %v; want 5 cells", cells)
	}
	if diff := cmp.Diff([]any{"w", "large", int64(3), nil}, cells[:4]); diff != "" {
		t.Errorf("TableCells (-want +got):\n%s", diff)
	}
	if age, ok := cells[4].(string); !ok || !strings.Contains(age, "y") {
		t.Errorf("Age cell = %#v; want the age in years", cells[4])
	}

	crd := widgetDefinition(t)
	crd.Spec.Versions[1].AdditionalPrinterColumns = nil
	v2, err := CustomResource(crd, "v2")
	if err != nil {
		t.Fatal(err)
	}
	if len(v2.TableColumns) != 2 || v2.TableColumns[0].Name != "Name" || v2.TableColumns[1].Name != "Age" || v2.TableColumns[1].Type != "date" {
		t.Errorf("columns of a version without printer columns = %+v; want Name, Age", v2.TableColumns)
	}
}

// TestCustomResourceFieldSelectors: the version's selectableFields filter
// lists; other fields are kube's 400.
func TestCustomResourceFieldSelectors(t *testing.T) {
	f := newWidgetFixture(t)
	ctx := testCtx(t)
	f.create(t, widgetJSON("s", `{"size":"small"}`))
	f.create(t, widgetJSON("l", `{"size":"large"}`))
	for _, tc := range []struct {
		selector string
		want     []string
	}{
		{"spec.size=large", []string{"l"}},
		{"spec.size!=large", []string{"s"}},
		{"metadata.name=s", []string{"s"}},
	} {
		list, err := f.v1.List(ctx, "ns", &metainternalversion.ListOptions{FieldSelector: fields.ParseSelectorOrDie(tc.selector)})
		if err != nil {
			t.Fatalf("List(%s): %v", tc.selector, err)
		}
		var names []string
		for _, item := range list.(*unstructured.UnstructuredList).Items {
			names = append(names, item.GetName())
		}
		if diff := cmp.Diff(tc.want, names); diff != "" {
			t.Errorf("List(%s) (-want +got):\n%s", tc.selector, diff)
		}
	}
	_, err := f.v1.List(ctx, "ns", &metainternalversion.ListOptions{FieldSelector: fields.ParseSelectorOrDie("spec.replicas=1")})
	if got := statusOf(t, err); got.Code != 400 || got.Message != "field label not supported: spec.replicas" {
		t.Errorf("List(spec.replicas=1) = %d %q; want 400 field label not supported", got.Code, got.Message)
	}
	// v2 declares no selectable fields.
	if _, err := f.v2.List(ctx, "ns", &metainternalversion.ListOptions{FieldSelector: fields.ParseSelectorOrDie("spec.size=large")}); statusOf(t, err).Code != 400 {
		t.Errorf("List through v2 by spec.size = %v; want 400", err)
	}
}

// TestCustomResourceDecodeRequest: what the HTTP layer reports for
// fieldValidation Strict and Warn — the pruned paths, as kube names them —
// and that decoding again changes nothing.
func TestCustomResourceDecodeRequest(t *testing.T) {
	decoder, ok := widgetResource(t, "v1").Strategy.(RequestDecoder)
	if !ok {
		t.Fatal("the custom resource Strategy is not a RequestDecoder")
	}
	for _, tc := range []struct {
		body string
		want []string
	}{
		{widgetJSON("a", `{"size":"large"}`), nil},
		{`{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"a","foo":1},"spec":{"x":1,"ports":[{"name":"p","bogus":2}],"extra":{"kept":1},"template":{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","bar":1}}},"status":{"other":1},"top":1}`,
			[]string{"metadata.foo", "spec.ports[0].bogus", "spec.x", "status.other", "top", "spec.template.metadata.bar"}},
	} {
		obj := widget(t, tc.body)
		pruned, err := decoder.DecodeRequest(obj)
		if err != nil {
			t.Fatalf("DecodeRequest(%s): %v", tc.body, err)
		}
		if diff := cmp.Diff(tc.want, pruned); diff != "" {
			t.Errorf("DecodeRequest(%s) pruned (-want +got):\n%s", tc.body, diff)
		}
		if spec := obj.Object["spec"].(map[string]any); spec["replicas"] != int64(1) {
			t.Errorf("DecodeRequest(%s) left spec %v undefaulted", tc.body, spec)
		}
		again := obj.DeepCopy()
		if pruned, err := decoder.DecodeRequest(again); err != nil || len(pruned) != 0 || !cmp.Equal(obj.Object, again.Object) {
			t.Errorf("DecodeRequest again = %q, %v, changes %s; want nothing", pruned, err, cmp.Diff(obj.Object, again.Object))
		}
	}
	bad := widget(t, `{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"a","labels":"x"},"spec":{}}`)
	if _, err := decoder.DecodeRequest(bad); !apierrors.IsBadRequest(err) {
		t.Errorf("DecodeRequest of labels that are a string = %v; want 400", err)
	}
}

// TestCustomResourcePatch: a patch's result is decoded as a body is — what
// the schema prunes is an unknown field to fieldValidation=Strict — and
// judged as a replace; custom objects take no strategic merge patch.
func TestCustomResourcePatch(t *testing.T) {
	f := newWidgetFixture(t)
	ctx := testCtx(t)
	f.create(t, widgetJSON("a", `{"replicas":2}`))
	_, err := f.v1.Patch(ctx, "ns", "a", types.MergePatchType, []byte(`{"spec":{"x":1,"maxReplicas":3}}`), WriteOptions{StrictFields: true})
	if got := statusOf(t, err); got.Code != 400 || got.Message != `strict decoding error: unknown field "spec.x"` {
		t.Errorf("strict merge patch with an unknown field = %d %q; want 400 strict decoding error", got.Code, got.Message)
	}
	out, err := f.v1.Patch(ctx, "ns", "a", types.MergePatchType, []byte(`{"spec":{"x":1,"maxReplicas":3,"replicas":null}}`), WriteOptions{})
	if err != nil {
		t.Fatalf("merge patch: %v", err)
	}
	if diff := cmp.Diff(map[string]any{"size": "small", "replicas": int64(1), "maxReplicas": int64(3)}, out.(*unstructured.Unstructured).Object["spec"]); diff != "" {
		t.Errorf("patched spec (-want +got):\n%s", diff)
	}
	_, err = f.v1.Patch(ctx, "ns", "a", types.JSONPatchType, []byte(`[{"op":"replace","path":"/spec/size","value":"large"}]`), WriteOptions{})
	if got := statusOf(t, err); got.Code != 422 || len(got.Details.Causes) != 1 || got.Details.Causes[0].Message != "Invalid value: size is immutable" {
		t.Errorf("JSON patch changing spec.size = %d %+v; want 422 size is immutable", got.Code, got.Details)
	}
	_, err = f.v1.Patch(ctx, "ns", "a", types.StrategicMergePatchType, []byte(`{"spec":{"replicas":2}}`), WriteOptions{})
	if got := statusOf(t, err); got.Code != 415 {
		t.Errorf("strategic merge patch = %d %q; want 415", got.Code, got.Message)
	}
}
