package app

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/concord-dev/concord/apiserver/filters"
)

// The --authorization-mode values, a comma list of which is asked in order.
const (
	// AuthorizationRBAC allows what the stored Roles, ClusterRoles and
	// bindings grant (package rbac), as kube-apiserver's RBAC mode.
	AuthorizationRBAC = "RBAC"
	// AuthorizationPolicy allows what the built-in rules and the
	// --authorization-policy-file allow (without a file: system:masters
	// everything, every authenticated user discovery).
	AuthorizationPolicy = "Policy"
	// AuthorizationAlwaysAllow allows every authenticated request
	// (kube-apiserver's AlwaysAllow): for tests and single-user setups.
	AuthorizationAlwaysAllow = "AlwaysAllow"
	// defaultAuthorizationMode: RBAC first, then the policy file, so that
	// a deployment with a policy file keeps every grant it had (RBAC never
	// denies) and operators grant more with kubectl.
	defaultAuthorizationMode = AuthorizationRBAC + "," + AuthorizationPolicy
)

var authorizationModes = []string{AuthorizationRBAC, AuthorizationPolicy, AuthorizationAlwaysAllow}

// parseAuthorizationModes splits --authorization-mode.
func parseAuthorizationModes(v string) ([]string, error) {
	var modes []string
	for m := range strings.SplitSeq(v, ",") {
		m = strings.TrimSpace(m)
		switch {
		case !slices.Contains(authorizationModes, m):
			return nil, fmt.Errorf("%q is not one of %s", m, strings.Join(authorizationModes, ", "))
		case slices.Contains(modes, m):
			return nil, fmt.Errorf("%q is given twice", m)
		}
		modes = append(modes, m)
	}
	return modes, nil
}

// SecurityConfig is how the server is reached and who may do what: TLS,
// authentication, authorization and the audit log. Flags are
// kube-apiserver's names where it has them.
type SecurityConfig struct {
	// TLSCertFile and TLSPrivateKeyFile are the serving certificate
	// (followed by its intermediates) and its key. Neither: Concord
	// generates a CA, a serving certificate and an admin client
	// certificate in CertDir (as k3s does), trusts that CA for client
	// certificates, and puts the CA and the admin credential in the
	// kubeconfig it writes.
	TLSCertFile       string
	TLSPrivateKeyFile string
	// CertDir holds the generated certificates (default <data-dir>/tls).
	CertDir string
	// InsecureServing serves plain HTTP instead of HTTPS, on a loopback
	// address only; authentication and authorization still apply.
	InsecureServing bool
	// ClientCAFile: client certificates signed by these CAs authenticate
	// (user = CN, groups = O).
	ClientCAFile string
	// TokenAuthFile is kube-apiserver's static token CSV file.
	TokenAuthFile string
	// AnonymousAuth serves requests without credentials as
	// system:anonymous (group system:unauthenticated); otherwise they are
	// 401. Unlike kube-apiserver, off by default.
	AnonymousAuth bool
	// AuthorizationMode is a comma list of RBAC, Policy and AlwaysAllow,
	// asked in order (default RBAC,Policy).
	AuthorizationMode string
	// AuthorizationPolicyFile is the rules of the Policy mode.
	AuthorizationPolicyFile string
	// AuditLogPath, if set, is where one JSON line per API request is
	// appended ("-": standard output).
	AuditLogPath string
}

