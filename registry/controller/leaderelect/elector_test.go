package leaderelect

import (
	"context"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestElectorRunsUnderKubeSystemLease: an Elector leads under the Lease
// kube-system/<lease>, held in its identity (host name, random suffix);
// another process's Elector does not lead meanwhile, and takes over once
// the first one's context ends.
func TestElectorRunsUnderKubeSystemLease(t *testing.T) {
	s := leases(t)
	timings := config(s, "")
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	first, second := NewElector(timings, s, log), NewElector(timings, s, log)
	if first.identity == second.identity {
		t.Fatalf("two electors share the identity %q", first.identity)
	}
	host, _ := os.Hostname()
	if !strings.HasPrefix(first.identity, host+"_") {
		t.Errorf("identity %q; want %s_<uuid>", first.identity, host)
	}

	led := make(chan string, 2)
	ctx1, stop1 := context.WithCancel(context.Background())
	ctx2, stop2 := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, r := range []struct {
		ctx context.Context
		e   *Elector
	}{{ctx1, first}, {ctx2, second}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.e.Run(r.ctx, "test-controller", func(ctx context.Context) { led <- r.e.identity; <-ctx.Done() })
		}()
	}
	defer func() { stop1(); stop2(); wg.Wait() }()

	leader := waitLeader(t, led)
	if h, _ := holder(t, s); h != leader {
		t.Errorf("kube-system/test-controller held by %q; want the leader %q", h, leader)
	}
	select {
	case other := <-led:
		t.Fatalf("%s leads while %s does", other, leader)
	case <-time.After(3 * timings.RetryPeriod):
	}
	if leader == first.identity {
		stop1()
	} else {
		stop2()
	}
	if next := waitLeader(t, led); next == leader {
		t.Errorf("%s leads again after its context ended; want the other elector", next)
	}
}
