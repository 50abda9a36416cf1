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
	"sort"
	"strings"
	"unicode"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/kube-openapi/pkg/builder"
	"k8s.io/kube-openapi/pkg/builder3"
	"k8s.io/kube-openapi/pkg/common"
	"k8s.io/kube-openapi/pkg/handler"
	"k8s.io/kube-openapi/pkg/spec3"
	"k8s.io/kube-openapi/pkg/util"
	"k8s.io/kube-openapi/pkg/validation/spec"

	"github.com/concord-dev/concord/registry"
	"github.com/concord-dev/concord/registry/openapidefs"
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
	defs := openapidefs.Names()
	var out []*registry.Resource
	for _, r := range resources {
		if defs[openapidefs.Name(r.New())] && defs[openapidefs.Name(r.NewList())] {
			out = append(out, r)
		}
	}
	return out
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
	namer := openapidefs.NewNamer(registry.Scheme)
	info := &spec.Info{InfoProps: spec.InfoProps{Title: "Kubernetes", Version: version}}

	specs := &Specs{V3: map[string]*spec3.OpenAPI{}}
	var all []common.RouteContainer
	for _, gv := range GroupVersions(resources) {
		all = append(all, containers[gv])
		doc, err := builder3.BuildOpenAPISpecFromRoutes([]common.RouteContainer{containers[gv]}, &common.OpenAPIV3Config{
			Info:                           info,
			GetDefinitions:                 openapidefs.Definitions,
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
		GetDefinitions:                 openapidefs.Definitions,
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
