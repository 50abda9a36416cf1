// Package registry says what each served resource is — its names, types,
// defaulting and validation — and implements the generic read, create,
// replace and delete logic over storage once for all of them.
package registry

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/warning"
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
	Plural string
	// StoragePrefix, when set, is the resource's part of its etcd keys in
	// place of Plural: "<group>/<plural>" for custom resources (and CRDs),
	// as kube-apiserver keys them: <prefix>/<group>/<plural>/<ns>/<name>.
	// A declaration with Storage uses its stored declaration's.
	StoragePrefix string
	Singular      string
	// Gone, when set, is asked before each request to the resource: true
	// answers the request as a path not served. A deleted CRD's custom
	// resource is gone at once, on every replica, while the catalog keeps
	// its stores a little longer for the open watches (crdserving). For a
	// write whose transaction is guarded by the resource's definition
	// (guardedWrite), Gone answers from what the replica knows, without
	// asking etcd: the guard refuses the write if the definition is gone.
	Gone func(ctx context.Context, guardedWrite bool) (bool, error)
	// ListKind is the kind of a list ("WidgetList"); empty: Kind + "List".
	ListKind   string
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
	// Nil: Name and Age only.
	TableColumns []metav1.TableColumnDefinition
	TableCells   func(obj Object) []any
	// TableColumnsOnly: TableColumns are the whole row, without Name before
	// and Age after them (kube's Event printer: LAST SEEN, TYPE, …).
	TableColumnsOnly bool
	// SelectableFields are the fields a fieldSelector may name, and
	// FieldSet gives an object's values of them; lists, watches and the
	// read cache all filter with it. Nil: metadata.name and
	// metadata.namespace only (kube's default, whose 400 names them).
	SelectableFields []string
	FieldSet         func(obj Object) fields.Set
	// Storage, when set, makes this declaration another served version of
	// the objects another declaration stores (see StorageVersion).
	Storage *StorageVersion
	// ReadStored, when set, finishes every object the store decodes from
	// storage — as decoded into the stored declaration's New type — and
	// returns it in this declaration's version, in place of the check that
	// its kind is the stored declaration's and of Storage.FromStored:
	// custom resources are read as kube's storage codec reads them, of any
	// version of their CRD, pruned and defaulted (customresource.go). The
	// values of such a resource are never passed through as stored JSON
	// (GetJSON, ListJSON, WrittenJSON).
	ReadStored func(Object) (Object, error)
	// IsNamespace marks the Namespace resource: objects may only be created
	// in an active namespace, and deleting one only marks it until its
	// spec.finalizers are removed (namespacelife.go).
	IsNamespace bool
	// CreateOnly marks a resource that is not stored, only created and
	// answered at once (SelfSubjectAccessReview): its only verb is create.
	CreateOnly bool
	// StatusStrategy, when set, gives the resource a status subresource:
	// Store.UpdateStatus and PatchStatus write the status only, prepared
	// and checked with it (status.go). The main Strategy then keeps the
	// stored status on update, as kube's strategies do.
	StatusStrategy UpdateStrategy
	// ResetFields are the top-level fields the Strategy resets whatever a
	// write says, and StatusResetFields those the StatusStrategy resets:
	// kube's GetResetFields, which managedFields count as nobody's.
	ResetFields, StatusResetFields []string
	// ValidateCreatesOnly: Strategy.Validate is for creates only, so a
	// replace is checked by ValidateUpdate alone, against the stored object
	// whose state may relax the rules (kube's CRD validation ratchets on
	// it), and not by Validate before it is read.
	ValidateCreatesOnly bool
	// AllowUnconditionalUpdate is kube-apiserver's strategy's: whether it
	// accepts a replace without metadata.resourceVersion (an overwrite of
	// whatever is stored). Concord follows it with --unconditional-update=kube
	// only, and never allows more (unconditional.go).
	AllowUnconditionalUpdate bool
	// AllowCreateOnUpdate is kube-apiserver's strategy's: whether a replace
	// of an object that does not exist creates it (Leases, Events, RBAC's
	// objects). Concord creates none so; it decides how a replace without a
	// version of a missing object is answered: 404 as kube where kube's
	// strategy does not create, else 428 (a version is required).
	AllowCreateOnUpdate bool
}

