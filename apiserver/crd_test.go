package apiserver_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
)

const crds = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"

// widgetsCRD is a CRD manifest as kubectl sends it: namespaced kind Widget
// in example.com, one version with a structural schema and a CEL rule,
// singular and listKind left to the server's defaults.
const widgetsCRD = `{"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition",
 "metadata":{"name":"widgets.example.com"},
 "spec":{"group":"example.com","scope":"Namespaced","names":{"plural":"widgets","kind":"Widget","shortNames":["wd"]},
  "versions":[{"name":"v1","served":true,"storage":true,"subresources":{"status":{}},
   "schema":{"openAPIV3Schema":{"type":"object","properties":{
    "spec":{"type":"object","properties":{"replicas":{"type":"integer","minimum":0}},
     "x-kubernetes-validations":[{"rule":"!has(self.replicas) || self.replicas <= 10","message":"at most 10 replicas"}]},
    "status":{"type":"object","x-kubernetes-preserve-unknown-fields":true}}}}}]}}`

// TestCRDsHTTP: CustomResourceDefinitions over HTTP, as kubectl and
// apiextensions' typed client (JSON and protobuf) use them: created with
// kube's defaults and generation 1, stored at kube's key, refused with
// kube's 422 causes, updated with the generation counting spec changes and
// the status kept, printed with kube's columns.
func TestCRDsHTTP(t *testing.T) {
	s := startServer(t)

	resp := s.do(t, http.MethodPost, crds, widgetsCRD)
	if resp.Code != http.StatusCreated {
		t.Fatalf("POST %s: %d %s", crds, resp.Code, resp.Body)
	}
	var created apiextensionsv1.CustomResourceDefinition
	resp.decode(t, &created)
	if created.Generation != 1 || created.Spec.Names.Singular != "widget" || created.Spec.Names.ListKind != "WidgetList" ||
		created.Spec.Conversion == nil || created.Spec.Conversion.Strategy != apiextensionsv1.NoneConverter ||
		!cmp.Equal(created.Status.StoredVersions, []string{"v1"}) || created.Status.Conditions != nil {
		t.Errorf("created %+v; want generation 1, kube's defaults, storedVersions [v1] and no conditions", created)
	}
	keys := s.storedKeys(t, "/registry/apiextensions.k8s.io/customresourcedefinitions/")
	if _, ok := keys["/registry/apiextensions.k8s.io/customresourcedefinitions/widgets.example.com"]; !ok || len(keys) != 1 {
		t.Errorf("etcd keys %v; want kube's key of widgets.example.com", keys)
	}

	// What kube refuses, with kube's causes; nothing stored.
	for _, tc := range []struct {
		name        string
		from, to    string
		field, text string
	}{
		{"name", `"name":"widgets.example.com"`, `"name":"gizmos.example.com"`, "metadata.name", `must be spec.names.plural+"."+spec.group`},
		{"untyped property", `"replicas":{"type":"integer","minimum":0}`, `"replicas":{"minimum":0}`,
			"spec.validation.openAPIV3Schema.properties[spec].properties[replicas].type", "must not be empty for specified object fields"},
		{"CEL rule", `self.replicas <= 10`, `self.replicas <=`, "spec.validation.openAPIV3Schema.properties[spec].x-kubernetes-validations[0].rule", "compilation failed"},
		{"no storage version", `"storage":true`, `"storage":false`, "spec.versions", "must have exactly one version marked as storage version"},
		{"conversion webhook", `"scope":"Namespaced",`, `"scope":"Namespaced","conversion":{"strategy":"Webhook","webhook":{"clientConfig":{"url":"https://convert.example.com/"},"conversionReviewVersions":["v1"]}},`,
			"spec.conversion.strategy", `Unsupported value: "Webhook"`},
	} {
		// Validation answers before the create is tried: an existing name
		// is no 409.
		resp := s.do(t, http.MethodPost, crds, strings.Replace(widgetsCRD, tc.from, tc.to, 1))
		if resp.Code != http.StatusUnprocessableEntity {
			t.Errorf("POST a CRD with a bad %s: %d %s; want 422", tc.name, resp.Code, resp.Body)
			continue
		}
		st := resp.status(t)
		found := false
		for _, c := range st.Details.Causes {
			found = found || (c.Field == tc.field && strings.Contains(c.Message, tc.text))
		}
		if st.Reason != metav1.StatusReasonInvalid || st.Details.Kind != "CustomResourceDefinition" || st.Details.Group != "apiextensions.k8s.io" || !found {
			t.Errorf("POST a CRD with a bad %s: %+v; want Invalid with a cause on %s saying %q", tc.name, st, tc.field, tc.text)
		}
	}
	if keys := s.storedKeys(t, "/registry/apiextensions.k8s.io/customresourcedefinitions/"); len(keys) != 1 {
		t.Errorf("after the refused creates etcd holds %d CRDs; want 1", len(keys))
	}

	// apiextensions' typed client, in JSON and in protobuf.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	jsonClient, err := apiextensionsclient.NewForConfig(&rest.Config{Host: s.URL})
	if err != nil {
		t.Fatal(err)
	}
	protoClient, err := apiextensionsclient.NewForConfig(&rest.Config{Host: s.URL, ContentConfig: rest.ContentConfig{
		ContentType: "application/vnd.kubernetes.protobuf", AcceptContentTypes: "application/vnd.kubernetes.protobuf",
	}})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		client *apiextensionsclient.Clientset
	}{{"json", jsonClient}, {"protobuf", protoClient}} {
		api := c.client.ApiextensionsV1().CustomResourceDefinitions()
		crd, err := api.Get(ctx, "widgets.example.com", metav1.GetOptions{})
		if err != nil {
			t.Fatalf("%s get: %v", c.name, err)
		}
		before := crd.Generation
		crd.Labels = map[string]string{"client": c.name}
		crd.Status.Conditions = []apiextensionsv1.CustomResourceDefinitionCondition{{Type: apiextensionsv1.Established, Status: apiextensionsv1.ConditionTrue}}
		crd, err = api.Update(ctx, crd, metav1.UpdateOptions{})
		if err != nil {
			t.Fatalf("%s update of labels and status: %v", c.name, err)
		}
		if crd.Generation != before || crd.Status.Conditions != nil || crd.Labels["client"] != c.name {
			t.Errorf("%s update of labels and status: generation %d (was %d), conditions %v, labels %v; want the generation and status unchanged, the labels written",
				c.name, crd.Generation, before, crd.Status.Conditions, crd.Labels)
		}
		crd.Spec.Names.Categories = append(crd.Spec.Names.Categories, c.name)
		crd, err = api.Update(ctx, crd, metav1.UpdateOptions{})
		if err != nil {
			t.Fatalf("%s update of the spec: %v", c.name, err)
		}
		if crd.Generation != before+1 {
			t.Errorf("%s update of the spec: generation %d; want %d", c.name, crd.Generation, before+1)
		}
		gadget := &apiextensionsv1.CustomResourceDefinition{
			ObjectMeta: metav1.ObjectMeta{Name: "gadgets" + c.name + ".example.com"},
			Spec: apiextensionsv1.CustomResourceDefinitionSpec{
				Group: "example.com", Scope: apiextensionsv1.ClusterScoped,
				Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "gadgets" + c.name, Kind: "Gadget" + strings.ToUpper(c.name[:1]) + c.name[1:]},
				Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{Name: "v1", Served: true, Storage: true, Schema: &apiextensionsv1.CustomResourceValidation{
					OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{Type: "object", XPreserveUnknownFields: ptr(true)},
				}}},
			},
		}
		if got, err := api.Create(ctx, gadget, metav1.CreateOptions{}); err != nil || got.Generation != 1 || got.Spec.Scope != apiextensionsv1.ClusterScoped {
			t.Errorf("%s create of a cluster-scoped kind = %+v, %v; want generation 1", c.name, got, err)
		}
	}

	// kube's Table columns, the storage version marked.
	resp = s.do(t, http.MethodGet, crds, nil, "Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
	var table metav1.Table
	resp.decode(t, &table)
	var columns []string
	for _, c := range table.ColumnDefinitions {
		columns = append(columns, c.Name)
	}
	if diff := cmp.Diff([]string{"Name", "Scope", "Versions", "Created At", "Group", "Kind", "ShortNames", "Established"}, columns); diff != "" {
		t.Errorf("Table columns (-want +got):\n%s", diff)
	}
	var widgets []any
	for _, row := range table.Rows {
		if row.Cells[0] == "widgets.example.com" {
			widgets = row.Cells
		}
	}
	if len(table.Rows) != 3 || len(widgets) != 8 || widgets[1] != "Namespaced" || widgets[2] != "v1(storage)" || widgets[4] != "example.com" || widgets[5] != "Widget" || widgets[6] != "wd" || widgets[7] != false {
		t.Errorf("Table rows %+v; want 3, widgets.example.com's Namespaced, v1(storage), example.com, Widget, wd, false", table.Rows)
	}
	if _, err := time.Parse(time.RFC3339, widgets[3].(string)); err != nil {
		t.Errorf("Created At %v: %v", widgets[3], err)
	}
}

