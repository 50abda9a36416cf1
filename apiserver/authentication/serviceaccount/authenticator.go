package serviceaccount

import (
	"context"
	"crypto"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	saauth "k8s.io/apiserver/pkg/authentication/serviceaccount"
	authjwt "k8s.io/apiserver/pkg/authentication/token/jwt"

	"github.com/concord-dev/concord/apiserver/filters"
)

// signatureAlgorithms are those a token may be signed with: the ones
// algorithm gives.
var signatureAlgorithms = []jose.SignatureAlgorithm{jose.RS256, jose.ES256, jose.ES384, jose.ES512}

// AuthenticatorConfig configures an Authenticator.
type AuthenticatorConfig struct {
	// Issuers are the accepted iss claims (every --service-account-issuer).
	Issuers []string
	// Keys verify signatures (every key of every --service-account-key-file).
	Keys []crypto.PublicKey
	// APIAudiences are the audiences a token must name one of.
	APIAudiences []string
	// ServiceAccounts and Secrets read the current state of the objects a
	// token is bound to; each read must be as of etcd's current state, so
	// that a deleted ServiceAccount's token is refused at once on every
	// replica (registry.Store.Get: its read cache is a watch of etcd, read
	// after a quorum read of etcd's revision).
	ServiceAccounts, Secrets Getter
}

type publicKey struct {
	id  string
	key crypto.PublicKey
}

// Authenticator authenticates ServiceAccount tokens as kube-apiserver's
// JWT token authenticator and its validator do.
type Authenticator struct {
	cfg  AuthenticatorConfig
	keys []publicKey
	now  func() time.Time
}

var _ filters.TokenAuthenticator = (*Authenticator)(nil)

// NewAuthenticator returns the authenticator of cfg.
func NewAuthenticator(cfg AuthenticatorConfig) (*Authenticator, error) {
	a := &Authenticator{cfg: cfg, now: time.Now}
	for _, k := range cfg.Keys {
		id, err := keyID(k)
		if err != nil {
			return nil, err
		}
		a.keys = append(a.keys, publicKey{id: id, key: k})
	}
	return a, nil
}

// AuthenticateToken says whose token this is. ok is false, with no error,
// for a token that is not one of these (not a JWT of one of the issuers),
// so that other authenticators may know it; an error is a token of these
// issuers that is refused (401).
func (a *Authenticator) AuthenticateToken(ctx context.Context, token string) (filters.UserInfo, bool, error) {
	if !a.hasIssuer(token) {
		return filters.UserInfo{}, false, nil
	}
	tok, err := jwt.ParseSigned(token, signatureAlgorithms)
	if err != nil {
		return filters.UserInfo{}, false, nil
	}
	var kid string
	for _, h := range tok.Headers {
		if h.KeyID != "" {
			kid = h.KeyID
			break
		}
	}
	var (
		public  jwt.Claims
		private privateClaims
		errs    []error
		found   bool
	)
	for _, k := range a.keys {
		if kid != "" && k.id != kid {
			continue
		}
		if err := tok.Claims(k.key, &public, &private); err != nil {
			errs = append(errs, err)
			continue
		}
		found = true
		break
	}
	if !found {
		if len(errs) == 0 {
			return filters.UserInfo{}, false, errors.New("invalid signature, no keys found")
		}
		return filters.UserInfo{}, false, errors.Join(errs...)
	}
	if !slices.Contains(a.cfg.Issuers, public.Issuer) {
		return filters.UserInfo{}, false, fmt.Errorf("token issuer %q is invalid", public.Issuer)
	}
	// kube: a token without audiences (a legacy one) is for the API.
	tokenAudiences := []string(public.Audience)
	if len(tokenAudiences) == 0 {
		tokenAudiences = a.cfg.APIAudiences
	}
	if len(a.cfg.APIAudiences) > 0 && !slices.ContainsFunc(tokenAudiences, func(aud string) bool { return slices.Contains(a.cfg.APIAudiences, aud) }) {
		return filters.UserInfo{}, false, fmt.Errorf("token audiences %q is invalid for the target audiences %q", tokenAudiences, a.cfg.APIAudiences)
	}
	user, err := a.validate(ctx, &public, &private)
	if err != nil {
		return filters.UserInfo{}, false, err
	}
	return user, true, nil
}

