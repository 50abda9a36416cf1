package crdstatus

import (
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func crd(name, plural, kind string, short ...string) *apiextensionsv1.CustomResourceDefinition {
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "example.com",
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: plural, Singular: plural[:len(plural)-1], Kind: kind, ListKind: kind + "List", ShortNames: short},
		},
	}
}

// accepted is c as the controller leaves it when its names are free.
func accepted(c *apiextensionsv1.CustomResourceDefinition) *apiextensionsv1.CustomResourceDefinition {
	c.Status = Status(c, nil, time.Now())
	return c
}

// TestStatus: kube's naming controller's outcomes, and Established.
func TestStatus(t *testing.T) {
	widgets := accepted(crd("widgets.example.com", "widgets", "Widget", "wd"))
	cases := []struct {
		name        string
		crd         *apiextensionsv1.CustomResourceDefinition
		others      []*apiextensionsv1.CustomResourceDefinition
		accepted    string // acceptedNames.plural
		status      apiextensionsv1.ConditionStatus
		reason      string
		message     string
		established apiextensionsv1.ConditionStatus
	}{
		{"free names", crd("gadgets.example.com", "gadgets", "Gadget"), []*apiextensionsv1.CustomResourceDefinition{widgets}, "gadgets", "True", "NoConflicts", "no conflicts found", "True"},
		// As kube: every name is checked, the last conflict names the reason.
		{"plural and singular taken", crd("widgets.example.com", "widgets", "Thing"), []*apiextensionsv1.CustomResourceDefinition{widgets}, "", "False", "SingularConflict", `"widget" is already in use`, "False"},
		{"kind and list kind taken", crd("gizmos.example.com", "gizmos", "Widget"), []*apiextensionsv1.CustomResourceDefinition{widgets}, "gizmos", "False", "ListKindConflict", `"WidgetList" is already in use`, "False"},
		{"short name taken", crd("gizmos.example.com", "gizmos", "Gizmo", "wd"), []*apiextensionsv1.CustomResourceDefinition{widgets}, "gizmos", "False", "ShortNamesConflict", `"wd" is already in use`, "False"},
		// The plural "wds" is free; its singular "wd" is another's short name.
		{"singular is another's short name", crd("wds.example.com", "wds", "Wd"), []*apiextensionsv1.CustomResourceDefinition{widgets}, "wds", "False", "SingularConflict", `"wd" is already in use`, "False"},
	}
	for _, tc := range cases {
		st := Status(tc.crd, tc.others, time.Now())
		names := find(st.Conditions, apiextensionsv1.NamesAccepted)
		est := find(st.Conditions, apiextensionsv1.Established)
		if names == nil || est == nil {
			t.Fatalf("%s: conditions %+v; want NamesAccepted and Established", tc.name, st.Conditions)
		}
		if st.AcceptedNames.Plural != tc.accepted || names.Status != tc.status || names.Reason != tc.reason || names.Message != tc.message || est.Status != tc.established {
			t.Errorf("%s: accepted plural %q, NamesAccepted %s %s %q, Established %s; want %q, %s %s %q, %s",
				tc.name, st.AcceptedNames.Plural, names.Status, names.Reason, names.Message, est.Status, tc.accepted, tc.status, tc.reason, tc.message, tc.established)
		}
	}
	// Once established, a CRD stays established; a status that is already
	// right is computed again unchanged (no write).
	again := Status(widgets, nil, time.Now().Add(time.Hour))
	if est := find(again.Conditions, apiextensionsv1.Established); est == nil || est.Status != "True" || !est.LastTransitionTime.Equal(&find(widgets.Status.Conditions, apiextensionsv1.Established).LastTransitionTime) {
		t.Errorf("Established after a second pass: %+v; want True, unchanged", est)
	}
}
