package app

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/concord-dev/concord/etcdstore/etcdtest"
	"github.com/concord-dev/concord/internal/syncbuf"
)

// TestTokensNeedASharedKeyWithEtcdServers: replicas over --etcd-servers
// without --service-account-signing-key-file issue no tokens (each would
// sign with a key the others do not know): the token subresource is 404,
// the log says what to do, and nothing is written to --cert-dir.
func TestTokensNeedASharedKeyWithEtcdServers(t *testing.T) {
	cfg := DefaultConfig()
	cfg.EtcdServers = []string{etcdtest.Start(t).Endpoint}
	cfg.Port = 0
	cfg.DataDir = t.TempDir()
	openServing(&cfg)
	logs := &syncbuf.Buffer{}
	base, _, _ := startRun(t, cfg, logs)

	resp, err := http.Post(base+"/api/v1/namespaces/default/serviceaccounts/default/token", "application/json",
		strings.NewReader(`{"apiVersion":"authentication.k8s.io/v1","kind":"TokenRequest","spec":{}}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	// The subresource's 404 saying what to configure, not the
	// ServiceAccount's (which may not exist yet).
	if want := "this server has no ServiceAccount signing key; start every replica with the same --service-account-signing-key-file"; resp.StatusCode != http.StatusNotFound || !strings.Contains(string(body), want) {
		t.Errorf("TokenRequest without a signing key: %d %s; want 404 %q", resp.StatusCode, body, want)
	}
	if want := "give every replica the same --service-account-signing-key-file"; !strings.Contains(logs.String(), want) {
		t.Errorf("log does not say %q:\n%s", want, logs.String())
	}
	if _, err := os.Stat(filepath.Join(cfg.DataDir, "tls", saSigningKeyFile)); !os.IsNotExist(err) {
		t.Errorf("a signing key was generated in --cert-dir (stat: %v)", err)
	}
}

func TestValidateServiceAccounts(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, "sa.key")
	if _, _, err := loadOrCreateSigningKey(key); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(dir, "other.key")
	if _, _, err := loadOrCreateSigningKey(other); err != nil {
		t.Fatal(err)
	}
	notPEM := filepath.Join(dir, "not.pem")
	if err := os.WriteFile(notPEM, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	runValidateCases(t, []validateCase{
		{"a signing key", func(c *Config) { c.ServiceAccounts.SigningKeyFile = key }, ""},
		{"rotation: the signing key among two verifying keys", func(c *Config) {
			c.ServiceAccounts.SigningKeyFile, c.ServiceAccounts.KeyFiles = key, []string{other, key}
		}, ""},
		{"no verifying key for the signing key", func(c *Config) {
			c.ServiceAccounts.SigningKeyFile, c.ServiceAccounts.KeyFiles = key, []string{other}
		}, "--service-account-key-file: no key verifies the tokens --service-account-signing-key-file signs"},
		{"verifying keys without a signing key", func(c *Config) { c.ServiceAccounts.KeyFiles = []string{key} }, "--service-account-key-file: only with --service-account-signing-key-file"},
		{"a signing key file that is not PEM", func(c *Config) { c.ServiceAccounts.SigningKeyFile = notPEM }, "--service-account-signing-key-file:"},
		{"a missing signing key file", func(c *Config) { c.ServiceAccounts.SigningKeyFile = filepath.Join(dir, "missing") }, "--service-account-signing-key-file:"},
		{"an empty issuer", func(c *Config) { c.ServiceAccounts.Issuers = []string{""} }, "--service-account-issuer: an empty issuer"},
		{"a max expiration below an hour", func(c *Config) { c.ServiceAccounts.MaxTokenExpiration = 30 * time.Minute }, "--service-account-max-token-expiration: 30m0s must be between 1h and 2^32 seconds"},
		{"a max expiration of a day", func(c *Config) { c.ServiceAccounts.MaxTokenExpiration = 24 * time.Hour }, ""},
	})
}
