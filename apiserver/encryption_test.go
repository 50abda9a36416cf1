package apiserver_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/concord-dev/concord/cmd/concord/app"
	apptesting "github.com/concord-dev/concord/cmd/concord/app/testing"
	"github.com/concord-dev/concord/etcdstore/etcdtest"
)

// Keys of the encryption tests (32 bytes each, base64).
var (
	encKey1 = base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{1}, 32))
	encKey2 = base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{2}, 32))
)

// encryptionConfig is an EncryptionConfiguration for secrets only, with
// providers in order: "key1" and "key2" are aesgcm keys (consecutive keys
// share one aesgcm provider), "identity" the identity provider.
func encryptionConfig(providers ...string) string {
	var b strings.Builder
	b.WriteString("apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n- resources: [secrets]\n  providers:\n")
	inAESGCM := false
	for _, p := range providers {
		if p == "identity" {
			b.WriteString("  - identity: {}\n")
			inAESGCM = false
			continue
		}
		if !inAESGCM {
			b.WriteString("  - aesgcm:\n      keys:\n")
			inAESGCM = true
		}
		secret := map[string]string{"key1": encKey1, "key2": encKey2}[p]
		fmt.Fprintf(&b, "      - name: %s\n        secret: %s\n", p, secret)
	}
	return b.String()
}

// encryptedServer is a server over a shared etcd with an
// --encryption-provider-config, so a test can "restart" it with another
// one.
type encryptedServer struct {
	*testServer
	logs *syncBuffer
	stop func()
}

// startEncrypted starts a server over e whose stores encrypt as config says
// (none when config is empty), serving plain HTTP to everyone.
func startEncrypted(t *testing.T, e *etcdtest.Etcd, config string) *encryptedServer {
	t.Helper()
	cfg := apptesting.Config(t, e.Endpoint)
	cfg.Security.InsecureServing = true
	cfg.Security.AnonymousAuth = true
	cfg.Security.AuthorizationMode = app.AuthorizationAlwaysAllow
	if config != "" {
		cfg.EncryptionProviderConfig = writeTestFile(t, "encryption.yaml", config)
	}
	logs := &syncBuffer{}
	srv := apptesting.Run(t, cfg, app.WithLogger(slog.New(slog.NewJSONHandler(logs, nil))))
	stop := func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("server shutdown: %v", err)
		}
	}
	return &encryptedServer{testServer: &testServer{URL: srv.URL(), Etcd: e, Stores: srv.Stores(), Catalog: srv.Catalog(), Handler: srv.Handler()}, logs: logs, stop: stop}
}

const secretsPath = "/api/v1/namespaces/default/secrets"

// The secret bytes of the tests; neither they nor their base64 may be in etcd.
const secretPlaintext = "correct-horse-battery-staple"

var secretBase64 = base64.StdEncoding.EncodeToString([]byte(secretPlaintext))

func (s *encryptedServer) createSecret(t *testing.T, name string) corev1.Secret {
	t.Helper()
	body := map[string]any{
		"apiVersion": "v1", "kind": "Secret",
		"metadata": map[string]any{"name": name},
		"data":     map[string]string{"password": secretBase64},
	}
	resp := s.do(t, http.MethodPost, secretsPath, body)
	if resp.Code != http.StatusCreated {
		t.Fatalf("create secret %s: %d %s", name, resp.Code, resp.Body)
	}
	var out corev1.Secret
	resp.decode(t, &out)
	return out
}

// getSecret reads a secret and checks it holds the plaintext.
func (s *encryptedServer) getSecret(t *testing.T, name string) corev1.Secret {
	t.Helper()
	resp := s.do(t, http.MethodGet, secretsPath+"/"+name, nil)
	if resp.Code != http.StatusOK {
		t.Fatalf("GET secret %s: %d %s", name, resp.Code, resp.Body)
	}
	var out corev1.Secret
	resp.decode(t, &out)
	if got := string(out.Data["password"]); got != secretPlaintext {
		t.Fatalf("GET secret %s: password %q; want %q", name, got, secretPlaintext)
	}
	return out
}

// putUnchanged writes back the secret as read and returns what PUT answered.
func (s *encryptedServer) putUnchanged(t *testing.T, name string) corev1.Secret {
	t.Helper()
	sec := s.getSecret(t, name)
	resp := s.do(t, http.MethodPut, secretsPath+"/"+name, sec)
	if resp.Code != http.StatusOK {
		t.Fatalf("PUT secret %s: %d %s", name, resp.Code, resp.Body)
	}
	var out corev1.Secret
	resp.decode(t, &out)
	return out
}

