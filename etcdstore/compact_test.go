package etcdstore_test

import (
	"errors"
	"testing"

	"github.com/concord-dev/concord/etcdstore"
)

// TestCompactorOneReplicaPerRound: two replicas' compactors share one etcd.
// Each round exactly one of them wins; the winner compacts to the revision
// recorded in the previous round, so one round of history always remains.
func TestCompactorOneReplicaPerRound(t *testing.T) {
	s, _ := newStore(t)
	ctx := testContext(t)
	a, b := s.NewCompactor(), s.NewCompactor()
	ref := etcdstore.Ref{Resource: "configmaps", Namespace: "default", Name: "c"}
	rev, err := s.Create(ctx, ref, []byte("0"))
	if err != nil {
		t.Fatal(err)
	}

	// Round 1: a wins and records the current revision; nothing is compacted.
	if got, err := a.Round(ctx); err != nil || got != 0 {
		t.Fatalf("round 1, a: compacted %d, %v; want 0 (never on the first round)", got, err)
	}
	if got, err := b.Round(ctx); err != nil || got != 0 {
		t.Fatalf("round 1, b: compacted %d, %v; want 0 (a won the round)", got, err)
	}
	recorded := rev + 1 // the round-1 write of the compact key
	for i := range 3 {
		if rev, err = s.Update(ctx, ref, []byte{byte('1' + i)}, rev); err != nil {
			t.Fatal(err)
		}
	}

	// Round 2: b goes first this time and compacts to what round 1 recorded.
	got, err := b.Round(ctx)
	if err != nil || got != recorded {
		t.Fatalf("round 2, b: compacted %d, %v; want the revision recorded in round 1 (%d)", got, err, recorded)
	}
	if again, err := a.Round(ctx); err != nil || again != 0 {
		t.Fatalf("round 2, a: compacted %d, %v; want 0 (b won the round)", again, err)
	}
	if _, err := s.Get(ctx, ref, got-1); !errors.Is(err, etcdstore.ErrCompacted) {
		t.Errorf("read below the compaction = %v; want ErrCompacted", err)
	}
	if obj, err := s.Get(ctx, ref, 0); err != nil || obj.Revision != rev {
		t.Errorf("latest after compaction = %+v, %v; want revision %d", obj, err, rev)
	}
}
