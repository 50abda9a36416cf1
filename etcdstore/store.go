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
	"slices"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/kubernetes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Ref names one object: <prefix>/<resource>/<namespace>/<name>, or
// <prefix>/<resource>/<name> when Namespace is empty (cluster-scoped).
// Resource may itself be several segments, "<group>/<plural>", as
// kube-apiserver keys custom resources and CRDs; each is checked.
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
	kv      kubernetes.Client
	prefix  string
	timeout time.Duration
	metrics *Metrics
	// ttl is how long the keys of a resource live after each write (on an
	// etcd lease from leases); resources not named live until deleted.
	ttl    map[string]time.Duration
	leases *leaseManager
	// bump: resource → the key every write of it puts (Options.Bump).
	bump map[string]Ref
	// monitor, when set, picks the member of each request (Options.Monitor).
	monitor *Monitor
}

// Options tune a Store; the zero value is what New gives.
type Options struct {
	// RequestTimeout bounds every etcd request the store sends (0: only
	// the caller's context does), so that no call waits for an etcd that
	// is gone longer than this, however long the caller's deadline.
	RequestTimeout time.Duration
	// Metrics, when set, records the duration and the failures of every
	// etcd request (see NewMetrics).
	Metrics *Metrics
	// TTL maps a resource to how long each of its keys lives after its
	// last write (kube-apiserver's TTLFunc; events: --event-ttl). Every
	// create and update of such a key puts it on an etcd lease of at least
	// that TTL — an update too, since a put without a lease would detach
	// the key from its lease — and etcd deletes the key when the lease
	// expires, whether or not any replica is running. Writes within a
	// short window share one lease (see leaseManager).
	TTL map[string]time.Duration
	// Bump maps a resource to a key that every create, update and delete
	// of it puts in the same transaction (a Bump guard), so that the key's
	// ModRevision is the revision of the resource's last write: a write
	// guarded by it fails if any of them landed since (RBAC's generation).
	Bump map[string]Ref
	// Monitor, when set, is the endpoint monitor of the store's client:
	// every request goes to the member it picks (Monitor.Member), on its
	// own connection, so that a request sent again goes to another member
	// than the one that did not answer (hedge.go).
	Monitor *Monitor
}

// New returns a Store that keeps its keys under prefix (for example
// "/registry"). The caller owns client and closes it.
func New(client *clientv3.Client, prefix string) *Store {
	return NewWithOptions(client, prefix, Options{})
}

// NewWithOptions is New with per-request timeouts and metrics.
func NewWithOptions(client *clientv3.Client, prefix string, opts Options) *Store {
	return &Store{
		kv:      kubernetes.Client{Client: client},
		prefix:  "/" + strings.Trim(prefix, "/"),
		timeout: opts.RequestTimeout,
		metrics: opts.Metrics,
		ttl:     opts.TTL,
		bump:    opts.Bump,
		monitor: opts.Monitor,
		leases:  newLeaseManager(client),
	}
}

// begin prepares one etcd request: its context gets the store's request
// timeout and asks etcd to refuse at once, rather than wait, when the member
// has no leader. end releases the context and records the request.
func (s *Store) begin(ctx context.Context, op, resource string) (_ context.Context, end func(error)) {
	start := time.Now()
	cancel := context.CancelFunc(func() {})
	if s.timeout > 0 {
		ctx, cancel = context.WithTimeout(ctx, s.timeout)
	}
	return clientv3.WithRequireLeader(ctx), func(err error) {
		cancel()
		s.metrics.observe(op, resource, time.Since(start), err)
	}
}

