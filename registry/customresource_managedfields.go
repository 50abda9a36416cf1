package registry

import (
	"fmt"

	"k8s.io/apiextensions-apiserver/pkg/controller/openapi/builder"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"k8s.io/kube-openapi/pkg/spec3"
	"k8s.io/kube-openapi/pkg/validation/spec"
)

// buildMergeTypes are the types kube's crdHandler merges the CRD's objects by
// (managedfields.go): every version's schema as kube's builder documents it
// for apply, unknown fields kept as spec.preserveUnknownFields says;
// kube's deduced types (every field atomic) when the documents cannot be
// built, as kube falls back to them.
func (d *customResourceDefinition) buildMergeTypes() *mergeTypes {
	converter := managedfields.NewDeducedTypeConverter()
	if models, err := d.applyModels(); err == nil {
		if c, err := managedfields.NewTypeConverter(models, d.preserveUnknownFields); err == nil {
			converter = c
		}
	}
	return &mergeTypes{converter: converter, convertor: customConvertor{d}, defaulter: customDefaulter{d}, creater: customCreater{}, custom: true}
}

// applyModels are kube's buildOpenAPIModelsForApply: each version built
// with the builder's defaults, the versions merged. (kube merges the
// server's built-in definitions in first; a custom resource's schemas
// refer only to the meta types, which the builder's documents hold too.)
func (d *customResourceDefinition) applyModels() (map[string]*spec.Schema, error) {
	var specs []*spec3.OpenAPI
	for _, v := range d.crd.Spec.Versions {
		s, err := builder.BuildOpenAPIV3(d.crd, v.Name, builder.Options{})
		if err != nil {
			return nil, err
		}
		specs = append(specs, s)
	}
	merged, err := builder.MergeSpecsV3(specs...)
	if err != nil {
		return nil, err
	}
	return merged.Components.Schemas, nil
}

// customConvertor converts a custom object between the CRD's versions as
// kube's None strategy does: the apiVersion only.
type customConvertor struct{ d *customResourceDefinition }

func (c customConvertor) ConvertToVersion(in runtime.Object, target runtime.GroupVersioner) (runtime.Object, error) {
	u, ok := in.(*unstructured.Unstructured)
	if !ok {
		return nil, fmt.Errorf("registry: %T is not a custom object", in)
	}
	gvk := u.GroupVersionKind()
	to, ok := target.KindForGroupVersionKinds([]schema.GroupVersionKind{gvk})
	if !ok || to.Group != c.d.crd.Spec.Group || !c.d.versions[to.Version] {
		return nil, runtime.NewNotRegisteredErrForTarget("customresource", nil, target)
	}
	if to == gvk {
		return u, nil // unwritten: the stored objects the field managers read are shared
	}
	out := u.DeepCopy()
	out.SetGroupVersionKind(to)
	return out, nil
}

func (customConvertor) Convert(in, out, context any) error {
	return fmt.Errorf("registry: custom objects convert with ConvertToVersion only")
}

func (customConvertor) ConvertFieldLabel(gvk schema.GroupVersionKind, label, value string) (string, string, error) {
	return label, value, nil
}

// customDefaulter is kube's unstructuredDefaulter: an applied object is
// defaulted by its version's schema.
type customDefaulter struct{ d *customResourceDefinition }

func (c customDefaulter) Default(in runtime.Object) {
	if u, ok := in.(*unstructured.Unstructured); ok && u.GroupVersionKind().GroupKind() == c.d.gvk(u.GroupVersionKind().Version).GroupKind() {
		c.d.applyDefaults(u.Object, c.d.schemas[u.GroupVersionKind().Version])
	}
}

// customCreater is kube's unstructuredCreator.
type customCreater struct{}

func (customCreater) New(gvk schema.GroupVersionKind) (runtime.Object, error) {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(gvk)
	return u, nil
}
