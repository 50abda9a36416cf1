package registry

import (
	"reflect"

	corev1 "k8s.io/api/core/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
	// As kube's configmap strategy.
	AllowUnconditionalUpdate: true,
	TableColumns: []metav1.TableColumnDefinition{
		{Name: "Data", Type: "string", Description: "Number of keys in data and binaryData."},
	},
	TableCells: func(obj Object) []any {
		cm := obj.(*corev1.ConfigMap)
		return []any{int64(len(cm.Data) + len(cm.BinaryData))}
	},
}

type configMapStrategy struct{}

var _ Strategy = configMapStrategy{}

func (configMapStrategy) PrepareForCreate(Object) {}

func (configMapStrategy) PrepareForUpdate(Object, Object) {}

// Validate follows kube-apiserver's ValidateConfigMap: keys are valid and
// unique across data and binaryData, and the total size is at most 1 MiB.
func (configMapStrategy) Validate(obj Object) field.ErrorList {
	cm := obj.(*corev1.ConfigMap)
	errs, size := validateKeys(field.NewPath("data"), cm.Data)
	binErrs, binSize := validateKeys(field.NewPath("binaryData"), cm.BinaryData)
	errs = append(errs, binErrs...)
	for key := range cm.Data {
		if _, dup := cm.BinaryData[key]; dup {
			errs = append(errs, field.Invalid(field.NewPath("data").Key(key), key, "duplicate of key present in binaryData"))
		}
	}
	if size+binSize > maxConfigMapSize {
		errs = append(errs, field.TooLong(field.NewPath(""), "", maxConfigMapSize))
	}
	return errs
}

// validateKeys checks that every key of m is a valid ConfigMap/Secret key
// and returns the bytes m takes.
func validateKeys[V ~string | ~[]byte](path *field.Path, m map[string]V) (field.ErrorList, int) {
	var errs field.ErrorList
	size := 0
	for key, value := range m {
		for _, msg := range validation.IsConfigMapKey(key) {
			errs = append(errs, field.Invalid(path.Key(key), key, msg))
		}
		size += len(key) + len(value)
	}
	return errs, size
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