// Get reads one object with a linearizable read (revision 0) or at an exact
// revision. Missing: ErrNotFound. Compacted revision: ErrCompacted.
func (s *Store) Get(ctx context.Context, ref Ref, revision int64) (Object, error) {
	key, err := s.key(ref)
	if err != nil {
		return Object{}, err
	}
	ctx, end := s.begin(ctx, "get", ref.Resource)
	resp, err := hedgedRead(ctx, s, func(ctx context.Context, kv kubernetes.Client) (kubernetes.GetResponse, error) {
		return kv.Get(ctx, key, kubernetes.GetOptions{Revision: revision})
	})
	end(err)
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
	ctx, end := s.begin(ctx, "list", resource)
	resp, err := hedgedRead(ctx, s, func(ctx context.Context, kv kubernetes.Client) (kubernetes.ListResponse, error) {
		return kv.List(ctx, prefix, kubernetes.ListOptions{Revision: opts.Revision, Limit: opts.Limit, Continue: prefix + opts.Start})
	})
	end(err)
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

// Count returns how many objects of resource etcd holds, in all
// namespaces, with a count-only range read.
func (s *Store) Count(ctx context.Context, resource string) (int64, error) {
	prefix, err := s.listPrefix(resource, "")
	if err != nil {
		return 0, err
	}
	ctx, end := s.begin(ctx, "count", resource)
	n, err := hedgedRead(ctx, s, func(ctx context.Context, kv kubernetes.Client) (int64, error) {
		return kv.Count(ctx, prefix, kubernetes.CountOptions{})
	})
	end(err)
	if err != nil {
		return 0, storeError("count", prefix, err)
	}
	return n, nil
}

// Check reports whether etcd serves a linearizable read now: nil, or the
// error of the read (ErrUnavailable when the member has no leader). It is
// the storage health check; it is not counted in the metrics.
func (s *Store) Check(ctx context.Context) error {
	key := s.prefix + "/health"
	if s.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.timeout)
		defer cancel()
	}
	if _, err := s.kv.Client.Get(clientv3.WithRequireLeader(ctx), key, clientv3.WithCountOnly()); err != nil {
		return storeError("health check", key, err)
	}
	return nil
}

// Guard is a further condition on a write: the key of Ref must still be at
// Revision (for example, the namespace an object is created in, or the CRD
// whose schema a custom object was checked against). A write whose guard
// fails is not applied and answers ErrGuardChanged (wrapped with
// ErrConflict).
type Guard struct {
	Ref      Ref
	Revision int64
	// Bump: no condition; the key of Ref is put (a constant value) in the
	// write's transaction instead, so its ModRevision becomes the write's.
	Bump bool
}

// withBump adds the Bump guard of resource (Options.Bump) to guards.
func (s *Store) withBump(resource string, guards []Guard) []Guard {
	if ref, ok := s.bump[resource]; ok {
		return append(slices.Clip(guards), Guard{Ref: ref, Bump: true})
	}
	return guards
}

// guardCompares are the transaction conditions of guards, and the puts of
// their Bump guards, for the Then branch after op.
func (s *Store) guardCompares(guards []Guard, op clientv3.Op) ([]clientv3.Cmp, []clientv3.Op, error) {
	cmps := make([]clientv3.Cmp, 0, len(guards))
	ops := []clientv3.Op{op}
	for _, g := range guards {
		gkey, err := s.key(g.Ref)
		if err != nil {
			return nil, nil, err
		}
		if g.Bump {
			// Not empty: a watch tells a delete by its missing value.
			ops = append(ops, clientv3.OpPut(gkey, "bumped"))
			continue
		}
		cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(gkey), "=", g.Revision))
	}
	return cmps, ops, nil
}

// guardedWrite runs op on key in one transaction If(ModRevision(key) ==
// revision, guards...) Then(op) Else(Get(key)), for Update and Delete with
// guards. It returns the transaction's revision, or the error as Update
// documents, ErrGuardChanged when the key was as expected but a guard not.
func (s *Store) guardedWrite(ctx context.Context, name, key string, revision int64, op clientv3.Op, guards []Guard) (int64, error) {
	gcmps, ops, err := s.guardCompares(guards, op)
	if err != nil {
		return 0, err
	}
	cmps := append([]clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(key), "=", revision)}, gcmps...)
	resp, err := hedgedWrite(ctx, s, func(ctx context.Context, kv kubernetes.Client) (*clientv3.TxnResponse, error) {
		return kv.Txn(ctx).If(cmps...).Then(ops...).Else(clientv3.OpGet(key)).Commit()
	}, func(resp *clientv3.TxnResponse) bool { return resp.Succeeded })
	if err != nil {
		return 0, writeError(name, key, err)
	}
	if !resp.Succeeded {
		kvs := resp.Responses[0].GetResponseRange().Kvs
		if len(kvs) == 1 && kvs[0].ModRevision == revision {
			return 0, fmt.Errorf("%s %s: %w: %w", name, key, ErrGuardChanged, ErrConflict)
		}
		var current *mvccpb.KeyValue
		if len(kvs) == 1 {
			current = kvs[0]
		}
		return 0, casFailure(name, key, revision, current)
	}
	return resp.Header.Revision, nil
}

