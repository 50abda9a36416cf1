package app

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/concord-dev/concord/etcdstore"
	"github.com/concord-dev/concord/etcdstore/etcdtest"
)

// TestCompactorMetrics: each compaction the replica does is counted, and
// the revision it compacted to is reported.
func TestCompactorMetrics(t *testing.T) {
	e := etcdtest.Start(t)
	store := etcdstore.New(e.Client, "/registry")
	reg := prometheus.NewRegistry()
	m := newCompactionMetrics(reg)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		runCompactor(ctx, slog.New(slog.NewTextHandler(io.Discard, nil)), store.NewCompactor(), 50*time.Millisecond, m)
	}()
	defer func() { cancel(); <-done }()

	metric := func(name string) float64 {
		families, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range families {
			if f.GetName() == name {
				ms := f.GetMetric()[0]
				if c := ms.GetCounter(); c != nil {
					return c.GetValue()
				}
				return ms.GetGauge().GetValue()
			}
		}
		t.Fatalf("no metric %s", name)
		return 0
	}
	deadline := time.Now().Add(10 * time.Second)
	for metric("concord_etcd_compactions_total") < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("concord_etcd_compactions_total = %v after 10s of 50ms rounds; want at least 2", metric("concord_etcd_compactions_total"))
		}
		// Writes move the revision, so each round has something to compact.
		if _, err := e.Client.Put(context.Background(), "/registry/configmaps/default/x", time.Now().String()); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	rev := metric("concord_etcd_compacted_revision")
	status, err := e.Client.Get(context.Background(), "/registry/configmaps/default/x")
	if err != nil {
		t.Fatal(err)
	}
	if rev <= 0 || rev > float64(status.Header.Revision) {
		t.Errorf("concord_etcd_compacted_revision = %v; want in (0, %d]", rev, status.Header.Revision)
	}
}
