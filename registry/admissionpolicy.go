package registry

import (
	"reflect"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/concord-dev/concord/etcdstore"
)

// AdmissionPolicyStoragePrefix is the part of the etcd keys of the four
// admission policy resources: <prefix>/admissionregistration.k8s.io/<plural>/<name>,
// so that one etcd watch sees every change to them and to
// AdmissionPolicyGeneration (apiserver/admission's policy view). kube keys
// them /registry/<plural>/...; no client sees the difference.
const AdmissionPolicyStoragePrefix = admissionregistrationv1.GroupName

// AdmissionPolicyGeneration is the key every write of the four policy
// resources puts in its own transaction (etcdstore.Options.Bump:
// AdmissionPolicyBump): its ModRevision is the revision of the last change
// to them, the guard of a write admitted on a view that may be behind.
var AdmissionPolicyGeneration = etcdstore.Ref{Resource: AdmissionPolicyStoragePrefix, Name: "generation"}

// AdmissionPolicyBump is the etcdstore.Options.Bump of the policy resources.
func AdmissionPolicyBump() map[string]etcdstore.Ref {
	m := map[string]etcdstore.Ref{}
	for _, r := range AdmissionPolicyResources {
		m[r.storagePrefix()] = AdmissionPolicyGeneration
	}
	return m
}

// ValidatingAdmissionPolicies, ValidatingAdmissionPolicyBindings,
// MutatingAdmissionPolicies and MutatingAdmissionPolicyBindings are
// admissionregistration.k8s.io/v1, the CEL admission policies every write
// is admitted by (apiserver/admission). A ValidatingAdmissionPolicy has a
// status subresource (its type checking, written by
// controller/admissionpolicystatus); a MutatingAdmissionPolicy has none,
// as in kube 1.37.
var (
	ValidatingAdmissionPolicies = &Resource{
		GroupVersion:             admissionregistrationv1.SchemeGroupVersion,
		Kind:                     "ValidatingAdmissionPolicy",
		Plural:                   "validatingadmissionpolicies",
		Singular:                 "validatingadmissionpolicy",
		StoragePrefix:            AdmissionPolicyStoragePrefix + "/validatingadmissionpolicies",
		Categories:               []string{"api-extensions"},
		NameValidation:           apivalidation.NameIsDNSSubdomain,
		New:                      func() Object { return &admissionregistrationv1.ValidatingAdmissionPolicy{} },
		NewList:                  func() runtime.Object { return &admissionregistrationv1.ValidatingAdmissionPolicyList{} },
		Strategy:                 validatingPolicyStrategy{},
		StatusStrategy:           validatingPolicyStatusStrategy{},
		ResetFields:              []string{"status"},
		StatusResetFields:        []string{"spec"},
		AllowUnconditionalUpdate: true,
	}
	ValidatingAdmissionPolicyBindings = &Resource{
		GroupVersion:             admissionregistrationv1.SchemeGroupVersion,
		Kind:                     "ValidatingAdmissionPolicyBinding",
		Plural:                   "validatingadmissionpolicybindings",
		Singular:                 "validatingadmissionpolicybinding",
		StoragePrefix:            AdmissionPolicyStoragePrefix + "/validatingadmissionpolicybindings",
		Categories:               []string{"api-extensions"},
		NameValidation:           apivalidation.NameIsDNSSubdomain,
		New:                      func() Object { return &admissionregistrationv1.ValidatingAdmissionPolicyBinding{} },
		NewList:                  func() runtime.Object { return &admissionregistrationv1.ValidatingAdmissionPolicyBindingList{} },
		Strategy:                 policyBindingStrategy{},
		AllowUnconditionalUpdate: true,
	}
	MutatingAdmissionPolicies = &Resource{
		GroupVersion:             admissionregistrationv1.SchemeGroupVersion,
		Kind:                     "MutatingAdmissionPolicy",
		Plural:                   "mutatingadmissionpolicies",
		Singular:                 "mutatingadmissionpolicy",
		StoragePrefix:            AdmissionPolicyStoragePrefix + "/mutatingadmissionpolicies",
		Categories:               []string{"api-extensions"},
		NameValidation:           apivalidation.NameIsDNSSubdomain,
		New:                      func() Object { return &admissionregistrationv1.MutatingAdmissionPolicy{} },
		NewList:                  func() runtime.Object { return &admissionregistrationv1.MutatingAdmissionPolicyList{} },
		Strategy:                 mutatingPolicyStrategy{},
		AllowUnconditionalUpdate: true,
	}
	MutatingAdmissionPolicyBindings = &Resource{
		GroupVersion:             admissionregistrationv1.SchemeGroupVersion,
		Kind:                     "MutatingAdmissionPolicyBinding",
		Plural:                   "mutatingadmissionpolicybindings",
		Singular:                 "mutatingadmissionpolicybinding",
		StoragePrefix:            AdmissionPolicyStoragePrefix + "/mutatingadmissionpolicybindings",
		Categories:               []string{"api-extensions"},
		NameValidation:           apivalidation.NameIsDNSSubdomain,
		New:                      func() Object { return &admissionregistrationv1.MutatingAdmissionPolicyBinding{} },
		NewList:                  func() runtime.Object { return &admissionregistrationv1.MutatingAdmissionPolicyBindingList{} },
		Strategy:                 policyBindingStrategy{},
		AllowUnconditionalUpdate: true,
	}
)

