package encryption

import (
	"bytes"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	secrets    = schema.GroupResource{Resource: "secrets"}
	configmaps = schema.GroupResource{Resource: "configmaps"}
	leases     = schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}
)

// testKey is a base64 key of n bytes, all b.
func testKey(b byte, n int) string {
	return base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{b}, n))
}

// config is an EncryptionConfiguration for secrets with providers.
func config(providers string) string {
	return `apiVersion: apiserver.config.k8s.io/v1
kind: EncryptionConfiguration
resources:
- resources: [secrets]
  providers:
` + providers
}

func aesgcm(keys ...string) string {
	out := "  - aesgcm:\n      keys:\n"
	for _, k := range keys {
		name, secret, _ := strings.Cut(k, "=")
		out += "      - name: " + name + "\n        secret: " + secret + "\n"
	}
	return out
}

const identityProvider = "  - identity: {}\n"

func mustParse(t *testing.T, cfg string) *Transformers {
	t.Helper()
	ts, err := Parse([]byte(cfg))
	if err != nil {
		t.Fatalf("Parse: %v\n%s", err, cfg)
	}
	return ts
}

var (
	key1 = "key1=" + testKey(1, 32)
	key2 = "key2=" + testKey(2, 32)
)

const dataCtx = "secrets/default/db"

func TestAESGCMRoundTripAndFormat(t *testing.T) {
	for _, n := range []int{16, 24, 32} {
		tr := mustParse(t, config(aesgcm("key1="+testKey(7, n))+identityProvider)).For(secrets)
		plain := []byte(`{"kind":"Secret","data":{"password":"aHVudGVyMg=="}}`)
		stored, err := tr.ToStorage(plain, []byte(dataCtx))
		if err != nil {
			t.Fatal(err)
		}
		prefix := "k8s:enc:aesgcm:v1:key1:"
		if !bytes.HasPrefix(stored, []byte(prefix)) {
			t.Fatalf("%d-byte key: stored value starts %q; want %q", n, stored[:min(len(stored), 30)], prefix)
		}
		if want := len(prefix) + 12 + len(plain) + 16; len(stored) != want {
			t.Errorf("%d-byte key: stored %d bytes; want prefix + 12-byte nonce + ciphertext + 16-byte tag = %d", n, len(stored), want)
		}
		if bytes.Contains(stored, []byte("aHVudGVyMg==")) || bytes.Contains(stored, []byte("password")) {
			t.Errorf("%d-byte key: stored value contains plaintext: %q", n, stored)
		}
		got, stale, err := tr.FromStorage(stored, []byte(dataCtx))
		if err != nil || stale || !bytes.Equal(got, plain) {
			t.Errorf("%d-byte key: FromStorage = %q, stale %v, %v; want the plaintext, not stale", n, got, stale, err)
		}
		again, _ := tr.ToStorage(plain, []byte(dataCtx))
		if bytes.Equal(stored, again) {
			t.Errorf("%d-byte key: two encryptions are equal; want random nonces", n)
		}
	}
}

func TestCiphertextIsBoundToItsKey(t *testing.T) {
	tr := mustParse(t, config(aesgcm(key1))).For(secrets)
	stored, err := tr.ToStorage([]byte("{}"), []byte("secrets/default/a"))
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = tr.FromStorage(stored, []byte("secrets/default/b"))
	if err == nil || !strings.Contains(err.Error(), `aesgcm key "key1" does not decrypt`) {
		t.Errorf("FromStorage under another key = %v; want a decryption error", err)
	}
	tampered := bytes.Clone(stored)
	tampered[len(tampered)-1] ^= 1
	if _, _, err := tr.FromStorage(tampered, []byte("secrets/default/a")); err == nil {
		t.Error("FromStorage of a tampered value succeeded")
	}
	if _, _, err := tr.FromStorage(stored[:len("k8s:enc:aesgcm:v1:key1:")+5], []byte("secrets/default/a")); err == nil || !strings.Contains(err.Error(), "too short") {
		t.Errorf("FromStorage of a truncated value = %v; want too short", err)
	}
}