func (cfg *Config) addSecurityFlags(fs *flag.FlagSet) {
	s := &cfg.Security
	fs.StringVar(&s.TLSCertFile, "tls-cert-file", s.TLSCertFile, "PEM file of the serving certificate, followed by its intermediates (with --tls-private-key-file); none: Concord generates a CA and a serving certificate in --cert-dir and writes the CA and an admin credential into the kubeconfig")
	fs.StringVar(&s.TLSPrivateKeyFile, "tls-private-key-file", s.TLSPrivateKeyFile, "PEM file of the private key of --tls-cert-file")
	fs.StringVar(&s.CertDir, "cert-dir", s.CertDir, "without --tls-cert-file: the directory of the serving certificate, apiserver.crt and apiserver.key as kube-apiserver's if they are there, otherwise of the CA and certificates Concord generates, reused at the next start while valid (default: <data-dir>/tls)")
	fs.BoolVar(&s.InsecureServing, "insecure-serving", s.InsecureServing, "serve plain HTTP instead of HTTPS, for tests and local tools; only on a loopback --bind-address. Authentication and authorization still apply: without TLS, only bearer tokens (and --anonymous-auth) authenticate")
	fs.StringVar(&s.ClientCAFile, "client-ca-file", s.ClientCAFile, "PEM file of the CAs whose client certificates authenticate: user = the certificate's CommonName, groups = its Organizations")
	fs.StringVar(&s.TokenAuthFile, "token-auth-file", s.TokenAuthFile, "CSV file of bearer tokens: token,user,uid,\"group1,group2\" (kube-apiserver's format)")
	fs.BoolVar(&s.AnonymousAuth, "anonymous-auth", s.AnonymousAuth, "serve requests without credentials as user system:anonymous, group system:unauthenticated (authorized like any user); otherwise they are answered 401")
	fs.StringVar(&s.AuthorizationMode, "authorization-mode", s.AuthorizationMode, "comma list of authorizers, asked in order until one allows: RBAC (the stored Roles and bindings), Policy (--authorization-policy-file and the built-in rules), AlwaysAllow (every authenticated request); system:masters may do everything")
	fs.StringVar(&s.AuthorizationPolicyFile, "authorization-policy-file", s.AuthorizationPolicyFile, "YAML file of authorization rules (users/groups, verbs, resources, namespaces or nonResourceURLs), for --authorization-mode=Policy; see docs/security.md")
	fs.StringVar(&s.AuditLogPath, "audit-log-path", s.AuditLogPath, "append one JSON line per API request (time, auditID, user, groups, verb, resource, namespace, name, code, latency) to this file; - is standard output")
}

// kube-apiserver's serving certificate and key in --cert-dir.
const (
	kubeServingCert = "apiserver.crt"
	kubeServingKey  = "apiserver.key"
)

// kubeServingCertIn reports whether dir holds kube-apiserver's serving
// certificate (either file: a missing other one is an error, not a
// generated CA).
func kubeServingCertIn(dir string) bool {
	for _, name := range []string{kubeServingCert, kubeServingKey} {
		if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
			return true
		}
	}
	return false
}

// completeSecurity fills the defaults that depend on other settings.
func (cfg *Config) completeSecurity() {
	if cfg.Security.CertDir == "" {
		cfg.Security.CertDir = filepath.Join(cfg.DataDir, "tls")
	}
	if cfg.Security.AuthorizationMode == "" {
		cfg.Security.AuthorizationMode = defaultAuthorizationMode
	}
}