// AdmissionPolicyResources are the four policy resources.
var AdmissionPolicyResources = []*Resource{ValidatingAdmissionPolicies, ValidatingAdmissionPolicyBindings, MutatingAdmissionPolicies, MutatingAdmissionPolicyBindings}

type (
	validatingPolicyStrategy       struct{}
	validatingPolicyStatusStrategy struct{}
	mutatingPolicyStrategy         struct{}
	policyBindingStrategy          struct{}
)

var (
	_ Strategy       = validatingPolicyStrategy{}
	_ UpdateStrategy = validatingPolicyStatusStrategy{}
	_ Strategy       = mutatingPolicyStrategy{}
	_ Strategy       = policyBindingStrategy{}
)

// PrepareForCreate starts the generation at 1 and drops a status, as
// kube's strategy; PrepareForUpdate keeps the stored status and bumps the
// generation when the spec changes.
func (validatingPolicyStrategy) PrepareForCreate(obj Object) {
	p := obj.(*admissionregistrationv1.ValidatingAdmissionPolicy)
	p.Status = admissionregistrationv1.ValidatingAdmissionPolicyStatus{}
	p.Generation = 1
}

func (validatingPolicyStrategy) PrepareForUpdate(obj, old Object) {
	p, oldP := obj.(*admissionregistrationv1.ValidatingAdmissionPolicy), old.(*admissionregistrationv1.ValidatingAdmissionPolicy)
	p.Status = oldP.Status
	if !reflect.DeepEqual(p.Spec, oldP.Spec) {
		p.Generation = oldP.Generation + 1
	}
}

func (validatingPolicyStrategy) Validate(Object) field.ErrorList { return nil }

func (validatingPolicyStrategy) ValidateUpdate(Object, Object) field.ErrorList { return nil }

// PrepareForUpdate of the status keeps the stored spec and metadata.
func (validatingPolicyStatusStrategy) PrepareForUpdate(obj, old Object) {
	p, oldP := obj.(*admissionregistrationv1.ValidatingAdmissionPolicy), old.(*admissionregistrationv1.ValidatingAdmissionPolicy)
	p.Spec = *oldP.Spec.DeepCopy()
	metav1.ResetObjectMetaForStatus(&p.ObjectMeta, oldP.ObjectMeta.DeepCopy())
}

func (validatingPolicyStatusStrategy) ValidateUpdate(Object, Object) field.ErrorList { return nil }

func (mutatingPolicyStrategy) PrepareForCreate(obj Object) {
	obj.SetGeneration(1)
}

func (mutatingPolicyStrategy) PrepareForUpdate(obj, old Object) {
	p, oldP := obj.(*admissionregistrationv1.MutatingAdmissionPolicy), old.(*admissionregistrationv1.MutatingAdmissionPolicy)
	if !reflect.DeepEqual(p.Spec, oldP.Spec) {
		p.Generation = oldP.Generation + 1
	}
}

func (mutatingPolicyStrategy) Validate(Object) field.ErrorList { return nil }

func (mutatingPolicyStrategy) ValidateUpdate(Object, Object) field.ErrorList { return nil }

func (policyBindingStrategy) PrepareForCreate(obj Object) { obj.SetGeneration(1) }

func (policyBindingStrategy) PrepareForUpdate(obj, old Object) {
	if !reflect.DeepEqual(bindingSpec(obj), bindingSpec(old)) {
		obj.SetGeneration(old.GetGeneration() + 1)
	} else {
		obj.SetGeneration(old.GetGeneration())
	}
}

func bindingSpec(obj Object) any {
	switch b := obj.(type) {
	case *admissionregistrationv1.ValidatingAdmissionPolicyBinding:
		return b.Spec
	case *admissionregistrationv1.MutatingAdmissionPolicyBinding:
		return b.Spec
	}
	return nil
}

func (policyBindingStrategy) Validate(Object) field.ErrorList { return nil }

func (policyBindingStrategy) ValidateUpdate(Object, Object) field.ErrorList { return nil }
