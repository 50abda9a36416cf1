package registry

import (
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/concord-dev/concord/etcdstore"
	"github.com/concord-dev/concord/etcdstore/etcdtest"
)

type crdFixture struct {
	etcd *etcdtest.Etcd
	crds *Store
}

func newCRDFixture(t *testing.T) *crdFixture {
	t.Helper()
	e := etcdtest.Start(t)
	s := NewStore(etcdstore.New(e.Client, "/registry"), CustomResourceDefinitions, DefaultWatchConfig())
	t.Cleanup(s.StopWatches)
	return &crdFixture{etcd: e, crds: s}
}

// raw is the stored value of a CRD as etcd holds it, nil if there is none.
func (f *crdFixture) raw(t *testing.T, name string) map[string]any {
	t.Helper()
	resp, err := f.etcd.Client.Get(testCtx(t), "/registry/apiextensions.k8s.io/customresourcedefinitions/"+name)
	if err != nil {
		t.Fatalf("etcd get %s: %v", name, err)
	}
	if len(resp.Kvs) == 0 {
		return nil
	}
	var m map[string]any
	if err := json.Unmarshal(resp.Kvs[0].Value, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// widgetSchema is a structural schema with a CEL rule on spec.
func widgetSchema() *apiextensionsv1.CustomResourceValidation {
	return &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
		Type: "object",
		Properties: map[string]apiextensionsv1.JSONSchemaProps{
			"spec": {
				Type: "object",
				Properties: map[string]apiextensionsv1.JSONSchemaProps{
					"replicas": {Type: "integer", Minimum: ptr.To(0.0)},
					"tags":     {Type: "array", MaxItems: ptr.To[int64](10), Items: &apiextensionsv1.JSONSchemaPropsOrArray{Schema: &apiextensionsv1.JSONSchemaProps{Type: "string", MaxLength: ptr.To[int64](64)}}},
				},
				XValidations: apiextensionsv1.ValidationRules{{Rule: "!has(self.replicas) || self.replicas <= 10", Message: "at most 10 replicas"}},
			},
			"status": {Type: "object", XPreserveUnknownFields: ptr.To(true)},
		},
	}}
}

// newCRD is a valid CRD of kind Widget in example.com, in scope, with a
// status subresource; singular, listKind and conversion are left to kube's
// defaults.
func newCRD(scope apiextensionsv1.ResourceScope) *apiextensionsv1.CustomResourceDefinition {
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "widgets.example.com"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "example.com",
			Scope: scope,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "widgets", Kind: "Widget", ShortNames: []string{"wd"}},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: "v1", Served: true, Storage: true,
				Schema:       widgetSchema(),
				Subresources: &apiextensionsv1.CustomResourceSubresources{Status: &apiextensionsv1.CustomResourceSubresourceStatus{}},
			}},
		},
	}
}

// crdCauses are the causes of a Status error.
func crdCauses(err error) []metav1.StatusCause {
	var st *apierrors.StatusError
	if !errors.As(err, &st) || st.ErrStatus.Details == nil {
		return nil
	}
	return st.ErrStatus.Details.Causes
}

// wantInvalid fails unless err is a 422 Invalid of a CustomResourceDefinition
// with a cause on each of fieldMsgs' fields whose message contains its text.
func wantInvalid(t *testing.T, what string, err error, fieldMsgs ...[2]string) {
	t.Helper()
	var st *apierrors.StatusError
	if !errors.As(err, &st) || st.ErrStatus.Code != http.StatusUnprocessableEntity || st.ErrStatus.Reason != metav1.StatusReasonInvalid ||
		st.ErrStatus.Details == nil || st.ErrStatus.Details.Kind != "CustomResourceDefinition" || st.ErrStatus.Details.Group != "apiextensions.k8s.io" {
		t.Fatalf("%s = %v; want 422 Invalid of a apiextensions.k8s.io CustomResourceDefinition", what, err)
	}
	for _, fm := range fieldMsgs {
		if !hasCause(err, fm[0], fm[1]) {
			t.Errorf("%s causes %+v; want one on %s saying %q", what, st.ErrStatus.Details.Causes, fm[0], fm[1])
		}
	}
}

