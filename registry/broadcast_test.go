package registry

import "testing"

// TestSubscriptionQueue: events come out in order; a full queue refuses
// more; a closed subscription still hands out what waits, then says it is
// closed; a drained queue lets a burst's room go.
func TestSubscriptionQueue(t *testing.T) {
	s := newSubscription(0, 3)
	if _, ok, closed := s.next(); ok || closed {
		t.Fatalf("empty: ok %v closed %v; want neither", ok, closed)
	}
	rev := int64(0)
	push := func() bool {
		rev++
		return s.push(&event{rev: rev})
	}
	want := int64(1)
	take := func() {
		t.Helper()
		e, ok, _ := s.next()
		if !ok || e.rev != want {
			t.Fatalf("next = %v, %v; want event %d", e, ok, want)
		}
		want++
	}
	for range 3 {
		if !push() {
			t.Fatalf("push %d refused; want room for 3", rev)
		}
	}
	if push() {
		t.Fatal("push into a full queue accepted")
	}
	rev-- // refused: not queued
	// Taking and pushing in turn reuses the queue's room.
	for range 20 {
		take()
		if !push() {
			t.Fatalf("push %d refused with 2 waiting", rev)
		}
	}
	if cap(s.queue) > 4 {
		t.Errorf("queue grew to %d with at most 3 waiting", cap(s.queue))
	}
	select {
	case <-s.ready:
	default:
		t.Fatal("events wait and ready is not signalled")
	}
	s.close()
	for range 3 {
		take()
	}
	if _, ok, closed := s.next(); ok || !closed {
		t.Fatalf("closed and drained: ok %v closed %v; want closed", ok, closed)
	}

	big := newSubscription(0, 100)
	for i := range 50 {
		big.push(&event{rev: int64(i + 1)})
	}
	for range 50 {
		big.next()
	}
	if big.queue != nil {
		t.Errorf("drained queue keeps room for %d events; want it let go", cap(big.queue))
	}
}
