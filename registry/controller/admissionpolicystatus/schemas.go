package admissionpolicystatus

import (
	"fmt"
	"strings"

	crdbuilder "k8s.io/apiextensions-apiserver/pkg/controller/openapi/builder"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/cel/openapi/resolver"
	"k8s.io/kube-openapi/pkg/validation/spec"

	"github.com/concord-dev/concord/registry"
)

// restMapper maps the resources of stores to their kinds and back, as
// kube-controller-manager's discovery RESTMapper maps the served ones:
// each resource by its plural and its singular.
func restMapper(stores []*registry.Store) meta.RESTMapper {
	m := meta.NewDefaultRESTMapper(nil)
	for _, s := range stores {
		r := s.Resource
		scope := meta.RESTScopeRoot
		if r.Namespaced {
			scope = meta.RESTScopeNamespace
		}
		singular := r.Singular
		if singular == "" {
			singular = strings.ToLower(r.Kind)
		}
		m.AddSpecific(r.GroupVersionKind(), r.GroupVersion.WithResource(r.Plural), r.GroupVersion.WithResource(singular), scope)
	}
	return m
}

// customSchemas resolves the kinds of the custom resources among stores:
// each from the OpenAPI v3 document kube-apiserver serves for its CRD's
// version (kube-controller-manager reads it through discovery,
// resolver.ClientDiscoveryResolver), built here by kube's builder. Any
// other kind is resolver.ErrSchemaNotFound, which the type checker skips.
type customSchemas []*registry.Store

func (stores customSchemas) ResolveSchema(gvk schema.GroupVersionKind) (*spec.Schema, error) {
	for _, s := range stores {
		crd := registry.CustomResourceDefinitionOf(s.Resource)
		if crd == nil || s.Resource.GroupVersionKind() != gvk {
			continue
		}
		doc, err := crdbuilder.BuildOpenAPIV3(crd, gvk.Version, crdbuilder.Options{V2: false, IncludeSelectableFields: true})
		if err != nil {
			return nil, fmt.Errorf("openapi of %s: %w", gvk, err)
		}
		if doc.Components == nil {
			break
		}
		defs := doc.Components.Schemas
		for ref, def := range defs {
			var gvks []schema.GroupVersionKind
			if err := def.Extensions.GetObject("x-kubernetes-group-version-kind", &gvks); err != nil {
				return nil, fmt.Errorf("openapi of %s: %s: %w", gvk, ref, err)
			}
			for _, g := range gvks {
				if g != gvk {
					continue
				}
				return resolver.PopulateRefs(func(ref string) (*spec.Schema, bool) {
					def, ok := defs[strings.TrimPrefix(ref, "#/components/schemas/")]
					return def, ok
				}, ref)
			}
		}
	}
	return nil, fmt.Errorf("cannot resolve group version kind %q: %w", gvk, resolver.ErrSchemaNotFound)
}