// TestCRDOpenAPI: the OpenAPI documents describe CRDs (kubectl explain,
// kubectl's client-side validation): the kind in apiextensions.k8s.io/v1,
// down to the JSON schema of a version.
func TestCRDOpenAPI(t *testing.T) {
	s := startServer(t)
	resp := s.do(t, http.MethodGet, "/openapi/v3/apis/apiextensions.k8s.io/v1", nil)
	if resp.Code != http.StatusOK {
		t.Fatalf("GET /openapi/v3/apis/apiextensions.k8s.io/v1: %d %s", resp.Code, resp.Body)
	}
	var doc struct {
		Components struct {
			Schemas map[string]struct {
				Properties map[string]json.RawMessage `json:"properties"`
				GVKs       []gvk                      `json:"x-kubernetes-group-version-kind"`
			} `json:"schemas"`
		} `json:"components"`
	}
	resp.decode(t, &doc)
	const prefix = "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1."
	crd := doc.Components.Schemas[prefix+"CustomResourceDefinition"]
	if !cmp.Equal(crd.GVKs, []gvk{{"apiextensions.k8s.io", "v1", "CustomResourceDefinition"}}) || crd.Properties["spec"] == nil || crd.Properties["status"] == nil {
		t.Errorf("CustomResourceDefinition schema: %+v", crd)
	}
	for _, name := range []string{"CustomResourceDefinitionVersion", "CustomResourceValidation", "JSONSchemaProps", "ValidationRule", "CustomResourceConversion"} {
		if _, ok := doc.Components.Schemas[prefix+name]; !ok {
			t.Errorf("no %s schema", prefix+name)
		}
	}
	if props := doc.Components.Schemas[prefix+"JSONSchemaProps"].Properties; props["x-kubernetes-validations"] == nil || props["properties"] == nil {
		t.Errorf("JSONSchemaProps has no x-kubernetes-validations or properties: %v", props)
	}
}
