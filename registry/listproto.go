package registry

import (
	"bufio"
	"context"
	"fmt"

	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/concord-dev/concord/etcdstore"
)

// protoMarshaler is a built-in type's generated protobuf encoding.
type protoMarshaler interface {
	Marshal() ([]byte, error)
}

// protobufOf is obj's protobuf encoding: the cache entry's, made once, when
// obj is the cached one.
func protobufOf(obj Object, cached *cacheEntry) ([]byte, error) {
	if cached != nil {
		return cached.protobuf(obj)
	}
	m, ok := obj.(protoMarshaler)
	if !ok {
		return nil, fmt.Errorf("%T has no protobuf encoding", obj)
	}
	return m.Marshal()
}

// ProtobufList is a list answer whose items are protobuf already: an object
// of the read cache is encoded once, for every list that serves it at that
// revision (cacheEntry.protobuf), instead of once per list.
type ProtobufList struct {
	Kind, APIVersion string
	Meta             metav1.ListMeta
	Items            [][]byte
}

// ListProtobuf is List for a client that takes Kubernetes protobuf. served
// is false for a resource without a protobuf encoding (custom resources).
func (s *Store) ListProtobuf(ctx context.Context, namespace string, opts *metainternalversion.ListOptions) (_ *ProtobufList, served bool, _ error) {
	if _, ok := s.Resource.New().(protoMarshaler); !ok {
		return nil, false, nil
	}
	plan, err := planList(s.Resource, opts)
	if err != nil {
		return nil, true, err
	}
	var items [][]byte
	rev, token, remaining, err := s.listPages(ctx, namespace, opts, plan, func(key string, stored etcdstore.Object, cached *cacheEntry) (bool, error) {
		obj, err := s.listed(key, stored, cached)
		if err != nil {
			return false, err
		}
		if !plan.filter.matches(obj) {
			return false, nil
		}
		encoded, err := protobufOf(obj, cached)
		if err != nil {
			return false, fmt.Errorf("protobuf encoding of %s: %w", key, err)
		}
		items = append(items, encoded)
		return true, nil
	})
	if err != nil {
		return nil, true, err
	}
	gvk := s.Resource.ListGroupVersionKind()
	return &ProtobufList{
		Kind:       gvk.Kind,
		APIVersion: gvk.GroupVersion().String(),
		Meta:       metav1.ListMeta{ResourceVersion: formatRevision(rev), Continue: token, RemainingItemCount: remaining},
		Items:      items,
	}, true, nil
}

// ProtobufObject is a get answer in protobuf already: the cached object's
// encoding, made once for every get and list that serves its revision.
type ProtobufObject struct {
	Kind, APIVersion string
	ResourceVersion  string
	Encoded          []byte
}

// GetProtobuf is Get for a client that takes Kubernetes protobuf (a
// linearizable read, as Get). served is false for a resource without a
// protobuf encoding (custom resources).
func (s *Store) GetProtobuf(ctx context.Context, namespace, name string) (_ *ProtobufObject, served bool, _ error) {
	if _, ok := s.Resource.New().(protoMarshaler); !ok {
		return nil, false, nil
	}
	stored, cached, err := s.read(ctx, namespace, name)
	if err != nil {
		return nil, true, err
	}
	obj, _, err := s.served(namespace, name, stored, cached)
	if err != nil {
		return nil, true, err
	}
	encoded, err := protobufOf(obj, cached)
	if err != nil {
		return nil, true, err
	}
	gvk := s.Resource.GroupVersionKind()
	return &ProtobufObject{Kind: gvk.Kind, APIVersion: gvk.GroupVersion().String(), ResourceVersion: formatRevision(stored.Revision), Encoded: encoded}, true, nil
}

// WriteProtobuf writes the object as apimachinery's protobuf serializer
// does (see ProtobufList.WriteProtobuf).
func (o *ProtobufObject) WriteProtobuf(w *bufio.Writer) error {
	return writeUnknown(w, o.APIVersion, o.Kind, len(o.Encoded), func() { w.Write(o.Encoded) })
}

// protobufPrefix starts every Kubernetes protobuf message (apimachinery's
// protobuf serializer).
var protobufPrefix = []byte{0x6b, 0x38, 0x73, 0x00}

// WriteProtobuf writes the list as apimachinery's protobuf serializer
// writes a typed list, without building it in memory first: the prefix,
// then a runtime.Unknown — its TypeMeta (field 1), the list message as its
// raw value (field 2: the ListMeta as field 1 and every item as field 2, as
// every list type of k8s.io/api numbers them), and its empty
// contentEncoding and contentType (fields 3 and 4, which gogo writes even
// when empty).
func (l *ProtobufList) WriteProtobuf(w *bufio.Writer) error {
	meta, err := l.Meta.Marshal()
	if err != nil {
		return err
	}
	raw := 1 + varintSize(len(meta)) + len(meta)
	for _, it := range l.Items {
		raw += 1 + varintSize(len(it)) + len(it)
	}
	return writeUnknown(w, l.APIVersion, l.Kind, raw, func() {
		writeField(w, 0x0a, meta)
		for _, it := range l.Items {
			writeField(w, 0x12, it)
		}
	})
}

// writeUnknown writes the prefix and a runtime.Unknown of apiVersion and
// kind whose raw value, rawSize bytes, writeRaw writes.
func writeUnknown(w *bufio.Writer, apiVersion, kind string, rawSize int, writeRaw func()) error {
	typeMeta, err := (&runtime.TypeMeta{APIVersion: apiVersion, Kind: kind}).Marshal()
	if err != nil {
		return err
	}
	w.Write(protobufPrefix)
	writeField(w, 0x0a, typeMeta)
	writeTag(w, 0x12, rawSize)
	writeRaw()
	_, err = w.Write([]byte{0x1a, 0x00, 0x22, 0x00})
	return err
}

// writeField writes a length-delimited field: its tag, length and bytes.
func writeField(w *bufio.Writer, tag byte, value []byte) {
	writeTag(w, tag, len(value))
	w.Write(value)
}

func writeTag(w *bufio.Writer, tag byte, size int) {
	w.WriteByte(tag)
	for n := uint64(size); ; n >>= 7 {
		if n < 0x80 {
			w.WriteByte(byte(n))
			return
		}
		w.WriteByte(byte(n) | 0x80)
	}
}

func varintSize(n int) int {
	size := 1
	for ; n >= 0x80; n >>= 7 {
		size++
	}
	return size
}
