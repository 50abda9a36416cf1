package registry

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/concord-dev/concord/internal/freshread"
)

// revisionReader reads etcd's current revision for reads served from the
// cache, one quorum read for many of them: a read may use a revision only
// if the etcd request that returned it was sent after the read began (so
// that every write acknowledged before the read is at or below it). The
// requests are shared as package freshread shares reads: readers that
// arrive while one is out wait for the next, which starts as soon as the
// current one returns.
//
// A request that one etcd member does not answer (frozen, cut off) must
// not hold every cached read for the whole request timeout: when the
// request has not answered within attemptTimeout it is sent again (the
// storage sends it to another member: etcdstore.Monitor.CurrentRevision),
// up to revisionReadAttempts in all, and the first answer serves the
// readers. Every one of those requests is sent after the readers waiting
// for it began, so any of their answers keeps the promise above.
type revisionReader struct {
	current        func(context.Context) (int64, error)
	attemptTimeout time.Duration
	shared         *freshread.Reader[int64]
}

const (
	revisionReadTimeout = time.Minute
	// revisionAttemptTimeout: a revision request not answered within it is
	// sent again. A linearizable read takes a few milliseconds when etcd
	// is well; this is what a frozen member adds to reads and writes.
	revisionAttemptTimeout = 500 * time.Millisecond
	// revisionReadAttempts bounds the requests out for one read: enough
	// to get past one silent member and a slow one.
	revisionReadAttempts = 3
)

func newRevisionReader(current func(context.Context) (int64, error)) *revisionReader {
	r := &revisionReader{current: current, attemptTimeout: revisionAttemptTimeout}
	r.shared = freshread.New(r.fetch)
	return r
}

// read returns a revision at least etcd's current revision when read was
// called, or, in a request's context (WithRevisionMemo), when the request
// began: the first one read for it, reused.
func (r *revisionReader) read(ctx context.Context) (int64, error) {
	memo, _ := ctx.Value(revisionMemoKey{}).(*revisionMemo)
	if memo != nil {
		if rev := memo.rev.Load(); rev > 0 {
			return rev, nil
		}
	}
	rev, err := r.readShared(ctx)
	if err == nil && memo != nil {
		memo.rev.CompareAndSwap(0, rev)
	}
	return rev, err
}

// readShared is read without the request's memo.
func (r *revisionReader) readShared(ctx context.Context) (int64, error) {
	return r.shared.Read(ctx)
}

// fetch sends the revision request, and again every attemptTimeout while
// none has answered, up to revisionReadAttempts: it returns the first
// revision read, or the last error once every request failed, and cancels
// the requests still out.
func (r *revisionReader) fetch() (int64, error) {
	// Not a reader's context: others wait for this answer too. The
	// storage bounds each request with its own timeout (--etcd-request-
	// timeout); revisionReadTimeout is a backstop for storage without one,
	// since every cached read waits for this request.
	ctx, cancel := context.WithTimeout(context.Background(), revisionReadTimeout)
	defer cancel()
	type answer struct {
		rev int64
		err error
	}
	answers := make(chan answer, revisionReadAttempts)
	send := func() {
		go func() {
			rev, err := r.current(ctx)
			answers <- answer{rev, err}
		}()
	}
	send()
	sent, out := 1, 1
	again := time.NewTimer(r.attemptTimeout)
	defer again.Stop()
	for {
		select {
		case a := <-answers:
			out--
			if a.err == nil || out == 0 {
				return a.rev, a.err
			}
		case <-again.C:
			if sent < revisionReadAttempts {
				send()
				sent, out = sent+1, out+1
				again.Reset(r.attemptTimeout)
			}
		}
	}
}

// revisionMemo is the revision one request read first.
type revisionMemo struct{ rev atomic.Int64 }

type revisionMemoKey struct{}

// WithRevisionMemo returns ctx for one API request: every linearizable
// read made in it (the authorizer's view of roles and bindings, then the
// read cache) uses the first revision read for it. That revision was read
// after the request began, so every write acknowledged before the request
// is at or below it, which is all each of those reads promises; one quorum
// read serves them all.
func WithRevisionMemo(ctx context.Context) context.Context {
	return context.WithValue(ctx, revisionMemoKey{}, &revisionMemo{})
}