// validateSecurity reports every invalid security setting; it reads the
// files it names but writes nothing.
func (cfg *Config) validateSecurity() []error {
	s := &cfg.Security
	var errs []error
	if (s.TLSCertFile == "") != (s.TLSPrivateKeyFile == "") {
		errs = append(errs, errors.New("--tls-cert-file and --tls-private-key-file: give both or neither"))
	} else if s.TLSCertFile != "" {
		if _, err := tls.LoadX509KeyPair(s.TLSCertFile, s.TLSPrivateKeyFile); err != nil {
			errs = append(errs, fmt.Errorf("--tls-cert-file, --tls-private-key-file: %w", err))
		}
	}
	if s.InsecureServing {
		if ip := net.ParseIP(cfg.BindAddress); ip != nil && !ip.IsLoopback() {
			errs = append(errs, fmt.Errorf("--insecure-serving: only on a loopback --bind-address (127.0.0.1 or ::1), not %s: plain HTTP would send credentials in the clear", cfg.BindAddress))
		}
		if s.TLSCertFile != "" {
			errs = append(errs, errors.New("--insecure-serving and --tls-cert-file: plain HTTP has no use for a certificate; give one or the other"))
		}
		if s.ClientCAFile != "" {
			errs = append(errs, errors.New("--insecure-serving and --client-ca-file: client certificates need TLS; give one or the other"))
		}
	}
	if s.ClientCAFile != "" {
		if _, err := loadClientCAs(s.ClientCAFile); err != nil {
			errs = append(errs, err)
		}
	}
	if s.TokenAuthFile != "" {
		if _, err := filters.LoadTokenFile(s.TokenAuthFile); err != nil {
			errs = append(errs, fmt.Errorf("--token-auth-file: %w", err))
		}
	}
	modes, err := parseAuthorizationModes(s.AuthorizationMode)
	switch {
	case err != nil:
		errs = append(errs, fmt.Errorf("--authorization-mode: %w", err))
	case s.AuthorizationPolicyFile == "":
	case !slices.Contains(modes, AuthorizationPolicy):
		errs = append(errs, errors.New("--authorization-policy-file: only with Policy in --authorization-mode"))
	default:
		if _, err := filters.LoadPolicyFile(s.AuthorizationPolicyFile); err != nil {
			errs = append(errs, fmt.Errorf("--authorization-policy-file: %w", err))
		}
	}
	return errs
}

func loadClientCAs(path string) (*x509.CertPool, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--client-ca-file: %w", err)
	}
	pool, ok := certPoolOf(data)
	if !ok {
		return nil, fmt.Errorf("--client-ca-file: %s holds no PEM certificate", path)
	}
	return pool, nil
}

// serving is the security of a running server, built from the settings.
type serving struct {
	// tls is nil for plain HTTP.
	tls   *tls.Config
	authn *filters.Authentication
	// authz is set by authorize once the RBAC authorizer exists.
	authz filters.Authorizer
	// modes are the --authorization-mode authorizers; policy is Policy's.
	modes  []string
	policy filters.Authorizer
	// audit is the audit log's file; nil: none.
	audit io.WriteCloser
	// kubeconfig is what the written kubeconfig carries.
	kubeconfig kubeconfigAuth
}

// kubeconfigAuth is the CA and the credential of a kubeconfig; empty
// fields are left out.
type kubeconfigAuth struct {
	caData, certData, keyData []byte
}