// rawValue is what etcd holds at key (under /registry/).
func rawValue(t *testing.T, e *etcdtest.Etcd, key string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := e.Client.Get(ctx, "/registry/"+key)
	if err != nil {
		t.Fatalf("etcd get %s: %v", key, err)
	}
	if len(resp.Kvs) != 1 {
		t.Fatalf("etcd get %s: %d keys", key, len(resp.Kvs))
	}
	return resp.Kvs[0].Value
}

func putRaw(t *testing.T, e *etcdtest.Etcd, key string, value []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := e.Client.Put(ctx, "/registry/"+key, string(value)); err != nil {
		t.Fatalf("etcd put %s: %v", key, err)
	}
}

// requireEncrypted fails unless the secret's raw etcd value is encrypted
// with key and holds no plaintext.
func requireEncrypted(t *testing.T, e *etcdtest.Etcd, name, key string) {
	t.Helper()
	raw := rawValue(t, e, "secrets/default/"+name)
	if prefix := "k8s:enc:aesgcm:v1:" + key + ":"; !bytes.HasPrefix(raw, []byte(prefix)) {
		t.Errorf("raw etcd value of secret %s starts %q; want %q", name, raw[:min(len(raw), 40)], prefix)
	}
	for _, plain := range []string{secretPlaintext, secretBase64, `"password"`, `"kind":"Secret"`} {
		if bytes.Contains(raw, []byte(plain)) {
			t.Errorf("raw etcd value of secret %s contains the plaintext %q", name, plain)
		}
	}
}

func requirePlaintext(t *testing.T, e *etcdtest.Etcd, name string) {
	t.Helper()
	raw := rawValue(t, e, "secrets/default/"+name)
	if !bytes.HasPrefix(raw, []byte("{")) || !bytes.Contains(raw, []byte(secretBase64)) {
		t.Errorf("raw etcd value of secret %s = %q; want plaintext JSON", name, raw)
	}
}

