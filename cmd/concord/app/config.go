package app

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/concord-dev/concord/apiserver/filters"
	"github.com/concord-dev/concord/registry"
	"github.com/concord-dev/concord/registry/controller/leaderelect"
	"github.com/concord-dev/concord/registry/encryption"
)

// Config is everything the server is started with. Flags bind to it in
// AddFlags; Validate says what is wrong before anything starts.
type Config struct {
	EtcdServers     []string
	EtcdPrefix      string
	EtcdDialTimeout time.Duration
	// EtcdCAFile, EtcdCertFile and EtcdKeyFile secure the connection to
	// etcd (https:// endpoints): the CA that signed etcd's serving
	// certificate (empty: the system's roots) and Concord's client
	// certificate and key (both or neither).
	EtcdCAFile   string
	EtcdCertFile string
	EtcdKeyFile  string
	// EtcdRequestTimeout bounds every single etcd request, even inside a
	// long request: an etcd that does not answer makes the request fail
	// with 504 (or 503) instead of hanging.
	EtcdRequestTimeout time.Duration
	// EtcdCompactionInterval: how often history is compacted (0: never).
	EtcdCompactionInterval time.Duration
	// EventTTL is how long an Event lives after its last write
	// (kube-apiserver's --event-ttl): its key is on an etcd lease.
	EventTTL        time.Duration
	BindAddress     string
	Port            int
	DataDir         string
	WriteKubeconfig string
	LogFormat       string
	// CORSAllowedOrigins are regular expressions; empty disables CORS.
	CORSAllowedOrigins []string
	RequestTimeout     time.Duration
	// ShutdownDelayDuration is how long, after SIGTERM, /readyz fails while
	// requests are still served, so that load balancers stop sending new
	// ones before the server stops taking them.
	ShutdownDelayDuration time.Duration
	ShutdownTimeout       time.Duration
	// Security is TLS, authentication, authorization and the audit log
	// (secure.go).
	Security SecurityConfig
	// MaxRequestsInFlight and MaxMutatingRequestsInFlight bound the
	// read-only and the mutating requests served at once; more are
	// answered 429 with Retry-After. Watches are not counted. 0: no limit.
	MaxRequestsInFlight         int
	MaxMutatingRequestsInFlight int
	// MaxRequestBytesInFlight bounds the bodies of the requests served at
	// once (their Content-Length; 3 MiB without one); more are answered
	// 429 with Retry-After. 0: no limit.
	MaxRequestBytesInFlight int64
	// ReadHeaderTimeout is how long a connection may take to send a
	// request's headers (not a flag; tests shorten it). 0: 32 s, as
	// kube-apiserver.
	ReadHeaderTimeout time.Duration
	// EncryptionProviderConfig is an EncryptionConfiguration file (as
	// kube-apiserver's): which resources' values are encrypted in etcd.
	EncryptionProviderConfig string
	// Profiling serves /debug/pprof/ to those authorized for it.
	Profiling bool
	// WatchCache serves gets and lists (first pages) from memory kept current by a
	// watch.
	WatchCache bool
	// UnconditionalUpdate says which replaces may come without a
	// resourceVersion or If-Match: helm-releases, none or kube
	// (registry.ParseUnconditionalUpdate).
	UnconditionalUpdate string
	// ServiceAccounts is how ServiceAccount tokens are issued and
	// verified (serviceaccounts.go).
	ServiceAccounts ServiceAccountConfig
	// LeaderElection times the Leases that choose the one replica running
	// each controller (the garbage collector, ...): kube-controller-manager's
	// --leader-elect-* flags.
	LeaderElection leaderelect.Config
	// IgnoredFlags are the kube-apiserver flags without meaning here that
	// were given (kubeflags.go); logged at start-up.
	IgnoredFlags []ignoredFlag
}

// DefaultConfig is dev mode: embedded etcd, loopback only.
func DefaultConfig() Config {
	return Config{
		EtcdPrefix:             "/registry",
		EtcdDialTimeout:        20 * time.Second,
		EtcdRequestTimeout:     5 * time.Second,
		EtcdCompactionInterval: 5 * time.Minute,
		EventTTL:               time.Hour, // kube-apiserver's default
		BindAddress:            "127.0.0.1",
		Port:                   8080,
		DataDir:                "concord-data",
		RequestTimeout:         time.Minute,
		ShutdownTimeout:        30 * time.Second,
		Security:               SecurityConfig{AuthorizationMode: defaultAuthorizationMode},
		// kube-apiserver's defaults.
		MaxRequestsInFlight:         filters.DefaultMaxRequestsInFlight,
		MaxMutatingRequestsInFlight: filters.DefaultMaxMutatingRequestsInFlight,
		MaxRequestBytesInFlight:     filters.DefaultMaxRequestBytesInFlight,
		Profiling:                   true,
		WatchCache:                  true,
		UnconditionalUpdate:         registry.UnconditionalHelmReleases.String(),
		LeaderElection: leaderelect.Config{
			LeaseDuration: leaderelect.DefaultLeaseDuration,
			RenewDeadline: leaderelect.DefaultRenewDeadline,
			RetryPeriod:   leaderelect.DefaultRetryPeriod,
		},
	}
}

// AddFlags binds the flags, named as kube-apiserver's (or k3s's), to cfg.
func (cfg *Config) AddFlags(fs *flag.FlagSet) {
	fs.Func("etcd-servers", "comma-separated etcd client URLs (http://a:2379,http://b:2379); empty runs an embedded etcd in --data-dir", func(s string) error {
		cfg.EtcdServers = nil
		for _, u := range strings.Split(s, ",") {
			if u = strings.TrimSpace(u); u != "" {
				cfg.EtcdServers = append(cfg.EtcdServers, u)
			}
		}
		return nil
	})
	fs.StringVar(&cfg.EtcdPrefix, "etcd-prefix", cfg.EtcdPrefix, "prefix of every key Concord writes in etcd")
	fs.DurationVar(&cfg.EtcdDialTimeout, "etcd-dial-timeout", cfg.EtcdDialTimeout, "how long to wait for etcd at start-up before giving up")
	fs.StringVar(&cfg.EtcdCAFile, "etcd-cafile", cfg.EtcdCAFile, "PEM file of the CA that signed etcd's serving certificate, for https:// --etcd-servers (default: the system's roots)")
	fs.StringVar(&cfg.EtcdCertFile, "etcd-certfile", cfg.EtcdCertFile, "PEM file of the client certificate Concord presents to etcd (with --etcd-keyfile)")
	fs.StringVar(&cfg.EtcdKeyFile, "etcd-keyfile", cfg.EtcdKeyFile, "PEM file of the private key of --etcd-certfile")
	fs.DurationVar(&cfg.EtcdRequestTimeout, "etcd-request-timeout", cfg.EtcdRequestTimeout, "longest time one etcd request may take; when etcd does not answer in time the API request fails with 504 and Retry-After instead of waiting")
	fs.DurationVar(&cfg.EtcdCompactionInterval, "etcd-compaction-interval", cfg.EtcdCompactionInterval, "how often to compact etcd's history (one replica per interval does it); 0 disables")
	fs.DurationVar(&cfg.EventTTL, "event-ttl", cfg.EventTTL, "how long an Event is kept after its last write: etcd deletes it when its lease expires (leases are shared by the events written within 5% of this, at most a minute, so the key may live that much longer)")
	fs.StringVar(&cfg.BindAddress, "bind-address", cfg.BindAddress, "IP address to serve the API on")
	fs.IntVar(&cfg.Port, "port", cfg.Port, "port to serve the API on (HTTPS; plain HTTP with --insecure-serving); 0 picks a free port")
	fs.StringVar(&cfg.DataDir, "data-dir", cfg.DataDir, "directory of the embedded etcd's data (dev mode only)")
	fs.StringVar(&cfg.WriteKubeconfig, "write-kubeconfig", cfg.WriteKubeconfig, "write a kubeconfig for this server to this path (dev mode default: <data-dir>/kubeconfig.yaml)")
	fs.Func("cors-allowed-origins", "comma-separated regular expressions of the origins browsers may call from (anchor them, e.g. '^https://app\\.example\\.com$'); empty disables CORS", func(s string) error {
		cfg.CORSAllowedOrigins = nil
		for _, o := range strings.Split(s, ",") {
			if o = strings.TrimSpace(o); o != "" {
				cfg.CORSAllowedOrigins = append(cfg.CORSAllowedOrigins, o)
			}
		}
		return nil
	})
	fs.StringVar(&cfg.LogFormat, "log-format", cfg.LogFormat, "text or json (default: text in dev mode, json with --etcd-servers)")
	fs.DurationVar(&cfg.RequestTimeout, "request-timeout", cfg.RequestTimeout, "longest time a request may take")
	fs.DurationVar(&cfg.ShutdownDelayDuration, "shutdown-delay-duration", cfg.ShutdownDelayDuration, "after SIGTERM, how long /readyz fails while requests are still served, before the server stops taking new ones; behind a load balancer set it above the balancer's health-check interval times its fall count (e.g. 5s)")
	fs.DurationVar(&cfg.ShutdownTimeout, "shutdown-timeout", cfg.ShutdownTimeout, "how long in-flight requests may run after the shutdown delay; watches end at once")
	cfg.addSecurityFlags(fs)
	cfg.addServiceAccountFlags(fs)
	cfg.addKubeFlags(fs)
	fs.IntVar(&cfg.MaxRequestsInFlight, "max-requests-inflight", cfg.MaxRequestsInFlight, "most read-only requests (GET, HEAD, OPTIONS; watches are not counted) served at once; more are answered 429 with Retry-After, which clients such as client-go wait for and retry; 0: no limit")
	fs.IntVar(&cfg.MaxMutatingRequestsInFlight, "max-mutating-requests-inflight", cfg.MaxMutatingRequestsInFlight, "most mutating requests (POST, PUT, PATCH, DELETE) served at once; more are answered 429 with Retry-After; 0: no limit")
	fs.Int64Var(&cfg.MaxRequestBytesInFlight, "max-request-bytes-inflight", cfg.MaxRequestBytesInFlight, "most bytes of request bodies (each request's Content-Length; 3 MiB, the largest body allowed, for one that announces none) read or held at once; more are answered 429 with Retry-After; a body alone above it is served when no other is in flight; 0: no limit")
	fs.BoolVar(&cfg.WatchCache, "watch-cache", cfg.WatchCache, "serve gets and lists (their first page; resourceVersion unset or 0) from memory: each replica keeps every object of a resource it reads current with an etcd watch and, per read, reads only etcd's current revision (one request for all reads that arrive meanwhile) and waits until it has applied it, so reads stay linearizable; false: every read goes to etcd")
	fs.BoolVar(&cfg.Profiling, "profiling", cfg.Profiling, "serve Go's CPU, heap and goroutine profiles under /debug/pprof/ (authorized as a non-resource URL: by default system:masters only)")
	fs.StringVar(&cfg.UnconditionalUpdate, "unconditional-update", cfg.UnconditionalUpdate, "which replaces (PUT) may come without metadata.resourceVersion or If-Match, done as kube-apiserver does (one etcd transaction guarded by the revision read, retried when another write lands first): helm-releases (Helm 3's release records: Secrets of type helm.sh/release.v1, ConfigMaps and Secrets labelled owner=helm), none (every one is refused with 428), or kube (kube-apiserver's rule: the resources whose kube strategy allows it, such as ConfigMaps, Secrets and Namespaces; never Leases)")
	fs.DurationVar(&cfg.LeaderElection.LeaseDuration, "leader-elect-lease-duration", cfg.LeaderElection.LeaseDuration, "how long, after the last renewal it saw, a replica waits before taking over a controller's Lease (kube-system/concord-*) from a replica that stopped renewing it")
	fs.DurationVar(&cfg.LeaderElection.RenewDeadline, "leader-elect-renew-deadline", cfg.LeaderElection.RenewDeadline, "how long the replica running a controller keeps trying to renew its Lease before it stops running it; shorter than --leader-elect-lease-duration")
	fs.DurationVar(&cfg.LeaderElection.RetryPeriod, "leader-elect-retry-period", cfg.LeaderElection.RetryPeriod, "how often replicas renew, or try to take, the controllers' Leases; shorter than --leader-elect-renew-deadline")
	fs.StringVar(&cfg.EncryptionProviderConfig, "encryption-provider-config", cfg.EncryptionProviderConfig, "EncryptionConfiguration file (kube-apiserver's format; providers aesgcm and identity) saying which resources are encrypted at rest in etcd, e.g. secrets")
}

// Embedded reports whether Concord runs its own etcd.
func (cfg *Config) Embedded() bool { return len(cfg.EtcdServers) == 0 }

// Complete fills the defaults that depend on other settings.
func (cfg *Config) Complete() {
	if cfg.LogFormat == "" {
		cfg.LogFormat = "json"
		if cfg.Embedded() {
			cfg.LogFormat = "text"
		}
	}
	if cfg.WriteKubeconfig == "" && cfg.Embedded() {
		cfg.WriteKubeconfig = filepath.Join(cfg.DataDir, "kubeconfig.yaml")
	}
	cfg.completeSecurity()
	cfg.completeServiceAccounts()
}

// Validate reports every invalid setting at once.
func (cfg *Config) Validate() error {
	var errs []error
	for _, u := range cfg.EtcdServers {
		if !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") {
			errs = append(errs, fmt.Errorf("--etcd-servers: %q is not a URL like http://127.0.0.1:2379", u))
		}
	}
	if !strings.HasPrefix(cfg.EtcdPrefix, "/") || strings.Contains(cfg.EtcdPrefix, "..") {
		errs = append(errs, fmt.Errorf("--etcd-prefix: %q must be an absolute key prefix like /registry", cfg.EtcdPrefix))
	}
	if net.ParseIP(cfg.BindAddress) == nil {
		errs = append(errs, fmt.Errorf("--bind-address: %q is not an IP address", cfg.BindAddress))
	}
	if cfg.Port < 0 || cfg.Port > 65535 {
		errs = append(errs, fmt.Errorf("--port: %d is not a port number (0 picks a free one)", cfg.Port))
	}
	if cfg.Embedded() && cfg.DataDir == "" {
		errs = append(errs, errors.New("--data-dir: needed for the embedded etcd (or pass --etcd-servers)"))
	}
	for _, o := range cfg.CORSAllowedOrigins {
		if _, err := regexp.Compile(o); err != nil {
			errs = append(errs, fmt.Errorf("--cors-allowed-origins: %q is not a regular expression: %w", o, err))
		}
	}
	if cfg.LogFormat != "text" && cfg.LogFormat != "json" {
		errs = append(errs, fmt.Errorf("--log-format: %q is neither text nor json", cfg.LogFormat))
	}
	if cfg.EtcdCompactionInterval < 0 {
		errs = append(errs, fmt.Errorf("--etcd-compaction-interval: %s must not be negative (0 disables compaction)", cfg.EtcdCompactionInterval))
	}
	if cfg.EventTTL < time.Second {
		errs = append(errs, fmt.Errorf("--event-ttl: %s must be at least 1s (etcd leases count whole seconds)", cfg.EventTTL))
	}
	for _, d := range []struct {
		flag  string
		value time.Duration
	}{
		{"--etcd-dial-timeout", cfg.EtcdDialTimeout},
		{"--etcd-request-timeout", cfg.EtcdRequestTimeout},
		{"--request-timeout", cfg.RequestTimeout},
		{"--shutdown-timeout", cfg.ShutdownTimeout},
	} {
		if d.value <= 0 {
			errs = append(errs, fmt.Errorf("%s: %s must be positive", d.flag, d.value))
		}
	}
	if cfg.ShutdownDelayDuration < 0 {
		errs = append(errs, fmt.Errorf("--shutdown-delay-duration: %s must not be negative", cfg.ShutdownDelayDuration))
	}
	if cfg.MaxRequestsInFlight < 0 {
		errs = append(errs, fmt.Errorf("--max-requests-inflight: %d must not be negative (0: no limit)", cfg.MaxRequestsInFlight))
	}
	if cfg.MaxMutatingRequestsInFlight < 0 {
		errs = append(errs, fmt.Errorf("--max-mutating-requests-inflight: %d must not be negative (0: no limit)", cfg.MaxMutatingRequestsInFlight))
	}
	if cfg.MaxRequestBytesInFlight < 0 {
		errs = append(errs, fmt.Errorf("--max-request-bytes-inflight: %d must not be negative (0: no limit)", cfg.MaxRequestBytesInFlight))
	}
	if _, err := registry.ParseUnconditionalUpdate(cfg.UnconditionalUpdate); err != nil {
		errs = append(errs, fmt.Errorf("--unconditional-update: %q is not one of helm-releases (the default), none, kube", cfg.UnconditionalUpdate))
	}
	for _, d := range []struct {
		flag  string
		value time.Duration
	}{
		{"--leader-elect-lease-duration", cfg.LeaderElection.LeaseDuration},
		{"--leader-elect-renew-deadline", cfg.LeaderElection.RenewDeadline},
		{"--leader-elect-retry-period", cfg.LeaderElection.RetryPeriod},
	} {
		if d.value <= 0 {
			errs = append(errs, fmt.Errorf("%s: %s must be positive", d.flag, d.value))
		}
	}
	if err := cfg.LeaderElection.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("--leader-elect-*: %w", err))
	}
	errs = append(errs, cfg.validateEtcdTLS()...)
	errs = append(errs, cfg.validateSecurity()...)
	errs = append(errs, cfg.validateServiceAccounts()...)
	if _, err := cfg.encryption(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// etcdTLSSet reports whether any of the etcd TLS flags is set.
func (cfg *Config) etcdTLSSet() bool {
	return cfg.EtcdCAFile != "" || cfg.EtcdCertFile != "" || cfg.EtcdKeyFile != ""
}

func (cfg *Config) validateEtcdTLS() []error {
	if !cfg.etcdTLSSet() {
		return nil
	}
	if cfg.Embedded() {
		return []error{errors.New("--etcd-cafile, --etcd-certfile, --etcd-keyfile: only with --etcd-servers (the embedded etcd listens on loopback without TLS)")}
	}
	var errs []error
	if !slices.ContainsFunc(cfg.EtcdServers, func(u string) bool { return strings.HasPrefix(u, "https://") }) {
		errs = append(errs, errors.New("--etcd-cafile, --etcd-certfile, --etcd-keyfile: no --etcd-servers URL is https://, so TLS would not be used"))
	}
	if (cfg.EtcdCertFile == "") != (cfg.EtcdKeyFile == "") {
		errs = append(errs, errors.New("--etcd-certfile and --etcd-keyfile: give both or neither"))
	}
	for _, f := range []struct{ flag, path string }{{"--etcd-cafile", cfg.EtcdCAFile}, {"--etcd-certfile", cfg.EtcdCertFile}, {"--etcd-keyfile", cfg.EtcdKeyFile}} {
		if f.path == "" {
			continue
		}
		if _, err := os.Stat(f.path); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", f.flag, err))
		}
	}
	if len(errs) > 0 {
		return errs
	}
	if _, err := cfg.etcdTLS(); err != nil {
		errs = append(errs, err)
	}
	return errs
}

// etcdTLS is the client TLS configuration of the etcd flags; nil when none
// is set.
func (cfg *Config) etcdTLS() (*tls.Config, error) {
	if !cfg.etcdTLSSet() {
		return nil, nil
	}
	tlsCfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if cfg.EtcdCAFile != "" {
		pem, err := os.ReadFile(cfg.EtcdCAFile)
		if err != nil {
			return nil, fmt.Errorf("--etcd-cafile: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--etcd-cafile: %s holds no PEM certificate", cfg.EtcdCAFile)
		}
		tlsCfg.RootCAs = pool
	}
	if cfg.EtcdCertFile != "" {
		cert, err := tls.LoadX509KeyPair(cfg.EtcdCertFile, cfg.EtcdKeyFile)
		if err != nil {
			return nil, fmt.Errorf("--etcd-certfile, --etcd-keyfile: %w", err)
		}
		tlsCfg.Certificates = []tls.Certificate{cert}
	}
	return tlsCfg, nil
}

// encryption loads --encryption-provider-config: nil when it is not set.
// Every problem is reported with the file and its place in it.
func (cfg *Config) encryption() (*encryption.Transformers, error) {
	if cfg.EncryptionProviderConfig == "" {
		return nil, nil
	}
	t, err := encryption.LoadFile(cfg.EncryptionProviderConfig)
	if err == nil {
		if err = t.CheckResources(servedResources()); err != nil {
			err = fmt.Errorf("%s: %w", cfg.EncryptionProviderConfig, err)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("--encryption-provider-config: %w", err)
	}
	return t, nil
}

// servedResources are the resources Concord stores, as encryption rules
// name them: a resource served in another version of stored objects
// (events.events.k8s.io) is encrypted as the resource that stores them
// (events), so a rule naming it would have no effect and is refused.
func servedResources() []schema.GroupResource {
	var served []schema.GroupResource
	for _, res := range registry.Resources {
		if res.Storage == nil {
			served = append(served, res.GroupResource())
		}
	}
	return served
}