func TestRotation(t *testing.T) {
	old := mustParse(t, config(aesgcm(key1))).For(secrets)
	rotated := mustParse(t, config(aesgcm(key2, key1))).For(secrets)
	stored, err := old.ToStorage([]byte("old"), []byte(dataCtx))
	if err != nil {
		t.Fatal(err)
	}
	got, stale, err := rotated.FromStorage(stored, []byte(dataCtx))
	if err != nil || string(got) != "old" || !stale {
		t.Errorf("rotated FromStorage(key1 value) = %q, stale %v, %v; want \"old\", stale", got, stale, err)
	}
	fresh, err := rotated.ToStorage([]byte("new"), []byte(dataCtx))
	if err != nil || !bytes.HasPrefix(fresh, []byte("k8s:enc:aesgcm:v1:key2:")) {
		t.Errorf("rotated ToStorage = %q, %v; want key2's prefix", fresh, err)
	}
	// Keys of a later aesgcm provider read too.
	split := mustParse(t, config(aesgcm(key2)+aesgcm(key1))).For(secrets)
	if got, stale, err := split.FromStorage(stored, []byte(dataCtx)); err != nil || string(got) != "old" || !stale {
		t.Errorf("FromStorage with key1 in the second provider = %q, %v, %v", got, stale, err)
	}
	// The old key gone: an error naming it, never the ciphertext.
	_, _, err = mustParse(t, config(aesgcm(key2))).For(secrets).FromStorage(stored, []byte(dataCtx))
	if err == nil || !strings.Contains(err.Error(), `"key1"`) || strings.Contains(err.Error(), string(stored[len("k8s:enc:aesgcm:v1:key1:"):])) {
		t.Errorf("FromStorage without key1 = %v; want an error naming key1", err)
	}
}

func TestPlaintextAndIdentity(t *testing.T) {
	plain := []byte(`{"kind":"Secret"}`)
	encrypting := mustParse(t, config(aesgcm(key1))).For(secrets)
	got, stale, err := encrypting.FromStorage(plain, []byte(dataCtx))
	if err != nil || !bytes.Equal(got, plain) || !stale {
		t.Errorf("aesgcm first, FromStorage(plaintext) = %q, stale %v, %v; want the value, stale (rewritten encrypted)", got, stale, err)
	}
	ciphertext, _ := encrypting.ToStorage(plain, []byte(dataCtx))

	decrypting := mustParse(t, config(identityProvider+aesgcm(key1))).For(secrets)
	if out, err := decrypting.ToStorage(plain, []byte(dataCtx)); err != nil || !bytes.Equal(out, plain) {
		t.Errorf("identity first, ToStorage = %q, %v; want the plaintext", out, err)
	}
	if got, stale, err := decrypting.FromStorage(plain, []byte(dataCtx)); err != nil || !bytes.Equal(got, plain) || stale {
		t.Errorf("identity first, FromStorage(plaintext) = %q, %v, %v; want it, not stale", got, stale, err)
	}
	if got, stale, err := decrypting.FromStorage(ciphertext, []byte(dataCtx)); err != nil || !bytes.Equal(got, plain) || !stale {
		t.Errorf("identity first, FromStorage(ciphertext) = %q, %v, %v; want the plaintext, stale", got, stale, err)
	}

	// Without aesgcm (identity only, or no rule at all), a ciphertext is an error.
	for name, tr := range map[string]Transformer{
		"identity only": mustParse(t, config(identityProvider)).For(secrets),
		"no rule":       mustParse(t, config(aesgcm(key1))).For(configmaps),
		"Identity()":    Identity(),
		"nil config":    (*Transformers)(nil).For(secrets),
	} {
		if _, _, err := tr.FromStorage(ciphertext, []byte(dataCtx)); err == nil || !strings.Contains(err.Error(), "no aesgcm provider") {
			t.Errorf("%s: FromStorage(ciphertext) = %v; want an error", name, err)
		}
		if out, err := tr.ToStorage(plain, []byte(dataCtx)); err != nil || !bytes.Equal(out, plain) {
			t.Errorf("%s: ToStorage = %q, %v; want the plaintext", name, out, err)
		}
	}
	_, _, err = encrypting.FromStorage([]byte("k8s:enc:kms:v2:provider:\x00\x01secret"), []byte(dataCtx))
	if err == nil || !strings.Contains(err.Error(), "k8s:enc:kms:v2") || strings.Contains(err.Error(), "secret") {
		t.Errorf("FromStorage(kms value) = %v; want an unsupported-provider error naming k8s:enc:kms:v2 only", err)
	}
}

