package registry

import (
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
)

// Scheme knows every type Concord serves, plus the meta types (Status,
// DeleteOptions, discovery lists) that travel with them.
var Scheme = runtime.NewScheme()

// Codecs holds the JSON, YAML and protobuf serializers for Scheme.
var Codecs = serializer.NewCodecFactory(Scheme)

func init() {
	utilruntime.Must(corev1.AddToScheme(Scheme))
	utilruntime.Must(coordinationv1.AddToScheme(Scheme))
	utilruntime.Must(eventsv1.AddToScheme(Scheme))
	utilruntime.Must(rbacv1.AddToScheme(Scheme))
	utilruntime.Must(admissionregistrationv1.AddToScheme(Scheme))
	utilruntime.Must(apiextensionsv1.AddToScheme(Scheme))
	// SelfSubjectAccessReview and SelfSubjectReview, which the API answers
	// without storing them.
	utilruntime.Must(authorizationv1.AddToScheme(Scheme))
	utilruntime.Must(authenticationv1.AddToScheme(Scheme))
	// Scale, what the scale subresource of a custom resource answers.
	utilruntime.Must(autoscalingv1.AddToScheme(Scheme))
	// Options types (DeleteOptions, …) also travel as meta.k8s.io/v1.
	metav1.AddToGroupVersion(Scheme, metav1.SchemeGroupVersion)
	// Table and PartialObjectMetadata, for kubectl's server-side printing.
	utilruntime.Must(metav1.AddMetaToScheme(Scheme))
}