// Create writes value if the key does not exist, in one transaction
// If(ModRevision(key) == 0) Then(Put): a key that exists has a non-zero
// ModRevision, so this is the same guard as CreateRevision == 0. With guards,
// their keys must also be unchanged. It returns the new revision, ErrExists,
// or ErrConflict when a guard's key changed. A resource with a TTL
// (Options.TTL) puts the key on a lease.
func (s *Store) Create(ctx context.Context, ref Ref, value []byte, guards ...Guard) (int64, error) {
	key, err := s.key(ref)
	if err != nil {
		return 0, err
	}
	guards = s.withBump(ref.Resource, guards)
	for attempt := 0; ; attempt++ {
		lease, ttl, err := s.lease(ctx, ref)
		if err != nil {
			return 0, err
		}
		rev, err := s.create(ctx, ref, key, value, lease, guards)
		if attempt == 0 && s.leaseFailed(err, ttl, lease) {
			continue // the shared lease is gone: once more on a new one
		}
		return rev, err
	}
}

func (s *Store) create(ctx context.Context, ref Ref, key string, value []byte, lease clientv3.LeaseID, guards []Guard) (int64, error) {
	if len(guards) == 0 {
		ctx, end := s.begin(ctx, "create", ref.Resource)
		resp, err := createOnce(ctx, s, func(ctx context.Context, kv kubernetes.Client) (kubernetes.PutResponse, error) {
			return kv.OptimisticPut(ctx, key, value, 0, kubernetes.PutOptions{LeaseID: lease})
		})
		end(err)
		if err != nil {
			return 0, writeError("create", key, err)
		}
		if !resp.Succeeded {
			return 0, fmt.Errorf("create %s: %w", key, ErrExists)
		}
		return resp.Revision, nil
	}
	gcmps, ops, err := s.guardCompares(guards, clientv3.OpPut(key, string(value), clientv3.WithLease(lease)))
	if err != nil {
		return 0, err
	}
	cmps := append([]clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(key), "=", 0)}, gcmps...)
	ctx, end := s.begin(ctx, "create", ref.Resource)
	resp, err := createOnce(ctx, s, func(ctx context.Context, kv kubernetes.Client) (*clientv3.TxnResponse, error) {
		return kv.Txn(ctx).If(cmps...).Then(ops...).Else(clientv3.OpGet(key, clientv3.WithCountOnly())).Commit()
	})
	end(err)
	if err != nil {
		return 0, writeError("create", key, err)
	}
	if !resp.Succeeded {
		if resp.Responses[0].GetResponseRange().Count > 0 {
			return 0, fmt.Errorf("create %s: %w", key, ErrExists)
		}
		return 0, fmt.Errorf("create %s: %w: %w", key, ErrGuardChanged, ErrConflict)
	}
	return resp.Header.Revision, nil
}

// Update replaces value only if the key's ModRevision is still revision, in
// one transaction If(ModRevision(key) == revision) Then(Put) Else(Get). It
// returns the new revision; ErrNotFound when the key is gone, ErrConflict
// when it was written since. A resource with a TTL puts the key on a lease
// again, so that it lives its TTL from this write. With guards, their keys
// must also be unchanged (ErrGuardChanged otherwise).
func (s *Store) Update(ctx context.Context, ref Ref, value []byte, revision int64, guards ...Guard) (int64, error) {
	key, err := s.key(ref)
	if err != nil {
		return 0, err
	}
	if revision <= 0 {
		return 0, fmt.Errorf("update %s: revision %d: %w", key, revision, ErrConflict)
	}
	guards = s.withBump(ref.Resource, guards)
	for attempt := 0; ; attempt++ {
		lease, ttl, err := s.lease(ctx, ref)
		if err != nil {
			return 0, err
		}
		rev, err := s.update(ctx, ref, key, value, revision, lease, guards)
		if attempt == 0 && s.leaseFailed(err, ttl, lease) {
			continue // the shared lease is gone: once more on a new one
		}
		return rev, err
	}
}

func (s *Store) update(ctx context.Context, ref Ref, key string, value []byte, revision int64, lease clientv3.LeaseID, guards []Guard) (int64, error) {
	ctx, end := s.begin(ctx, "update", ref.Resource)
	if len(guards) > 0 {
		rev, err := s.guardedWrite(ctx, "update", key, revision, clientv3.OpPut(key, string(value), clientv3.WithLease(lease)), guards)
		end(err)
		return rev, err
	}
	resp, err := hedgedWrite(ctx, s, func(ctx context.Context, kv kubernetes.Client) (kubernetes.PutResponse, error) {
		return kv.OptimisticPut(ctx, key, value, revision, kubernetes.PutOptions{GetOnFailure: true, LeaseID: lease})
	}, func(resp kubernetes.PutResponse) bool { return resp.Succeeded })
	end(err)
	if err != nil {
		return 0, writeError("update", key, err)
	}
	if !resp.Succeeded {
		return 0, casFailure("update", key, revision, resp.KV)
	}
	return resp.Revision, nil
}

