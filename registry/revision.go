package registry

import (
	"context"
	"sync"
	"time"
)

// revisionReader reads etcd's current revision for reads served from the
// cache, one quorum read for many of them: a read may use a revision only
// if the etcd request that returned it was sent after the read began (so
// that every write acknowledged before the read is at or below it). Readers
// that arrive while a request is out wait for the next one, which starts as
// soon as the current one returns; so under load one etcd request serves
// every read that arrived during the previous one, as etcd batches its
// ReadIndex.
type revisionReader struct {
	current func(context.Context) (int64, error)

	mu       sync.Mutex
	inFlight bool
	// next is the request the readers who arrived during the one in
	// flight wait for; nil when none is waiting.
	next *revisionRead
}

type revisionRead struct {
	done chan struct{}
	rev  int64
	err  error
}

const revisionReadTimeout = time.Minute

func newRevisionReader(current func(context.Context) (int64, error)) *revisionReader {
	return &revisionReader{current: current}
}

// read returns a revision at least etcd's current revision when read was
// called.
func (r *revisionReader) read(ctx context.Context) (int64, error) {
	r.mu.Lock()
	if !r.inFlight {
		// Nothing out: send one now, for this reader and whoever comes
		// while it is out (they will need the next one).
		r.inFlight = true
		r.mu.Unlock()
		read := &revisionRead{done: make(chan struct{})}
		r.run(read)
		return read.rev, read.err
	}
	if r.next == nil {
		r.next = &revisionRead{done: make(chan struct{})}
	}
	read := r.next
	r.mu.Unlock()
	select {
	case <-read.done:
		return read.rev, read.err
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// run sends read's request and then, while readers wait for a next one,
// sends that too (from a goroutine of its own, so that the caller of the
// first one is answered at once).
func (r *revisionReader) run(read *revisionRead) {
	// Not the reader's context: others wait for this answer too. The
	// storage bounds each request with its own timeout (--etcd-request-
	// timeout); revisionReadTimeout is a backstop for storage without one,
	// since every cached read waits for this request.
	ctx, cancel := context.WithTimeout(context.Background(), revisionReadTimeout)
	read.rev, read.err = r.current(ctx)
	cancel()
	close(read.done)
	r.mu.Lock()
	next := r.next
	r.next = nil
	r.inFlight = next != nil
	r.mu.Unlock()
	if next != nil {
		go r.run(next)
	}
}