func TestResourceRules(t *testing.T) {
	ts := mustParse(t, `apiVersion: apiserver.config.k8s.io/v1
kind: EncryptionConfiguration
resources:
- resources: [secrets]
  providers: [{aesgcm: {keys: [{name: s, secret: `+testKey(1, 32)+`}]}}]
- resources: ["*."]
  providers: [{aesgcm: {keys: [{name: core, secret: `+testKey(2, 32)+`}]}}]
- resources: ["*.*"]
  providers: [{identity: {}}]
`)
	for gr, want := range map[schema.GroupResource]string{
		secrets:    "k8s:enc:aesgcm:v1:s:",
		configmaps: "k8s:enc:aesgcm:v1:core:",
		leases:     "{",
	} {
		out, err := ts.For(gr).ToStorage([]byte("{}"), []byte("x"))
		if err != nil || !bytes.HasPrefix(out, []byte(want)) {
			t.Errorf("For(%s).ToStorage = %q, %v; want prefix %q", gr, out, err, want)
		}
	}
	if got := ts.Writers([]schema.GroupResource{secrets, configmaps, leases}); got != "secrets=aesgcm:s configmaps=aesgcm:core leases.coordination.k8s.io=identity" {
		t.Errorf("Writers = %q", got)
	}
	if err := ts.CheckResources([]schema.GroupResource{secrets}); err != nil {
		t.Errorf("CheckResources: %v", err)
	}
	typo := mustParse(t, config(aesgcm(key1)))
	typo.names = append(typo.names, schema.GroupResource{Resource: "secret"})
	if err := typo.CheckResources([]schema.GroupResource{secrets, configmaps}); err == nil || !strings.Contains(err.Error(), `resource "secret" is not served by Concord (served: secrets, configmaps)`) {
		t.Errorf("CheckResources with a typo = %v", err)
	}
}

