package filters

import (
	"context"
	"net/http"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/concord-dev/concord/registry"
)

// Fence is how an authorizer that allowed a write on a view of its policy
// that may be behind etcd (RBAC, without waiting for a quorum read) makes
// the write itself check that decision, at no further round trip: the
// storage adds Guard to every write of the request (etcd refuses it if the
// policy changed after the view), and when that guard failed, Redecide
// decides again on a current view. Any answer but a write that landed or
// whose outcome is unknown is decided again before it is sent (WithAuth),
// so that nothing a stale grant allowed reaches the client.
type Fence struct {
	mu    sync.Mutex
	state fenceState
	guard *registry.FenceGuard
	// settled: the decision needs no confirming (a guarded write landed,
	// its outcome is unknown, or it was decided again on a current view).
	settled bool
	authz   Authorizer
	attrs   Attributes
}

type fenceState int

const (
	fenceClosed fenceState = iota
	// fenceFast: the request's own decision is being made; an authorizer
	// may decide a write on its view as it is and Offer a guard.
	fenceFast
	// fenceRedecide: the decision is made again; it must be current, and
	// an authorizer that allows it Offers the guard of its view.
	fenceRedecide
)

type fenceKey struct{}

// Fencing is the fence of the decision being made in ctx, and whether the
// authorizer may decide on a view that is not current (fast) or must wait
// for it (Redecide); nil when no decision of a write is being made.
func Fencing(ctx context.Context) (f *Fence, fast bool) {
	f, _ = ctx.Value(fenceKey{}).(*Fence)
	if f == nil {
		return nil, false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.state == fenceClosed {
		return nil, false
	}
	return f, f.state == fenceFast
}

// Offer makes g the guard of the request's writes (registry.RBACGuard).
func (f *Fence) Offer(g registry.FenceGuard) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.state != fenceClosed {
		f.guard = &g
	}
}

// FenceOf is the fence of the request of ctx when its writes must carry a
// guard; nil otherwise. It is what registry.FencedStorage is given.
func FenceOf(ctx context.Context) registry.Fence {
	f, _ := ctx.Value(fenceKey{}).(*Fence)
	if f == nil {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.state != fenceClosed || f.guard == nil && !f.settled {
		return nil
	}
	return f
}

// Guard is the guard to add to the request's next write; false when none is
// needed (the decision was made again by an authorizer without one).
func (f *Fence) Guard() (registry.FenceGuard, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.guard == nil {
		return registry.FenceGuard{}, false
	}
	return *f.guard, true
}

// Settle records that a guarded write landed, or was sent without an
// answer: the request's answer is that write's.
func (f *Fence) Settle() {
	f.mu.Lock()
	f.settled = true
	f.mu.Unlock()
}

func (f *Fence) isSettled() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.settled
}

// Redecide decides the request again with the whole chain on current views
// (after a guard of the fence failed, or before an answer no write
// confirmed): nil when it is still allowed (Guard is then the new view's),
// else the answer: 403 with kube's message, or 500.
func (f *Fence) Redecide(ctx context.Context) error {
	f.mu.Lock()
	f.state, f.guard = fenceRedecide, nil
	f.mu.Unlock()
	allowed, reason, err := Allowed(ctx, f.authz, f.attrs)
	f.mu.Lock()
	f.state = fenceClosed
	f.settled = allowed
	f.mu.Unlock()
	switch {
	case allowed:
		return nil
	case err != nil:
		return apierrors.NewInternalError(err)
	}
	return forbidden(f.attrs, reason)
}

// fencedWriter confirms a fast decision before the first byte of an answer
// that no guarded write settled: refused now, the request is answered with
// the refusal instead.
type fencedWriter struct {
	http.ResponseWriter
	r          *http.Request
	fence      *Fence
	writeError func(http.ResponseWriter, *http.Request, error)
	checked    bool
	refused    bool
}

func (w *fencedWriter) check() bool {
	if !w.checked {
		w.checked = true
		if !w.fence.isSettled() {
			if err := w.fence.Redecide(w.r.Context()); err != nil {
				w.refused = true
				w.writeError(w.ResponseWriter, w.r, err)
			}
		}
	}
	return !w.refused
}

func (w *fencedWriter) WriteHeader(code int) {
	if w.check() {
		w.ResponseWriter.WriteHeader(code)
	}
}

func (w *fencedWriter) Write(b []byte) (int, error) {
	if !w.check() {
		return len(b), nil
	}
	return w.ResponseWriter.Write(b)
}

func (w *fencedWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok && w.check() {
		f.Flush()
	}
}

func (w *fencedWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