// TestCRDCreate: a valid CRD, namespaced or cluster-scoped, one or several
// versions, is stored with kube's defaults, generation 1 and a status that
// holds only the storage version, whatever status was sent.
func TestCRDCreate(t *testing.T) {
	f := newCRDFixture(t)
	ctx := testCtx(t)
	for _, tc := range []struct {
		name  string
		crd   func() *apiextensionsv1.CustomResourceDefinition
		store string // the storage version
	}{
		{"namespaced", func() *apiextensionsv1.CustomResourceDefinition { return newCRD(apiextensionsv1.NamespaceScoped) }, "v1"},
		{"cluster-scoped, two versions", func() *apiextensionsv1.CustomResourceDefinition {
			crd := newCRD(apiextensionsv1.ClusterScoped)
			crd.Name, crd.Spec.Names = "gadgets.example.com", apiextensionsv1.CustomResourceDefinitionNames{Plural: "gadgets", Kind: "Gadget"}
			old := crd.Spec.Versions[0]
			old.Name, old.Storage = "v1beta1", false
			old.Schema = &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{Type: "object", XPreserveUnknownFields: ptr.To(true)}}
			crd.Spec.Versions = append(crd.Spec.Versions, old)
			return crd
		}, "v1"},
		{"no version served (kube allows it)", func() *apiextensionsv1.CustomResourceDefinition {
			crd := newCRD(apiextensionsv1.ClusterScoped)
			crd.Name, crd.Spec.Names = "idles.example.com", apiextensionsv1.CustomResourceDefinitionNames{Plural: "idles", Kind: "Idle"}
			crd.Spec.Versions[0].Served = false
			return crd
		}, "v1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			crd := tc.crd()
			// What a client sends as status is not what is stored.
			crd.Status = apiextensionsv1.CustomResourceDefinitionStatus{
				Conditions:     []apiextensionsv1.CustomResourceDefinitionCondition{{Type: apiextensionsv1.Established, Status: apiextensionsv1.ConditionTrue}},
				AcceptedNames:  crd.Spec.Names,
				StoredVersions: []string{"v0"},
			}
			crd.Generation = 7
			created, err := f.crds.Create(ctx, "", crd.DeepCopy(), WriteOptions{})
			if err != nil {
				t.Fatalf("create: %v", err)
			}
			got := created.(*apiextensionsv1.CustomResourceDefinition)
			wantStatus := apiextensionsv1.CustomResourceDefinitionStatus{StoredVersions: []string{tc.store}}
			if diff := cmp.Diff(wantStatus, got.Status); diff != "" {
				t.Errorf("created status (-want +got):\n%s", diff)
			}
			if got.Generation != 1 || got.UID == "" || got.ResourceVersion == "" {
				t.Errorf("created generation %d, uid %q, resourceVersion %q; want 1 and both set", got.Generation, got.UID, got.ResourceVersion)
			}
			wantNames := crd.Spec.Names
			wantNames.Singular, wantNames.ListKind = strings.ToLower(wantNames.Kind), wantNames.Kind+"List"
			if diff := cmp.Diff(wantNames, got.Spec.Names); diff != "" {
				t.Errorf("created names, kube's defaults (-want +got):\n%s", diff)
			}
			if c := got.Spec.Conversion; c == nil || c.Strategy != apiextensionsv1.NoneConverter {
				t.Errorf("created conversion %+v; want kube's default strategy None", c)
			}

			raw := f.raw(t, crd.Name)
			if raw == nil || raw["apiVersion"] != "apiextensions.k8s.io/v1" || raw["kind"] != "CustomResourceDefinition" {
				t.Fatalf("etcd holds %v at /registry/apiextensions.k8s.io/customresourcedefinitions/%s; want the v1 CRD", raw, crd.Name)
			}
			if status := raw["status"].(map[string]any); status["conditions"] != nil || status["acceptedNames"].(map[string]any)["kind"] != "" {
				t.Errorf("stored status %v; want no conditions or accepted names", status)
			}
			read, err := f.crds.Get(ctx, "", crd.Name)
			if err != nil {
				t.Fatalf("get: %v", err)
			}
			if diff := cmp.Diff(got, read); diff != "" {
				t.Errorf("get differs from the create's answer (-create +get):\n%s", diff)
			}
		})
	}
}