// Delete removes the key only if its ModRevision is still revision, in one
// transaction If(ModRevision(key) == revision) Then(Delete) Else(Get). It
// returns the delete revision; ErrNotFound, ErrConflict or ErrGuardChanged
// as Update.
func (s *Store) Delete(ctx context.Context, ref Ref, revision int64, guards ...Guard) (int64, error) {
	key, err := s.key(ref)
	if err != nil {
		return 0, err
	}
	if revision <= 0 {
		return 0, fmt.Errorf("delete %s: revision %d: %w", key, revision, ErrConflict)
	}
	guards = s.withBump(ref.Resource, guards)
	ctx, end := s.begin(ctx, "delete", ref.Resource)
	if len(guards) > 0 {
		rev, err := s.guardedWrite(ctx, "delete", key, revision, clientv3.OpDelete(key), guards)
		end(err)
		return rev, err
	}
	resp, err := hedgedWrite(ctx, s, func(ctx context.Context, kv kubernetes.Client) (kubernetes.DeleteResponse, error) {
		return kv.OptimisticDelete(ctx, key, revision, kubernetes.DeleteOptions{GetOnFailure: true})
	}, func(resp kubernetes.DeleteResponse) bool { return resp.Succeeded })
	end(err)
	if err != nil {
		return 0, writeError("delete", key, err)
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
	if err := checkResource(ref.Resource); err != nil {
		return "", err
	}
	segments := []string{ref.Resource, ref.Name}
	if ref.Namespace != "" {
		segments = []string{ref.Resource, ref.Namespace, ref.Name}
	}
	for _, seg := range segments[1:] {
		if err := checkSegment(seg); err != nil {
			return "", err
		}
	}
	return s.prefix + "/" + strings.Join(segments, "/"), nil
}

// listPrefix is the range a list reads; it ends in "/" so that a namespace
// "a" never lists the objects of namespace "ab".
func (s *Store) listPrefix(resource, namespace string) (string, error) {
	if err := checkResource(resource); err != nil {
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

// checkResource checks each "/"-separated segment of a resource's part of
// its keys ("configmaps", "example.com/widgets").
func checkResource(resource string) error {
	for seg := range strings.SplitSeq(resource, "/") {
		if err := checkSegment(seg); err != nil {
			return fmt.Errorf("resource %q: %w", resource, err)
		}
	}
	return nil
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
// A deadline stays context.DeadlineExceeded (the store's request timeout or
// the caller's ran out).
func storeError(op, key string, err error) error {
	switch {
	case errors.Is(err, rpctypes.ErrCompacted):
		return fmt.Errorf("%s %s: %w: %w", op, key, ErrCompacted, err)
	case errors.Is(err, rpctypes.ErrFutureRev):
		return fmt.Errorf("%s %s: %w: %w", op, key, ErrFutureRevision, err)
	case unavailable(err):
		return fmt.Errorf("%s %s: %w: %w", op, key, ErrUnavailable, err)
	case tooLarge(err):
		return fmt.Errorf("%s %s: %w: %w", op, key, ErrTooLarge, err)
	}
	return fmt.Errorf("%s %s: %w", op, key, err)
}

// tooLarge reports a request etcd refused for its size, or that the
// client would not send, as kube-apiserver's isTooLargeError tells them.
func tooLarge(err error) bool {
	if errors.Is(err, rpctypes.ErrRequestTooLarge) || rpctypes.ErrorDesc(err) == rpctypes.ErrRequestTooLarge.Error() {
		return true
	}
	s, ok := status.FromError(err)
	return ok && s.Code() == codes.ResourceExhausted && strings.Contains(s.Message(), "trying to send message larger than max")
}

// unavailable reports an etcd that cannot serve the request now but may
// soon: gRPC code Unavailable, which etcd uses for no leader, leader
// changed, stopping, not capable and its own request timeouts.
func unavailable(err error) bool {
	var etcdErr rpctypes.EtcdError
	if errors.As(err, &etcdErr) {
		return etcdErr.Code() == codes.Unavailable
	}
	return status.Code(err) == codes.Unavailable
}
