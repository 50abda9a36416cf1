package registry

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/concord-dev/concord/etcdstore"
)

// A write is admitted by the admission policies of a per-replica view
// that may be behind etcd (a policy created on another replica a moment
// ago). A guard makes a policy count from the moment its write returned,
// on every replica: admission records, in the request's context, the
// revision of AdmissionPolicyGeneration its view had
// (RecordAdmissionPolicies), and every write of the request carries the
// guard that the key is still at it (AdmissionGuardedStorage). If a policy
// or binding changed since — before the write began, or while it was
// admitted — etcd refuses the write, nothing is written, the view catches
// up, and the write is admitted again on it.

// admissionRecord is what a request's admission has recorded.
type admissionRecord struct {
	mu  sync.Mutex
	set bool
	gen int64
	// stale: the last write failed because the policies changed since
	// gen; no write may be sent until admission records again.
	stale bool
}

type admissionRecordKey struct{}

// WithAdmissionRecord returns ctx for one API request, whose admission
// records the policies' generation its writes are guarded by.
func WithAdmissionRecord(ctx context.Context) context.Context {
	return context.WithValue(ctx, admissionRecordKey{}, &admissionRecord{})
}

// RecordAdmissionPolicies records that the request in ctx was admitted on
// a view of the policies at generation gen (the ModRevision of
// AdmissionPolicyGeneration it had; 0: no key). The first record of an
// attempt stands: the views only move forward, so any later one is at
// least as current.
func RecordAdmissionPolicies(ctx context.Context, gen int64) {
	r, _ := ctx.Value(admissionRecordKey{}).(*admissionRecord)
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.set || r.stale {
		r.set, r.gen, r.stale = true, gen, false
	}
}

// guard is the guard of the record, if admission made one; ErrAdmissionChanged
// when the record is stale.
func (r *admissionRecord) guard() (etcdstore.Guard, bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stale {
		return etcdstore.Guard{}, false, ErrAdmissionChanged
	}
	return etcdstore.Guard{Ref: AdmissionPolicyGeneration, Revision: r.gen}, r.set, nil
}

// expire marks the record stale: the next attempt is admitted, and
// records, again before it may write (a resend of the same value, as
// FencedStorage makes, is refused).
func (r *admissionRecord) expire() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stale = true
}

// ErrAdmissionChanged: the admission policies changed between a write's
// admission and its transaction; nothing was written, and the write must
// be admitted again (the stores do). It wraps etcdstore.ErrGuardChanged.
var ErrAdmissionChanged = fmt.Errorf("%w: %w: the admission policies changed while the write was admitted", etcdstore.ErrConflict, etcdstore.ErrGuardChanged)

// AdmissionGuardedStorage adds to every write made for a request the
// guard of its admission record (WithAdmissionRecord). When that guard
// failed, it reads the key's revision, waits (catchUp) until the policy
// view holds it, marks the record stale and answers ErrAdmissionChanged;
// other failures are answered as they are.
func AdmissionGuardedStorage(s Storage, catchUp func(ctx context.Context, rev int64) error) Storage {
	return &admissionGuarded{Storage: s, catchUp: catchUp}
}

type admissionGuarded struct {
	Storage
	catchUp func(ctx context.Context, rev int64) error
}

// Prefix is the storage's own (corrupt-object reports name etcd keys).
func (a *admissionGuarded) Prefix() string {
	if p, ok := a.Storage.(prefixed); ok {
		return p.Prefix()
	}
	return ""
}

func (a *admissionGuarded) Create(ctx context.Context, ref etcdstore.Ref, value []byte, guards ...etcdstore.Guard) (int64, error) {
	return a.write(ctx, guards, func(g []etcdstore.Guard) (int64, error) { return a.Storage.Create(ctx, ref, value, g...) })
}

func (a *admissionGuarded) Update(ctx context.Context, ref etcdstore.Ref, value []byte, revision int64, guards ...etcdstore.Guard) (int64, error) {
	return a.write(ctx, guards, func(g []etcdstore.Guard) (int64, error) { return a.Storage.Update(ctx, ref, value, revision, g...) })
}

func (a *admissionGuarded) Delete(ctx context.Context, ref etcdstore.Ref, revision int64, guards ...etcdstore.Guard) (int64, error) {
	return a.write(ctx, guards, func(g []etcdstore.Guard) (int64, error) { return a.Storage.Delete(ctx, ref, revision, g...) })
}

func (a *admissionGuarded) write(ctx context.Context, guards []etcdstore.Guard, send func([]etcdstore.Guard) (int64, error)) (int64, error) {
	r, _ := ctx.Value(admissionRecordKey{}).(*admissionRecord)
	if r == nil {
		return send(guards)
	}
	g, ok, err := r.guard()
	if err != nil {
		return 0, err
	}
	if !ok {
		return send(guards)
	}
	rev, err := send(append(slices.Clip(guards), g))
	if !errors.Is(err, etcdstore.ErrGuardChanged) {
		return rev, err
	}
	// Which guard failed? The policies' did if their key moved.
	now, gerr := AdmissionPolicyGenerationOf(ctx, a.Storage)
	if gerr != nil || now == g.Revision {
		return rev, err
	}
	if cerr := a.catchUp(ctx, now); cerr != nil {
		return 0, &RetryError{Message: fmt.Sprintf("the admission policies changed while the write was admitted, and this server's view of them did not catch up (%v); nothing was written: send it again", cerr)}
	}
	r.expire()
	return 0, ErrAdmissionChanged
}

// AdmissionPolicyGenerationOf reads the revision of the last change to the
// admission policies and bindings (AdmissionPolicyGeneration's ModRevision;
// 0 when none was ever written) from s, linearizably.
func AdmissionPolicyGenerationOf(ctx context.Context, s Storage) (int64, error) {
	stored, err := s.Get(ctx, AdmissionPolicyGeneration, 0)
	if errors.Is(err, etcdstore.ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return stored.Revision, nil
}
