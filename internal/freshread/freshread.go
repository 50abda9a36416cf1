// Package freshread shares one read among the callers that want it at the
// same time without ever answering a caller with a read sent before it
// asked: one read is out at a time, and the callers who arrive while it is
// out share the next, sent as soon as it returns. Under load, one request
// then serves every caller that arrived during the previous one (as etcd
// batches its ReadIndex), and each answer is as fresh as a read of its own.
// The registry's quorum revision reads and crdserving's CRD-existence reads
// are made with it.
package freshread

import (
	"context"
	"sync"
)

// Reader shares the reads of read.
type Reader[T any] struct {
	read func() (T, error)

	mu       sync.Mutex
	inFlight bool
	// next is the read the callers who arrived during the one in flight
	// wait for; nil when none is waiting.
	next *call[T]
}

type call[T any] struct {
	done chan struct{}
	val  T
	err  error
}

// New returns a Reader of read, which bounds its own time: a read is not
// any one caller's, so no caller's context cancels it.
func New[T any](read func() (T, error)) *Reader[T] {
	return &Reader[T]{read: read}
}

// Read returns the answer of a read sent after Read was called, or ctx's
// error if ctx ends first (the read goes on for the others).
func (r *Reader[T]) Read(ctx context.Context) (T, error) {
	r.mu.Lock()
	var c *call[T]
	if !r.inFlight {
		// Nothing out: send one now, for this caller and whoever comes
		// while it is out (they will need the next one).
		r.inFlight = true
		c = &call[T]{done: make(chan struct{})}
		go r.run(c) // so that this caller stops waiting at its deadline
	} else {
		if r.next == nil {
			r.next = &call[T]{done: make(chan struct{})}
		}
		c = r.next
	}
	r.mu.Unlock()
	select {
	case <-c.done:
		return c.val, c.err
	case <-ctx.Done():
		var zero T
		return zero, ctx.Err()
	}
}

// run sends c's read and then, while callers wait for a next one, that
// too (from a goroutine of its own, so that the callers of the first one
// are answered at once).
func (r *Reader[T]) run(c *call[T]) {
	c.val, c.err = r.read()
	close(c.done)
	r.mu.Lock()
	next := r.next
	r.next = nil
	r.inFlight = next != nil
	r.mu.Unlock()
	if next != nil {
		go r.run(next)
	}
}
