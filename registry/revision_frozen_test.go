package registry

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/concord-dev/concord/etcdstore"
	"github.com/concord-dev/concord/etcdstore/etcdtest"
)

// TestRevisionReadIsSentAgainWhenUnanswered: a request that does not
// answer within the attempt timeout is sent again, and the first answer
// serves the readers; the one still out is cancelled.
func TestRevisionReadIsSentAgainWhenUnanswered(t *testing.T) {
	var calls, cancelled atomic.Int64
	r := newRevisionReader(func(ctx context.Context) (int64, error) {
		if calls.Add(1) == 1 { // the silent member
			<-ctx.Done()
			cancelled.Add(1)
			return 0, ctx.Err()
		}
		return 42, nil
	})
	r.attemptTimeout = 50 * time.Millisecond
	start := time.Now()
	rev, err := r.read(context.Background())
	took := time.Since(start)
	if rev != 42 || err != nil {
		t.Fatalf("read = %d, %v; want 42 from the second request", rev, err)
	}
	if took > 5*time.Second {
		t.Errorf("read took %s; want about the 50ms attempt timeout", took)
	}
	deadline := time.Now().Add(10 * time.Second)
	for cancelled.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if cancelled.Load() != 1 || calls.Load() != 2 {
		t.Errorf("%d requests sent, %d cancelled; want 2 sent and the unanswered one cancelled", calls.Load(), cancelled.Load())
	}
}

// TestRevisionReadsPassAFrozenMember: with one of three etcd endpoints
// frozen (its connections open, nothing answered), shared revision reads
// keep answering within about the attempt timeout: none waits for the
// request stuck on the frozen member, which the old reader did for the
// whole etcd request timeout.
func TestRevisionReadsPassAFrozenMember(t *testing.T) {
	const requestTimeout = 10 * time.Second
	e := etcdtest.Start(t)
	proxies := []*etcdtest.Proxy{etcdtest.StartProxy(t, e.Endpoint), etcdtest.StartProxy(t, e.Endpoint), etcdtest.StartProxy(t, e.Endpoint)}
	cfg := clientv3.Config{DialTimeout: 5 * time.Second, Logger: zap.NewNop()}
	for _, p := range proxies {
		cfg.Endpoints = append(cfg.Endpoints, p.URL)
	}
	client, err := clientv3.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	monitor, err := etcdstore.StartMonitor(client, etcdstore.MonitorConfig{Client: cfg, Prefix: "/registry"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(monitor.Close)
	storage := etcdstore.NewWithOptions(client, "/registry", etcdstore.Options{RequestTimeout: requestTimeout, Monitor: monitor})
	r := newRevisionReader(storage.CurrentRevision)
	// Every member has answered a revision read before one freezes.
	for i := 0; i < 30; i++ {
		if _, err := r.read(context.Background()); err != nil {
			t.Fatalf("revision read before the freeze: %v", err)
		}
	}
	proxies[0].Freeze()

	var mu sync.Mutex
	var slowest time.Duration
	var failures []error
	var wg sync.WaitGroup
	stop := time.Now().Add(3 * time.Second)
	for range 4 {
		wg.Go(func() {
			for n := 0; n < 1000 && time.Now().Before(stop); n++ {
				ctx, cancel := context.WithTimeout(context.Background(), 2*requestTimeout)
				start := time.Now()
				_, err := r.read(ctx)
				took := time.Since(start)
				cancel()
				mu.Lock()
				slowest = max(slowest, took)
				if err != nil {
					failures = append(failures, err)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	t.Logf("slowest revision read with a member frozen: %s", slowest.Round(time.Millisecond))
	if len(failures) > 0 {
		t.Errorf("%d revision reads failed with a member frozen, the first: %v; want none", len(failures), failures[0])
	}
	if slowest >= requestTimeout/2 {
		t.Errorf("slowest revision read with a member frozen took %s; want well under the %s etcd request timeout (a read sent again to another member)", slowest.Round(time.Millisecond), requestTimeout)
	}
}
