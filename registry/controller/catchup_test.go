package controller

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestCatchup: Await returns once the view holds the revision, whether it
// got there before or while waiting; it times out with ErrNotCaughtUp on
// a view that never gets there or is not kept current, and ends with its
// context.
func TestCatchup(t *testing.T) {
	ctx := context.Background()
	c := NewCatchup()
	if err := c.Await(ctx, 1, 20*time.Millisecond); !errors.Is(err, ErrNotCaughtUp) {
		t.Fatalf("Await on a view never loaded: %v; want ErrNotCaughtUp", err)
	}
	c.Synced(5, nil)
	if err := c.Await(ctx, 5, time.Second); err != nil {
		t.Fatalf("Await(5) on a view at 5: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- c.Await(ctx, 7, 5*time.Second) }()
	c.Advanced(6)
	select {
	case err := <-done:
		t.Fatalf("Await(7) returned %v at 6", err)
	case <-time.After(20 * time.Millisecond):
	}
	c.Advanced(7)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Await(7) at 7: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Await(7) did not return at 7")
	}
	c.Advanced(3) // never backwards
	if err := c.Await(ctx, 7, time.Second); err != nil {
		t.Fatalf("Await(7) after an older report: %v", err)
	}
	c.Ended()
	if err := c.Await(ctx, 7, 20*time.Millisecond); !errors.Is(err, ErrNotCaughtUp) {
		t.Fatalf("Await on an ended view: %v; want ErrNotCaughtUp", err)
	}
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	if err := c.Await(canceled, 100, time.Second); !errors.Is(err, context.Canceled) {
		t.Fatalf("Await with a canceled context: %v", err)
	}
}
