// Package etcdstore is the only package that talks to etcd. It maps
// (resource, namespace, name) to keys under a prefix and offers the five
// operations Concord needs, each a single etcd request: linearizable Get and
// List, and Create, Update and Delete as compare-and-swap transactions on the
// key's revision.
package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/kubernetes"
)

// Ref names one object: <prefix>/<resource>/<namespace>/<name>, or
// <prefix>/<resource>/<name> when Namespace is empty (cluster-scoped).
type Ref struct {
	Resource  string
	Namespace string
	Name      string
}

// Object is a stored value and the etcd ModRevision it was written at.
type Object struct {
	// Key is the key relative to the list prefix (set by List only).
	Key      string
	Value    []byte
	Revision int64
}

// ListOptions selects what a List reads.
type ListOptions struct {
	// Revision 0 reads the latest state with a linearizable read; otherwise
	// the range is read at that revision.
	Revision int64
	// Limit bounds the number of objects returned; 0 means all.
	Limit int64
	// Start is where the range begins (inclusive), relative to the list
	// prefix: the Next of a previous page.
	Start string
}

// ListResult holds objects under a prefix, in key order.
type ListResult struct {
	Objects []Object
	// Revision is the etcd revision the range was read at.
	Revision int64
	// Remaining counts the objects after this page.
	Remaining int64
}

// Store keeps objects in etcd under a key prefix.
type Store struct {
	kv     kubernetes.Client
	prefix string
}

// New returns a Store that keeps its keys under prefix (for example
// "/registry"). The caller owns client and closes it.
func New(client *clientv3.Client, prefix string) *Store {
	return &Store{
		kv:     kubernetes.Client{Client: client},
		prefix: "/" + strings.Trim(prefix, "/"),
	}
}

// Get reads one object with a linearizable read (revision 0) or at an exact
// revision. Missing: ErrNotFound. Compacted revision: ErrCompacted.
func (s *Store) Get(ctx context.Context, ref Ref, revision int64) (Object, error) {
	key, err := s.key(ref)
	if err != nil {
		return Object{}, err
	}
	resp, err := s.kv.Get(ctx, key, kubernetes.GetOptions{Revision: revision})
	if err != nil {
		return Object{}, storeError("get", key, err)
	}
	if resp.KV == nil {
		return Object{}, fmt.Errorf("get %s: %w", key, ErrNotFound)
	}
	return object(resp.KV), nil
}

// List reads the objects of a resource in one namespace, or in all
// namespaces when namespace is empty, as one consistent range. A revision
// that is compacted gives ErrCompacted; one newer than the store's,
// ErrFutureRevision.
func (s *Store) List(ctx context.Context, resource, namespace string, opts ListOptions) (ListResult, error) {
	prefix, err := s.listPrefix(resource, namespace)
	if err != nil {
		return ListResult{}, err
	}
	// The range end is the prefix's end, so no Start can read outside it.
	resp, err := s.kv.List(ctx, prefix, kubernetes.ListOptions{Revision: opts.Revision, Limit: opts.Limit, Continue: prefix + opts.Start})
	if err != nil {
		return ListResult{}, storeError("list", prefix, err)
	}
	out := ListResult{Objects: make([]Object, 0, len(resp.Kvs)), Revision: resp.Revision}
	for _, kv := range resp.Kvs {
		o := object(kv)
		o.Key = strings.TrimPrefix(string(kv.Key), prefix)
		out.Objects = append(out.Objects, o)
	}
	out.Remaining = resp.Count - int64(len(resp.Kvs))
	return out, nil
}

// Guard is a further condition on a create: the key of Ref must still be
// at Revision (for example, the namespace an object is created in).
type Guard struct {
	Ref      Ref
	Revision int64
}

// Create writes value if the key does not exist, in one transaction
// If(ModRevision(key) == 0) Then(Put): a key that exists has a non-zero
// ModRevision, so this is the same guard as CreateRevision == 0. With guards,
// their keys must also be unchanged. It returns the new revision, ErrExists,
// or ErrConflict when a guard's key changed.
func (s *Store) Create(ctx context.Context, ref Ref, value []byte, guards ...Guard) (int64, error) {
	key, err := s.key(ref)
	if err != nil {
		return 0, err
	}
	if len(guards) == 0 {
		resp, err := s.kv.OptimisticPut(ctx, key, value, 0, kubernetes.PutOptions{})
		if err != nil {
			return 0, storeError("create", key, err)
		}
		if !resp.Succeeded {
			return 0, fmt.Errorf("create %s: %w", key, ErrExists)
		}
		return resp.Revision, nil
	}
	cmps := []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(key), "=", 0)}
	for _, g := range guards {
		gkey, err := s.key(g.Ref)
		if err != nil {
			return 0, err
		}
		cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(gkey), "=", g.Revision))
	}
	resp, err := s.kv.Client.Txn(ctx).If(cmps...).Then(clientv3.OpPut(key, string(value))).Else(clientv3.OpGet(key, clientv3.WithCountOnly())).Commit()
	if err != nil {
		return 0, storeError("create", key, err)
	}
	if !resp.Succeeded {
		if resp.Responses[0].GetResponseRange().Count > 0 {
			return 0, fmt.Errorf("create %s: %w", key, ErrExists)
		}
		return 0, fmt.Errorf("create %s: a guard changed: %w", key, ErrConflict)
	}
	return resp.Header.Revision, nil
}