// TestCRDValidation: what kube's validation refuses is answered 422 with
// kube's causes (field paths of the internal form: one schema shared by all
// versions is spec.validation), ObjectMeta causes once, and nothing is
// stored; Concord also refuses conversion webhooks.
func TestCRDValidation(t *testing.T) {
	f := newCRDFixture(t)
	ctx := testCtx(t)
	const specSchema = "spec.validation.openAPIV3Schema.properties[spec]"
	for _, tc := range []struct {
		name string
		edit func(crd *apiextensionsv1.CustomResourceDefinition)
		// want are (field, message) of causes there must be; only, when
		// set, says there must be no other.
		want [][2]string
		only bool
	}{
		{"name not <plural>.<group>", func(crd *apiextensionsv1.CustomResourceDefinition) { crd.Name = "gizmos.example.com" },
			[][2]string{{"metadata.name", `must be spec.names.plural+"."+spec.group`}}, true},
		{"name not a DNS subdomain", func(crd *apiextensionsv1.CustomResourceDefinition) { crd.Name = "Widgets.example.com" },
			[][2]string{{"metadata.name", "RFC 1123"}, {"metadata.name", `must be spec.names.plural+"."+spec.group`}}, true},
		{"a property without a type (not structural)", func(crd *apiextensionsv1.CustomResourceDefinition) {
			s := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
			s.Properties["replicas"] = apiextensionsv1.JSONSchemaProps{Minimum: ptr.To(0.0)}
		}, [][2]string{{specSchema + ".properties[replicas].type", "must not be empty for specified object fields"}}, false},
		{"no schema", func(crd *apiextensionsv1.CustomResourceDefinition) { crd.Spec.Versions[0].Schema = nil },
			[][2]string{{"spec.versions[0].schema.openAPIV3Schema", "Required value"}}, false},
		{"no storage version", func(crd *apiextensionsv1.CustomResourceDefinition) { crd.Spec.Versions[0].Storage = false },
			[][2]string{{"spec.versions", "must have exactly one version marked as storage version"}}, false},
		{"two storage versions", func(crd *apiextensionsv1.CustomResourceDefinition) {
			v2 := *crd.Spec.Versions[0].DeepCopy()
			v2.Name = "v2"
			v2.Schema.OpenAPIV3Schema.Description = "v2"
			crd.Spec.Versions = append(crd.Spec.Versions, v2)
		}, [][2]string{
			{"spec.versions", "must have exactly one version marked as storage version"},
			// PrepareForCreate records the first one only.
			{"status.storedVersions", "must have the storage version v2"},
		}, true},
		{"a CEL rule that does not compile", func(crd *apiextensionsv1.CustomResourceDefinition) {
			s := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
			s.XValidations[0].Rule = "self.replicas >"
			crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"] = s
		}, [][2]string{{specSchema + ".x-kubernetes-validations[0].rule", "compilation failed"}}, true},
		{"a CEL rule on an unknown field", func(crd *apiextensionsv1.CustomResourceDefinition) {
			s := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
			s.XValidations[0].Rule = "self.size > 1"
			crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"] = s
		}, [][2]string{{specSchema + ".x-kubernetes-validations[0].rule", "undefined field 'size'"}}, true},
		{"a CEL rule over its cost budget", func(crd *apiextensionsv1.CustomResourceDefinition) {
			s := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
			s.Properties["names"] = apiextensionsv1.JSONSchemaProps{Type: "array", Items: &apiextensionsv1.JSONSchemaPropsOrArray{Schema: &apiextensionsv1.JSONSchemaProps{Type: "string"}},
				XValidations: apiextensionsv1.ValidationRules{{Rule: "self.all(x, self.all(y, self.all(z, x == y && y == z)))"}}}
		}, [][2]string{{specSchema + ".properties[names].x-kubernetes-validations[0].rule", "estimated rule cost exceeds budget"}}, false},
		{"kind and listKind the same", func(crd *apiextensionsv1.CustomResourceDefinition) { crd.Spec.Names.ListKind = "Widget" },
			[][2]string{{"spec.names.listKind", "kind and listKind may not be the same"}}, true},
		{"preserveUnknownFields", func(crd *apiextensionsv1.CustomResourceDefinition) { crd.Spec.PreserveUnknownFields = true },
			[][2]string{{"spec.preserveUnknownFields", "cannot set to true"}}, false},
		{"a kube group without API approval", func(crd *apiextensionsv1.CustomResourceDefinition) {
			crd.Name, crd.Spec.Group = "widgets.things.k8s.io", "things.k8s.io"
		}, [][2]string{{"metadata.annotations[api-approved.kubernetes.io]", "protected groups must have approval annotation"}}, true},
		{"conversion webhook (kube accepts it)", func(crd *apiextensionsv1.CustomResourceDefinition) {
			crd.Spec.Conversion = &apiextensionsv1.CustomResourceConversion{
				Strategy: apiextensionsv1.WebhookConverter,
				Webhook: &apiextensionsv1.WebhookConversion{
					ClientConfig:             &apiextensionsv1.WebhookClientConfig{URL: ptr.To("https://convert.example.com/widgets")},
					ConversionReviewVersions: []string{"v1"},
				},
			}
		}, [][2]string{{"spec.conversion.strategy", `Unsupported value: "Webhook": supported values: "None"`}}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			crd := newCRD(apiextensionsv1.NamespaceScoped)
			tc.edit(crd)
			_, err := f.crds.Create(ctx, "", crd, WriteOptions{})
			wantInvalid(t, "create", err, tc.want...)
			if got := crdCauses(err); tc.only && len(got) != len(tc.want) {
				t.Errorf("create causes %+v; want exactly %v", got, tc.want)
			}
			if raw := f.raw(t, crd.Name); raw != nil {
				t.Errorf("the invalid CRD was stored: %v", raw)
			}
		})
	}
}

