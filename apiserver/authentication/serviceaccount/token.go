// Package serviceaccount issues and verifies ServiceAccount tokens as
// kube-apiserver does (pkg/serviceaccount, and the TokenRequest of
// pkg/registry/core/serviceaccount/storage/token.go): JWTs signed by one
// key and verified with several, whose claims bind them to the
// ServiceAccount's uid and, optionally, a Secret's; and the OpenID Connect
// discovery documents by which other systems verify them.
package serviceaccount

import (
	"context"
	"crypto"
	"fmt"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"github.com/google/uuid"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	saauth "k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/apiserver/pkg/warning"

	"github.com/concord-dev/concord/registry"
)

// The bounds of a TokenRequest's expirationSeconds, kube's
// ValidateTokenRequest.
const (
	minExpirationSeconds = 10 * 60
	maxExpirationSeconds = 1 << 32
)

// TokenRequestGVK is the kind the token subresource takes and answers.
var TokenRequestGVK = authenticationv1.SchemeGroupVersion.WithKind("TokenRequest")

// privateClaims are kube's "kubernetes.io" claims.
type privateClaims struct {
	Kubernetes kubernetesClaims `json:"kubernetes.io,omitempty"`
}

type kubernetesClaims struct {
	Namespace string `json:"namespace,omitempty"`
	Svcacct   ref    `json:"serviceaccount,omitempty"`
	Secret    *ref   `json:"secret,omitempty"`
	// Pod and Node are parsed so that a token bound to one (issued by a
	// kube-apiserver sharing the key) is refused: Concord serves neither.
	Pod  *ref `json:"pod,omitempty"`
	Node *ref `json:"node,omitempty"`
}

type ref struct {
	Name string `json:"name,omitempty"`
	UID  string `json:"uid,omitempty"`
}

// Getter reads one object; registry.Store is one.
type Getter interface {
	Get(ctx context.Context, namespace, name string) (registry.Object, error)
}

// IssuerConfig configures an Issuer.
type IssuerConfig struct {
	// Issuer is the iss claim (the first --service-account-issuer).
	Issuer string
	// Key signs (--service-account-signing-key-file).
	Key crypto.Signer
	// APIAudiences are the audiences of a request that names none
	// (--api-audiences).
	APIAudiences []string
	// MaxExpiration caps expirationSeconds (0: no cap).
	MaxExpiration time.Duration
	// ServiceAccounts and Secrets read the objects a token is for.
	ServiceAccounts, Secrets Getter
}

// Issuer answers TokenRequests.
type Issuer struct {
	cfg    IssuerConfig
	signer jose.Signer
	now    func() time.Time
}

// NewIssuer returns the issuer of cfg.
func NewIssuer(cfg IssuerConfig) (*Issuer, error) {
	alg, err := algorithm(cfg.Key.Public())
	if err != nil {
		return nil, err
	}
	kid, err := keyID(cfg.Key.Public())
	if err != nil {
		return nil, err
	}
	signer, err := jose.NewSigner(jose.SigningKey{
		Algorithm: alg,
		Key:       &jose.JSONWebKey{Algorithm: string(alg), Key: cfg.Key, KeyID: kid, Use: "sig"},
	}, nil)
	if err != nil {
		return nil, fmt.Errorf("service account token signer: %w", err)
	}
	return &Issuer{cfg: cfg, signer: signer, now: time.Now}, nil
}

// Request answers a TokenRequest for the ServiceAccount namespace/name as
// kube's TokenREST.Create does, in its order of checks, each refusal a
// Status error: the request's name and namespace (422), the ServiceAccount
// (404), its uid (409), expirationSeconds (422), the bound object (400,
// 404, 409). A request above MaxExpiration is shortened, with a warning
// (ctx's warning recorder). Nothing is stored.
func (i *Issuer) Request(ctx context.Context, namespace, name string, req *authenticationv1.TokenRequest) (*authenticationv1.TokenRequest, error) {
	gk := TokenRequestGVK.GroupKind()
	if req.Name != "" && req.Name != name {
		return nil, apierrors.NewInvalid(gk, name, field.ErrorList{field.Invalid(field.NewPath("metadata", "name"), req.Name, "must match the service account name if specified")})
	}
	if req.Namespace != "" && req.Namespace != namespace {
		return nil, apierrors.NewInvalid(gk, name, field.ErrorList{field.Invalid(field.NewPath("metadata", "namespace"), req.Namespace, "must match the service account namespace if specified")})
	}
	obj, err := i.cfg.ServiceAccounts.Get(ctx, namespace, name)
	if err != nil {
		return nil, err
	}
	sa := obj.(*corev1.ServiceAccount)
	// kube's TokenRequestServiceAccountUIDValidation.
	if req.UID != "" && req.UID != sa.UID {
		return nil, apierrors.NewConflict(schema.GroupResource{Group: gk.Group, Resource: gk.Kind}, name,
			fmt.Errorf("the UID in the token request (%s) does not match the UID of the service account (%s)", req.UID, sa.UID))
	}
	out := req.DeepCopy()
	if len(out.Spec.Audiences) == 0 {
		out.Spec.Audiences = i.cfg.APIAudiences
	}
	out.Name, out.Namespace, out.UID = sa.Name, sa.Namespace, sa.UID
	now := i.now()
	out.CreationTimestamp = metav1.NewTime(now)
	out.Status = authenticationv1.TokenRequestStatus{}
	// The v1 default, which kube's decoder applies.
	if out.Spec.ExpirationSeconds == nil {
		hour := int64(60 * 60)
		out.Spec.ExpirationSeconds = &hour
	}
	if errs := validateTokenRequest(out); len(errs) > 0 {
		return nil, apierrors.NewInvalid(gk, "", errs)
	}
	secret, err := i.boundSecret(ctx, namespace, out.Spec.BoundObjectRef)
	if err != nil {
		return nil, err
	}
	if max := int64(i.cfg.MaxExpiration / time.Second); max > 0 && *out.Spec.ExpirationSeconds > max {
		warning.AddWarning(ctx, "", fmt.Sprintf("requested expiration of %d seconds shortened to %d seconds", *out.Spec.ExpirationSeconds, max))
		out.Spec.ExpirationSeconds = &max
	}
	exp := time.Duration(*out.Spec.ExpirationSeconds) * time.Second
	token, err := i.sign(sa, secret, out.Spec.Audiences, now, exp)
	if err != nil {
		return nil, apierrors.NewInternalError(fmt.Errorf("failed to generate token: %w", err))
	}
	out.Status = authenticationv1.TokenRequestStatus{Token: token, ExpirationTimestamp: metav1.NewTime(now.Add(exp))}
	return out, nil
}