func clientset(t *testing.T, url string) *kubernetes.Clientset {
	t.Helper()
	c, err := kubernetes.NewForConfig(&rest.Config{Host: url, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestSecretsEncryptedAtRest: with encryption on for secrets, etcd holds
// only ciphertext, and get, list and watch answer the plaintext;
// ConfigMaps, which the configuration does not name, stay plaintext.
func TestSecretsEncryptedAtRest(t *testing.T) {
	t.Parallel()
	e := etcdtest.Start(t)
	s := startEncrypted(t, e, encryptionConfig("key1", "identity"))
	c := clientset(t, s.URL)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	list, err := c.CoreV1().Secrets("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := c.CoreV1().Secrets("default").Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	created := s.createSecret(t, "db")
	if got := string(created.Data["password"]); got != secretPlaintext {
		t.Errorf("POST answered password %q; want the plaintext", got)
	}
	requireEncrypted(t, e, "db", "key1")
	got := s.getSecret(t, "db")
	if got.ResourceVersion != created.ResourceVersion || got.UID != created.UID {
		t.Errorf("GET: resourceVersion %s uid %s; want %s %s", got.ResourceVersion, got.UID, created.ResourceVersion, created.UID)
	}

	list, err = c.CoreV1().Secrets("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 || string(list.Items[0].Data["password"]) != secretPlaintext {
		t.Errorf("list of all namespaces = %+v; want db with the plaintext", list.Items)
	}
	select {
	case ev := <-w.ResultChan():
		sec, ok := ev.Object.(*corev1.Secret)
		if ev.Type != watch.Added || !ok || string(sec.Data["password"]) != secretPlaintext {
			t.Errorf("watch event %s %T; want ADDED with the plaintext", ev.Type, ev.Object)
		}
	case <-ctx.Done():
		t.Fatal("no watch event")
	}
	// A watch from before the create is served from etcd's history, a
	// watch with initial events lists: both decrypt.
	for name, opts := range map[string]metav1.ListOptions{
		"from history":   {ResourceVersion: "1"},
		"initial events": {SendInitialEvents: ptr(true), ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan, AllowWatchBookmarks: true},
	} {
		w, err := c.CoreV1().Secrets("default").Watch(ctx, opts)
		if err != nil {
			t.Fatalf("watch %s: %v", name, err)
		}
		select {
		case ev := <-w.ResultChan():
			if sec, ok := ev.Object.(*corev1.Secret); !ok || string(sec.Data["password"]) != secretPlaintext {
				t.Errorf("watch %s: event %s %T; want the secret with the plaintext", name, ev.Type, ev.Object)
			}
		case <-ctx.Done():
			t.Fatalf("watch %s: no event", name)
		}
		w.Stop()
	}

	// An update is encrypted again; an update that changes nothing writes
	// nothing, as without encryption.
	got.Labels = map[string]string{"tier": "db"}
	updated, err := c.CoreV1().Secrets("default").Update(ctx, &got, metav1.UpdateOptions{})
	if err != nil || string(updated.Data["password"]) != secretPlaintext {
		t.Fatalf("update: %v", err)
	}
	requireEncrypted(t, e, "db", "key1")
	select {
	case ev := <-w.ResultChan():
		sec, ok := ev.Object.(*corev1.Secret)
		if ev.Type != watch.Modified || !ok || string(sec.Data["password"]) != secretPlaintext || sec.Labels["tier"] != "db" {
			t.Errorf("watch event %s %T; want MODIFIED with the plaintext", ev.Type, ev.Object)
		}
	case <-ctx.Done():
		t.Fatal("no watch event for the update")
	}
	if again := s.putUnchanged(t, "db"); again.ResourceVersion != updated.ResourceVersion {
		t.Errorf("unchanged PUT: resourceVersion %s; want %s (nothing written)", again.ResourceVersion, updated.ResourceVersion)
	}

	// ConfigMaps are not named by the configuration: plaintext.
	cm := map[string]any{"metadata": map[string]any{"name": "settings"}, "data": map[string]string{"mode": "plain-visible"}}
	if resp := s.do(t, http.MethodPost, "/api/v1/namespaces/default/configmaps", cm); resp.Code != http.StatusCreated {
		t.Fatalf("create configmap: %d %s", resp.Code, resp.Body)
	}
	if raw := rawValue(t, e, "configmaps/default/settings"); !bytes.HasPrefix(raw, []byte("{")) || !bytes.Contains(raw, []byte("plain-visible")) {
		t.Errorf("raw etcd value of the configmap = %q; want plaintext JSON", raw)
	}
	if raw := rawValue(t, e, "namespaces/default"); !bytes.HasPrefix(raw, []byte("{")) {
		t.Errorf("raw etcd value of namespace default = %q; want plaintext JSON", raw)
	}

	// Delete decrypts (preconditions are checked on the object) and works.
	if _, err := c.CoreV1().Secrets("default").Get(ctx, "db", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := c.CoreV1().Secrets("default").Delete(ctx, "db", metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &created.UID}}); err != nil {
		t.Errorf("delete: %v", err)
	}
}

func ptr[T any](v T) *T { return &v }

// TestEncryptionKeyRotation: a secret written with key1 still reads after a
// restart with [key2, key1]; new writes use key2, and so does a rewrite of
// the old secret, even one that changes nothing.
func TestEncryptionKeyRotation(t *testing.T) {
	t.Parallel()
	e := etcdtest.Start(t)
	before := startEncrypted(t, e, encryptionConfig("key1"))
	before.createSecret(t, "old")
	requireEncrypted(t, e, "old", "key1")
	before.stop()

	after := startEncrypted(t, e, encryptionConfig("key2", "key1"))
	after.getSecret(t, "old")
	after.createSecret(t, "new")
	requireEncrypted(t, e, "new", "key2")
	requireEncrypted(t, e, "old", "key1")

	read := after.getSecret(t, "old")
	rewritten := after.putUnchanged(t, "old")
	if rewritten.ResourceVersion == read.ResourceVersion {
		t.Errorf("PUT of the key1 secret unchanged: resourceVersion %s; want a new one (re-encrypted with key2)", rewritten.ResourceVersion)
	}
	requireEncrypted(t, e, "old", "key2")
	if again := after.putUnchanged(t, "old"); again.ResourceVersion != rewritten.ResourceVersion {
		t.Errorf("second unchanged PUT: resourceVersion %s; want %s (nothing written)", again.ResourceVersion, rewritten.ResourceVersion)
	}
	after.stop()

	// Once everything is rewritten, key1 may go.
	only2 := startEncrypted(t, e, encryptionConfig("key2"))
	only2.getSecret(t, "old")
	only2.getSecret(t, "new")
}

// TestIdentityFirstDecrypts: identity first (decrypting everything) writes
// plaintext and still reads the ciphertexts; plaintext written before
// encryption was turned on reads once it is.
func TestIdentityFirstDecrypts(t *testing.T) {
	t.Parallel()
	e := etcdtest.Start(t)
	plain := startEncrypted(t, e, "")
	plain.createSecret(t, "legacy")
	requirePlaintext(t, e, "legacy")
	plain.stop()

	encrypting := startEncrypted(t, e, encryptionConfig("key1"))
	encrypting.getSecret(t, "legacy") // plaintext reads with encryption on
	encrypting.createSecret(t, "enc")
	requireEncrypted(t, e, "enc", "key1")
	encrypting.putUnchanged(t, "legacy") // rewritten encrypted
	requireEncrypted(t, e, "legacy", "key1")
	encrypting.stop()

	decrypting := startEncrypted(t, e, encryptionConfig("identity", "key1"))
	decrypting.getSecret(t, "enc")
	decrypting.createSecret(t, "clear")
	requirePlaintext(t, e, "clear")
	decrypting.putUnchanged(t, "enc")
	requirePlaintext(t, e, "enc")
}

// requireInternalError checks a 500 InternalError that shows nothing of the
// stored value.
func requireInternalError(t *testing.T, what string, resp response, raw []byte) {
	t.Helper()
	requireServerError(t, what, resp, raw, metav1.StatusReasonInternalError)
}

// requireServerError checks a 500 with reason that shows nothing of the
// stored value: InternalError for the object, StorageReadError for a list
// that would hold it (as kube-apiserver answers for a value that does not
// decrypt).
func requireServerError(t *testing.T, what string, resp response, raw []byte, reason metav1.StatusReason) {
	t.Helper()
	if resp.Code != http.StatusInternalServerError {
		t.Fatalf("%s: %d %s; want 500", what, resp.Code, resp.Body)
	}
	if st := resp.status(t); st.Reason != reason {
		t.Errorf("%s: reason %q; want %s", what, st.Reason, reason)
	}
	sealed := raw[len("k8s:enc:aesgcm:v1:key1:"):]
	for _, leak := range [][]byte{[]byte("k8s:enc"), sealed[:16], []byte(base64.StdEncoding.EncodeToString(sealed)[:16]), []byte(secretBase64), []byte(secretPlaintext)} {
		if bytes.Contains(resp.Body, leak) {
			t.Errorf("%s: the answer contains %q of the stored value: %s", what, leak, resp.Body)
		}
	}
}

// TestMissingKeyIsInternalError: a secret whose key the configuration no
// longer lists is a 500 naming its key (and logged), never its ciphertext.
func TestMissingKeyIsInternalError(t *testing.T) {
	t.Parallel()
	e := etcdtest.Start(t)
	before := startEncrypted(t, e, encryptionConfig("key1"))
	before.createSecret(t, "db")
	before.stop()
	raw := rawValue(t, e, "secrets/default/db")

	for name, config := range map[string]string{
		"key1 dropped":  encryptionConfig("key2"),
		"identity only": encryptionConfig("identity"),
		"no encryption": "",
	} {
		t.Run(name, func(t *testing.T) {
			s := startEncrypted(t, e, config)
			requireInternalError(t, "GET", s.do(t, http.MethodGet, secretsPath+"/db", nil), raw)
			requireServerError(t, "LIST", s.do(t, http.MethodGet, secretsPath, nil), raw, metav1.StatusReasonStoreReadError)
			requireInternalError(t, "PUT", s.do(t, http.MethodPut, secretsPath+"/db", map[string]any{"metadata": map[string]any{"name": "db"}}, "If-Match", "*"), raw)
			logged := s.logs.waitFor(t, func(line map[string]any) bool {
				err, _ := line["err"].(string)
				return line["msg"] == "stored object cannot be read" && line["key"] == "/registry/secrets/default/db" && strings.Contains(err, `aesgcm key "key1"`)
			})
			if !logged {
				t.Errorf("no error naming key1 and the secret's key in the log:\n%s", s.logs.String())
			}
			if strings.Contains(s.logs.String(), string(raw[len(raw)-16:])) {
				t.Error("the log contains ciphertext")
			}
		})
	}
}

// TestCiphertextMovedToAnotherKeyDoesNotDecrypt: the etcd key is
// authenticated data, so a ciphertext copied under another name (or
// namespace) is refused, not served as that object.
func TestCiphertextMovedToAnotherKeyDoesNotDecrypt(t *testing.T) {
	t.Parallel()
	e := etcdtest.Start(t)
	s := startEncrypted(t, e, encryptionConfig("key1"))
	s.namespace(t, "other")
	s.createSecret(t, "a")
	s.createSecret(t, "b")
	raw := rawValue(t, e, "secrets/default/a")
	putRaw(t, e, "secrets/default/b", raw)
	putRaw(t, e, "secrets/other/a", raw)

	s.getSecret(t, "a")
	requireInternalError(t, "GET of a's value under b", s.do(t, http.MethodGet, secretsPath+"/b", nil), raw)
	requireInternalError(t, "GET of a's value in another namespace", s.do(t, http.MethodGet, "/api/v1/namespaces/other/secrets/a", nil), raw)
}
