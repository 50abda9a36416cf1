package registry

import (
	"reflect"

	corev1 "k8s.io/api/core/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Secrets are core/v1 Secrets: data is base64 in JSON, stringData is merged
// into data on every write and never stored, and the type cannot change.
var Secrets = &Resource{
	GroupVersion:   corev1.SchemeGroupVersion,
	Kind:           "Secret",
	Plural:         "secrets",
	Singular:       "secret",
	Namespaced:     true,
	NameValidation: apivalidation.NameIsDNSSubdomain,
	New:            func() Object { return &corev1.Secret{} },
	NewList:        func() runtime.Object { return &corev1.SecretList{} },
	Strategy:       secretStrategy{},
	// As kube's secret strategy.
	AllowUnconditionalUpdate: true,
	TableColumns: []metav1.TableColumnDefinition{
		{Name: "Type", Type: "string", Description: "The type of the secret."},
		{Name: "Data", Type: "string", Description: "Number of keys in data."},
	},
	TableCells: func(obj Object) []any {
		s := obj.(*corev1.Secret)
		return []any{string(s.Type), int64(len(s.Data))}
	},
}

type secretStrategy struct{}

var _ Strategy = secretStrategy{}

// mergeStringData moves stringData into data, as kube-apiserver does on
// every write; stringData wins over data for the same key.
func mergeStringData(s *corev1.Secret) {
	if len(s.StringData) == 0 {
		s.StringData = nil
		return
	}
	if s.Data == nil {
		s.Data = map[string][]byte{}
	}
	for k, v := range s.StringData {
		s.Data[k] = []byte(v)
	}
	s.StringData = nil
}

func (st secretStrategy) PrepareForCreate(obj Object) { st.DefaultRequest(obj, nil) }

func (st secretStrategy) PrepareForUpdate(obj, old Object) { st.DefaultRequest(obj, old) }

var _ RequestDefaulter = secretStrategy{}

// DefaultRequest merges stringData into data, and gives a Secret without
// a type Opaque, or, replacing old, old's (kube's decoder defaults it to
// Opaque, which its validation then refuses to change).
func (secretStrategy) DefaultRequest(obj, old Object) {
	s := obj.(*corev1.Secret)
	if s.Type == "" {
		s.Type = corev1.SecretTypeOpaque
		if old != nil {
			s.Type = old.(*corev1.Secret).Type
		}
	}
	mergeStringData(s)
}

// Validate follows kube-apiserver's ValidateSecret: valid keys, at most
// 1 MiB, and the keys the well-known types require.
func (secretStrategy) Validate(obj Object) field.ErrorList {
	s := obj.(*corev1.Secret)
	errs, size := validateKeys(field.NewPath("data"), s.Data)
	if size > maxConfigMapSize {
		errs = append(errs, field.TooLong(field.NewPath("data"), "", maxConfigMapSize))
	}
	required := map[corev1.SecretType][]string{
		corev1.SecretTypeTLS:              {corev1.TLSCertKey, corev1.TLSPrivateKeyKey},
		corev1.SecretTypeDockerConfigJson: {corev1.DockerConfigJsonKey},
		corev1.SecretTypeDockercfg:        {corev1.DockerConfigKey},
		corev1.SecretTypeSSHAuth:          {corev1.SSHAuthPrivateKey},
	}
	for _, key := range required[s.Type] {
		if _, ok := s.Data[key]; !ok {
			errs = append(errs, field.Required(field.NewPath("data").Key(key), ""))
		}
	}
	return errs
}

func (st secretStrategy) ValidateUpdate(obj, old Object) field.ErrorList {
	s, oldS := obj.(*corev1.Secret), old.(*corev1.Secret)
	var errs field.ErrorList
	if s.Type != oldS.Type {
		errs = append(errs, field.Invalid(field.NewPath("type"), s.Type, "field is immutable"))
	}
	if oldS.Immutable != nil && *oldS.Immutable {
		const msg = "field is immutable when `immutable` is set"
		if !reflect.DeepEqual(s.Immutable, oldS.Immutable) {
			errs = append(errs, field.Forbidden(field.NewPath("immutable"), msg))
		}
		if !equalMaps(s.Data, oldS.Data) {
			errs = append(errs, field.Forbidden(field.NewPath("data"), msg))
		}
	}
	return append(errs, st.Validate(obj)...)
}