// buildSecurity loads the files the settings name and, without
// --tls-cert-file, loads or generates the certificates in --cert-dir. The
// returned audit file must be closed.
func (cfg *Config) buildSecurity(log *slog.Logger) (*serving, error) {
	s := &cfg.Security
	out := &serving{authn: &filters.Authentication{Anonymous: s.AnonymousAuth}}
	if s.TokenAuthFile != "" {
		tokens, err := filters.LoadTokenFile(s.TokenAuthFile)
		if err != nil {
			return nil, fmt.Errorf("--token-auth-file: %w", err)
		}
		out.authn.Tokens = tokens
	}
	if s.ClientCAFile != "" {
		pool, err := loadClientCAs(s.ClientCAFile)
		if err != nil {
			return nil, err
		}
		out.authn.ClientCAs = pool
	}

	switch {
	case s.InsecureServing:
		log.Warn("serving plain HTTP (--insecure-serving): credentials travel in the clear; use it on loopback for tests only")
	case s.TLSCertFile != "":
		cert, err := tls.LoadX509KeyPair(s.TLSCertFile, s.TLSPrivateKeyFile)
		if err != nil {
			return nil, fmt.Errorf("--tls-cert-file, --tls-private-key-file: %w", err)
		}
		out.tls = &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}}
		log.Info("serving HTTPS", "certificate", s.TLSCertFile)
	case kubeServingCertIn(s.CertDir):
		// As kube-apiserver: --cert-dir's apiserver.crt and apiserver.key,
		// written there by whoever starts the server (envtest does).
		certFile, keyFile := filepath.Join(s.CertDir, kubeServingCert), filepath.Join(s.CertDir, kubeServingKey)
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("--cert-dir %s: %w", s.CertDir, err)
		}
		out.tls = &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}}
		log.Info("serving HTTPS with --cert-dir's apiserver.crt, as kube-apiserver", "certificate", certFile)
	default:
		ips, dns := servingNames(cfg.BindAddress)
		pki, err := loadOrCreatePKI(s.CertDir, ips, dns, time.Now())
		if err != nil {
			return nil, fmt.Errorf("self-signed certificates in --cert-dir %s: %w", s.CertDir, err)
		}
		out.tls = &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{pki.serving}}
		if out.authn.ClientCAs == nil {
			out.authn.ClientCAs = x509.NewCertPool()
		}
		out.authn.ClientCAs.AddCert(pki.caCert)
		out.kubeconfig = kubeconfigAuth{caData: pki.caPEM, certData: pki.adminCert, keyData: pki.adminKey}
		log.Info("serving HTTPS with a certificate of Concord's own CA; the kubeconfig trusts the CA and holds an admin credential",
			"certDir", s.CertDir, "generated", pki.generated, "ca", filepath.Join(s.CertDir, pkiCAFile))
		if !cfg.Embedded() {
			log.Warn("each replica generates its own CA unless they share --cert-dir; behind a load balancer give them one certificate with --tls-cert-file")
		}
	}
	if out.tls != nil && out.authn.ClientCAs != nil {
		// Verified by the authenticator, so that a bad certificate is a
		// 401 Status rather than a failed handshake.
		out.tls.ClientAuth = tls.RequestClientCert
	}

	var err error
	if out.modes, err = parseAuthorizationModes(s.AuthorizationMode); err != nil {
		return nil, fmt.Errorf("--authorization-mode: %w", err)
	}
	if slices.Contains(out.modes, AuthorizationAlwaysAllow) && s.AnonymousAuth {
		log.Warn("--authorization-mode AlwaysAllow with --anonymous-auth: anyone who reaches the port may do everything")
	}
	if slices.Contains(out.modes, AuthorizationPolicy) {
		var rules []filters.PolicyRule
		if s.AuthorizationPolicyFile != "" {
			if rules, err = filters.LoadPolicyFile(s.AuthorizationPolicyFile); err != nil {
				return nil, fmt.Errorf("--authorization-policy-file: %w", err)
			}
		}
		out.policy = filters.NewPolicyAuthorizer(rules)
	}
	log.Info("authentication and authorization", "clientCertificates", out.authn.ClientCAs != nil, "tokens", len(out.authn.Tokens),
		"anonymous", s.AnonymousAuth, "authorizationMode", s.AuthorizationMode, "policyFile", s.AuthorizationPolicyFile)

	switch s.AuditLogPath {
	case "":
	case "-":
		out.audit = nopCloser{os.Stdout}
	default:
		if err := os.MkdirAll(filepath.Dir(s.AuditLogPath), 0o700); err != nil {
			return nil, fmt.Errorf("--audit-log-path: %w", err)
		}
		f, err := os.OpenFile(s.AuditLogPath, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
		if err != nil {
			return nil, fmt.Errorf("--audit-log-path: %w", err)
		}
		out.audit = f
		log.Info("audit log", "path", s.AuditLogPath)
	}
	return out, nil
}

// rbacEnabled reports whether RBAC is among the authorizers.
func (s *serving) rbacEnabled() bool { return slices.Contains(s.modes, AuthorizationRBAC) }

// authorize makes authz the chain of first, then the modes in their
// order; rbac is the RBAC authorizer (nil when it is not among them).
func (s *serving) authorize(first []filters.Authorizer, rbac filters.Authorizer) {
	chain := slices.Clone(first)
	for _, m := range s.modes {
		switch m {
		case AuthorizationRBAC:
			chain = append(chain, rbac)
		case AuthorizationPolicy:
			chain = append(chain, s.policy)
		case AuthorizationAlwaysAllow:
			chain = append(chain, filters.AlwaysAllow)
		}
	}
	s.authz = filters.Chain(chain...)
}

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }
