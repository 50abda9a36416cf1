package main

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// Config is everything the server is started with. Flags bind to it in
// AddFlags; Validate says what is wrong before anything starts.
type Config struct {
	EtcdServers     []string
	EtcdPrefix      string
	EtcdDialTimeout time.Duration
	// EtcdCompactionInterval: how often history is compacted (0: never).
	EtcdCompactionInterval time.Duration
	BindAddress            string
	Port                   int
	DataDir                string
	WriteKubeconfig        string
	LogFormat              string
	// CORSAllowedOrigins are regular expressions; empty disables CORS.
	CORSAllowedOrigins []string
	RequestTimeout     time.Duration
	ShutdownTimeout    time.Duration
}

// DefaultConfig is dev mode: embedded etcd, loopback only.
func DefaultConfig() Config {
	return Config{
		EtcdPrefix:             "/registry",
		EtcdDialTimeout:        20 * time.Second,
		EtcdCompactionInterval: 5 * time.Minute,
		BindAddress:            "127.0.0.1",
		Port:                   8080,
		DataDir:                "concord-data",
		RequestTimeout:         time.Minute,
		ShutdownTimeout:        30 * time.Second,
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
	fs.DurationVar(&cfg.EtcdCompactionInterval, "etcd-compaction-interval", cfg.EtcdCompactionInterval, "how often to compact etcd's history (one replica per interval does it); 0 disables")
	fs.StringVar(&cfg.BindAddress, "bind-address", cfg.BindAddress, "IP address to serve the API on")
	fs.IntVar(&cfg.Port, "port", cfg.Port, "port to serve the API on (plain HTTP); 0 picks a free port")
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
	fs.DurationVar(&cfg.ShutdownTimeout, "shutdown-timeout", cfg.ShutdownTimeout, "how long in-flight requests may run after SIGTERM")
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
	for name, d := range map[string]time.Duration{"--etcd-dial-timeout": cfg.EtcdDialTimeout, "--request-timeout": cfg.RequestTimeout, "--shutdown-timeout": cfg.ShutdownTimeout} {
		if d <= 0 {
			errs = append(errs, fmt.Errorf("%s: %s must be positive", name, d))
		}
	}
	return errors.Join(errs...)
}