// Update replaces value only if the key's ModRevision is still revision, in
// one transaction If(ModRevision(key) == revision) Then(Put) Else(Get). It
// returns the new revision; ErrNotFound when the key is gone, ErrConflict
// when it was written since.
func (s *Store) Update(ctx context.Context, ref Ref, value []byte, revision int64) (int64, error) {
	key, err := s.key(ref)
	if err != nil {
		return 0, err
	}
	if revision <= 0 {
		return 0, fmt.Errorf("update %s: revision %d: %w", key, revision, ErrConflict)
	}
	resp, err := s.kv.OptimisticPut(ctx, key, value, revision, kubernetes.PutOptions{GetOnFailure: true})
	if err != nil {
		return 0, storeError("update", key, err)
	}
	if !resp.Succeeded {
		return 0, casFailure("update", key, revision, resp.KV)
	}
	return resp.Revision, nil
}

// Delete removes the key only if its ModRevision is still revision, in one
// transaction If(ModRevision(key) == revision) Then(Delete) Else(Get). It
// returns the delete revision; ErrNotFound or ErrConflict as Update.
func (s *Store) Delete(ctx context.Context, ref Ref, revision int64) (int64, error) {
	key, err := s.key(ref)
	if err != nil {
		return 0, err
	}
	if revision <= 0 {
		return 0, fmt.Errorf("delete %s: revision %d: %w", key, revision, ErrConflict)
	}
	resp, err := s.kv.OptimisticDelete(ctx, key, revision, kubernetes.DeleteOptions{GetOnFailure: true})
	if err != nil {
		return 0, storeError("delete", key, err)
	}
	if !resp.Succeeded {
		return 0, casFailure("delete", key, revision, resp.KV)
	}
	return resp.Revision, nil
}

func casFailure(op, key string, expected int64, current *mvccpb.KeyValue) error {
	if current == nil {
		return fmt.Errorf("%s %s: %w", op, key, ErrNotFound)
	}
	return fmt.Errorf("%s %s: expected revision %d, found %d: %w", op, key, expected, current.ModRevision, ErrConflict)
}

// key builds the etcd key for ref. Every segment is checked so that no name
// can climb out of its resource's key space.
func (s *Store) key(ref Ref) (string, error) {
	segments := []string{ref.Resource, ref.Name}
	if ref.Namespace != "" {
		segments = []string{ref.Resource, ref.Namespace, ref.Name}
	}
	for _, seg := range segments {
		if err := checkSegment(seg); err != nil {
			return "", err
		}
	}
	return s.prefix + "/" + strings.Join(segments, "/"), nil
}

// listPrefix is the range a list reads; it ends in "/" so that a namespace
// "a" never lists the objects of namespace "ab".
func (s *Store) listPrefix(resource, namespace string) (string, error) {
	if err := checkSegment(resource); err != nil {
		return "", err
	}
	if namespace == "" {
		return s.prefix + "/" + resource + "/", nil
	}
	if err := checkSegment(namespace); err != nil {
		return "", err
	}
	return s.prefix + "/" + resource + "/" + namespace + "/", nil
}

func checkSegment(seg string) error {
	if seg == "" || seg == "." || seg == ".." || strings.ContainsAny(seg, "/\x00") || path.Clean(seg) != seg {
		return fmt.Errorf("%q: %w", seg, ErrInvalidKey)
	}
	return nil
}

func object(kv *mvccpb.KeyValue) Object {
	return Object{Value: kv.Value, Revision: kv.ModRevision}
}

// storeError wraps an etcd error, translating the ones callers act on.
func storeError(op, key string, err error) error {
	switch {
	case errors.Is(err, rpctypes.ErrCompacted):
		return fmt.Errorf("%s %s: %w: %w", op, key, ErrCompacted, err)
	case errors.Is(err, rpctypes.ErrFutureRev):
		return fmt.Errorf("%s %s: %w: %w", op, key, ErrFutureRevision, err)
	}
	return fmt.Errorf("%s %s: %w", op, key, err)
}
