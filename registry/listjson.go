package registry

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"

	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/concord-dev/concord/etcdstore"
)

// JSONList is a list answer whose items are JSON already: the stored objects
// with their resourceVersion written in, never decoded.
type JSONList struct {
	Kind, APIVersion   string
	ResourceVersion    string
	Continue           string
	RemainingItemCount *int64
	Items              []JSONItem
}

// JSONItem is a stored JSON object and the place in it where its
// resourceVersion belongs, so that a list is written out without copying
// every object first.
type JSONItem struct {
	object []byte
	at     int // just after the '{' of the top-level metadata
	rev    int64
	// skip is how many bytes after the object's '{' are left out: its kind
	// and apiVersion, in a list of a built-in resource (withoutTypeMeta).
	skip int
}

func newJSONItem(obj []byte, rev int64) (JSONItem, error) {
	for len(obj) > 0 && (obj[len(obj)-1] == '\n' || obj[len(obj)-1] == ' ') {
		obj = obj[:len(obj)-1]
	}
	at := metadataStart(obj)
	if at < 0 {
		return JSONItem{}, errors.New("no top-level metadata object")
	}
	return JSONItem{object: obj, at: at, rev: rev}, nil
}

// WriteJSON writes the object with "resourceVersion":"<rev>" as the first
// field of its top-level metadata.
func (it JSONItem) WriteJSON(w *bufio.Writer) error {
	var field [40]byte
	w.WriteByte('{')
	w.Write(it.object[1+it.skip : it.at])
	w.Write(it.appendField(field[:0]))
	_, err := w.Write(it.object[it.at:])
	return err
}

// appendJSON is WriteJSON into a byte slice.
func (it JSONItem) appendJSON(out []byte) []byte {
	out = append(out, '{')
	out = append(out, it.object[1+it.skip:it.at]...)
	out = it.appendField(out)
	return append(out, it.object[it.at:]...)
}

// appendField appends the resourceVersion field, and the comma before the
// metadata's other fields if it has any.
func (it JSONItem) appendField(out []byte) []byte {
	out = append(out, `"resourceVersion":"`...)
	out = strconv.AppendInt(out, it.rev, 10)
	out = append(out, '"')
	if it.object[it.at] != '}' {
		out = append(out, ',')
	}
	return out
}

// withoutTypeMeta leaves out the item's kind and apiVersion when its JSON
// starts with prefix, them (typeMetaPrefix). ok is false when it does not.
func (it JSONItem) withoutTypeMeta(prefix []byte) (_ JSONItem, ok bool) {
	if !bytes.HasPrefix(it.object, prefix) || it.at <= len(prefix) {
		return it, false
	}
	it.skip = len(prefix) - 1
	return it, true
}

// typeMetaPrefix is how a built-in object of gvk is stored: its JSON starts
// with its kind and apiVersion (the serializer writes TypeMeta first), then
// the other fields.
func typeMetaPrefix(gvk schema.GroupVersionKind) []byte {
	return []byte(`{"kind":"` + gvk.Kind + `","apiVersion":"` + gvk.GroupVersion().String() + `",`)
}

