// Package openapi builds Concord's OpenAPI v2 (Swagger) and v3 documents
// the way kube-apiserver does: for the built-in resources the schemas are
// the OpenAPI definitions kube-openapi's openapi-gen generated from the
// Kubernetes Go types (package generated), and the paths are the routes
// kube-apiserver's installer registers for each resource, both assembled by
// kube-openapi's builders; for custom resources both are what
// apiextensions-apiserver's builder makes of their CRD, merged in as kube
// merges them (crd.go). Everything is derived from the registry's resource
// declarations.
package openapi

import (
	"fmt"
	"reflect"
	"sort"
	"strings"
	"sync"
	"unicode"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/kube-openapi/pkg/builder"
	"k8s.io/kube-openapi/pkg/builder3"
	"k8s.io/kube-openapi/pkg/common"
	"k8s.io/kube-openapi/pkg/handler"
	"k8s.io/kube-openapi/pkg/spec3"
	"k8s.io/kube-openapi/pkg/util"
	"k8s.io/kube-openapi/pkg/validation/spec"

	"github.com/concord-dev/concord/apiserver/openapi/generated"
	"github.com/concord-dev/concord/registry"
)

// Specs are the OpenAPI documents of a set of resources.
type Specs struct {
	// V2 is the Swagger 2.0 document of everything (/openapi/v2).
	V2 *spec.Swagger
	// V3 holds one OpenAPI 3.0 document per group version, keyed by the
	// path below /openapi/v3: "api/v1", "apis/coordination.k8s.io/v1",
	// "apis/example.com/v1" (a CRD's).
	V3 map[string]*spec3.OpenAPI
	// Errors are the custom resources left out, each with why: their
	// documents could not be built, or their group version is a built-in
	// one. Everything else is documented.
	Errors []error
}

// V3Key is the /openapi/v3 path of a group version: "api/v1" for the core
// group, "apis/<group>/<version>" for the others.
func V3Key(gv schema.GroupVersion) string {
	return strings.TrimPrefix(groupVersionPath(gv), "/")
}

// GroupVersions are the group versions of resources, sorted.
func GroupVersions(resources []*registry.Resource) []schema.GroupVersion {
	seen := map[schema.GroupVersion]bool{}
	var gvs []schema.GroupVersion
	for _, r := range resources {
		if !seen[r.GroupVersion] {
			seen[r.GroupVersion] = true
			gvs = append(gvs, r.GroupVersion)
		}
	}
	sort.Slice(gvs, func(i, j int) bool { return V3Key(gvs[i]) < V3Key(gvs[j]) })
	return gvs
}

// Documented are those of resources whose object and list types have
// OpenAPI definitions (package generated), in order: the built-in
// resources Build documents. Custom resources (CustomResources) are
// documented from their CRD instead; any other resource without generated
// definitions is served, but not documented.
func Documented(resources []*registry.Resource) []*registry.Resource {
	defs := definitionNames()
	var out []*registry.Resource
	for _, r := range resources {
		if defs[definitionName(r.New())] && defs[definitionName(r.NewList())] {
			out = append(out, r)
		}
	}
	return out
}

// definitionNames are the names of the generated definitions.
var definitionNames = sync.OnceValue(func() map[string]bool {
	names := map[string]bool{}
	for name := range generated.GetOpenAPIDefinitions(func(path string) spec.Ref { return spec.Ref{} }) {
		names[name] = true
	}
	return names
})

// definitionName is the name of obj's type among the definitions, as the
// builders find it (GetDefinitionName).
func definitionName(obj any) string {
	name := util.GetCanonicalTypeName(obj)
	if strings.Contains(name, "/") { // a type without OpenAPIModelName
		name = util.ToRESTFriendlyName(name)
	}
	return name
}

// Builder builds the documents of resources, again and again as they
// change; it keeps the custom resources' documents while they are served.
// Its Build may be called concurrently.
type Builder struct {
	crds crdCache
}

// Build builds the v2 and v3 documents of resources (the Documented ones
// and the CustomResources) with a new Builder.
func Build(resources []*registry.Resource, version string) (*Specs, error) {
	return new(Builder).Build(resources, version)
}

// Build builds the v2 and v3 documents of resources: the Documented ones
// from their Go types, the CustomResources from their CRDs. version is the
// server's version for the documents' info.
func (b *Builder) Build(resources []*registry.Resource, version string) (*Specs, error) {
	specs, err := buildBuiltIn(Documented(resources), version)
	if err != nil {
		return nil, err
	}
	if err := b.crds.addCustomResources(specs, CustomResources(resources)); err != nil {
		return nil, err
	}
	return specs, nil
}

