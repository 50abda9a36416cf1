package main

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

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
	// The route's 404, not the ServiceAccount's (which may not exist yet).
	if want := "the server could not find the requested resource"; resp.StatusCode != http.StatusNotFound || !strings.Contains(string(body), want) {
		t.Errorf("TokenRequest without a signing key: %d %s; want 404 %q", resp.StatusCode, body, want)
	}
	if want := "give every replica the same --service-account-signing-key-file"; !strings.Contains(logs.String(), want) {
		t.Errorf("log does not say %q:\n%s", want, logs.String())
	}
	if _, err := os.Stat(filepath.Join(cfg.DataDir, "tls", saSigningKeyFile)); !os.IsNotExist(err) {
		t.Errorf("a signing key was generated in --cert-dir (stat: %v)", err)
	}
}
