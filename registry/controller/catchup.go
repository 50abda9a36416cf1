package controller

import (
	"context"
	"errors"
	"sync"
	"time"
)

// Catchup tracks how far a view fed by WatchPrefix has applied etcd's
// changes, so that a reader can wait until the view holds etcd's state as
// of a revision read after its request arrived: a change acknowledged by
// any replica then counts on this one for every request that follows it.
// The view calls Synced, Advanced and Ended from its handler.
type Catchup struct {
	mu    sync.Mutex
	ready bool
	rev   int64
	watch *PrefixWatch
	// advanced is closed (and replaced) whenever rev or ready change.
	advanced chan struct{}
	askedAt  time.Time
}

// NewCatchup returns a Catchup of a view not loaded yet.
func NewCatchup() *Catchup { return &Catchup{advanced: make(chan struct{})} }

// Synced: the view holds every change up to rev, and w is its watch.
func (c *Catchup) Synced(rev int64, w *PrefixWatch) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ready, c.rev, c.watch = true, rev, w
	c.advanceLocked()
}

// Advanced: the view holds every change up to rev (a batch of changes
// applied, or a progress report).
func (c *Catchup) Advanced(rev int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if rev > c.rev {
		c.rev = rev
		c.advanceLocked()
	}
}

// Ended: the view is no longer kept current until Synced again.
func (c *Catchup) Ended() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ready, c.watch = false, nil
	c.advanceLocked()
}

func (c *Catchup) advanceLocked() {
	close(c.advanced)
	c.advanced = make(chan struct{})
}

// ErrNotCaughtUp is Await's error when the view did not reach the
// revision in time (etcd unavailable, or the watch broken).
var ErrNotCaughtUp = errors.New("the view did not catch up with etcd in time")

// Await waits, at most timeout, until the view holds etcd's state as of
// want. A view that has applied every change it was sent asks its watch
// for a progress report (one at a time for all waiters: a report answers
// for every revision current when it was asked for).
func (c *Catchup) Await(ctx context.Context, want int64, timeout time.Duration) error {
	wantAt := time.Now()
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		c.mu.Lock()
		if c.ready && c.rev >= want {
			c.mu.Unlock()
			return nil
		}
		advanced := c.advanced
		var ask *PrefixWatch
		if c.ready && c.askedAt.Before(wantAt) {
			c.askedAt, ask = time.Now(), c.watch
		}
		c.mu.Unlock()
		if ask != nil {
			_ = ask.RequestProgress() // a failure makes this wait time out
		}
		if timer == nil {
			timer = time.NewTimer(timeout)
		}
		select {
		case <-advanced:
		case <-timer.C:
			return ErrNotCaughtUp
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
