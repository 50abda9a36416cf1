package registry

import (
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Namespaces are core/v1 Namespaces (cluster-scoped). Objects can only be
// created in an active namespace; deleting a namespace marks it, and the
// namespace controller deletes what is in it (namespacelife.go).
var Namespaces = &Resource{
	GroupVersion:   corev1.SchemeGroupVersion,
	Kind:           "Namespace",
	Plural:         "namespaces",
	Singular:       "namespace",
	ShortNames:     []string{"ns"},
	NameValidation: apivalidation.ValidateNamespaceName,
	New:            func() Object { return &corev1.Namespace{} },
	NewList:        func() runtime.Object { return &corev1.NamespaceList{} },
	Strategy:       namespaceStrategy{},
	IsNamespace:    true,
	// As kube's namespace strategy: only the server writes the status.
	ResetFields: []string{"status"},
	// As kube's namespace strategy.
	AllowUnconditionalUpdate: true,
	TableColumns: []metav1.TableColumnDefinition{
		{Name: "Status", Type: "string", Description: "The status of the namespace."},
	},
	TableCells: func(obj Object) []any {
		return []any{string(obj.(*corev1.Namespace).Status.Phase)}
	},
}

// SystemNamespaces exist from the start, as in a kube-apiserver cluster.
var SystemNamespaces = []string{metav1.NamespaceDefault, metav1.NamespaceSystem, metav1.NamespacePublic, corev1.NamespaceNodeLease}

type namespaceStrategy struct{}

var _ Strategy = namespaceStrategy{}

// PrepareForCreate starts a namespace Active with kube's finalizer.
func (st namespaceStrategy) PrepareForCreate(obj Object) {
	ns := obj.(*corev1.Namespace)
	ns.Status = corev1.NamespaceStatus{Phase: corev1.NamespaceActive}
	ns.Spec.Finalizers = []corev1.FinalizerName{corev1.FinalizerKubernetes}
	st.DefaultRequest(obj, nil)
}

// PrepareForUpdate keeps status and finalizers: they are the server's.
func (st namespaceStrategy) PrepareForUpdate(obj, old Object) {
	ns, oldNS := obj.(*corev1.Namespace), old.(*corev1.Namespace)
	ns.Status = oldNS.Status
	ns.Spec = oldNS.Spec
	st.DefaultRequest(obj, old)
}

var _ RequestDefaulter = namespaceStrategy{}

// DefaultRequest labels the namespace with its name, as kube-apiserver
// labels every namespace (kube's defaults, so its writer owns the label).
func (namespaceStrategy) DefaultRequest(obj, _ Object) {
	ns := obj.(*corev1.Namespace)
	if ns.Labels == nil {
		ns.Labels = map[string]string{}
	}
	ns.Labels[corev1.LabelMetadataName] = ns.Name
}

func (namespaceStrategy) Validate(Object) field.ErrorList               { return nil }
func (namespaceStrategy) ValidateUpdate(Object, Object) field.ErrorList { return nil }

// namespaceFinalizeStrategy is kube's for namespaces/{name}/finalize: the
// write takes spec.finalizers and metadata from the request and keeps the
// status.
type namespaceFinalizeStrategy struct{}

var _ UpdateStrategy = namespaceFinalizeStrategy{}

func (namespaceFinalizeStrategy) PrepareForUpdate(obj, old Object) {
	obj.(*corev1.Namespace).Status = old.(*corev1.Namespace).Status
}

// ValidateUpdate checks each spec finalizer as kube does: a standard name
// or a qualified one with a domain.
func (namespaceFinalizeStrategy) ValidateUpdate(obj, _ Object) field.ErrorList {
	var errs field.ErrorList
	path := field.NewPath("spec", "finalizers")
	for i, f := range obj.(*corev1.Namespace).Spec.Finalizers {
		errs = append(errs, validateFinalizerName(string(f), path.Index(i))...)
	}
	return errs
}

// validateFinalizerName is kube's core validateFinalizerName: a name
// without a domain must be one of kube's standard finalizers.
func validateFinalizerName(name string, path *field.Path) field.ErrorList {
	errs := apivalidation.ValidateFinalizerName(name, path)
	standard := []string{string(corev1.FinalizerKubernetes), metav1.FinalizerOrphanDependents, metav1.FinalizerDeleteDependents}
	if !strings.Contains(name, "/") && !slices.Contains(standard, name) {
		errs = append(errs, field.Invalid(path, name, "name is neither a standard finalizer name nor is it fully qualified"))
	}
	return errs
}