// TestCRDUpdate: an update keeps the stored status, bumps the generation
// only when the spec changes, adds a new storage version to
// status.storedVersions, and is validated by kube's update rules.
func TestCRDUpdate(t *testing.T) {
	f := newCRDFixture(t)
	ctx := testCtx(t)
	created, err := f.crds.Create(ctx, "", newCRD(apiextensionsv1.NamespaceScoped), WriteOptions{})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	current := created.(*apiextensionsv1.CustomResourceDefinition)
	update := func(edit func(crd *apiextensionsv1.CustomResourceDefinition)) (*apiextensionsv1.CustomResourceDefinition, error) {
		crd := current.DeepCopy()
		edit(crd)
		out, _, err := f.crds.Update(ctx, "", crd.Name, crd, WriteOptions{})
		if err != nil {
			return nil, err
		}
		return out.(*apiextensionsv1.CustomResourceDefinition), nil
	}
	for _, step := range []struct {
		name           string
		edit           func(crd *apiextensionsv1.CustomResourceDefinition)
		wantGeneration int64
		wantStored     []string
	}{
		{"labels only", func(crd *apiextensionsv1.CustomResourceDefinition) { crd.Labels = map[string]string{"team": "a"} }, 1, []string{"v1"}},
		{"a short name", func(crd *apiextensionsv1.CustomResourceDefinition) {
			crd.Spec.Names.ShortNames = append(crd.Spec.Names.ShortNames, "wdg")
		}, 2, []string{"v1"}},
		{"the status, which the main resource ignores", func(crd *apiextensionsv1.CustomResourceDefinition) {
			crd.Status.Conditions = []apiextensionsv1.CustomResourceDefinitionCondition{{Type: apiextensionsv1.Established, Status: apiextensionsv1.ConditionTrue}}
			crd.Status.StoredVersions = nil
		}, 2, []string{"v1"}},
		{"nothing", func(*apiextensionsv1.CustomResourceDefinition) {}, 2, []string{"v1"}},
		{"a new storage version", func(crd *apiextensionsv1.CustomResourceDefinition) {
			v2 := *crd.Spec.Versions[0].DeepCopy()
			v2.Name = "v2"
			v2.Schema.OpenAPIV3Schema.Description = "v2"
			crd.Spec.Versions[0].Storage = false
			crd.Spec.Versions = append(crd.Spec.Versions, v2)
		}, 3, []string{"v1", "v2"}},
	} {
		before := current.ResourceVersion
		got, err := update(step.edit)
		if err != nil {
			t.Fatalf("update of %s: %v", step.name, err)
		}
		if got.Generation != step.wantGeneration {
			t.Errorf("update of %s: generation %d; want %d", step.name, got.Generation, step.wantGeneration)
		}
		if got.Status.Conditions != nil || !cmp.Equal(got.Status.StoredVersions, step.wantStored) {
			t.Errorf("update of %s: status %+v; want no conditions, storedVersions %v", step.name, got.Status, step.wantStored)
		}
		if step.name == "nothing" && got.ResourceVersion != before {
			t.Errorf("an update that changes nothing wrote resourceVersion %s (was %s)", got.ResourceVersion, before)
		}
		current = got
	}

	// A patch of the spec counts too.
	patched, err := f.crds.Patch(ctx, "", current.Name, types.MergePatchType, []byte(`{"spec":{"names":{"categories":["all"]}}}`), WriteOptions{})
	if err != nil {
		t.Fatalf("patch: %v", err)
	}
	if g := patched.GetGeneration(); g != 4 {
		t.Errorf("patch of the spec: generation %d; want 4", g)
	}
	current = patched.(*apiextensionsv1.CustomResourceDefinition)

	for _, tc := range []struct {
		name string
		edit func(crd *apiextensionsv1.CustomResourceDefinition)
		want [][2]string
	}{
		{"group", func(crd *apiextensionsv1.CustomResourceDefinition) { crd.Spec.Group = "example.org" }, [][2]string{{"spec.group", "field is immutable"}}},
		{"plural", func(crd *apiextensionsv1.CustomResourceDefinition) { crd.Spec.Names.Plural = "widgetz" }, [][2]string{{"spec.names.plural", "field is immutable"}}},
		{"a schema that is not structural", func(crd *apiextensionsv1.CustomResourceDefinition) {
			crd.Spec.Versions[1].Schema.OpenAPIV3Schema.Properties["spec"].Properties["replicas"] = apiextensionsv1.JSONSchemaProps{}
		}, [][2]string{{"spec.versions[1].schema.openAPIV3Schema.properties[spec].properties[replicas].type", "must not be empty"}}},
		{"the storage version removed", func(crd *apiextensionsv1.CustomResourceDefinition) { crd.Spec.Versions = crd.Spec.Versions[1:] },
			[][2]string{{"status.storedVersions[0]", "missing from spec.versions"}}},
		{"a conversion webhook", func(crd *apiextensionsv1.CustomResourceDefinition) {
			crd.Spec.Conversion = &apiextensionsv1.CustomResourceConversion{Strategy: apiextensionsv1.WebhookConverter, Webhook: &apiextensionsv1.WebhookConversion{
				ClientConfig: &apiextensionsv1.WebhookClientConfig{URL: ptr.To("https://convert.example.com/widgets")}, ConversionReviewVersions: []string{"v1"},
			}}
		}, [][2]string{{"spec.conversion.strategy", `Unsupported value: "Webhook"`}}},
	} {
		_, err := update(tc.edit)
		wantInvalid(t, "update of "+tc.name, err, tc.want...)
	}
	if raw := f.raw(t, current.Name); raw["metadata"].(map[string]any)["generation"] != float64(4) || raw["spec"].(map[string]any)["group"] != "example.com" {
		t.Errorf("after the refused updates etcd holds %v", raw)
	}
}

