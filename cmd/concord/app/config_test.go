package app

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestFlagDefaults(t *testing.T) {
	cfg := DefaultConfig()
	fs := flag.NewFlagSet("concord", flag.ContinueOnError)
	cfg.AddFlags(fs)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	if cfg.EtcdRequestTimeout != 5*time.Second {
		t.Errorf("--etcd-request-timeout default = %s; want 5s", cfg.EtcdRequestTimeout)
	}
	if cfg.ShutdownDelayDuration != 0 {
		t.Errorf("--shutdown-delay-duration default = %s; want 0", cfg.ShutdownDelayDuration)
	}
	for _, name := range []string{"etcd-cafile", "etcd-certfile", "etcd-keyfile", "etcd-request-timeout", "shutdown-delay-duration"} {
		if fs.Lookup(name) == nil {
			t.Errorf("no flag --%s", name)
		}
	}
}

func TestValidateEtcdTLSAndTimeouts(t *testing.T) {
	pki := newTestPKI(t)
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "not.pem")
	if err := os.WriteFile(notPEM, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.pem")
	remote := func(cfg *Config) { cfg.EtcdServers = []string{"https://127.0.0.1:2379"} }

	tests := []validateCase{
		{"defaults", func(*Config) {}, ""},
		{"full TLS", func(c *Config) {
			remote(c)
			c.EtcdCAFile, c.EtcdCertFile, c.EtcdKeyFile = pki.caFile, pki.clientCert, pki.clientKey
		}, ""},
		{"CA only (etcd without client auth)", func(c *Config) { remote(c); c.EtcdCAFile = pki.caFile }, ""},
		{"cert without key", func(c *Config) { remote(c); c.EtcdCertFile = pki.clientCert }, "--etcd-certfile and --etcd-keyfile: give both or neither"},
		{"key without cert", func(c *Config) { remote(c); c.EtcdKeyFile = pki.clientKey }, "--etcd-certfile and --etcd-keyfile: give both or neither"},
		{"missing CA file", func(c *Config) { remote(c); c.EtcdCAFile = missing }, "--etcd-cafile: stat " + missing},
		{"CA file without certificate", func(c *Config) { remote(c); c.EtcdCAFile = notPEM }, "holds no PEM certificate"},
		{"key does not match cert", func(c *Config) {
			remote(c)
			c.EtcdCertFile, c.EtcdKeyFile = pki.clientCert, pki.serverKey
		}, "--etcd-certfile, --etcd-keyfile: tls: private key does not match public key"},
		{"TLS with the embedded etcd", func(c *Config) { c.EtcdCAFile = pki.caFile }, "only with --etcd-servers"},
		{"TLS but only http:// endpoints", func(c *Config) {
			c.EtcdServers = []string{"http://127.0.0.1:2379"}
			c.EtcdCAFile = pki.caFile
		}, "no --etcd-servers URL is https://"},
		{"zero etcd request timeout", func(c *Config) { c.EtcdRequestTimeout = 0 }, "--etcd-request-timeout: 0s must be positive"},
		{"negative shutdown delay", func(c *Config) { c.ShutdownDelayDuration = -time.Second }, "--shutdown-delay-duration: -1s must not be negative"},
	}
	runValidateCases(t, tests)
}

func TestValidateUnconditionalUpdate(t *testing.T) {
	if got := DefaultConfig().UnconditionalUpdate; got != "helm-releases" {
		t.Errorf("--unconditional-update default = %q; want helm-releases", got)
	}
	runValidateCases(t, []validateCase{
		{"helm-releases", func(c *Config) { c.UnconditionalUpdate = "helm-releases" }, ""},
		{"none", func(c *Config) { c.UnconditionalUpdate = "none" }, ""},
		{"kube", func(c *Config) { c.UnconditionalUpdate = "kube" }, ""},
		{"unknown", func(c *Config) { c.UnconditionalUpdate = "always" }, `--unconditional-update: "always" is not one of helm-releases (the default), none, kube`},
		{"empty", func(c *Config) { c.UnconditionalUpdate = "" }, `--unconditional-update: "" is not one of`},
		{"wrong case", func(c *Config) { c.UnconditionalUpdate = "Kube" }, `--unconditional-update: "Kube" is not one of`},
	})
}

// validateCase is a change to the default configuration and what Validate
// says of it: wantErr is part of the error, "" for a valid one.
type validateCase struct {
	name    string
	change  func(*Config)
	wantErr string
}

func runValidateCases(t *testing.T, tests []validateCase) {
	t.Helper()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.DataDir = t.TempDir()
			tc.change(&cfg)
			cfg.Complete()
			err := cfg.Validate()
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("Validate() = %v; want nil", err)
			case tc.wantErr != "" && err == nil:
				t.Errorf("Validate() = nil; want an error with %q", tc.wantErr)
			case tc.wantErr != "" && !strings.Contains(err.Error(), tc.wantErr):
				t.Errorf("Validate() = %v; want an error with %q", err, tc.wantErr)
			}
		})
	}
}

func TestValidateLeaderElection(t *testing.T) {
	runValidateCases(t, []validateCase{
		{"short durations", func(c *Config) {
			c.LeaderElection.LeaseDuration, c.LeaderElection.RenewDeadline, c.LeaderElection.RetryPeriod = 4*time.Second, 3*time.Second, 500*time.Millisecond
		}, ""},
		{"renew deadline not shorter than the lease", func(c *Config) { c.LeaderElection.RenewDeadline = 15 * time.Second }, "--leader-elect-*: the renew deadline must be shorter than the lease duration"},
		{"retry period not shorter than the renew deadline", func(c *Config) { c.LeaderElection.RetryPeriod = 10 * time.Second }, "--leader-elect-*: the retry period must be shorter than the renew deadline"},
		{"zero retry period", func(c *Config) { c.LeaderElection.RetryPeriod = 0 }, "--leader-elect-retry-period: 0s must be positive"},
	})
}