// buildBuiltIn builds the documents of resources that have generated
// definitions.
func buildBuiltIn(resources []*registry.Resource, version string) (*Specs, error) {
	containers := map[schema.GroupVersion]*routeContainer{}
	for _, gv := range GroupVersions(resources) {
		containers[gv] = &routeContainer{rootPath: groupVersionPath(gv)}
	}
	for _, r := range resources {
		c := containers[r.GroupVersion]
		c.routes = append(c.routes, resourceRoutes(r)...)
	}
	namer := newDefinitionNamer(registry.Scheme)
	info := &spec.Info{InfoProps: spec.InfoProps{Title: "Kubernetes", Version: version}}

	specs := &Specs{V3: map[string]*spec3.OpenAPI{}}
	var all []common.RouteContainer
	for _, gv := range GroupVersions(resources) {
		all = append(all, containers[gv])
		doc, err := builder3.BuildOpenAPISpecFromRoutes([]common.RouteContainer{containers[gv]}, &common.OpenAPIV3Config{
			Info:                           info,
			GetDefinitions:                 generated.GetOpenAPIDefinitions,
			GetDefinitionName:              namer.GetDefinitionName,
			GetOperationIDAndTagsFromRoute: operationIDAndTags,
		})
		if err != nil {
			return nil, fmt.Errorf("build OpenAPI v3 for %s: %w", gv, err)
		}
		specs.V3[V3Key(gv)] = doc
	}
	v2, err := builder.BuildOpenAPISpecFromRoutes(all, &common.Config{
		Info:                           info,
		GetDefinitions:                 generated.GetOpenAPIDefinitions,
		GetDefinitionName:              namer.GetDefinitionName,
		GetOperationIDAndTagsFromRoute: operationIDAndTags,
	})
	if err != nil {
		return nil, fmt.Errorf("build OpenAPI v2: %w", err)
	}
	// kube-apiserver drops the defaults from the v2 definitions.
	v2.Definitions = handler.PruneDefaults(v2.Definitions)
	specs.V2 = v2
	return specs, nil
}

// definitionNamer names definitions as kube-apiserver does
// (io.k8s.api.core.v1.ConfigMap) and marks the types that are kinds in the
// scheme with x-kubernetes-group-version-kind, which kubectl explain and
// client-side validation look up.
type definitionNamer struct {
	gvks map[string][]metav1.GroupVersionKind
}

func newDefinitionNamer(scheme *runtime.Scheme) *definitionNamer {
	d := &definitionNamer{gvks: map[string][]metav1.GroupVersionKind{}}
	for gvk, t := range scheme.AllKnownTypes() {
		name := util.GetCanonicalTypeName(reflect.New(t).Interface())
		if strings.Contains(name, "/") { // a type without OpenAPIModelName
			name = util.ToRESTFriendlyName(name)
		}
		g := metav1.GroupVersionKind{Group: gvk.Group, Version: gvk.Version, Kind: gvk.Kind}
		if !containsGVK(d.gvks[name], g) {
			d.gvks[name] = append(d.gvks[name], g)
		}
	}
	for _, list := range d.gvks {
		sort.Slice(list, func(i, j int) bool {
			a, b := list[i], list[j]
			if a.Group != b.Group {
				return a.Group < b.Group
			}
			if a.Version != b.Version {
				return a.Version < b.Version
			}
			return a.Kind < b.Kind
		})
	}
	return d
}

func containsGVK(list []metav1.GroupVersionKind, gvk metav1.GroupVersionKind) bool {
	for _, g := range list {
		if g == gvk {
			return true
		}
	}
	return false
}

// GetDefinitionName is kube-apiserver's DefinitionNamer.GetDefinitionName.
// The generated definitions are keyed by model name already
// (io.k8s.api.core.v1.ConfigMap, from the types' OpenAPIModelName); a Go
// type path (k8s.io/api/core/v1.ConfigMap) is turned into that form.
func (d *definitionNamer) GetDefinitionName(name string) (string, spec.Extensions) {
	if strings.Contains(name, "/") {
		name = util.ToRESTFriendlyName(name)
	}
	gvks, ok := d.gvks[name]
	if !ok {
		return name, nil
	}
	ext := make([]interface{}, 0, len(gvks))
	for _, g := range gvks {
		ext = append(ext, map[string]interface{}{"group": g.Group, "version": g.Version, "kind": g.Kind})
	}
	return name, spec.Extensions{"x-kubernetes-group-version-kind": ext}
}

var operationVerbs = util.NewTrie([]string{"get", "log", "read", "replace", "patch", "delete", "deletecollection", "watch", "connect", "proxy", "list", "create", "patch"})

// operationIDAndTags is kube-apiserver's GetOperationIDAndTags: the verb,
// then the group and version, then the rest of the operation name
// ("patchCoreV1NamespacedConfigMap"), tagged "core_v1".
func operationIDAndTags(r common.Route) (string, []string, error) {
	op := r.OperationName()
	prefix, ok := operationVerbs.GetPrefix(op)
	if !ok {
		return op, nil, fmt.Errorf("operation names should start with a verb. Cannot determine operation verb from %v", op)
	}
	op = op[len(prefix):]
	parts := strings.Split(strings.Trim(r.Path(), "/"), "/")
	if len(parts) >= 1 && parts[0] == "api" {
		parts = append([]string{"apis", "core"}, parts[1:]...)
	}
	var tags []string
	if len(parts) >= 2 && parts[0] == "apis" {
		trimmed := strings.TrimSuffix(parts[1], ".k8s.io")
		prefix += toValidOperationID(trimmed, prefix != "")
		tag := toValidOperationID(trimmed, false)
		if len(parts) > 2 {
			prefix += toValidOperationID(parts[2], prefix != "")
			tag += "_" + toValidOperationID(parts[2], false)
		}
		tags = append(tags, tag)
	} else if len(parts) >= 1 {
		tags = append(tags, toValidOperationID(parts[0], false))
	}
	return prefix + toValidOperationID(op, prefix != ""), tags, nil
}

// toValidOperationID drops punctuation and camel-cases what follows it.
func toValidOperationID(s string, capitalizeFirstLetter bool) string {
	var b strings.Builder
	capitalize := capitalizeFirstLetter
	for i, r := range s {
		if unicode.IsLetter(r) || r == '_' || (i != 0 && unicode.IsDigit(r)) {
			if capitalize {
				b.WriteRune(unicode.ToUpper(r))
				capitalize = false
			} else {
				b.WriteRune(r)
			}
		} else {
			capitalize = true
		}
	}
	return b.String()
}