// TestCRDUpdateRatchets: a stored CRD that today's create validation would
// refuse (kube's v1beta1 era: no schema, preserveUnknownFields) can still
// be updated, as kube's update validation allows, and only what it refuses
// of the change is refused.
func TestCRDUpdateRatchets(t *testing.T) {
	f := newCRDFixture(t)
	ctx := testCtx(t)
	legacy := `{"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition",` +
		`"metadata":{"name":"olds.example.com","uid":"u-olds","generation":1,"creationTimestamp":"2020-01-02T03:04:05Z"},` +
		`"spec":{"group":"example.com","scope":"Namespaced","preserveUnknownFields":true,"conversion":{"strategy":"None"},` +
		`"names":{"plural":"olds","singular":"old","kind":"Old","listKind":"OldList"},"versions":[{"name":"v1","served":true,"storage":true}]},` +
		`"status":{"storedVersions":["v1"],"acceptedNames":{"plural":"olds","kind":"Old"}}}`
	if _, err := f.etcd.Client.Put(ctx, "/registry/apiextensions.k8s.io/customresourcedefinitions/olds.example.com", legacy); err != nil {
		t.Fatal(err)
	}
	got, err := f.crds.Get(ctx, "", "olds.example.com")
	if err != nil {
		t.Fatalf("get: %v", err)
	}
	crd := got.(*apiextensionsv1.CustomResourceDefinition)
	crd.Labels = map[string]string{"touched": "yes"}
	crd.Spec.Names.ShortNames = []string{"od"}
	updated, _, err := f.crds.Update(ctx, "", crd.Name, crd.DeepCopy(), WriteOptions{})
	if err != nil {
		t.Fatalf("update of a legacy CRD (kube's update validation allows it): %v", err)
	}
	if updated.GetGeneration() != 2 {
		t.Errorf("generation %d; want 2", updated.GetGeneration())
	}
	crd = updated.(*apiextensionsv1.CustomResourceDefinition)
	crd.Spec.Group = "example.org"
	_, _, err = f.crds.Update(ctx, "", crd.Name, crd, WriteOptions{})
	wantInvalid(t, "update of a legacy CRD's group", err, [2]string{"spec.group", "field is immutable"})
}

