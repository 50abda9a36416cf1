package app

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/concord-dev/concord/apiserver/authentication/serviceaccount"
	"github.com/concord-dev/concord/registry"
)

// ServiceAccountConfig is how ServiceAccount tokens are issued and
// verified, with kube-apiserver's flags.
type ServiceAccountConfig struct {
	// SigningKeyFile is the private key tokens are signed with. Empty: in
	// dev mode Concord generates one in --cert-dir and reuses it at the
	// next start; with --etcd-servers no tokens are issued or accepted.
	SigningKeyFile string
	// KeyFiles hold the keys tokens are verified with (several, for
	// rotation). Empty: the signing key's.
	KeyFiles []string
	// Issuers are the accepted iss claims; the first is the issued one.
	// Empty: defaultIssuer.
	Issuers []string
	// JWKSURI is the jwks_uri of the OpenID configuration; empty:
	// <issuer>/openid/v1/jwks.
	JWKSURI string
	// MaxTokenExpiration caps a TokenRequest's expirationSeconds (0: none).
	MaxTokenExpiration time.Duration
	// APIAudiences are the audiences a token must have one of to
	// authenticate, and a TokenRequest's default. Empty: the issuer.
	APIAudiences []string
}

// defaultIssuer is k3s's default issuer: the API's name inside a cluster.
const defaultIssuer = "https://kubernetes.default.svc.cluster.local"

// saSigningKeyFile is the generated signing key's file in --cert-dir.
const saSigningKeyFile = "service-account.key"

// repeated is a flag that may be given several times, each value appended.
type repeated struct{ values *[]string }

func (r repeated) String() string {
	if r.values == nil {
		return ""
	}
	return strings.Join(*r.values, ",")
}

func (r repeated) Set(s string) error {
	*r.values = append(*r.values, s)
	return nil
}

func (cfg *Config) addServiceAccountFlags(fs *flag.FlagSet) {
	s := &cfg.ServiceAccounts
	fs.StringVar(&s.SigningKeyFile, "service-account-signing-key-file", s.SigningKeyFile, "PEM file of the RSA or ECDSA private key ServiceAccount tokens are signed with (RS256, ES256, ES384, ES512); none: in dev mode Concord generates an RSA key in --cert-dir and reuses it at the next start; with --etcd-servers, TokenRequests are not served and no ServiceAccount token is accepted (every replica needs the same key)")
	fs.Var(repeated{&s.KeyFiles}, "service-account-key-file", "PEM file of RSA or ECDSA public keys, certificates or private keys that verify ServiceAccount tokens; repeat it to accept tokens of several keys during a rotation (default: the signing key)")
	fs.Var(repeated{&s.Issuers}, "service-account-issuer", "the iss claim of the ServiceAccount tokens issued (the first one) and accepted (all of them), and the OpenID discovery documents' issuer when it is an https URL (default: "+defaultIssuer+")")
	fs.StringVar(&s.JWKSURI, "service-account-jwks-uri", s.JWKSURI, "jwks_uri of /.well-known/openid-configuration (default: <issuer>/openid/v1/jwks)")
	fs.DurationVar(&s.MaxTokenExpiration, "service-account-max-token-expiration", s.MaxTokenExpiration, "longest lifetime of a token a TokenRequest issues: longer requests are shortened, with a warning (0: none; else 1h to 2^32 s)")
	fs.Func("api-audiences", "comma-separated audiences of the API: a ServiceAccount token must name one of them, and a TokenRequest without audiences gets them (default: the first --service-account-issuer)", func(v string) error {
		for _, a := range strings.Split(v, ",") {
			if a = strings.TrimSpace(a); a != "" {
				s.APIAudiences = append(s.APIAudiences, a)
			}
		}
		return nil
	})
}

// completeServiceAccounts fills the defaults that depend on other settings.
func (cfg *Config) completeServiceAccounts() {
	s := &cfg.ServiceAccounts
	if len(s.Issuers) == 0 {
		s.Issuers = []string{defaultIssuer}
	}
	if len(s.APIAudiences) == 0 {
		s.APIAudiences = []string{s.Issuers[0]}
	}
}

func (cfg *Config) validateServiceAccounts() []error {
	s := &cfg.ServiceAccounts
	var errs []error
	if s.MaxTokenExpiration != 0 && (s.MaxTokenExpiration < time.Hour || s.MaxTokenExpiration > (1<<32)*time.Second) {
		errs = append(errs, fmt.Errorf("--service-account-max-token-expiration: %s must be between 1h and 2^32 seconds (or 0: no limit)", s.MaxTokenExpiration))
	}
	if len(s.KeyFiles) > 0 && s.SigningKeyFile == "" {
		errs = append(errs, errors.New("--service-account-key-file: only with --service-account-signing-key-file (without it the generated key signs and verifies)"))
	}
	if slices.Contains(s.Issuers, "") {
		errs = append(errs, errors.New("--service-account-issuer: an empty issuer"))
	}
	if s.SigningKeyFile == "" {
		return errs
	}
	if _, err := cfg.serviceAccountKeys(nil); err != nil {
		errs = append(errs, err)
	}
	return errs
}

