// Package encryption encrypts stored values at rest. It reads
// kube-apiserver's EncryptionConfiguration (--encryption-provider-config)
// and gives, per resource, a Transformer that the registry's storage codec
// applies to every value it writes to and reads from etcd.
//
// Two providers are supported: aesgcm (AES-GCM with a random 12-byte nonce,
// stored as kube-apiserver stores it: "k8s:enc:aesgcm:v1:<key name>:" +
// nonce + ciphertext and tag) and identity (the value as it is). Values are
// written with a resource's first provider and its first key; values are
// read with the provider and key their prefix names, so listing a new key
// first rotates keys while older values still read.
package encryption

import (
	"crypto/aes"
	"crypto/cipher"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"
)

// The file's apiVersion and kind, as kube-apiserver's.
const (
	APIVersion = "apiserver.config.k8s.io/v1"
	Kind       = "EncryptionConfiguration"
)

// EncryptionConfiguration mirrors kube-apiserver's file format
// (apiserver.config.k8s.io/v1).
type EncryptionConfiguration struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	// Resources are the rules: which resources, which providers. A resource
	// takes the first rule that names it (exactly, or by a "*.<group>" or
	// "*.*" wildcard).
	Resources []ResourceConfiguration `json:"resources"`
}

// ResourceConfiguration is one rule.
type ResourceConfiguration struct {
	// Resources are group resources: "secrets" (core group),
	// "leases.coordination.k8s.io", "*." (all of the core group), "*.*".
	Resources []string `json:"resources"`
	// Providers in order: the first writes, all of them read.
	Providers []ProviderConfiguration `json:"providers"`
}

// ProviderConfiguration holds exactly one provider. Only AESGCM and
// Identity are supported; the others are kube-apiserver's and are refused
// by name.
type ProviderConfiguration struct {
	AESGCM    *KeysConfiguration     `json:"aesgcm,omitempty"`
	AESCBC    *KeysConfiguration     `json:"aescbc,omitempty"`
	Secretbox *KeysConfiguration     `json:"secretbox,omitempty"`
	KMS       json.RawMessage        `json:"kms,omitempty"`
	Identity  *IdentityConfiguration `json:"identity,omitempty"`
}

// KeysConfiguration lists a provider's keys; the first encrypts.
type KeysConfiguration struct {
	Keys []Key `json:"keys"`
}

// Key is a named key. The name is written, in clear, into every value it
// encrypts; Secret is the key, base64 encoded.
type Key struct {
	Name   string `json:"name"`
	Secret string `json:"secret"`
}

// IdentityConfiguration has no settings.
type IdentityConfiguration struct{}

// Prefix of every encrypted value; values without it are plaintext.
const encryptedPrefix = "k8s:enc:"

// aesgcmPrefix starts a value encrypted by the aesgcm provider; the key's
// name and ":" follow.
const aesgcmPrefix = encryptedPrefix + "aesgcm:v1:"