// TestCRDStatus: the status subresource's writes (UpdateStatus,
// PatchStatus) replace the status only: the stored spec, labels,
// annotations and owner references stay, finalizers may change, the
// generation stays; they are conditional, never create, and are validated
// by kube's status rules. A resource without a status subresource refuses
// them.
func TestCRDStatus(t *testing.T) {
	f := newCRDFixture(t)
	ctx := testCtx(t)
	crd := newCRD(apiextensionsv1.NamespaceScoped)
	crd.Labels = map[string]string{"team": "a"}
	created, err := f.crds.Create(ctx, "", crd, WriteOptions{})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	stored := created.(*apiextensionsv1.CustomResourceDefinition)

	sent := stored.DeepCopy()
	sent.Spec.Scope = apiextensionsv1.ClusterScoped
	sent.Spec.Names.ShortNames = nil
	sent.Labels = map[string]string{"team": "b"}
	sent.Annotations = map[string]string{"a": "b"}
	sent.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: "owner", UID: "u-owner"}}
	sent.Finalizers = []string{"example.com/cleanup"}
	sent.Generation = 9
	sent.Status.Conditions = []apiextensionsv1.CustomResourceDefinitionCondition{
		{Type: apiextensionsv1.NamesAccepted, Status: apiextensionsv1.ConditionTrue, Reason: "NoConflicts"},
		{Type: apiextensionsv1.Established, Status: apiextensionsv1.ConditionTrue, Reason: "InitialNamesAccepted"},
	}
	sent.Status.AcceptedNames = stored.Spec.Names
	out, err := f.crds.UpdateStatus(ctx, "", sent.Name, sent.DeepCopy(), WriteOptions{})
	if err != nil {
		t.Fatalf("update status: %v", err)
	}
	got := out.(*apiextensionsv1.CustomResourceDefinition)
	if diff := cmp.Diff(sent.Status, got.Status); diff != "" {
		t.Errorf("written status (-sent +got):\n%s", diff)
	}
	if diff := cmp.Diff(stored.Spec, got.Spec); diff != "" {
		t.Errorf("a status write changed the spec (-stored +got):\n%s", diff)
	}
	if !cmp.Equal(got.Labels, stored.Labels) || got.Annotations != nil || got.OwnerReferences != nil || got.Generation != 1 {
		t.Errorf("after a status write: labels %v, annotations %v, owners %v, generation %d; want the stored %v, none, none, 1",
			got.Labels, got.Annotations, got.OwnerReferences, got.Generation, stored.Labels)
	}
	if !cmp.Equal(got.Finalizers, sent.Finalizers) {
		t.Errorf("after a status write: finalizers %v; want %v (they may change)", got.Finalizers, sent.Finalizers)
	}
	if got.ResourceVersion == stored.ResourceVersion {
		t.Errorf("the status write kept resourceVersion %s", got.ResourceVersion)
	}
	raw := f.raw(t, sent.Name)
	if conds := raw["status"].(map[string]any)["conditions"].([]any); len(conds) != 2 || raw["spec"].(map[string]any)["scope"] != "Namespaced" {
		t.Errorf("etcd holds %v; want the two conditions and scope Namespaced", raw)
	}
	// The table shows it established.
	if cells := crdCells(got); cells[2] != "v1(storage)" || cells[7] != true {
		t.Errorf("table cells %v; want versions v1(storage) and established", cells)
	}

	// An update of the main resource keeps that status.
	main := got.DeepCopy()
	main.Status = apiextensionsv1.CustomResourceDefinitionStatus{}
	main.Spec.Names.Categories = []string{"all"}
	updated, _, err := f.crds.Update(ctx, "", main.Name, main, WriteOptions{})
	if err != nil {
		t.Fatalf("update: %v", err)
	}
	if diff := cmp.Diff(got.Status, updated.(*apiextensionsv1.CustomResourceDefinition).Status); diff != "" {
		t.Errorf("an update of the main resource changed the status (-before +after):\n%s", diff)
	}
	current := updated.(*apiextensionsv1.CustomResourceDefinition)

	// A patch of the status writes the status only.
	patch := `{"spec":{"scope":"Cluster"},"metadata":{"labels":{"team":"c"}},"status":{"conditions":[{"type":"Established","status":"False","reason":"Gone"}]}}`
	patched, err := f.crds.PatchStatus(ctx, "", current.Name, types.MergePatchType, []byte(patch), WriteOptions{})
	if err != nil {
		t.Fatalf("patch status: %v", err)
	}
	p := patched.(*apiextensionsv1.CustomResourceDefinition)
	if len(p.Status.Conditions) != 1 || p.Status.Conditions[0].Status != apiextensionsv1.ConditionFalse || p.Spec.Scope != apiextensionsv1.NamespaceScoped || p.Labels["team"] != "a" {
		t.Errorf("patched status %+v, scope %s, labels %v; want one Established False condition, the stored scope and labels", p.Status, p.Spec.Scope, p.Labels)
	}
	if p.Generation != current.Generation {
		t.Errorf("patch status: generation %d; want %d", p.Generation, current.Generation)
	}

	stale := p.DeepCopy()
	stale.ResourceVersion = current.ResourceVersion
	noVersion := p.DeepCopy()
	noVersion.ResourceVersion = ""
	badNames := p.DeepCopy()
	badNames.Status.AcceptedNames.Plural = "Not_A_Label"
	missing := p.DeepCopy()
	missing.Name = "gone.example.com"
	cms := NewStore(etcdstore.New(f.etcd.Client, "/registry"), ConfigMaps, DefaultWatchConfig())
	t.Cleanup(cms.StopWatches)
	for _, tc := range []struct {
		name  string
		write func() error
		code  int32
	}{
		{"stale resourceVersion", func() error { _, err := f.crds.UpdateStatus(ctx, "", p.Name, stale, WriteOptions{}); return err }, http.StatusConflict},
		{"no resourceVersion", func() error { _, err := f.crds.UpdateStatus(ctx, "", p.Name, noVersion, WriteOptions{}); return err }, http.StatusPreconditionRequired},
		{"invalid accepted names", func() error { _, err := f.crds.UpdateStatus(ctx, "", p.Name, badNames, WriteOptions{}); return err }, http.StatusUnprocessableEntity},
		{"a missing CRD", func() error {
			_, err := f.crds.UpdateStatus(ctx, "", missing.Name, missing, WriteOptions{CreateOnly: true})
			return err
		}, http.StatusNotFound},
		{"create-only of an existing CRD", func() error {
			_, err := f.crds.UpdateStatus(ctx, "", p.Name, p.DeepCopy(), WriteOptions{CreateOnly: true})
			return err
		}, http.StatusPreconditionFailed},
		{"a resource without a status subresource", func() error {
			_, err := cms.UpdateStatus(ctx, "default", "cm", &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm", ResourceVersion: "1"}}, WriteOptions{})
			return err
		}, http.StatusMethodNotAllowed},
		{"a patch of a resource without one", func() error {
			_, err := cms.PatchStatus(ctx, "default", "cm", types.MergePatchType, []byte(`{}`), WriteOptions{})
			return err
		}, http.StatusMethodNotAllowed},
	} {
		err := tc.write()
		var st *apierrors.StatusError
		if !errors.As(err, &st) || st.ErrStatus.Code != tc.code {
			t.Errorf("status write with %s = %v; want %d", tc.name, err, tc.code)
		}
	}
	if _, err := f.crds.UpdateStatus(ctx, "", p.Name, badNames, WriteOptions{}); !hasCause(err, "status.acceptedNames.plural", "DNS-1035 label") {
		t.Errorf("invalid accepted names = %v; want a cause on status.acceptedNames.plural", err)
	}
	if raw := f.raw(t, missing.Name); raw != nil {
		t.Errorf("a status write created %v", raw)
	}

	// A dry run answers what would be written and writes nothing.
	dry := p.DeepCopy()
	dry.Status.Conditions = nil
	if out, err := f.crds.UpdateStatus(ctx, "", dry.Name, dry, WriteOptions{DryRun: true}); err != nil || len(out.(*apiextensionsv1.CustomResourceDefinition).Status.Conditions) != 0 {
		t.Errorf("dry-run status write = %v, %v", out, err)
	}
	if raw := f.raw(t, p.Name); len(raw["status"].(map[string]any)["conditions"].([]any)) != 1 {
		t.Errorf("the dry run wrote %v", raw["status"])
	}
}

