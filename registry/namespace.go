package registry

import (
	corev1 "k8s.io/api/core/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Namespaces are core/v1 Namespaces (cluster-scoped). Objects can only be
// created in an active namespace; deleting a namespace deletes what is in it.
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
