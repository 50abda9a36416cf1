package registry

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

// TestRevisionMemo: in one request's context the first revision read is
// reused by every later read (the authorizer's, then the cache's: one
// quorum read); outside it, and in another request, each read asks etcd.
func TestRevisionMemo(t *testing.T) {
	var asked atomic.Int64
	r := newRevisionReader(func(context.Context) (int64, error) { return 100 + asked.Add(1), nil })
	request := WithRevisionMemo(context.Background())
	first, _ := r.read(request)
	second, _ := r.read(request)
	if first != 101 || second != 101 || asked.Load() != 1 {
		t.Errorf("one request: reads %d, %d after %d etcd reads; want 101, 101 after 1", first, second, asked.Load())
	}
	if got, _ := r.read(WithRevisionMemo(context.Background())); got != 102 {
		t.Errorf("another request read %d; want a new revision, 102", got)
	}
	if got, _ := r.read(context.Background()); got != 103 {
		t.Errorf("a read outside any request read %d; want 103", got)
	}
	// Polling for a later revision reads etcd each time.
	if got, _ := r.readShared(request); got != 104 {
		t.Errorf("readShared in the request read %d; want 104", got)
	}
}

// TestRevisionReadEndsAtTheReadersDeadline: a reader whose context ends
// while etcd has not answered stops waiting, first sender or not; the
// others get the answer when it comes.
func TestRevisionReadEndsAtTheReadersDeadline(t *testing.T) {
	release := make(chan struct{})
	r := newRevisionReader(func(context.Context) (int64, error) { <-release; return 7, nil })
	for _, who := range []string{"the reader that sends the request", "a reader waiting for the next one"} {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		errc := make(chan error, 1)
		go func() { _, err := r.readShared(ctx); errc <- err }()
		select {
		case err := <-errc:
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("%s: %v; want its deadline's error", who, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: still waiting 10s after its 50ms deadline", who)
		}
		cancel()
	}
	patient := make(chan int64)
	go func() { rev, _ := r.readShared(context.Background()); patient <- rev }()
	close(release)
	select {
	case rev := <-patient:
		if rev != 7 {
			t.Errorf("a reader without a deadline read %d; want 7", rev)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a reader without a deadline got no answer")
	}
}