// TestCRDDeprecationWarning: kube's deprecation warnings of a CRD's
// versions (customresource_handler_test.go's Test_defaultDeprecationWarning
// cases, with the deprecated version in the spec), the version's own text
// when it has one, and none for a version not deprecated or not there.
func TestCRDDeprecationWarning(t *testing.T) {
	crd := func(versions ...apiextensionsv1.CustomResourceDefinitionVersion) *apiextensionsv1.CustomResourceDefinition {
		return &apiextensionsv1.CustomResourceDefinition{Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "example.com", Names: apiextensionsv1.CustomResourceDefinitionNames{Kind: "Widget"}, Versions: versions,
		}}
	}
	v := func(name string, served, deprecated bool) apiextensionsv1.CustomResourceDefinitionVersion {
		return apiextensionsv1.CustomResourceDefinitionVersion{Name: name, Served: served, Deprecated: deprecated}
	}
	own := v("v1beta1", true, true)
	own.DeprecationWarning = ptr.To("use v1, really")
	for _, tc := range []struct {
		name, version string
		crd           *apiextensionsv1.CustomResourceDefinition
		want          string
		ok            bool
	}{
		{"no replacement", "v1", crd(v("v1", true, true), v("v2", true, true), v("v3", false, false)), "example.com/v1 Widget is deprecated", true},
		{"replacement sorting", "v1", crd(v("v1", true, true), v("v1alpha1", true, false), v("v1alpha2", true, false), v("v1beta1", true, false),
			v("v1beta2", true, false), v("v2", true, false), v("v2alpha1", true, false), v("v2alpha2", true, false), v("v2beta1", true, false),
			v("v2beta2", true, false), v("v3", false, false), v("v3alpha1", false, false), v("v3alpha2", false, false), v("v3beta1", false, false),
			v("v3beta2", false, false)), "example.com/v1 Widget is deprecated; use example.com/v2 Widget", true},
		{"no newer replacement of equal stability", "v2", crd(v("v1", true, false), v("v2", true, true), v("v3", false, false),
			v("v3alpha1", true, false), v("v3beta1", true, false), v("v4", true, true)), "example.com/v2 Widget is deprecated", true},
		{"its own warning", "v1beta1", crd(own, v("v1", true, false)), "use v1, really", true},
		{"not deprecated", "v1", crd(v("v1", true, false)), "", false},
		{"no such version", "v2", crd(v("v1", true, true)), "", false},
	} {
		got, ok := CRDDeprecationWarning(tc.crd, tc.version)
		if got != tc.want || ok != tc.ok {
			t.Errorf("%s: %q, %v; want %q, %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}

// TestCRDStrategyWarnings: kube's WarningsOnCreate and WarningsOnUpdate of
// a CRD (strategy_test.go's cases): unrecognized formats of every schema —
// one schema shared by the versions is looked at once, distinct ones each —
// list-type sets of objects and arrays, and an update warning only of what
// the old CRD did not have.
func TestCRDStrategyWarnings(t *testing.T) {
	props := func(p map[string]apiextensionsv1.JSONSchemaProps) *apiextensionsv1.CustomResourceValidation {
		return &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{Type: "object", Properties: p}}
	}
	crd := func(schemas ...*apiextensionsv1.CustomResourceValidation) *apiextensionsv1.CustomResourceDefinition {
		c := &apiextensionsv1.CustomResourceDefinition{Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "example.com", Scope: apiextensionsv1.NamespaceScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "widgets", Kind: "Widget"},
		}}
		for i, s := range schemas {
			c.Spec.Versions = append(c.Spec.Versions, apiextensionsv1.CustomResourceDefinitionVersion{Name: []string{"v1", "v2"}[i], Served: true, Storage: i == 0, Schema: s})
		}
		return c
	}
	foo := props(map[string]apiextensionsv1.JSONSchemaProps{"a": {Type: "string", Format: "foo"}, "b": {Type: "string", Format: "date-time"}})
	fooAndList := props(map[string]apiextensionsv1.JSONSchemaProps{
		"a": {Type: "string", Format: "foo"},
		"l": {Type: "array", XListType: ptr.To("set"), Items: &apiextensionsv1.JSONSchemaPropsOrArray{Schema: &apiextensionsv1.JSONSchemaProps{
			Type: "array", Items: &apiextensionsv1.JSONSchemaPropsOrArray{Schema: &apiextensionsv1.JSONSchemaProps{Type: "string"}},
		}}},
		"n": {Type: "number", Format: "double"},
		"i": {Type: "integer", Format: "int8"},
	})
	listWarning := `x-kubernetes-list-type: set for items of type "array" is not supported by server-side apply or CEL validation rules`
	for _, tc := range []struct {
		name     string
		obj, old *apiextensionsv1.CustomResourceDefinition
		want     []string
	}{
		{"create, one format", crd(foo), nil, []string{`unrecognized format "foo"`}},
		{"create, a schema shared by two versions", crd(foo, foo), nil, []string{`unrecognized format "foo"`}},
		{"create, two schemas", crd(foo, fooAndList), nil, []string{`unrecognized format "foo"`, `unrecognized format "foo"`, `unrecognized format "int8"`, listWarning}},
		{"update, nothing new", crd(foo), crd(foo), nil},
		{"update, new format and list", crd(fooAndList), crd(foo), []string{`unrecognized format "int8"`, listWarning}},
		{"update, fewer", crd(foo), crd(fooAndList), nil},
	} {
		var got []string
		if tc.old == nil {
			got = crdStrategy{}.WarningsOnCreate(tc.obj)
		} else {
			got = crdStrategy{}.WarningsOnUpdate(tc.obj, tc.old)
		}
		// kube walks properties in map order: the formats come in any order.
		slices.Sort(got)
		want := slices.Sorted(slices.Values(tc.want))
		if !cmp.Equal(got, want, cmpopts.EquateEmpty()) {
			t.Errorf("%s: %q; want %q", tc.name, got, want)
		}
	}
}
