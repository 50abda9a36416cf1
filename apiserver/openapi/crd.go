package openapi

import (
	"fmt"
	"sort"
	"sync"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	crdbuilder "k8s.io/apiextensions-apiserver/pkg/controller/openapi/builder"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/kube-openapi/pkg/handler"
	"k8s.io/kube-openapi/pkg/spec3"
	"k8s.io/kube-openapi/pkg/validation/spec"

	"github.com/concord-dev/concord/registry"
)

// The documents of custom resources are built by kube-apiserver's own
// builder, apiextensions-apiserver's pkg/controller/openapi/builder, with
// the options its OpenAPI controllers (pkg/controller/openapi and
// openapiv3) give it in 1.37; it is a library here: it builds a go-restful
// WebService of the routes only to hand it to kube-openapi, and none of
// k8s.io/apiserver's serving machinery runs.
var (
	crdV2Options = crdbuilder.Options{V2: true, IncludeSelectableFields: true}
	crdV3Options = crdbuilder.Options{V2: false, IncludeSelectableFields: true}
)

// CustomResources are those of resources that serve a version of a CRD
// (registry.CustomResource), in order: what Build documents with the
// CRD's schema, as kube does for every served version of an established
// CRD (the catalog serves exactly those).
func CustomResources(resources []*registry.Resource) []*registry.Resource {
	var out []*registry.Resource
	for _, r := range resources {
		if registry.CustomResourceDefinitionOf(r) != nil {
			out = append(out, r)
		}
	}
	return out
}

// crdDocs are the documents kube's builder makes of one custom resource:
// one served version of one CRD.
type crdDocs struct {
	crd *apiextensionsv1.CustomResourceDefinition
	gv  schema.GroupVersion
	v2  *spec.Swagger
	v3  *spec3.OpenAPI
	err error
}

// crdCache keeps the documents of each custom resource while it is served:
// a catalog change (any CRD created, changed or deleted) rebuilds the
// documents of every group version, and kube's builder is the costly part
// of that for the unchanged CRDs. A changed CRD is a new Resource, built
// anew; kube's controllers cache theirs by CRD UID and generation alike.
// The cached documents are never changed: the merges below copy what they
// change (builder.MergeSpecs, MergeSpecsV3).
type crdCache struct {
	mu   sync.Mutex
	docs map[*registry.Resource]*crdDocs
}

// of returns the documents of the custom resources, and forgets those of
// resources no longer among them.
func (c *crdCache) of(custom []*registry.Resource) []*crdDocs {
	c.mu.Lock()
	defer c.mu.Unlock()
	keep := make(map[*registry.Resource]*crdDocs, len(custom))
	out := make([]*crdDocs, 0, len(custom))
	for _, r := range custom {
		d, ok := c.docs[r]
		if !ok {
			d = buildCRDDocs(r)
		}
		keep[r] = d
		out = append(out, d)
	}
	c.docs = keep
	return out
}

func buildCRDDocs(r *registry.Resource) *crdDocs {
	crd := registry.CustomResourceDefinitionOf(r)
	d := &crdDocs{crd: crd, gv: r.GroupVersion}
	v2, err := crdbuilder.BuildOpenAPIV2(crd, r.GroupVersion.Version, crdV2Options)
	if err != nil {
		d.err = fmt.Errorf("build the OpenAPI v2 of CustomResourceDefinition %s version %s: %w", crd.Name, r.GroupVersion.Version, err)
		return d
	}
	// As kube's controller: defaults pruned, as in the built-in document
	// they are merged with.
	v2.Definitions = handler.PruneDefaults(v2.Definitions)
	v3, err := crdbuilder.BuildOpenAPIV3(crd, r.GroupVersion.Version, crdV3Options)
	if err != nil {
		d.err = fmt.Errorf("build the OpenAPI v3 of CustomResourceDefinition %s version %s: %w", crd.Name, r.GroupVersion.Version, err)
		return d
	}
	d.v2, d.v3 = v2, v3
	return d
}

// addCustomResources merges the documents of the custom resources into
// specs, as kube-apiserver does: into /openapi/v2 each CRD's versions,
// merged, then every CRD merged into the built-in document, which wins
// any conflict (builder.MergeSpecs: a path the built-ins have is left out,
// a definition that differs is renamed); into /openapi/v3 one document per
// group version of the CRDs' versions (builder.MergeSpecsV3). A group
// version the built-ins document keeps its built-in document only. A
// custom resource whose documents cannot be built is left out of both;
// its error is in the Specs' Errors.
func (c *crdCache) addCustomResources(specs *Specs, custom []*registry.Resource) error {
	docs := c.of(custom)
	sort.SliceStable(docs, func(i, j int) bool { return docs[i].crd.Name < docs[j].crd.Name })

	byCRD := map[types.UID][]*spec.Swagger{} // a CRD's versions' v2 documents
	var crdOrder []types.UID
	byGV := map[schema.GroupVersion][]*spec3.OpenAPI{}
	var gvOrder []schema.GroupVersion
	for _, d := range docs {
		if d.err != nil {
			specs.Errors = append(specs.Errors, d.err)
			continue
		}
		key := d.crd.UID
		if key == "" { // a CRD not read from storage (tests)
			key = types.UID(d.crd.Name)
		}
		if _, ok := byCRD[key]; !ok {
			crdOrder = append(crdOrder, key)
		}
		byCRD[key] = append(byCRD[key], d.v2)
		if _, builtIn := specs.V3[V3Key(d.gv)]; builtIn {
			specs.Errors = append(specs.Errors, fmt.Errorf("CustomResourceDefinition %s version %s: the group version %s has built-in resources; its OpenAPI v3 document is theirs", d.crd.Name, d.gv.Version, d.gv))
			continue
		}
		if _, ok := byGV[d.gv]; !ok {
			gvOrder = append(gvOrder, d.gv)
		}
		byGV[d.gv] = append(byGV[d.gv], d.v3)
	}

	var perCRD []*spec.Swagger
	for _, key := range crdOrder {
		merged := &spec.Swagger{}
		for _, v := range byCRD[key] {
			var err error
			if merged, err = crdbuilder.MergeSpecs(merged, v); err != nil {
				return fmt.Errorf("merge the OpenAPI v2 of a CRD's versions: %w", err)
			}
		}
		perCRD = append(perCRD, merged)
	}
	if len(perCRD) > 0 {
		v2, err := crdbuilder.MergeSpecs(specs.V2, perCRD...)
		if err != nil {
			return fmt.Errorf("merge the OpenAPI v2 of the custom resources: %w", err)
		}
		specs.V2 = v2
	}
	for _, gv := range gvOrder {
		doc, err := crdbuilder.MergeSpecsV3(byGV[gv]...)
		if err != nil {
			return fmt.Errorf("merge the OpenAPI v3 of %s: %w", gv, err)
		}
		specs.V3[V3Key(gv)] = doc
	}
	return nil
}