// LoadFile reads and checks an EncryptionConfiguration file. Its errors
// name the file and the place in it (which rule, provider and key); they
// never contain key material.
func LoadFile(path string) (*Transformers, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	t, err := Parse(data)
	if joined, ok := err.(interface{ Unwrap() []error }); ok {
		// One line per problem, each naming the file.
		var errs []error
		for _, e := range joined.Unwrap() {
			errs = append(errs, fmt.Errorf("%s: %w", path, e))
		}
		return nil, errors.Join(errs...)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return t, nil
}

// Parse parses and checks an EncryptionConfiguration, reporting every
// problem at once, and returns its transformers.
func Parse(data []byte) (*Transformers, error) {
	var cfg EncryptionConfiguration
	if err := yaml.UnmarshalStrict(data, &cfg); err != nil {
		return nil, fmt.Errorf("not a valid EncryptionConfiguration: %w", err)
	}
	return build(&cfg)
}

func build(cfg *EncryptionConfiguration) (*Transformers, error) {
	var errs []error
	if cfg.APIVersion != APIVersion || cfg.Kind != Kind {
		errs = append(errs, fmt.Errorf("apiVersion %q, kind %q: want apiVersion %s, kind %s", cfg.APIVersion, cfg.Kind, APIVersion, Kind))
	}
	if len(cfg.Resources) == 0 {
		errs = append(errs, errors.New("resources: at least one rule is required"))
	}
	out := &Transformers{exact: map[schema.GroupResource]*transformer{}}
	// Where each resource (or wildcard) was first named.
	named := map[schema.GroupResource]string{}
	for i, rc := range cfg.Resources {
		where := fmt.Sprintf("resources[%d]", i)
		if len(rc.Resources) > 0 {
			where = fmt.Sprintf("resources[%d] (%s)", i, strings.Join(rc.Resources, ", "))
		}
		t, terrs := newTransformer(rc.Providers)
		for _, err := range terrs {
			errs = append(errs, fmt.Errorf("%s: %w", where, err))
		}
		if len(rc.Resources) == 0 {
			errs = append(errs, fmt.Errorf("%s: resources: at least one resource is required", where))
		}
		for j, res := range rc.Resources {
			gr, err := parseResource(res)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: resources[%d] %q: %w", where, j, res, err))
				continue
			}
			if first, ok := named[gr]; ok {
				errs = append(errs, fmt.Errorf("%s: resources[%d] %q: already named by %s; a resource may be named once", where, j, res, first))
				continue
			}
			if by := maskedBy(gr, named); by != "" {
				errs = append(errs, fmt.Errorf("%s: resources[%d] %q: masked by the wildcard of %s, which comes first; name it before that rule, or remove it", where, j, res, by))
				continue
			}
			named[gr] = fmt.Sprintf("resources[%d]", i)
			switch {
			case gr.Group == "*":
				out.any = t
			case gr.Resource == "*":
				if out.groups == nil {
					out.groups = map[string]*transformer{}
				}
				out.groups[gr.Group] = t
			default:
				out.exact[gr] = t
				out.names = append(out.names, gr)
			}
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return out, nil
}

// parseResource parses a rule's resource name as kube-apiserver does.
func parseResource(res string) (schema.GroupResource, error) {
	switch {
	case res == "":
		return schema.GroupResource{}, errors.New("empty resource name")
	case strings.ToLower(res) != res:
		return schema.GroupResource{}, errors.New("resource names are lower case")
	case res == "*":
		return schema.GroupResource{}, errors.New(`use "*." for every resource of the core group, or "*.*" for every resource`)
	}
	gr := schema.ParseGroupResource(res)
	if gr.Group == "*" && gr.Resource != "*" {
		return schema.GroupResource{}, errors.New("a resource cannot be named across groups; name its group")
	}
	return gr, nil
}

// maskedBy names the earlier wildcard rule that covers gr, if any.
func maskedBy(gr schema.GroupResource, named map[schema.GroupResource]string) string {
	if where, ok := named[schema.GroupResource{Group: "*", Resource: "*"}]; ok {
		return where
	}
	if gr.Resource != "*" {
		if where, ok := named[schema.GroupResource{Group: gr.Group, Resource: "*"}]; ok {
			return where
		}
	}
	return ""
}

// newTransformer checks a rule's providers and builds its transformer.
func newTransformer(providers []ProviderConfiguration) (*transformer, []error) {
	var errs []error
	if len(providers) == 0 {
		return nil, []error{errors.New("providers: at least one provider is required")}
	}
	t := &transformer{keys: map[string]cipher.AEAD{}}
	for i, p := range providers {
		where := fmt.Sprintf("providers[%d]", i)
		var set []string
		for name, on := range map[string]bool{
			"aesgcm": p.AESGCM != nil, "aescbc": p.AESCBC != nil, "secretbox": p.Secretbox != nil,
			"kms": p.KMS != nil, "identity": p.Identity != nil,
		} {
			if on {
				set = append(set, name)
			}
		}
		slices.Sort(set)
		switch {
		case len(set) == 0:
			errs = append(errs, fmt.Errorf("%s: names no provider (Concord supports aesgcm and identity)", where))
			continue
		case len(set) > 1:
			errs = append(errs, fmt.Errorf("%s: names %s; give each provider its own list element", where, strings.Join(set, " and ")))
			continue
		}
		switch name := set[0]; name {
		case "identity":
			if i == 0 {
				t.identityFirst = true
			}
		case "aesgcm":
			if len(p.AESGCM.Keys) == 0 {
				errs = append(errs, fmt.Errorf("%s.aesgcm.keys: at least one key is required", where))
				continue
			}
			for j, k := range p.AESGCM.Keys {
				kwhere := fmt.Sprintf("%s.aesgcm.keys[%d]", where, j)
				if k.Name != "" {
					kwhere = fmt.Sprintf("%s (key %q)", kwhere, k.Name)
				}
				aead, err := newAESGCM(k)
				if err != nil {
					errs = append(errs, fmt.Errorf("%s: %w", kwhere, err))
					continue
				}
				if _, dup := t.keys[k.Name]; dup {
					errs = append(errs, fmt.Errorf("%s: the name %q is used by another key of this rule; names say which key decrypts a value, so they must differ", kwhere, k.Name))
					continue
				}
				t.keys[k.Name] = aead
				if i == 0 && j == 0 {
					t.writeKey, t.writeAEAD = k.Name, aead
				}
			}
		default:
			errs = append(errs, fmt.Errorf("%s: provider %s is not supported by Concord (supported: aesgcm, identity)", where, name))
		}
	}
	return t, errs
}

func newAESGCM(k Key) (cipher.AEAD, error) {
	if k.Name == "" {
		return nil, errors.New("name: required")
	}
	if strings.Contains(k.Name, ":") {
		return nil, errors.New(`name: must not contain ":" (it ends the name in stored values)`)
	}
	if k.Secret == "" {
		return nil, errors.New("secret: required (32 random bytes, base64: head -c 32 /dev/urandom | base64)")
	}
	secret, err := base64.StdEncoding.DecodeString(k.Secret)
	if err != nil {
		return nil, errors.New("secret: not valid base64")
	}
	switch len(secret) {
	case 16, 24, 32:
	default:
		return nil, fmt.Errorf("secret: %d bytes; AES keys are 16, 24 or 32 bytes (32 recommended)", len(secret))
	}
	block, err := aes.NewCipher(secret)
	if err != nil {
		return nil, fmt.Errorf("secret: %w", err)
	}
	return cipher.NewGCM(block)
}
