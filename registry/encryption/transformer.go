package encryption

import (
	"bytes"
	"crypto/cipher"
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Transformers are the transformers of a configuration, by resource.
type Transformers struct {
	exact  map[schema.GroupResource]*transformer
	names  []schema.GroupResource // exact resources, in file order
	groups map[string]*transformer
	any    *transformer
}

// identity is the transformer of resources no rule names.
var identity = &transformer{identityFirst: true}

// Identity is the transformer without encryption: values are stored as they
// are, and a value that is encrypted does not read.
func Identity() Transformer { return identity }

// For returns the transformer of a resource: that of the first rule naming
// it, or identity. A nil *Transformers (no configuration) gives identity.
func (ts *Transformers) For(gr schema.GroupResource) Transformer {
	if ts == nil {
		return identity
	}
	if t, ok := ts.exact[gr]; ok {
		return t
	}
	if t, ok := ts.groups[gr.Group]; ok {
		return t
	}
	if ts.any != nil {
		return ts.any
	}
	return identity
}

// Writers says, for each of resources that a rule covers, how new values
// are written: "secrets=aesgcm:key2 configmaps=identity". For the log.
func (ts *Transformers) Writers(resources []schema.GroupResource) string {
	var out []string
	for _, gr := range resources {
		t, ok := ts.For(gr).(*transformer)
		if !ok || t == identity {
			continue
		}
		w := "identity"
		if t.writeAEAD != nil {
			w = "aesgcm:" + t.writeKey
		}
		out = append(out, gr.String()+"="+w)
	}
	return strings.Join(out, " ")
}

// CheckResources reports resources a rule names exactly that are not among
// served: a misspelled name would leave its resource unencrypted.
func (ts *Transformers) CheckResources(served []schema.GroupResource) error {
	if ts == nil {
		return nil
	}
	var errs []error
	for _, gr := range ts.names {
		if !slices.Contains(served, gr) {
			var names []string
			for _, s := range served {
				names = append(names, s.String())
			}
			errs = append(errs, fmt.Errorf("resource %q is not served by Concord (served: %s)", gr.String(), strings.Join(names, ", ")))
		}
	}
	return errors.Join(errs...)
}

// Transformer turns values into what is stored and back. dataCtx is
// authenticated data bound to the value (its etcd key): a value copied
// under another key does not decrypt.
type Transformer interface {
	// ToStorage returns what to store for plaintext.
	ToStorage(plaintext, dataCtx []byte) ([]byte, error)
	// FromStorage returns the plaintext of a stored value. stale reports a
	// value not written as ToStorage would write it now (another provider
	// or key), which the next write should rewrite.
	FromStorage(stored, dataCtx []byte) (plaintext []byte, stale bool, err error)
}

// transformer is one rule's providers.
type transformer struct {
	// identityFirst: new values are written in plaintext.
	identityFirst bool
	// writeKey names writeAEAD, the key that writes, when aesgcm is first.
	writeKey  string
	writeAEAD cipher.AEAD
	// keys are the rule's aesgcm keys by name; they read.
	keys map[string]cipher.AEAD
}

func (t *transformer) ToStorage(plaintext, dataCtx []byte) ([]byte, error) {
	if t.writeAEAD == nil {
		return plaintext, nil
	}
	prefixLen := len(aesgcmPrefix) + len(t.writeKey) + 1
	nonceSize := t.writeAEAD.NonceSize()
	out := make([]byte, prefixLen+nonceSize, prefixLen+nonceSize+len(plaintext)+t.writeAEAD.Overhead())
	copy(out, aesgcmPrefix+t.writeKey+":")
	nonce := out[prefixLen:]
	if err := randomNonce(nonce); err != nil {
		return nil, fmt.Errorf("aesgcm: random nonce: %w", err)
	}
	return t.writeAEAD.Seal(out, nonce, plaintext, dataCtx), nil
}

func (t *transformer) FromStorage(stored, dataCtx []byte) ([]byte, bool, error) {
	if !bytes.HasPrefix(stored, []byte(encryptedPrefix)) {
		return stored, !t.identityFirst, nil
	}
	rest, ok := bytes.CutPrefix(stored, []byte(aesgcmPrefix))
	if !ok {
		return nil, false, fmt.Errorf("the value is encrypted by an unsupported provider (%s...); Concord reads aesgcm and identity", providerOf(stored))
	}
	name, sealed, ok := bytes.Cut(rest, []byte(":"))
	if !ok {
		return nil, false, errors.New("the value starts with the aesgcm prefix but names no key")
	}
	aead, ok := t.keys[string(name)]
	if !ok {
		if len(t.keys) == 0 {
			return nil, false, fmt.Errorf("the value is encrypted with aesgcm key %q, but no aesgcm provider is configured for this resource", name)
		}
		return nil, false, fmt.Errorf("the value is encrypted with aesgcm key %q, which the encryption configuration does not list for this resource", name)
	}
	if len(sealed) < aead.NonceSize()+aead.Overhead() {
		return nil, false, fmt.Errorf("aesgcm key %q: the value is too short to be a ciphertext", name)
	}
	nonce, ciphertext := sealed[:aead.NonceSize()], sealed[aead.NonceSize():]
	plaintext, err := aead.Open(nil, nonce, ciphertext, dataCtx)
	if err != nil {
		return nil, false, fmt.Errorf("aesgcm key %q does not decrypt the value: the key's secret changed, the value was moved from another etcd key, or it is corrupt", name)
	}
	return plaintext, t.identityFirst || string(name) != t.writeKey, nil
}

// providerOf is the provider part of an encrypted value's prefix
// ("k8s:enc:kms:v2"), for messages; never any of the ciphertext.
func providerOf(stored []byte) string {
	parts := bytes.SplitN(stored, []byte(":"), 5)
	if len(parts) < 4 {
		return encryptedPrefix
	}
	p := string(bytes.Join(parts[:4], []byte(":")))
	if len(p) > 40 || strings.ContainsFunc(p, func(r rune) bool { return r < 0x20 || r > 0x7e }) {
		return encryptedPrefix
	}
	return p
}

// randomNonce fills nonce with random bytes. AES-GCM with random 96-bit
// nonces stays safe for about 2^32 encryptions per key: rotate keys well
// before that many writes.
func randomNonce(nonce []byte) error {
	_, err := rand.Read(nonce)
	return err
}
