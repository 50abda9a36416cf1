package registry

import (
	corev1 "k8s.io/api/core/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// ServiceAccounts are core/v1 ServiceAccounts: identities for processes,
// which authenticate with the tokens their TokenRequest subresource issues
// (apiserver/token.go). Every namespace gets a "default" one
// (package sacontroller).
var ServiceAccounts = &Resource{
	GroupVersion:   corev1.SchemeGroupVersion,
	Kind:           "ServiceAccount",
	Plural:         "serviceaccounts",
	Singular:       "serviceaccount",
	ShortNames:     []string{"sa"},
	Namespaced:     true,
	NameValidation: apivalidation.ValidateServiceAccountName,
	New:            func() Object { return &corev1.ServiceAccount{} },
	NewList:        func() runtime.Object { return &corev1.ServiceAccountList{} },
	Strategy:       serviceAccountStrategy{},
	// As kube's serviceaccount strategy.
	AllowUnconditionalUpdate: true,
	// No TableColumns: kube 1.37's printer has Name and Age only (it
	// dropped Secrets with the legacy token Secrets).
}

type serviceAccountStrategy struct{}

var (
	_ Strategy        = serviceAccountStrategy{}
	_ WarningStrategy = serviceAccountStrategy{}
)

// PrepareForCreate and PrepareForUpdate keep only the names of the
// referenced secrets, as kube's cleanSecretReferences.
func (serviceAccountStrategy) PrepareForCreate(obj Object) {
	cleanSecretReferences(obj.(*corev1.ServiceAccount))
}

func (serviceAccountStrategy) PrepareForUpdate(obj, _ Object) {
	cleanSecretReferences(obj.(*corev1.ServiceAccount))
}

func cleanSecretReferences(sa *corev1.ServiceAccount) {
	for i, s := range sa.Secrets {
		sa.Secrets[i] = corev1.ObjectReference{Name: s.Name}
	}
}

// Validate is kube's ValidateServiceAccount: the object meta alone, which
// the store checks.
func (serviceAccountStrategy) Validate(Object) field.ErrorList               { return nil }
func (serviceAccountStrategy) ValidateUpdate(Object, Object) field.ErrorList { return nil }

// enforceMountableSecrets is the annotation kube deprecated in 1.32.
const enforceMountableSecrets = "kubernetes.io/enforce-mountable-secrets"

func (serviceAccountStrategy) WarningsOnCreate(obj Object) []string {
	return mountableSecretsWarning(obj.(*corev1.ServiceAccount), nil)
}

func (serviceAccountStrategy) WarningsOnUpdate(obj, old Object) []string {
	return mountableSecretsWarning(obj.(*corev1.ServiceAccount), old.(*corev1.ServiceAccount))
}

// mountableSecretsWarning is kube's warnIfHasEnforceMountableSecretsAnnotation:
// a warning when a write newly sets the annotation.
func mountableSecretsWarning(sa, old *corev1.ServiceAccount) []string {
	if old != nil {
		if _, ok := old.Annotations[enforceMountableSecrets]; ok {
			return nil
		}
	}
	if _, ok := sa.Annotations[enforceMountableSecrets]; ok {
		return []string{"metadata.annotations[" + enforceMountableSecrets + "]: deprecated in v1.32+; prefer separate namespaces to isolate access to mounted secrets"}
	}
	return nil
}
