package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Lease reuse, as kube-apiserver's etcd3 leaseManager: a lease granted for
// one write is reused by the writes that follow within a reuse window —
// leaseReuseFraction of the TTL, at most leaseReuseMax — and is granted for
// the TTL plus that window, so that every key written on it still lives at
// least its TTL. At most leaseMaxObjects writes share one lease, so that its
// expiry (one etcd transaction deleting all its keys) stays small.
const (
	leaseReuseFraction = 0.05
	leaseReuseMax      = time.Minute
	leaseMaxObjects    = 1000
)

// leaseManager hands out the lease a write of a resource with a TTL puts its
// key on. Leases are etcd's: a key on one expires even when every replica
// is gone, and a replica that restarts simply grants new ones.
type leaseManager struct {
	client *clientv3.Client

	mu sync.Mutex
	// byTTL is the lease being reused for each TTL.
	byTTL map[time.Duration]*sharedLease
}

type sharedLease struct {
	id clientv3.LeaseID
	// expires is when etcd will drop the lease, as measured from before
	// the grant was sent.
	expires time.Time
	// attached counts the writes that took it.
	attached int
}

func newLeaseManager(client *clientv3.Client) *leaseManager {
	return &leaseManager{client: client, byTTL: map[time.Duration]*sharedLease{}}
}

// leaseReuse is how long a lease granted for ttl is handed out again.
func leaseReuse(ttl time.Duration) time.Duration {
	return min(time.Duration(leaseReuseFraction*float64(ttl)), leaseReuseMax)
}

// get returns a lease that lives at least ttl from now: the shared one when
// it does and is not older than the reuse window, else a new one granted
// for ttl plus the window (in whole seconds, rounded up, as etcd counts).
// The lock is held across the grant, so concurrent writes wait for one
// grant instead of each sending their own.
func (m *leaseManager) get(ctx context.Context, ttl time.Duration) (clientv3.LeaseID, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	reuse := leaseReuse(ttl)
	if l := m.byTTL[ttl]; l != nil {
		valid := now.Add(ttl).Before(l.expires)
		recent := now.Add(ttl + reuse).After(l.expires)
		if valid && recent && l.attached < leaseMaxObjects {
			l.attached++
			return l.id, nil
		}
	}
	seconds := int64((ttl + reuse + time.Second - 1) / time.Second)
	resp, err := m.client.Grant(ctx, seconds)
	if err != nil {
		return 0, err
	}
	m.byTTL[ttl] = &sharedLease{id: resp.ID, expires: now.Add(time.Duration(seconds) * time.Second), attached: 1}
	return resp.ID, nil
}

// forget drops a shared lease that etcd no longer has (a write on it
// failed with "lease not found"), so the next write grants a new one.
func (m *leaseManager) forget(ttl time.Duration, id clientv3.LeaseID) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if l := m.byTTL[ttl]; l != nil && l.id == id {
		delete(m.byTTL, ttl)
	}
}

// lease is the lease a write of ref's resource puts its key on: none
// (0) for a resource without a TTL.
func (s *Store) lease(ctx context.Context, ref Ref) (clientv3.LeaseID, time.Duration, error) {
	ttl := s.ttl[ref.Resource]
	if ttl <= 0 {
		return 0, 0, nil
	}
	ctx, end := s.begin(ctx, "grant", ref.Resource)
	id, err := s.leases.get(ctx, ttl)
	end(err)
	if err != nil {
		return 0, 0, storeError("lease grant", ref.Resource, err)
	}
	return id, ttl, nil
}

// leaseFailed handles a write on a lease that failed: a lease etcd no
// longer has is forgotten, so that the write can be sent again on a new
// one (retry is true). Nothing was written: etcd refuses the whole
// transaction.
func (s *Store) leaseFailed(err error, ttl time.Duration, id clientv3.LeaseID) (retry bool) {
	if id == 0 || !isLeaseNotFound(err) {
		return false
	}
	s.leases.forget(ttl, id)
	return true
}

// LeaseOf reports the lease ID and the remaining TTL of the key of ref (ID
// 0 when the key has none), for tests and diagnostics.
func (s *Store) LeaseOf(ctx context.Context, ref Ref) (id int64, remaining time.Duration, _ error) {
	key, err := s.key(ref)
	if err != nil {
		return 0, 0, err
	}
	resp, err := s.kv.Client.Get(ctx, key)
	if err != nil {
		return 0, 0, storeError("get", key, err)
	}
	if len(resp.Kvs) == 0 {
		return 0, 0, fmt.Errorf("get %s: %w", key, ErrNotFound)
	}
	id = resp.Kvs[0].Lease
	if id == 0 {
		return 0, 0, nil
	}
	ttl, err := s.kv.Client.TimeToLive(ctx, clientv3.LeaseID(id))
	if err != nil {
		return 0, 0, storeError("lease time-to-live", key, err)
	}
	return id, time.Duration(ttl.TTL) * time.Second, nil
}

// isLeaseNotFound reports etcd's "requested lease not found": the
// transaction was refused as a whole.
func isLeaseNotFound(err error) bool {
	return err != nil && (errors.Is(err, rpctypes.ErrLeaseNotFound) || rpctypes.ErrorDesc(err) == rpctypes.ErrLeaseNotFound.Error())
}
