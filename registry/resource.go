// Package registry says what each served resource is — its names, types,
// defaulting and validation — and implements the generic read, create,
// replace and delete logic over storage once for all of them.
package registry

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Object is a stored API object: a runtime.Object with ObjectMeta.
type Object interface {
	runtime.Object
	metav1.Object
}

// Strategy holds what differs between resources on the write path.
type Strategy interface {
	// PrepareForCreate defaults a new object before validation.
	PrepareForCreate(obj Object)
	// PrepareForUpdate carries over from old what an update may not change.
	PrepareForUpdate(obj, old Object)
	// Validate checks a new object beyond its ObjectMeta.
	Validate(obj Object) field.ErrorList
	// ValidateUpdate checks a replacement against the stored object.
	ValidateUpdate(obj, old Object) field.ErrorList
}

// Resource declares one served resource. Adding a resource to Concord is one
// such declaration appended to Resources.
type Resource struct {
	GroupVersion schema.GroupVersion
	Kind         string
	// Plural is the resource name in URLs and etcd keys ("configmaps").
	Plural     string
	Singular   string
	ShortNames []string
	Namespaced bool
	// NameValidation checks metadata.name (apimachinery's validators).
	NameValidation func(name string, prefix bool) []string
	New            func() Object
	NewList        func() runtime.Object
	Strategy       Strategy
	// Categories group resources for kubectl ("all").
	Categories []string
	// TableColumns are the columns kube-apiserver prints for this resource
	// between Name and Age; TableCells gives an object's cells for them.
	TableColumns []metav1.TableColumnDefinition
	TableCells   func(obj Object) []any
	// IsNamespace marks the Namespace resource: objects may only be created
	// in an active namespace, and deleting one deletes its contents.
	IsNamespace bool
	// CreateOnly marks a resource that is not stored, only created and
	// answered at once (SelfSubjectAccessReview): its only verb is create.
	CreateOnly bool
}

// Verbs are the API verbs the resource answers, for discovery, OpenAPI and
// routing. Namespaces have no deletecollection, as in kube-apiserver.
func (r *Resource) Verbs() []string {
	if r.CreateOnly {
		return []string{"create"}
	}
	if r.IsNamespace {
		return []string{"create", "delete", "get", "list", "patch", "update", "watch"}
	}
	return []string{"create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"}
}

// GroupResource names the resource in Status errors ("configmaps").
func (r *Resource) GroupResource() schema.GroupResource {
	return r.GroupVersion.WithResource(r.Plural).GroupResource()
}

// GroupVersionKind is the kind of one object of this resource.
func (r *Resource) GroupVersionKind() schema.GroupVersionKind {
	return r.GroupVersion.WithKind(r.Kind)
}

// ListGroupVersionKind is the kind of a list of this resource.
func (r *Resource) ListGroupVersionKind() schema.GroupVersionKind {
	return r.GroupVersion.WithKind(r.Kind + "List")
}

// Resources are all the resources Concord serves.
var Resources = []*Resource{Namespaces, ConfigMaps, Secrets, Leases}
