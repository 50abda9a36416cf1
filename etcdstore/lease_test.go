package etcdstore_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/concord-dev/concord/etcdstore"
	"github.com/concord-dev/concord/etcdstore/etcdtest"
)

func newTTLStore(t *testing.T, ttl time.Duration) (*etcdstore.Store, *etcdtest.Etcd) {
	t.Helper()
	e := etcdtest.Start(t)
	return etcdstore.NewWithOptions(e.Client, "/registry", etcdstore.Options{TTL: map[string]time.Duration{"events": ttl}}), e
}

// leaseOf is the lease of the key of ref and its remaining TTL.
func leaseOf(t *testing.T, s *etcdstore.Store, ref etcdstore.Ref) (int64, time.Duration) {
	t.Helper()
	id, remaining, err := s.LeaseOf(testContext(t), ref)
	if err != nil {
		t.Fatalf("LeaseOf(%v): %v", ref, err)
	}
	return id, remaining
}

func TestTTLPutsKeysOnLeases(t *testing.T) {
	s, _ := newTTLStore(t, time.Hour)
	ctx := testContext(t)
	event := etcdstore.Ref{Resource: "events", Namespace: "default", Name: "e1"}
	rev, err := s.Create(ctx, event, []byte("v1"))
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	id, remaining := leaseOf(t, s, event)
	// The TTL plus the reuse window (kube's: 5% of the TTL, at most a minute).
	if id == 0 || remaining < time.Hour || remaining > time.Hour+time.Minute {
		t.Fatalf("after create: lease %d with %s left; want a lease with 1h0m0s..1h1m0s left", id, remaining)
	}

	if _, err := s.Update(ctx, event, []byte("v2"), rev); err != nil {
		t.Fatalf("Update: %v", err)
	}
	if id2, _ := leaseOf(t, s, event); id2 == 0 {
		t.Fatalf("after update: the key has no lease; an update must put it on one again")
	}

	cm := etcdstore.Ref{Resource: "configmaps", Namespace: "default", Name: "c"}
	if _, err := s.Create(ctx, cm, []byte("v1")); err != nil {
		t.Fatalf("Create configmap: %v", err)
	}
	if id, _ := leaseOf(t, s, cm); id != 0 {
		t.Fatalf("configmap key is on lease %d; a resource without a TTL must have none", id)
	}
	guarded := etcdstore.Ref{Resource: "events", Namespace: "default", Name: "guarded"}
	cmObj, err := s.Get(ctx, cm, 0)
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	if _, err := s.Create(ctx, guarded, []byte("v1"), etcdstore.Guard{Ref: cm, Revision: cmObj.Revision}); err != nil {
		t.Fatalf("guarded Create: %v", err)
	}
	if id, _ := leaseOf(t, s, guarded); id == 0 {
		t.Fatalf("a guarded create put no lease on its key")
	}
}

// TestLeasesAreShared: 100 events written back to back share one lease, as
// kube-apiserver's leaseManager shares them; past 1000 keys a lease is not
// shared further.
func TestLeasesAreShared(t *testing.T) {
	s, e := newTTLStore(t, time.Hour)
	ctx := testContext(t)
	leasesOf := func(n int) map[int64]int {
		t.Helper()
		ids := map[int64]int{}
		for i := range n {
			id, _ := leaseOf(t, s, etcdstore.Ref{Resource: "events", Namespace: "default", Name: fmt.Sprintf("e%d", i)})
			ids[id]++
		}
		return ids
	}
	for i := range 100 {
		if _, err := s.Create(ctx, etcdstore.Ref{Resource: "events", Namespace: "default", Name: fmt.Sprintf("e%d", i)}, []byte("v")); err != nil {
			t.Fatalf("Create %d: %v", i, err)
		}
	}
	if ids := leasesOf(100); len(ids) != 1 {
		t.Fatalf("100 events are on %d leases (%v); want 1", len(ids), ids)
	}
	for i := 100; i < 1001; i++ {
		if _, err := s.Create(ctx, etcdstore.Ref{Resource: "events", Namespace: "default", Name: fmt.Sprintf("e%d", i)}, []byte("v")); err != nil {
			t.Fatalf("Create %d: %v", i, err)
		}
	}
	ids := leasesOf(1001)
	if len(ids) != 2 {
		t.Fatalf("1001 events are on %d leases (%v); want 2 (at most 1000 keys a lease)", len(ids), ids)
	}
	leases, err := e.Client.Leases(ctx)
	if err != nil {
		t.Fatalf("Leases: %v", err)
	}
	if len(leases.Leases) != 2 {
		t.Fatalf("etcd holds %d leases; want 2", len(leases.Leases))
	}
}

// TestTTLExpires: the key is gone once its TTL and the reuse window have
// passed, deleted by etcd itself; an update starts the TTL again.
func TestTTLExpires(t *testing.T) {
	s, _ := newTTLStore(t, 2*time.Second)
	ctx := testContext(t)
	ref := etcdstore.Ref{Resource: "events", Namespace: "default", Name: "short"}
	start := time.Now()
	if _, err := s.Create(ctx, ref, []byte("v")); err != nil {
		t.Fatalf("Create: %v", err)
	}
	for {
		_, err := s.Get(ctx, ref, 0)
		if errors.Is(err, etcdstore.ErrNotFound) {
			break
		}
		if err != nil {
			t.Fatalf("Get: %v", err)
		}
		if time.Since(start) > 10*time.Second {
			t.Fatalf("the key with a 2s TTL still exists after %s", time.Since(start))
		}
		time.Sleep(100 * time.Millisecond)
	}
	took := time.Since(start)
	if took < 2*time.Second {
		t.Fatalf("the key with a 2s TTL was gone after %s", took)
	}
	t.Logf("a key with a 2s TTL was gone after %s", took.Round(100*time.Millisecond))
}

// TestLeaseGoneIsReplaced: a write on a shared lease that etcd no longer has
// (revoked, or a restore) is sent again on a new lease.
func TestLeaseGoneIsReplaced(t *testing.T) {
	s, e := newTTLStore(t, time.Hour)
	ctx := testContext(t)
	first := etcdstore.Ref{Resource: "events", Namespace: "default", Name: "first"}
	if _, err := s.Create(ctx, first, []byte("v")); err != nil {
		t.Fatalf("Create: %v", err)
	}
	id, _ := leaseOf(t, s, first)
	if _, err := e.Client.Revoke(ctx, clientv3.LeaseID(id)); err != nil {
		t.Fatalf("Revoke: %v", err)
	}
	second := etcdstore.Ref{Resource: "events", Namespace: "default", Name: "second"}
	if _, err := s.Create(ctx, second, []byte("v")); err != nil {
		t.Fatalf("Create on a revoked shared lease: %v", err)
	}
	if id2, _ := leaseOf(t, s, second); id2 == 0 || id2 == id {
		t.Fatalf("second key on lease %d (the revoked one was %d); want a new lease", id2, id)
	}
}
