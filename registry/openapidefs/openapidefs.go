// Package openapidefs holds the OpenAPI definitions of the Kubernetes types
// Concord serves (package generated) and names them as kube-apiserver does.
// The OpenAPI documents are built from them (apiserver/openapi), and so are
// the types server-side apply merges by (registry), as kube-apiserver
// builds both from the same definitions.
package openapidefs

import (
	"cmp"
	"reflect"
	"slices"
	"strings"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/kube-openapi/pkg/builder3"
	"k8s.io/kube-openapi/pkg/common"
	"k8s.io/kube-openapi/pkg/util"
	"k8s.io/kube-openapi/pkg/validation/spec"

	"github.com/concord-dev/concord/registry/openapidefs/generated"
)

// Definitions are the generated definitions, keyed by model name.
var Definitions common.GetOpenAPIDefinitions = generated.GetOpenAPIDefinitions

// Names are the names of the generated definitions.
var Names = sync.OnceValue(func() map[string]bool {
	names := map[string]bool{}
	for name := range Definitions(func(string) spec.Ref { return spec.Ref{} }) {
		names[name] = true
	}
	return names
})

// Name is the name of obj's type among the definitions, as the builders
// find it (GetDefinitionName).
func Name(obj any) string {
	name := util.GetCanonicalTypeName(obj)
	if strings.Contains(name, "/") { // a type without OpenAPIModelName
		name = util.ToRESTFriendlyName(name)
	}
	return name
}

// Namer names definitions as kube-apiserver's DefinitionNamer does
// (io.k8s.api.core.v1.ConfigMap) and marks the types that are kinds in a
// scheme with x-kubernetes-group-version-kind, which kubectl explain,
// client-side validation and server-side apply look up.
type Namer struct {
	gvks map[string][]metav1.GroupVersionKind
}

// NewNamer returns the namer of the kinds of scheme.
func NewNamer(scheme *runtime.Scheme) *Namer {
	d := &Namer{gvks: map[string][]metav1.GroupVersionKind{}}
	for gvk, t := range scheme.AllKnownTypes() {
		name := Name(reflect.New(t).Interface())
		g := metav1.GroupVersionKind{Group: gvk.Group, Version: gvk.Version, Kind: gvk.Kind}
		if !slices.Contains(d.gvks[name], g) {
			d.gvks[name] = append(d.gvks[name], g)
		}
	}
	for _, list := range d.gvks {
		slices.SortFunc(list, func(a, b metav1.GroupVersionKind) int {
			return cmp.Or(strings.Compare(a.Group, b.Group), strings.Compare(a.Version, b.Version), strings.Compare(a.Kind, b.Kind))
		})
	}
	return d
}

// GetDefinitionName is kube-apiserver's DefinitionNamer.GetDefinitionName.
// The generated definitions are keyed by model name already
// (io.k8s.api.core.v1.ConfigMap, from the types' OpenAPIModelName); a Go
// type path (k8s.io/api/core/v1.ConfigMap) is turned into that form.
func (d *Namer) GetDefinitionName(name string) (string, spec.Extensions) {
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

// Models are the definitions of objs' types and of the types they refer
// to, named by namer: what kube-apiserver builds its server-side apply
// types from (BuildOpenAPIDefinitionsForResources).
func Models(namer *Namer, objs ...runtime.Object) (map[string]*spec.Schema, error) {
	names := make([]string, len(objs))
	for i, obj := range objs {
		names[i] = Name(obj)
	}
	return builder3.BuildOpenAPIDefinitionsForResources(&common.OpenAPIV3Config{
		GetDefinitions:    Definitions,
		GetDefinitionName: namer.GetDefinitionName,
	}, names...)
}
