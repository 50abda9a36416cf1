package e2e

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/concord-dev/concord/etcdstore/etcdtest"
)

// writeEncryptionConfig writes an EncryptionConfiguration that encrypts
// secrets with an aesgcm key named name (secret bytes all b), identity as
// the fallback.
func writeEncryptionConfig(t *testing.T, dir, name string, b byte, length int) string {
	t.Helper()
	secret := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{b}, length))
	cfg := `apiVersion: apiserver.config.k8s.io/v1
kind: EncryptionConfiguration
resources:
- resources: [secrets]
  providers:
  - aesgcm:
      keys:
      - name: ` + name + `
        secret: ` + secret + `
  - identity: {}
`
	path := filepath.Join(dir, "encryption.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestSecretsEncryptedAcrossRestart runs the binary with
// --encryption-provider-config over an external etcd: the secret is
// ciphertext in etcd, and after SIGTERM and a new start the server decrypts
// it again.
func TestSecretsEncryptedAcrossRestart(t *testing.T) {
	t.Parallel()
	etcd := etcdtest.Start(t)
	dir := t.TempDir()
	config := writeEncryptionConfig(t, dir, "key1", 7, 32)
	args := []string{"--etcd-servers", etcd.Endpoint, "--encryption-provider-config", config}

	const password = "e2e-plaintext-password"
	encoded := base64.StdEncoding.EncodeToString([]byte(password))
	first := startConcord(t, "first", dir, args...)
	secret := &corev1.Secret{Data: map[string][]byte{"password": []byte(password)}}
	secret.Name, secret.APIVersion, secret.Kind = "db", "v1", "Secret"
	if code, body := do(t, http.MethodPost, first.url+"/api/v1/namespaces/default/secrets", secret); code != http.StatusCreated {
		t.Fatalf("create secret: %d %s", code, body)
	}
	if !strings.Contains(first.log(), `"writes":"secrets=aesgcm:key1"`) {
		t.Errorf("the log does not say secrets are written with aesgcm key1:\n%s", first.log())
	}
	first.stopCleanly(t)

	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	resp, err := etcd.Client.Get(ctx, "/registry/secrets/default/db")
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("etcd get: %v", err)
	}
	raw := resp.Kvs[0].Value
	if !bytes.HasPrefix(raw, []byte("k8s:enc:aesgcm:v1:key1:")) || bytes.Contains(raw, []byte(password)) || bytes.Contains(raw, []byte(encoded)) {
		t.Fatalf("raw etcd value = %q; want aesgcm ciphertext without the plaintext", raw)
	}

	second := startConcord(t, "second", dir, args...)
	code, body := do(t, http.MethodGet, second.url+"/api/v1/namespaces/default/secrets/db", nil)
	if code != http.StatusOK {
		t.Fatalf("GET after restart: %d %s", code, body)
	}
	var got corev1.Secret
	if err := json.Unmarshal(body, &got); err != nil || string(got.Data["password"]) != password {
		t.Fatalf("GET after restart: password %q (%v); want %q", got.Data["password"], err, password)
	}
	second.stopCleanly(t)

	// Started without the configuration, the server refuses to serve the
	// ciphertext: 500, nothing of the value in the answer.
	third := startConcord(t, "without encryption", dir, "--etcd-servers", etcd.Endpoint)
	code, body = do(t, http.MethodGet, third.url+"/api/v1/namespaces/default/secrets/db", nil)
	if code != http.StatusInternalServerError || bytes.Contains(body, []byte("k8s:enc")) {
		t.Errorf("GET without the configuration: %d %s; want 500 without the value", code, body)
	}
	third.stopCleanly(t)
}

// TestInvalidEncryptionConfig: a key of the wrong length stops the start
// with exit code 2 and a message naming the file, the rule and the key.
func TestInvalidEncryptionConfig(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	config := writeEncryptionConfig(t, t.TempDir(), "key1", 7, 20)
	p := launch(t, "concord", dir, "--encryption-provider-config", config)
	if code := p.waitExit(t, exitTimeout); code != 2 {
		t.Fatalf("exit code with a 20-byte key = %d; want 2; log:\n%s", code, p.log())
	}
	want := "--encryption-provider-config: " + config + `: resources[0] (secrets): providers[0].aesgcm.keys[0] (key "key1"): secret: 20 bytes; AES keys are 16, 24 or 32 bytes`
	if !strings.Contains(p.log(), want) {
		t.Errorf("stderr does not say %q; stderr:\n%s", want, p.log())
	}
	requireEmptyDir(t, "working directory after an invalid encryption config", dir)
}
