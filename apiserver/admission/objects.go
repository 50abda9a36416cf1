package admission

import (
	"fmt"
	"reflect"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"

	"github.com/concord-dev/concord/registry"
)

// builtinObjects type, create and convert the built-in kinds by
// registry.Scheme; customObjects the custom resources, which are
// unstructured (as kube's CRD handler gives them to admission).
var (
	builtinObjects = &admission.RuntimeObjectInterfaces{
		ObjectCreater:            registry.Scheme,
		ObjectTyper:              registry.Scheme,
		ObjectDefaulter:          registry.Scheme,
		ObjectConvertor:          servedConvertor{registry.Scheme},
		EquivalentResourceMapper: runtime.NewEquivalentResourceRegistry(),
	}
	customObjects = &admission.RuntimeObjectInterfaces{
		ObjectCreater:            unstructuredObjects{},
		ObjectTyper:              unstructuredObjects{},
		ObjectDefaulter:          unstructuredObjects{},
		ObjectConvertor:          servedConvertor{registry.Scheme},
		EquivalentResourceMapper: runtime.NewEquivalentResourceRegistry(),
	}
)

func objectInterfaces(kind schema.GroupVersionKind) admission.ObjectInterfaces {
	if registry.Scheme.Recognizes(kind) {
		return builtinObjects
	}
	return customObjects
}

// servedConvertor copies an object into another of its type: kube's
// plugins convert the object they sent a webhook back into the request's
// (kube's internal version), and Concord's is the served version itself.
// The target keeps its own apiVersion and kind.
type servedConvertor struct{ runtime.ObjectConvertor }

func (c servedConvertor) Convert(in, out, context any) error {
	if reflect.TypeOf(in) != reflect.TypeOf(out) {
		return c.ObjectConvertor.Convert(in, out, context)
	}
	o, ok := out.(runtime.Object)
	if !ok {
		return c.ObjectConvertor.Convert(in, out, context)
	}
	gvk := o.GetObjectKind().GroupVersionKind()
	reflect.ValueOf(out).Elem().Set(reflect.ValueOf(in).Elem())
	o.GetObjectKind().SetGroupVersionKind(gvk)
	return nil
}

// unstructuredObjects creates and types custom resources by their own
// apiVersion and kind; they have no defaults outside their schemas, which
// the store applies.
type unstructuredObjects struct{}

func (unstructuredObjects) New(kind schema.GroupVersionKind) (runtime.Object, error) {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(kind)
	return u, nil
}

func (unstructuredObjects) ObjectKinds(obj runtime.Object) ([]schema.GroupVersionKind, bool, error) {
	gvk := obj.GetObjectKind().GroupVersionKind()
	if gvk.Empty() {
		return nil, false, runtime.NewMissingKindErr(fmt.Sprintf("%T", obj))
	}
	return []schema.GroupVersionKind{gvk}, false, nil
}

func (unstructuredObjects) Recognizes(schema.GroupVersionKind) bool { return true }

func (unstructuredObjects) Default(runtime.Object) {}