// StorageVersion says that a declaration serves, in its own group version
// and Go type, the objects another declaration stores: one key space, one
// stored form, several served versions — kube's Events (stored as core/v1,
// served also as events.k8s.io/v1), and a CRD's versions. The store of such
// a declaration reads the stored form and converts it on the way out, and
// converts what it is sent to the stored form on the way in; everything in
// between — validation (its own Strategy), patches, field selectors, tables,
// watches — works on this declaration's type. Both declarations have the
// same Plural and scope: the key space is the stored declaration's.
type StorageVersion struct {
	// Of is the declaration whose stored objects these are.
	Of *Resource
	// ToStored converts an object of this version into Of's type, and
	// FromStored back; neither may lose a field the other form holds.
	ToStored   func(Object) (Object, error)
	FromStored func(Object) (Object, error)
}

// stored is the declaration whose type and apiVersion are what etcd holds:
// Storage.Of, or the resource itself.
func (r *Resource) stored() *Resource {
	if r.Storage != nil {
		return r.Storage.Of
	}
	return r
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
	if r.ListKind != "" {
		return r.GroupVersion.WithKind(r.ListKind)
	}
	return r.GroupVersion.WithKind(r.Kind + "List")
}

// storedJSONServed reports whether the stored JSON of an object is what
// this declaration serves, so that reads may pass it through.
func (r *Resource) storedJSONServed() bool {
	return r.Storage == nil && r.ReadStored == nil
}

// Resources are all the resources Concord serves.
var Resources = []*Resource{Namespaces, ConfigMaps, Secrets, ServiceAccounts, Leases, Events, EventsV1, CustomResourceDefinitions, Roles, ClusterRoles, RoleBindings, ClusterRoleBindings, ValidatingWebhookConfigurations, MutatingWebhookConfigurations, ValidatingAdmissionPolicies, ValidatingAdmissionPolicyBindings, MutatingAdmissionPolicies, MutatingAdmissionPolicyBindings}

// RequestDefaulter is implemented by a Strategy whose objects kube's
// decoder finishes before its field manager sees them (its defaults and
// its conversion to the internal version): DefaultRequest does that to a
// create's object (old nil) or a replacement of old, so that managedFields
// record what kube's do (a Secret's data from its stringData and its type,
// a Namespace's name label, a CRD's defaults, all the writer's).
type RequestDefaulter interface {
	DefaultRequest(obj, old Object)
}

// defaultRequest runs res's RequestDefaulter, if it has one.
func (r *Resource) defaultRequest(obj, old Object) {
	if d, ok := r.Strategy.(RequestDefaulter); ok {
		d.DefaultRequest(obj, old)
	}
}

// WarningStrategy is implemented by a Strategy (or StatusStrategy) that
// warns of what it accepts, as kube-apiserver's strategies' WarningsOnCreate
// and WarningsOnUpdate do (CustomResourceDefinitions: unrecognized formats).
// The store adds each warning of a write that passed validation to the
// request's warning recorder (k8s.io/apiserver/pkg/warning; the HTTP layer
// answers them as Warning headers), also when the write then fails, as kube
// does.
type WarningStrategy interface {
	WarningsOnCreate(obj Object) []string
	WarningsOnUpdate(obj, old Object) []string
}

// addWarnings adds warnings to ctx's warning recorder, if it has one (a
// repeated warning is answered once: the recorder drops duplicates).
func addWarnings(ctx context.Context, warnings []string) {
	for _, w := range warnings {
		warning.AddWarning(ctx, "", w)
	}
}
