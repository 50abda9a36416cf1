package etcdstore

import (
	"context"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/client/v3/kubernetes"
)

// A member that stops answering without closing its connections (frozen,
// cut off) holds every request sent to it until the request's deadline,
// and the endpoint monitor sees it only after its probe timeout. So a
// request of the store goes to a member the monitor picks (Monitor.Member),
// and one not answered within the hedge delay is sent again to another
// member, up to hedgeCopies copies; the first answer that settles it wins
// and the copies still out are cancelled.
//
// That is safe for reads: each copy is sent after the request began, so a
// linearizable read answered by any of them is still linearizable, and a
// read at a fixed revision reads the same on every member. It is safe for
// a write only when a copy applied makes every other copy's compare fail,
// whenever it arrives: an update or a delete compares the key's
// ModRevision with the revision read, and a key's ModRevision never takes
// an old value again (a deleted and created key gets a new one). A create
// compares ModRevision with 0, which holds again once the key is deleted:
// a copy held by a frozen member and delivered after a delete would create
// the object again. So a create is sent once, to the member the monitor
// picks (avoiding one already stalled), and never again.
const (
	// DefaultHedgeDelay: a request not answered within it is sent again to
	// another member. A request takes milliseconds
	// from a member that answers; this is what a frozen one adds.
	DefaultHedgeDelay = 500 * time.Millisecond
	// hedgeCopies bounds the copies of one request: enough to get past a
	// silent member and a slow one.
	hedgeCopies = 3
)

// answer is one copy's answer.
type answer[T any] struct {
	v   T
	err error
}

// hedge sends call, and again every hedge delay to another member while
// no copy's answer is final (final says), up to copies in all. It returns
// the first final answer, or, when none was, every answer in the order
// they came, once every copy answered. Without a monitor it sends one copy
// on the store's client.
func hedge[T any](ctx context.Context, s *Store, copies int, call func(context.Context, kubernetes.Client) (T, error), final func(T, error) bool) (answer[T], []answer[T]) {
	if s.monitor == nil {
		v, err := call(ctx, s.kv)
		return answer[T]{v, err}, nil
	}
	// One member: a copy would go where the first waits.
	copies = min(copies, len(s.monitor.endpoints))
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // the copies still out
	answers := make(chan answer[T], copies)
	var tried []int
	var settled atomic.Bool // a final answer came
	send := func() {
		i, client, done := s.monitor.Member(tried)
		tried = append(tried, i)
		kv := s.kv
		if client != nil {
			kv = kubernetes.Client{Client: client}
		}
		go func() {
			v, err := call(ctx, kv)
			won := final(v, err) && settled.CompareAndSwap(false, true)
			done(settled.Load() && !won)
			answers <- answer[T]{v, err}
		}()
	}
	send()
	out := 1
	again := time.NewTimer(DefaultHedgeDelay)
	defer again.Stop()
	var got []answer[T]
	for {
		select {
		case a := <-answers:
			out--
			if final(a.v, a.err) {
				return a, nil
			}
			got = append(got, a)
			if out == 0 {
				return answer[T]{}, got
			}
		case <-again.C:
			if len(tried) < copies {
				send()
				out++
				again.Reset(DefaultHedgeDelay)
			}
		}
	}
}

// hedgedRead runs a read (Get, List, Count) as hedge says: the first
// answer without an error is final; when every copy failed, the last
// error is the read's.
func hedgedRead[T any](ctx context.Context, s *Store, call func(context.Context, kubernetes.Client) (T, error)) (T, error) {
	first, failed := hedge(ctx, s, hedgeCopies, call, func(_ T, err error) bool { return err == nil })
	if failed == nil {
		return first.v, first.err
	}
	last := failed[len(failed)-1]
	return last.v, last.err
}

// hedgedWrite runs a compare-and-swap write whose compare on the key's
// ModRevision fails once any copy applied (see the top of this file). A
// copy that applied is final. A copy whose compare failed proves nothing
// while another copy may have applied (that may be why it failed); so it
// decides only when every other copy answered definitively too — compare
// failed, or refused before applying (refusedBeforeApply) — and the
// write's answer is then the last compare failure, else the last refusal.
// Otherwise the outcome is unknown: the error of a copy whose fate is
// open, which writeError turns into ErrUnknownOutcome.
func hedgedWrite[T any](ctx context.Context, s *Store, call func(context.Context, kubernetes.Client) (T, error), applied func(T) bool) (T, error) {
	first, all := hedge(ctx, s, hedgeCopies, call, func(v T, err error) bool { return err == nil && applied(v) })
	if all == nil {
		return first.v, first.err
	}
	var compareFailed, refused, open *answer[T]
	for i := range all {
		a := &all[i]
		switch {
		case a.err == nil:
			compareFailed = a
		case refusedBeforeApply(a.err):
			refused = a
		default:
			open = a
		}
	}
	switch {
	case open != nil:
		return open.v, open.err
	case compareFailed != nil:
		return compareFailed.v, nil
	}
	return refused.v, refused.err
}

// createOnce sends a create to one member the monitor picks, never again
// (see the top of this file).
func createOnce[T any](ctx context.Context, s *Store, call func(context.Context, kubernetes.Client) (T, error)) (T, error) {
	first, _ := hedge(ctx, s, 1, call, func(T, error) bool { return true })
	return first.v, first.err
}
