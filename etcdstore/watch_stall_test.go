package etcdstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/concord-dev/concord/etcdstore"
	"github.com/concord-dev/concord/etcdstore/etcdtest"
)

// TestWatchResumesPastAFrozenMember: a watch whose stream runs through a
// member that stops answering resumes on another one, from where it was,
// with every event once and in order. Each of the two members is frozen in
// turn, so one of the freezes hits the stream the watch is on; without the
// resume that watch would hear nothing until gRPC's keepalive gives up on
// the connection (never, with this client's settings).
func TestWatchResumesPastAFrozenMember(t *testing.T) {
	cfg, client, proxies := twoEndpoints(t)
	m, err := etcdstore.StartMonitor(client, etcdstore.MonitorConfig{Client: cfg, Prefix: "/registry", Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	reg := prometheus.NewRegistry()
	ctx := t.Context()
	s, w := watchFromNow(t, ctx, client, reg)
	const perPhase = 10
	n := 0
	write := func(t *testing.T) {
		t.Helper()
		for range perPhase {
			n++
			name := fmt.Sprintf("cm-%02d", n)
			// The monitor takes the frozen member out within 2 s; until
			// then a write may go to it and time out: write it again.
			for attempt := 0; ; attempt++ {
				_, err := s.Create(ctx, etcdstore.Ref{Resource: "configmaps", Namespace: "default", Name: name}, []byte("v"))
				if err == nil {
					break
				}
				if attempt == 5 {
					t.Fatalf("create %s: %v", name, err)
				}
			}
		}
	}
	next := 1
	receive := func(t *testing.T, within time.Duration) {
		t.Helper()
		deadline := time.After(within)
		for next <= n {
			select {
			case r, ok := <-w.C:
				if !ok || r.Err != nil {
					t.Fatalf("watch ended: %v", r.Err)
				}
				for _, ev := range r.Events {
					if want := fmt.Sprintf("default/cm-%02d", next); ev.Key != want {
						t.Fatalf("event for %s; want %s (every event once, in order)", ev.Key, want)
					}
					next++
				}
			case <-deadline:
				t.Fatalf("%d of %d events after %s", next-1, n, within)
			}
		}
	}
	write(t)
	receive(t, 5*time.Second)
	for i, p := range proxies {
		p.Freeze()
		start := time.Now()
		write(t)
		receive(t, 10*time.Second)
		t.Logf("member %d frozen: every event after %s", i, time.Since(start).Round(time.Millisecond))
		p.Thaw()
		waitEndpoints(t, client, cfg.Endpoints, 5*time.Second)
	}
	if n := stalls(t, reg); n < 1 {
		t.Errorf("%v stalled streams counted; want at least the one that ran through a frozen member", n)
	}
}

// TestIdleWatchReportsOnlyWhatIsAsked: the liveness probes of an idle watch
// are not passed on as progress reports (readers make bookmarks of them),
// and a report the reader asks for still comes.
func TestIdleWatchReportsOnlyWhatIsAsked(t *testing.T) {
	e := etcdtest.Start(t)
	reg := prometheus.NewRegistry()
	ctx := t.Context()
	s, w := watchFromNow(t, ctx, e.Client, reg)
	// Nothing written since the watch began: etcd reports no progress to
	// it, and the watch must not take that for a dead stream.
	time.Sleep(5 * time.Second)
	if n := stalls(t, reg); n != 0 {
		t.Errorf("%v stalled streams counted for a watch of an idle etcd; want none", n)
	}
	// etcd reports progress only once its revision is past the watch's
	// start: another resource moves it.
	moved, err := s.Create(ctx, etcdstore.Ref{Resource: "secrets", Namespace: "default", Name: "elsewhere"}, []byte("v"))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-w.C:
		t.Fatalf("an idle watch passed on %+v; want nothing (its liveness probes are its own)", r)
	case <-time.After(5 * time.Second): // two probes at least
	}
	if n := stalls(t, reg); n != 0 {
		t.Errorf("%v stalled streams counted for an idle watch; want none", n)
	}
	if err := w.RequestProgress(); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-w.C:
		if r.Err != nil || len(r.Events) != 0 || r.Progress < moved {
			t.Errorf("answer to RequestProgress: %+v; want a progress report at %d or later", r, moved)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no progress report within 5s of RequestProgress")
	}
}

// watchFromNow is a store over client with its metrics in reg, and a watch
// of its ConfigMaps from etcd's current revision, until ctx ends.
func watchFromNow(t *testing.T, ctx context.Context, client *clientv3.Client, reg *prometheus.Registry) (*etcdstore.Store, *etcdstore.Watch) {
	t.Helper()
	metrics, err := etcdstore.NewMetrics(reg, map[string]string{"configmaps": ""})
	if err != nil {
		t.Fatal(err)
	}
	s := etcdstore.NewWithOptions(client, "/registry", etcdstore.Options{RequestTimeout: 2 * time.Second, Metrics: metrics})
	from, err := s.CurrentRevision(ctx)
	if err != nil {
		t.Fatal(err)
	}
	w, err := s.Watch(ctx, "configmaps", from, etcdstore.WatchOptions{PrevValues: true})
	if err != nil {
		t.Fatal(err)
	}
	return s, w
}

// stalls is etcd_request_errors_total{operation="watch"}: the watch streams
// replaced as dead.
func stalls(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	total := 0.0
	for _, f := range families {
		if f.GetName() != "etcd_request_errors_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "operation" && l.GetValue() == "watch" {
					total += m.GetCounter().GetValue()
				}
			}
		}
	}
	return total
}