// validate is kube's validator: the times (with jwt's leeway of a
// minute), then the ServiceAccount and the bound Secret as they are now.
func (a *Authenticator) validate(ctx context.Context, public *jwt.Claims, private *privateClaims) (filters.UserInfo, error) {
	now := a.now()
	switch err := public.ValidateWithLeeway(jwt.Expected{Time: now}, jwt.DefaultLeeway); {
	case err == nil:
	case errors.Is(err, jwt.ErrExpired):
		return filters.UserInfo{}, errors.New("service account token has expired")
	case errors.Is(err, jwt.ErrNotValidYet):
		return filters.UserInfo{}, errors.New("service account token is not valid yet")
	case errors.Is(err, jwt.ErrIssuedInTheFuture):
		return filters.UserInfo{}, errors.New("service account token is issued in the future")
	default:
		return filters.UserInfo{}, errors.New("service account token claims could not be validated due to unexpected validation error")
	}
	k := private.Kubernetes
	if k.Pod != nil || k.Node != nil {
		return filters.UserInfo{}, errors.New("service account token is bound to a pod or node, which this server does not serve")
	}
	obj, err := a.cfg.ServiceAccounts.Get(ctx, k.Namespace, k.Svcacct.Name)
	if err != nil {
		return filters.UserInfo{}, fmt.Errorf("service account %s/%s: %w", k.Namespace, k.Svcacct.Name, err)
	}
	sa := obj.(*corev1.ServiceAccount)
	if string(sa.UID) != k.Svcacct.UID {
		return filters.UserInfo{}, fmt.Errorf("service account UID (%s) does not match claim (%s)", sa.UID, k.Svcacct.UID)
	}
	// kube: what was deleted (a foreground deletion in progress) more than
	// the leeway ago no longer authenticates.
	deletedBefore := now.Add(-jwt.DefaultLeeway)
	if sa.DeletionTimestamp != nil && sa.DeletionTimestamp.Time.Before(deletedBefore) {
		return filters.UserInfo{}, fmt.Errorf("service account %s/%s has been deleted", k.Namespace, k.Svcacct.Name)
	}
	if k.Secret != nil {
		obj, err := a.cfg.Secrets.Get(ctx, k.Namespace, k.Secret.Name)
		if err != nil {
			if !apierrors.IsNotFound(err) {
				return filters.UserInfo{}, fmt.Errorf("bound secret %s/%s: %w", k.Namespace, k.Secret.Name, err)
			}
			return filters.UserInfo{}, errors.New("service account token has been invalidated")
		}
		secret := obj.(*corev1.Secret)
		if string(secret.UID) != k.Secret.UID {
			return filters.UserInfo{}, fmt.Errorf("secret UID (%s) does not match service account secret ref claim (%s)", secret.UID, k.Secret.UID)
		}
		if secret.DeletionTimestamp != nil && secret.DeletionTimestamp.Time.Before(deletedBefore) {
			return filters.UserInfo{}, errors.New("service account token has been invalidated")
		}
	}
	info := (&saauth.ServiceAccountInfo{
		Namespace:    k.Namespace,
		Name:         k.Svcacct.Name,
		UID:          k.Svcacct.UID,
		CredentialID: authjwt.CredentialIDForJTI(public.ID),
	}).UserInfo()
	return filters.UserInfo{Name: info.GetName(), UID: info.GetUID(), Groups: info.GetGroups(), Extra: info.GetExtra()}, nil
}

// hasIssuer reports whether token is a compact JWS whose (unverified) iss
// is one of the issuers, as kube's hasCorrectIssuer.
func (a *Authenticator) hasIssuer(token string) bool {
	if strings.HasPrefix(strings.TrimSpace(token), "{") {
		return false
	}
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return false
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return false
	}
	var claims struct {
		// Not verified: only to tell whose token it may be.
		Issuer string `json:"iss"`
	}
	if err := json.Unmarshal(payload, &claims); err != nil {
		return false
	}
	return slices.Contains(a.cfg.Issuers, claims.Issuer)
}