// ListJSON is List for a client that takes JSON and selects nothing: each
// stored object is passed through with its resourceVersion inserted, instead
// of being decoded and encoded again (objects are stored as JSON). served is
// false when the options need decoded objects (selectors); use List then.
//
// Items of a built-in resource leave out their kind and apiVersion, as
// kube-apiserver's typed lists do (List's too); a custom resource's keep
// them, as kube's unstructured lists do.
func (s *Store) ListJSON(ctx context.Context, namespace string, opts *metainternalversion.ListOptions) (_ *JSONList, served bool, _ error) {
	if (opts.LabelSelector != nil && !opts.LabelSelector.Empty()) || (opts.FieldSelector != nil && !opts.FieldSelector.Empty()) {
		return nil, false, nil
	}
	if s.Resource.Storage != nil {
		return nil, false, nil // the stored JSON is another version's
	}
	plan, err := planList(s.Resource, opts)
	if err != nil {
		return nil, true, err
	}
	var items []JSONItem
	if opts.Limit > 0 {
		items = make([]JSONItem, 0, min(opts.Limit, 10000))
	}
	_, custom := s.Resource.New().(*unstructured.Unstructured)
	prefix := typeMetaPrefix(s.Resource.GroupVersionKind())
	rev, token, remaining, err := s.listPages(ctx, namespace, opts, plan, func(key string, stored etcdstore.Object, cached *cacheEntry) (bool, error) {
		plaintext, err := s.servedJSON(key, stored, cached)
		if err != nil {
			return false, err
		}
		item, err := newJSONItem(plaintext, stored.Revision)
		if err != nil {
			return false, s.notJSONObject(key, stored, err)
		}
		if !custom {
			var ok bool
			if item, ok = item.withoutTypeMeta(prefix); !ok {
				if item, err = s.listItemJSON(key, stored, cached); err != nil {
					return false, err
				}
			}
		}
		items = append(items, item)
		return true, nil
	})
	if err != nil {
		return nil, true, err
	}
	gvk := s.Resource.ListGroupVersionKind()
	return &JSONList{
		Kind:               gvk.Kind,
		APIVersion:         gvk.GroupVersion().String(),
		ResourceVersion:    formatRevision(rev),
		Continue:           token,
		RemainingItemCount: remaining,
		Items:              items,
	}, true, nil
}

// listItemJSON is the built-in object stored at key encoded without its kind
// and apiVersion: for a stored value that does not start with them, which
// Concord never writes.
func (s *Store) listItemJSON(key string, stored etcdstore.Object, cached *cacheEntry) (JSONItem, error) {
	obj, err := s.listed(key, stored, cached)
	if err != nil {
		return JSONItem{}, err
	}
	obj = copyObject(obj) // the cache's is shared
	obj.GetObjectKind().SetGroupVersionKind(schema.GroupVersionKind{})
	obj.SetResourceVersion("")
	var buf bytes.Buffer
	if err := encodeJSON(obj, &buf); err != nil {
		return JSONItem{}, fmt.Errorf("encode %s: %w", key, err)
	}
	item, err := newJSONItem(buf.Bytes(), stored.Revision)
	if err != nil {
		return JSONItem{}, s.notJSONObject(key, stored, err)
	}
	return item, nil
}

// servedJSON is the object stored at key as the store serves it, as JSON
// without resourceVersion: the stored value itself, unless the resource
// reads its objects with Resource.ReadStored and reading this one changes
// it (cacheEntry.asServed; an object not in the cache is decoded).
func (s *Store) servedJSON(key string, stored etcdstore.Object, cached *cacheEntry) ([]byte, error) {
	if s.Resource.storedJSONServed() || (cached != nil && cached.asServed(s)) {
		plaintext, _, err := s.unseal(key, stored.Value)
		if err != nil {
			return nil, s.corrupt(key, stored, untransformable, err)
		}
		return plaintext, nil
	}
	var obj Object
	var err error
	if cached != nil {
		if obj, err = cached.decode(s); err == nil {
			obj = copyObject(obj)
		}
	} else {
		obj, err = s.decode(key, stored)
	}
	if err != nil {
		return nil, err
	}
	return s.serialize(obj)
}

// withResourceVersion returns the JSON object obj with
// "resourceVersion":"<rev>" as the first field of its top-level metadata.
func withResourceVersion(obj []byte, rev int64) ([]byte, error) {
	item, err := newJSONItem(obj, rev)
	if err != nil {
		return nil, err
	}
	return item.appendJSON(make([]byte, 0, len(item.object)+40)), nil
}

// metadataStart finds the top-level key "metadata" of a compact JSON object
// and returns the index just after its value's '{', or -1. It follows
// strings and nesting, so a "metadata" key deeper down or a string that
// merely contains the word is never taken.
func metadataStart(b []byte) int {
	depth, inString, escaped, keyStart := 0, false, false, -1
	for i := 0; i < len(b); i++ {
		c := b[i]
		if inString {
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
				if depth == 1 && string(b[keyStart:i]) == "metadata" && i+2 < len(b) && b[i+1] == ':' && b[i+2] == '{' {
					return i + 3
				}
			}
			continue
		}
		switch c {
		case '"':
			inString, keyStart = true, i+1
		case '{', '[':
			depth++
		case '}', ']':
			depth--
		}
	}
	return -1
}

