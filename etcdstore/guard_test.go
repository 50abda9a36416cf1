package etcdstore_test

import (
	"errors"
	"testing"

	"github.com/concord-dev/concord/etcdstore"
	"github.com/concord-dev/concord/etcdstore/etcdtest"
)

// TestGuardedWrites: a create, update or delete with a guard applies only
// while the guard's key is at the guard's revision; otherwise nothing is
// written and the answer is ErrGuardChanged (with ErrConflict), told apart
// from a change of the written key itself.
func TestGuardedWrites(t *testing.T) {
	s, _ := newStore(t)
	ctx := testContext(t)
	guardRef := etcdstore.Ref{Resource: "apiextensions.k8s.io/customresourcedefinitions", Name: "widgets.example.com"}
	guardRev, err := s.Create(ctx, guardRef, []byte("crd v1"))
	if err != nil {
		t.Fatal(err)
	}
	guard := etcdstore.Guard{Ref: guardRef, Revision: guardRev}
	ref := etcdstore.Ref{Resource: "example.com/widgets", Namespace: "ns", Name: "w"}
	rev, err := s.Create(ctx, ref, []byte("w1"), guard)
	if err != nil {
		t.Fatalf("guarded create while the guard holds: %v", err)
	}
	if rev, err = s.Update(ctx, ref, []byte("w2"), rev, guard); err != nil {
		t.Fatalf("guarded update while the guard holds: %v", err)
	}
	// The guard's key changes: every guarded write is refused as such.
	if _, err := s.Update(ctx, guardRef, []byte("crd v2"), guardRev); err != nil {
		t.Fatal(err)
	}
	other := etcdstore.Ref{Resource: "example.com/widgets", Namespace: "ns", Name: "other"}
	for name, write := range map[string]func() error{
		"create": func() error { _, err := s.Create(ctx, other, []byte("x"), guard); return err },
		"update": func() error { _, err := s.Update(ctx, ref, []byte("x"), rev, guard); return err },
		"delete": func() error { _, err := s.Delete(ctx, ref, rev, guard); return err },
	} {
		if err := write(); !errors.Is(err, etcdstore.ErrGuardChanged) || !errors.Is(err, etcdstore.ErrConflict) {
			t.Errorf("guarded %s after the guard's key changed = %v; want ErrGuardChanged and ErrConflict", name, err)
		}
	}
	if got, err := s.Get(ctx, ref, 0); err != nil || string(got.Value) != "w2" || got.Revision != rev {
		t.Errorf("after refused writes: %q at %d, %v; want w2 at %d", got.Value, got.Revision, err, rev)
	}
	if _, err := s.Get(ctx, other, 0); !errors.Is(err, etcdstore.ErrNotFound) {
		t.Errorf("refused guarded create left %v; want nothing (ErrNotFound)", err)
	}
	// A stale or missing key is told as before, never as a guard change,
	// even when the guard changed too.
	if _, err := s.Update(ctx, ref, []byte("x"), rev-1, guard); !errors.Is(err, etcdstore.ErrConflict) || errors.Is(err, etcdstore.ErrGuardChanged) {
		t.Errorf("guarded update at a stale revision = %v; want ErrConflict alone", err)
	}
	missing := etcdstore.Ref{Resource: "example.com/widgets", Namespace: "ns", Name: "missing"}
	if _, err := s.Delete(ctx, missing, rev, guard); !errors.Is(err, etcdstore.ErrNotFound) {
		t.Errorf("guarded delete of a missing key = %v; want ErrNotFound", err)
	}
	// Under the new revision of the guard, writes apply again.
	got, err := s.Get(ctx, guardRef, 0)
	if err != nil {
		t.Fatal(err)
	}
	guard.Revision = got.Revision
	if _, err := s.Delete(ctx, ref, rev, guard); err != nil {
		t.Errorf("guarded delete under the guard's new revision: %v", err)
	}
}

// TestBumpedWrites: every create, update and delete of a resource named in
// Options.Bump puts its generation key in the same transaction (its
// ModRevision is the write's revision), so a write guarded by the key's
// revision fails once any of them landed; a refused write bumps nothing.
func TestBumpedWrites(t *testing.T) {
	e := etcdtest.Start(t)
	gen := etcdstore.Ref{Resource: "rbac.authorization.k8s.io", Name: "generation"}
	s := etcdstore.NewWithOptions(e.Client, "/registry", etcdstore.Options{Bump: map[string]etcdstore.Ref{"rbac.authorization.k8s.io/roles": gen}})
	ctx := testContext(t)
	genRev := func() int64 {
		o, err := s.Get(ctx, gen, 0)
		if errors.Is(err, etcdstore.ErrNotFound) {
			return 0
		}
		if err != nil {
			t.Fatal(err)
		}
		return o.Revision
	}
	ref := etcdstore.Ref{Resource: "rbac.authorization.k8s.io/roles", Namespace: "ns", Name: "r"}
	other := etcdstore.Ref{Resource: "configmaps", Namespace: "ns", Name: "c"}
	guard := etcdstore.Guard{Ref: gen, Revision: genRev()} // 0: no key yet
	otherRev, err := s.Create(ctx, other, []byte("c1"), guard)
	if err != nil {
		t.Fatalf("write guarded by the missing generation key: %v", err)
	}
	rev, err := s.Create(ctx, ref, []byte("r1"))
	if err != nil || genRev() != rev {
		t.Fatalf("create: %d, %v; generation at %d, want the create's revision", rev, err, genRev())
	}
	if _, err := s.Update(ctx, other, []byte("c2"), otherRev, guard); !errors.Is(err, etcdstore.ErrGuardChanged) {
		t.Errorf("write guarded by the generation before a role's create = %v; want ErrGuardChanged", err)
	}
	if rev, err = s.Update(ctx, ref, []byte("r2"), rev); err != nil || genRev() != rev {
		t.Fatalf("update: %d, %v; generation at %d, want the update's revision", rev, err, genRev())
	}
	if _, err := s.Update(ctx, ref, []byte("r3"), rev-1); !errors.Is(err, etcdstore.ErrConflict) || genRev() != rev {
		t.Errorf("refused update = %v, generation at %d; want ErrConflict and the generation unchanged at %d", err, genRev(), rev)
	}
	if rev, err = s.Delete(ctx, ref, rev, etcdstore.Guard{Ref: other, Revision: otherRev}); err != nil || genRev() != rev {
		t.Fatalf("guarded delete: %d, %v; generation at %d, want the delete's revision", rev, err, genRev())
	}
	if rev, err = s.Create(ctx, ref, []byte("r4"), etcdstore.Guard{Ref: other, Revision: otherRev}); err != nil || genRev() != rev {
		t.Fatalf("guarded create: %d, %v; generation at %d, want the create's revision", rev, err, genRev())
	}
}