// serviceAccountKeys are the keys that sign and verify tokens, and the
// discovery documents that publish the latter.
type serviceAccountKeys struct {
	signer crypto.Signer
	verify []crypto.PublicKey
	// metadata is nil when the issuer is not an https URL (kube serves no
	// discovery documents then either).
	metadata *serviceaccount.Metadata
}

// serviceAccountKeys loads the key files or, in dev mode, loads or
// generates the key of --cert-dir; log, if not nil, is told what was done.
// With --etcd-servers and no signing key it returns nil: no tokens are
// issued or accepted, since replicas that each made a key of their own
// would refuse each other's tokens.
func (cfg *Config) serviceAccountKeys(log *slog.Logger) (*serviceAccountKeys, error) {
	s := &cfg.ServiceAccounts
	out := &serviceAccountKeys{}
	var err error
	switch {
	case s.SigningKeyFile != "":
		if out.signer, err = serviceaccount.LoadSigningKey(s.SigningKeyFile); err != nil {
			return nil, fmt.Errorf("--service-account-signing-key-file: %w", err)
		}
	case !cfg.Embedded():
		if log != nil {
			log.Info("ServiceAccount tokens are not issued or accepted: give every replica the same --service-account-signing-key-file to serve TokenRequests (e.g. openssl genrsa -out sa.key 2048)")
		}
		return nil, nil
	default:
		path := filepath.Join(cfg.Security.CertDir, saSigningKeyFile)
		generated := false
		if out.signer, generated, err = loadOrCreateSigningKey(path); err != nil {
			return nil, fmt.Errorf("service account signing key %s: %w", path, err)
		}
		if log != nil {
			log.Info("service account tokens are signed with the key of --cert-dir", "key", path, "generated", generated)
		}
	}
	for _, f := range s.KeyFiles {
		keys, err := serviceaccount.LoadPublicKeys(f)
		if err != nil {
			return nil, fmt.Errorf("--service-account-key-file: %w", err)
		}
		out.verify = append(out.verify, keys...)
	}
	if len(s.KeyFiles) == 0 {
		out.verify = []crypto.PublicKey{out.signer.Public()}
	}
	type equaler interface{ Equal(crypto.PublicKey) bool }
	if !slices.ContainsFunc(out.verify, func(k crypto.PublicKey) bool { return out.signer.Public().(equaler).Equal(k) }) {
		return nil, errors.New("--service-account-key-file: no key verifies the tokens --service-account-signing-key-file signs; list its public key too")
	}
	if len(s.Issuers) > 0 {
		md, err := serviceaccount.NewMetadata(s.Issuers[0], s.JWKSURI, out.verify)
		switch {
		case err == nil:
			out.metadata = md
		case s.JWKSURI != "":
			return nil, fmt.Errorf("--service-account-jwks-uri: %w", err)
		case log != nil:
			log.Warn("the OpenID discovery documents of the service account issuer are not served", "reason", err.Error())
		}
	}
	return out, nil
}

// loadOrCreateSigningKey reads the RSA key at path, or writes a new one
// there (0600, in a 0700 directory) if there is none.
func loadOrCreateSigningKey(path string) (crypto.Signer, bool, error) {
	if _, err := os.Stat(path); err == nil {
		key, err := serviceaccount.LoadSigningKey(path)
		return key, false, err
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, false, err
	}
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, false, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, false, err
	}
	data := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
	if err := writeFileAtomic(path, data, 0o600); err != nil {
		return nil, false, err
	}
	return key, true, nil
}

// tokens builds the TokenRequest issuer and the token authenticator over
// the catalog's ServiceAccounts and Secrets.
func (k *serviceAccountKeys) tokens(s ServiceAccountConfig, catalog *registry.Catalog) (*serviceaccount.Issuer, *serviceaccount.Authenticator, error) {
	if k == nil {
		return nil, nil, nil
	}
	sas, secrets := coreStore(catalog, registry.ServiceAccounts), coreStore(catalog, registry.Secrets)
	issuer, err := serviceaccount.NewIssuer(serviceaccount.IssuerConfig{
		Issuer: s.Issuers[0], Key: k.signer, APIAudiences: s.APIAudiences, MaxExpiration: s.MaxTokenExpiration,
		ServiceAccounts: sas, Secrets: secrets,
	})
	if err != nil {
		return nil, nil, err
	}
	authn, err := serviceaccount.NewAuthenticator(serviceaccount.AuthenticatorConfig{
		Issuers: s.Issuers, Keys: k.verify, APIAudiences: s.APIAudiences,
		ServiceAccounts: sas, Secrets: secrets,
	})
	if err != nil {
		return nil, nil, err
	}
	return issuer, authn, nil
}

// coreStore is the catalog's store of a built-in resource.
func coreStore(catalog *registry.Catalog, res *registry.Resource) *registry.Store {
	s, ok := catalog.Lookup(res.GroupVersion.Group, res.GroupVersion.Version, res.Plural)
	if !ok {
		panic("the catalog serves no " + res.Plural) // built-ins are always served
	}
	return s
}

// openIDMetadata is what /.well-known/openid-configuration serves: nil
// without tokens, or when the issuer is not an https URL.
func (k *serviceAccountKeys) openIDMetadata() *serviceaccount.Metadata {
	if k == nil {
		return nil
	}
	return k.metadata
}