// GetJSON is Get for a client that takes JSON: the stored object with its
// resourceVersion inserted, never decoded (a linearizable read, as Get).
func (s *Store) GetJSON(ctx context.Context, namespace, name string) (obj []byte, resourceVersion string, _ error) {
	if !s.Resource.storedJSONServed() {
		return s.convertedJSON(ctx, namespace, name)
	}
	stored, _, err := s.read(ctx, namespace, name)
	if err != nil {
		return nil, "", err
	}
	return s.passedThrough(namespace, name, stored)
}

// passedThrough answers GetJSON with the stored value.
func (s *Store) passedThrough(namespace, name string, stored etcdstore.Object) ([]byte, string, error) {
	out, err := s.storedJSON(namespace, name, stored)
	if err != nil {
		return nil, "", err
	}
	// Clients read, edit and write back: remember the state, undecoded.
	s.recent.put(s.recentKey(namespace, name), stored, nil)
	return out, formatRevision(stored.Revision), nil
}

// WrittenJSON is obj as JSON when it is the state this replica just wrote
// (or last saw) of its key: the stored bytes with the resourceVersion
// inserted, so that a write is answered without encoding the object again.
// A key has one value per revision, so the remembered value at obj's
// revision is obj. ok is false when that state is not remembered.
func (s *Store) WrittenJSON(obj Object) (_ []byte, ok bool) {
	rev, err := parseResourceVersion(obj.GetResourceVersion())
	if err != nil || rev == 0 || s.Resource.Storage != nil {
		return nil, false // for Storage: the stored JSON is another version's
	}
	e, ok := s.recent.get(s.recentKey(obj.GetNamespace(), obj.GetName()))
	if !ok || e.stored.Revision != rev || !(e.asServed || s.Resource.storedJSONServed()) {
		return nil, false
	}
	out, err := s.storedJSON(obj.GetNamespace(), obj.GetName(), e.stored)
	return out, err == nil
}

// storedJSON is the stored value of namespace/name, decrypted, with its
// resourceVersion inserted.
func (s *Store) storedJSON(namespace, name string, stored etcdstore.Object) ([]byte, error) {
	key := s.keyOf(namespace, name)
	plaintext, _, err := s.unseal(key, stored.Value)
	if err != nil {
		return nil, s.corrupt(key, stored, untransformable, err)
	}
	out, err := withResourceVersion(plaintext, stored.Revision)
	if err != nil {
		return nil, s.notJSONObject(key, stored, err)
	}
	return out, nil
}

// convertedJSON is GetJSON for a resource served in another version of the
// stored objects (Resource.Storage), or read with Resource.ReadStored: the
// object read, converted, encoded.
//
// A cached object of a resource read with Resource.ReadStored whose reading
// changes nothing — the stored version, its schema's defaults already in
// it — is passed through as stored (cacheEntry.asServed).
func (s *Store) convertedJSON(ctx context.Context, namespace, name string) ([]byte, string, error) {
	stored, cached, err := s.read(ctx, namespace, name)
	if err != nil {
		return nil, "", err
	}
	if cached != nil && s.Resource.Storage == nil && cached.asServed(s) {
		return s.passedThrough(namespace, name, stored)
	}
	obj, err := s.got(namespace, name, stored, cached)
	if err != nil {
		return nil, "", err
	}
	obj.GetObjectKind().SetGroupVersionKind(s.Resource.GroupVersionKind())
	var buf bytes.Buffer
	if err := encodeJSON(obj, &buf); err != nil {
		return nil, "", fmt.Errorf("encode %s %s: %w", s.Resource.Kind, name, err)
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), obj.GetResourceVersion(), nil
}
