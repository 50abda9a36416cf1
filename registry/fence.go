package registry

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/concord-dev/concord/etcdstore"
)

// Fence is what FencedStorage needs of a request's authorization (the API
// layer's, apiserver/filters.Fence): RBAC allowed its writes on a view that
// may be behind etcd, and each write must carry the guard of that view.
type Fence interface {
	// Guard is the guard to add to the request's next write; false when
	// none is needed (the decision was made again without one).
	Guard() (FenceGuard, bool)
	// Settle records that a guarded write landed, or was sent without an
	// answer: the request's answer is that write's.
	Settle()
	// Redecide decides the request again on current views after a guard
	// failed: nil when it is still allowed (Guard is then the new view's),
	// else the answer (a Status: 403, or 500).
	Redecide(ctx context.Context) error
}

// FenceGuard is the guard of a fence: that the RBAC objects are still as a
// view had them (RBACGuard). Comparable: a fence whose guard is the same
// after a failed write held.
type FenceGuard struct{ guard etcdstore.Guard }

// RBACGuard is the guard of a write allowed on a view of the RBAC objects
// at generation (the ModRevision of RBACGeneration the view read): etcd
// applies the write only if they have not changed since.
func RBACGuard(generation int64) FenceGuard {
	return FenceGuard{etcdstore.Guard{Ref: RBACGeneration, Revision: generation}}
}

// FencedStorage adds to every write made for a request the guard of its
// authorization's fence, found by fenceOf (nil: the write needs none), so
// that etcd applies it only if the RBAC objects are still as that fence's
// view had them. When a guard failed (a definite refusal: nothing was
// written), the request is decided again on a current view: still allowed,
// the same write is sent again under the new guard (bounded); refused, it
// is answered 403. A write whose outcome is unknown is never sent again.
// It is the storage nearest etcd, under crdserving's guards, so that a
// failure of the fence is handled before theirs. fenceOf comes from the
// API layer (apiserver/filters.FenceOf), which registry does not import.
func FencedStorage(s Storage, fenceOf func(context.Context) Fence) Storage {
	return &fencedStorage{Storage: s, fenceOf: fenceOf}
}

type fencedStorage struct {
	Storage
	fenceOf func(context.Context) Fence
}

// fenceAttempts bounds how often one write is sent while RBAC keeps changing.
const fenceAttempts = 3

// Prefix is the storage's own (corrupt-object reports name etcd keys).
func (f *fencedStorage) Prefix() string {
	if p, ok := f.Storage.(prefixed); ok {
		return p.Prefix()
	}
	return ""
}

func (f *fencedStorage) Create(ctx context.Context, ref etcdstore.Ref, value []byte, guards ...etcdstore.Guard) (int64, error) {
	return fencedWrite(ctx, f.fenceOf(ctx), guards, func(g []etcdstore.Guard) (int64, error) { return f.Storage.Create(ctx, ref, value, g...) })
}

func (f *fencedStorage) Update(ctx context.Context, ref etcdstore.Ref, value []byte, revision int64, guards ...etcdstore.Guard) (int64, error) {
	return fencedWrite(ctx, f.fenceOf(ctx), guards, func(g []etcdstore.Guard) (int64, error) { return f.Storage.Update(ctx, ref, value, revision, g...) })
}

func (f *fencedStorage) Delete(ctx context.Context, ref etcdstore.Ref, revision int64, guards ...etcdstore.Guard) (int64, error) {
	return fencedWrite(ctx, f.fenceOf(ctx), guards, func(g []etcdstore.Guard) (int64, error) { return f.Storage.Delete(ctx, ref, revision, g...) })
}

func fencedWrite(ctx context.Context, fence Fence, guards []etcdstore.Guard, send func([]etcdstore.Guard) (int64, error)) (int64, error) {
	if fence == nil {
		return send(guards)
	}
	for attempt := 1; ; attempt++ {
		g, guarded := fence.Guard()
		all := guards
		if guarded {
			all = append(slices.Clip(guards), g.guard)
		}
		rev, err := send(all)
		if err == nil || errors.Is(err, etcdstore.ErrUnknownOutcome) {
			// Landed, or perhaps: the answer is this write's.
			fence.Settle()
			return rev, err
		}
		if !guarded || !errors.Is(err, etcdstore.ErrGuardChanged) {
			return rev, err
		}
		// Some guard failed and nothing was written: decide again on a
		// current view. If the fence's guard is the same, it held: another
		// guard failed (the caller's to handle).
		if derr := fence.Redecide(ctx); derr != nil {
			return 0, derr
		}
		if now, ok := fence.Guard(); ok && now == g {
			return rev, err
		}
		if attempt == fenceAttempts {
			return 0, &RetryError{Message: fmt.Sprintf("the RBAC roles and bindings kept changing while the write was authorized (%d attempts); nothing was written: send it again", attempt)}
		}
	}
}