func TestInvalidConfigs(t *testing.T) {
	secret := testKey(9, 32)
	tests := []struct {
		name string
		cfg  string
		want []string
	}{
		{"wrong kind", strings.Replace(config(identityProvider), "kind: EncryptionConfiguration", "kind: Encryption", 1),
			[]string{`kind "Encryption": want apiVersion apiserver.config.k8s.io/v1, kind EncryptionConfiguration`}},
		{"no rules", "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\n", []string{"resources: at least one rule is required"}},
		{"no providers", config(""), []string{"resources[0] (secrets): providers: at least one provider is required"}},
		{"no resources", "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n- providers: [{identity: {}}]\n",
			[]string{"resources[0]: resources: at least one resource is required"}},
		{"unknown field", config(identityProvider) + "  - aesgsm: {}\n", []string{`unknown field "aesgsm"`}},
		{"aescbc", config(`  - aescbc: {keys: [{name: k, secret: ` + secret + `}]}` + "\n"),
			[]string{"resources[0] (secrets): providers[0]: provider aescbc is not supported by Concord (supported: aesgcm, identity)"}},
		{"secretbox and kms", config(`  - secretbox: {keys: [{name: k, secret: ` + secret + `}]}` + "\n" + `  - kms: {name: vault, endpoint: unix:///kms.sock}` + "\n"),
			[]string{"providers[0]: provider secretbox is not supported", "providers[1]: provider kms is not supported"}},
		{"two in one element", config("  - identity: {}\n    aesgcm: {keys: [{name: k, secret: " + secret + "}]}\n"),
			[]string{"providers[0]: names aesgcm and identity; give each provider its own list element"}},
		{"empty element", config("  - {}\n"), []string{"providers[0]: names no provider"}},
		{"no keys", config("  - aesgcm: {keys: []}\n"), []string{"providers[0].aesgcm.keys: at least one key is required"}},
		{"short key", config(aesgcm("key1=" + testKey(3, 20))),
			[]string{`resources[0] (secrets): providers[0].aesgcm.keys[0] (key "key1"): secret: 20 bytes; AES keys are 16, 24 or 32 bytes`}},
		{"not base64", config(aesgcm("key1=not*base64")), []string{`keys[0] (key "key1"): secret: not valid base64`}},
		{"no secret", config(aesgcm("key1=")), []string{`keys[0] (key "key1"): secret: required`}},
		{"no name", config(aesgcm("=" + secret)), []string{"keys[0]: name: required"}},
		{"colon in name", config(aesgcm("a:b=" + secret)), []string{`keys[0] (key "a:b"): name: must not contain ":"`}},
		{"duplicate key name", config(aesgcm(key1) + aesgcm("key1="+testKey(4, 16))),
			[]string{`providers[1].aesgcm.keys[0] (key "key1"): the name "key1" is used by another key of this rule`}},
		{"capitals", strings.Replace(config(identityProvider), "[secrets]", "[Secrets]", 1), []string{`resources[0] "Secrets": resource names are lower case`}},
		{"star", strings.Replace(config(identityProvider), "[secrets]", `["*"]`, 1), []string{`use "*." for every resource of the core group`}},
		{"across groups", strings.Replace(config(identityProvider), "[secrets]", `["secrets.*"]`, 1), []string{"a resource cannot be named across groups"}},
		{"named twice", strings.Replace(config(identityProvider), "[secrets]", `[secrets, configmaps, secrets]`, 1),
			[]string{`resources[2] "secrets": already named by resources[0]`}},
		{"masked", strings.Replace(config(identityProvider), "[secrets]", `["*.*", secrets]`, 1),
			[]string{`resources[1] "secrets": masked by the wildcard of resources[0]`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.cfg))
			if err == nil {
				t.Fatalf("Parse succeeded; want errors %q\n%s", tc.want, tc.cfg)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Parse error:\n%v\nwant it to contain %q", err, w)
				}
			}
			for _, s := range []string{secret, testKey(3, 20), testKey(4, 16)} {
				if strings.Contains(err.Error(), s) {
					t.Errorf("Parse error contains key material: %v", err)
				}
			}
		})
	}
}

func TestLoadFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "enc.yaml")
	if err := os.WriteFile(path, []byte(config(aesgcm("key1="+testKey(1, 10)))), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := LoadFile(path)
	if err == nil || !strings.Contains(err.Error(), path+`: resources[0] (secrets): providers[0].aesgcm.keys[0] (key "key1"): secret: 10 bytes`) {
		t.Errorf("LoadFile = %v; want the path, rule and key in the error", err)
	}
	if _, err := LoadFile(filepath.Join(dir, "missing.yaml")); err == nil || !strings.Contains(err.Error(), "missing.yaml: no such file") {
		t.Errorf("LoadFile(missing) = %v", err)
	}
	if err := os.WriteFile(path, []byte(config(aesgcm(key2, key1)+identityProvider)), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadFile(path); err != nil {
		t.Errorf("LoadFile(valid) = %v", err)
	}
}

func TestLoadFileNamesTheFileOnEveryLine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "enc.yaml")
	cfg := config(aesgcm("key1="+testKey(1, 10)) + "  - kms: {name: x}\n")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := LoadFile(path)
	if err == nil {
		t.Fatal("LoadFile succeeded")
	}
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != 2 {
		t.Fatalf("LoadFile = %v; want two lines", err)
	}
	for _, l := range lines {
		if !strings.HasPrefix(l, path+": resources[0] (secrets): providers[") {
			t.Errorf("line %q does not start with the file and the rule", l)
		}
	}
}