// validateTokenRequest is kube's ValidateTokenRequest.
func validateTokenRequest(req *authenticationv1.TokenRequest) field.ErrorList {
	var errs field.ErrorList
	path := field.NewPath("spec", "expirationSeconds")
	secs := *req.Spec.ExpirationSeconds
	if secs < minExpirationSeconds {
		errs = append(errs, field.Invalid(path, secs, "may not specify a duration less than 10 minutes"))
	}
	if secs > maxExpirationSeconds {
		errs = append(errs, field.Invalid(path, secs, "may not specify a duration larger than 2^32 seconds"))
	}
	return errs
}

// boundSecret is the Secret a request binds its token to, nil for none.
// Pods and Nodes are kinds kube binds to, which Concord does not serve:
// the one named is not found, as kube answers for a missing one.
func (i *Issuer) boundSecret(ctx context.Context, namespace string, ref *authenticationv1.BoundObjectReference) (*corev1.Secret, error) {
	if ref == nil {
		return nil, nil
	}
	gvk := schema.FromAPIVersionAndKind(ref.APIVersion, ref.Kind)
	var uid types.UID
	var secret *corev1.Secret
	switch {
	case gvk.Group == "" && gvk.Kind == "Pod":
		return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "pods"}, ref.Name)
	case gvk.Group == "" && gvk.Kind == "Node":
		return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "nodes"}, ref.Name)
	case gvk.Group == "" && gvk.Kind == "Secret":
		obj, err := i.cfg.Secrets.Get(ctx, namespace, ref.Name)
		if err != nil {
			return nil, err
		}
		secret = obj.(*corev1.Secret)
		uid = secret.UID
	default:
		return nil, apierrors.NewBadRequest(fmt.Sprintf("cannot bind token to object of type %s", gvk.String()))
	}
	if ref.UID != "" && ref.UID != uid {
		return nil, apierrors.NewConflict(schema.GroupResource{Group: gvk.Group, Resource: gvk.Kind}, ref.Name,
			fmt.Errorf("the UID in the bound object reference (%s) does not match the UID in record. The object might have been deleted and then recreated", ref.UID))
	}
	return secret, nil
}

// audienceClaim is aud as kube writes it: always a list. go-jose's
// jwt.Audience writes a single audience as a string, which kube's (go-jose
// v2) never does.
type audienceClaim struct {
	Audience []string `json:"aud,omitempty"`
}

// sign is kube's Claims and GenerateToken: iss, sub, aud, iat, nbf, exp,
// a random jti, and the kubernetes.io claims.
func (i *Issuer) sign(sa *corev1.ServiceAccount, secret *corev1.Secret, audiences []string, now time.Time, exp time.Duration) (string, error) {
	public := jwt.Claims{
		Issuer:    i.cfg.Issuer,
		Subject:   saauth.MakeUsername(sa.Namespace, sa.Name),
		IssuedAt:  jwt.NewNumericDate(now),
		NotBefore: jwt.NewNumericDate(now),
		Expiry:    jwt.NewNumericDate(now.Add(exp)),
		ID:        uuid.NewString(),
	}
	private := privateClaims{Kubernetes: kubernetesClaims{
		Namespace: sa.Namespace,
		Svcacct:   ref{Name: sa.Name, UID: string(sa.UID)},
	}}
	if secret != nil {
		private.Kubernetes.Secret = &ref{Name: secret.Name, UID: string(secret.UID)}
	}
	return jwt.Signed(i.signer).Claims(private).Claims(audienceClaim{audiences}).Claims(public).Serialize()
}
