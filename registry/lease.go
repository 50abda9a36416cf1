package registry

import (
	coordinationv1 "k8s.io/api/coordination/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Leases are coordination.k8s.io/v1 Leases, which client-go's leader
// election uses as its lock.
var Leases = &Resource{
	GroupVersion:   coordinationv1.SchemeGroupVersion,
	Kind:           "Lease",
	Plural:         "leases",
	Singular:       "lease",
	Namespaced:     true,
	NameValidation: apivalidation.NameIsDNSSubdomain,
	New:            func() Object { return &coordinationv1.Lease{} },
	NewList:        func() runtime.Object { return &coordinationv1.LeaseList{} },
	Strategy:       leaseStrategy{},
	// kube's lease strategy refuses a replace without a resourceVersion.
	AllowUnconditionalUpdate: false,
	AllowCreateOnUpdate:      true,
	TableColumns: []metav1.TableColumnDefinition{
		{Name: "Holder", Type: "string", Description: "The identity of the current holder."},
	},
	TableCells: func(obj Object) []any {
		l := obj.(*coordinationv1.Lease)
		holder := ""
		if l.Spec.HolderIdentity != nil {
			holder = *l.Spec.HolderIdentity
		}
		return []any{holder}
	},
}

type leaseStrategy struct{}

var _ Strategy = leaseStrategy{}

func (leaseStrategy) PrepareForCreate(Object)         {}
func (leaseStrategy) PrepareForUpdate(Object, Object) {}

// Validate follows kube-apiserver's ValidateLeaseSpec.
func (leaseStrategy) Validate(obj Object) field.ErrorList {
	spec := obj.(*coordinationv1.Lease).Spec
	var errs field.ErrorList
	if spec.LeaseDurationSeconds != nil && *spec.LeaseDurationSeconds <= 0 {
		errs = append(errs, field.Invalid(field.NewPath("spec", "leaseDurationSeconds"), *spec.LeaseDurationSeconds, "must be greater than 0"))
	}
	if spec.LeaseTransitions != nil && *spec.LeaseTransitions < 0 {
		errs = append(errs, field.Invalid(field.NewPath("spec", "leaseTransitions"), *spec.LeaseTransitions, "must be greater than or equal to 0"))
	}
	return errs
}

func (s leaseStrategy) ValidateUpdate(obj, _ Object) field.ErrorList { return s.Validate(obj) }
