package registry

import (
	"fmt"

	"github.com/concord-dev/concord/etcdstore"
	"github.com/concord-dev/concord/registry/encryption"
)

// StoreOption configures the stores NewStore and NewStores make.
type StoreOption func(*Store)

// WithEncryption encrypts the stored values of the resources t names
// (--encryption-provider-config); without it every value is stored as it
// is.
func WithEncryption(t *encryption.Transformers) StoreOption {
	// A resource served in another version of stored objects
	// (Resource.Storage) reads and writes them as their own resource does.
	return func(s *Store) { s.transformer = t.For(s.Resource.stored().GroupResource()) }
}

// WithoutReadCache makes every get and list read etcd (kube-apiserver's
// --watch-cache=false); by default gets and lists (first pages) are served from a
// cache kept current by a watch (cache.go).
func WithoutReadCache() StoreOption {
	return func(s *Store) { s.cache = nil }
}

// storagePrefix is the resource's part of its etcd keys: StoragePrefix,
// else Plural, of the declaration that stores its objects.
func (r *Resource) storagePrefix() string {
	if st := r.stored(); st.StoragePrefix != "" {
		return st.StoragePrefix
	}
	return r.stored().Plural
}

// storageKey is the key of ref's value relative to the etcd prefix:
// "<resource>/<namespace>/<name>", or "<resource>/<name>" when
// cluster-scoped. It is the authenticated data of the value's encryption, so
// a ciphertext copied under another key does not decrypt, while the whole
// key space may move to another --etcd-prefix.
func storageKey(ref etcdstore.Ref) string {
	if ref.Namespace == "" {
		return ref.Resource + "/" + ref.Name
	}
	return ref.Resource + "/" + ref.Namespace + "/" + ref.Name
}

// keyOf is the storageKey of namespace/name in this store.
func (s *Store) keyOf(namespace, name string) string { return storageKey(s.ref(namespace, name)) }

// listedKey is the storageKey of an object that List returned for
// namespace (its Key is relative to the list's prefix).
func (s *Store) listedKey(namespace string, stored etcdstore.Object) string {
	if namespace == "" {
		return s.Resource.storagePrefix() + "/" + stored.Key
	}
	return s.Resource.storagePrefix() + "/" + namespace + "/" + stored.Key
}

// seal turns the serialized object into the value stored at key.
func (s *Store) seal(key string, plaintext []byte) ([]byte, error) {
	value, err := s.transformer.ToStorage(plaintext, []byte(key))
	if err != nil {
		return nil, fmt.Errorf("encrypt %s: %w", key, err)
	}
	return value, nil
}

// unseal returns the serialized object stored at key. stale reports a value
// that is not written as it would be now (another provider or key), so that
// a write rewrites it even when the object is unchanged. A value that does
// not decrypt is an error: an internal error to the client, never the
// ciphertext.
func (s *Store) unseal(key string, value []byte) (plaintext []byte, stale bool, err error) {
	plaintext, stale, err = s.transformer.FromStorage(value, []byte(key))
	if err != nil {
		return nil, false, fmt.Errorf("read stored %s %s: %w", s.Resource.Kind, key, err)
	}
	return plaintext, stale, nil
}
