package registry

import "strings"

// ScaleSubresource is where the scale subresource of a custom resource
// version (its CRD's subresources.scale) reads and writes an object's
// replicas, and reads its label selector: JSON paths such as
// ".spec.replicas". LabelSelectorPath is empty when the CRD names none.
type ScaleSubresource struct {
	SpecReplicasPath, StatusReplicasPath, LabelSelectorPath string
}

// Scale returns the resource's scale subresource, if it has one: a custom
// resource version whose CRD declares subresources.scale
// (CustomResource).
func (r *Resource) Scale() (ScaleSubresource, bool) {
	s, ok := r.Strategy.(*customResourceStrategy)
	if !ok || s.scale == nil {
		return ScaleSubresource{}, false
	}
	sc := ScaleSubresource{SpecReplicasPath: s.scale.SpecReplicasPath, StatusReplicasPath: s.scale.StatusReplicasPath}
	if s.scale.LabelSelectorPath != nil {
		sc.LabelSelectorPath = *s.scale.LabelSelectorPath
	}
	return sc, true
}

// Path splits a scale path into the fields it names, as kube does (the
// leading period dropped).
func (ScaleSubresource) Path(jsonPath string) []string {
	return strings.Split(strings.TrimPrefix(jsonPath, "."), ".")
}
