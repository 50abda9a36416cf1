package registry

import (
	"fmt"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
)

// The managedFields of a custom resource's scale subresource, as kube's
// scale subresource keeps them (apiextensions-apiserver's
// scaleUpdatedObjectInfo): the object's entries are mapped to its Scale's
// by kube's ScaleHandler (who owns the spec replicas owns .spec.replicas),
// the write is recorded on the Scale by the scale field manager, and the
// Scale's entries are mapped back; the object is then written with them
// (WriteOptions.Tracked). The HTTP layer makes the Scale of an object and
// writes its replicas back (apiserver/scale.go).

var scaleGVK = autoscalingv1.SchemeGroupVersion.WithKind("Scale")

// TrackScale records next, the Scale a replace or patch of parent's scale
// subresource by opts.FieldManager makes of current (parent's Scale): it
// returns parent's managedFields with the write.
func (s *Store) TrackScale(parent Object, current, next *autoscalingv1.Scale, opts WriteOptions) ([]metav1.ManagedFieldsEntry, error) {
	m, handler, err := s.scaleFields(parent)
	if err != nil {
		return nil, err
	}
	live := current.DeepCopy()
	if live.ManagedFields, err = handler.ToSubresource(); err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	out, ok := m.UpdateNoErrors(live, next.DeepCopy(), opts.FieldManager).(*autoscalingv1.Scale)
	if !ok {
		return nil, apierrors.NewInternalError(fmt.Errorf("registry: the scale field manager of %s returned no Scale", s.Resource.GroupResource()))
	}
	return scaleEntries(handler, out)
}

// ApplyScale is a server-side apply of patch, a Scale, to current
// (parent's Scale) by opts.FieldManager, as Apply is of an object: it
// returns the Scale to write and parent's managedFields with it. A field
// another manager owns is a 409 naming it, unless opts.Force.
func (s *Store) ApplyScale(parent Object, current *autoscalingv1.Scale, patch []byte, opts WriteOptions) (*autoscalingv1.Scale, []metav1.ManagedFieldsEntry, error) {
	applied, strictErr, err := decodeApplied(patch, opts)
	if err != nil {
		return nil, nil, err
	}
	m, handler, err := s.scaleFields(parent)
	if err != nil {
		return nil, nil, err
	}
	live := current.DeepCopy()
	if live.ManagedFields, err = handler.ToSubresource(); err != nil {
		return nil, nil, apierrors.NewInternalError(err)
	}
	out, err := m.Apply(live, applied, opts.FieldManager, opts.Force)
	if err != nil {
		return nil, nil, s.applyStatus(err, applied)
	}
	next, ok := out.(*autoscalingv1.Scale)
	if !ok {
		return nil, nil, fmt.Errorf("registry: an apply of a Scale made a %T", out)
	}
	if err := strictApplied(strictErr, opts); err != nil {
		return nil, nil, err
	}
	if err := s.checkApplied(parent.GetNamespace(), parent.GetName(), next, parent, opts); err != nil {
		return nil, nil, err
	}
	entries, err := scaleEntries(handler, next)
	return next, entries, err
}

// scaleFields are the scale field manager and parent's ScaleHandler, which
// maps the spec replicas of every version of the CRD that has a scale
// subresource (an entry of a version it does not map is dropped, as kube
// drops it).
func (s *Store) scaleFields(parent Object) (*managedfields.FieldManager, *managedfields.ScaleHandler, error) {
	fields, err := s.fields()
	if err != nil {
		return nil, nil, apierrors.NewInternalError(err)
	}
	crd := CustomResourceDefinitionOf(s.Resource)
	if fields.scale == nil || crd == nil {
		return nil, nil, apierrors.NewMethodNotSupported(s.Resource.GroupResource(), "update scale")
	}
	mappings := managedfields.ResourcePathMappings{}
	for _, v := range crd.Spec.Versions {
		gv := schema.GroupVersion{Group: crd.Spec.Group, Version: v.Name}.String()
		mappings[gv] = replicasPath(v.Subresources)
	}
	return fields.scale, managedfields.NewScaleHandler(parent.GetManagedFields(), s.Resource.GroupVersion, mappings), nil
}

// replicasPath is the spec replicas of a version's scale subresource, nil
// without one.
func replicasPath(sub *apiextensionsv1.CustomResourceSubresources) fieldpath.Path {
	if sub == nil || sub.Scale == nil {
		return nil
	}
	var path fieldpath.Path
	for _, f := range (ScaleSubresource{}).Path(sub.Scale.SpecReplicasPath) {
		path = append(path, fieldpath.PathElement{FieldName: &f})
	}
	return path
}

// scaleEntries are the parent's managedFields once scale's are mapped back.
func scaleEntries(handler *managedfields.ScaleHandler, scale *autoscalingv1.Scale) ([]metav1.ManagedFieldsEntry, error) {
	entries, err := handler.ToParent(scale.ManagedFields)
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	return entries, nil
}
