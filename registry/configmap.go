package registry

import (
	"reflect"

	corev1 "k8s.io/api/core/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// maxConfigMapSize is kube-apiserver's limit on data plus binaryData.
const maxConfigMapSize = 1 << 20

// ConfigMaps are core/v1 ConfigMaps.
var ConfigMaps = &Resource{
	GroupVersion:   corev1.SchemeGroupVersion,
	Kind:           "ConfigMap",
	Plural:         "configmaps",
	Singular:       "configmap",
	ShortNames:     []string{"cm"},
	Namespaced:     true,
	NameValidation: apivalidation.NameIsDNSSubdomain,
	New:            func() Object { return &corev1.ConfigMap{} },
	NewList:        func() runtime.Object { return &corev1.ConfigMapList{} },
	Strategy:       configMapStrategy{},
}

type configMapStrategy struct{}

var _ Strategy = configMapStrategy{}

func (configMapStrategy) PrepareForCreate(Object) {}

func (configMapStrategy) PrepareForUpdate(Object, Object) {}

// Validate follows kube-apiserver's ValidateConfigMap: keys are valid and
// unique across data and binaryData, and the total size is at most 1 MiB.
func (configMapStrategy) Validate(obj Object) field.ErrorList {
	cm := obj.(*corev1.ConfigMap)
	var errs field.ErrorList
	size := 0
	for key, value := range cm.Data {
		for _, msg := range validation.IsConfigMapKey(key) {
			errs = append(errs, field.Invalid(field.NewPath("data").Key(key), key, msg))
		}
		if _, dup := cm.BinaryData[key]; dup {
			errs = append(errs, field.Invalid(field.NewPath("data").Key(key), key, "duplicate of key present in binaryData"))
		}
		size += len(key) + len(value)
	}
	for key, value := range cm.BinaryData {
		for _, msg := range validation.IsConfigMapKey(key) {
			errs = append(errs, field.Invalid(field.NewPath("binaryData").Key(key), key, msg))
		}
		size += len(key) + len(value)
	}
	if size > maxConfigMapSize {
		errs = append(errs, field.TooLong(field.NewPath(""), "", maxConfigMapSize))
	}
	return errs
}

// ValidateUpdate refuses changes to an immutable ConfigMap's data, as
// kube-apiserver's ValidateConfigMapUpdate does.
func (s configMapStrategy) ValidateUpdate(obj, old Object) field.ErrorList {
	cm, oldCM := obj.(*corev1.ConfigMap), old.(*corev1.ConfigMap)
	var errs field.ErrorList
	if oldCM.Immutable != nil && *oldCM.Immutable {
		const msg = "field is immutable when `immutable` is set"
		if !reflect.DeepEqual(cm.Immutable, oldCM.Immutable) {
			errs = append(errs, field.Forbidden(field.NewPath("immutable"), msg))
		}
		if !equalMaps(cm.Data, oldCM.Data) {
			errs = append(errs, field.Forbidden(field.NewPath("data"), msg))
		}
		if !equalMaps(cm.BinaryData, oldCM.BinaryData) {
			errs = append(errs, field.Forbidden(field.NewPath("binaryData"), msg))
		}
	}
	return append(errs, s.Validate(obj)...)
}

// equalMaps treats nil and empty as equal, as the JSON form does.
func equalMaps[V any](a, b map[string]V) bool {
	if len(a) == 0 && len(b) == 0 {
		return true
	}
	return reflect.DeepEqual(a, b)
}
