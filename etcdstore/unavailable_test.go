package etcdstore_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/concord-dev/concord/etcdstore"
	"github.com/concord-dev/concord/etcdstore/etcdtest"
)

// TestRequestTimeoutWhenEtcdIsGone: with etcd stopped, every call gives up
// after the store's request timeout, even under a caller's long deadline,
// and says the deadline passed.
func TestRequestTimeoutWhenEtcdIsGone(t *testing.T) {
	const timeout = 500 * time.Millisecond
	e := etcdtest.Start(t)
	reg := prometheus.NewRegistry()
	metrics, err := etcdstore.NewMetrics(reg, map[string]string{"configmaps": "", "leases": "coordination.k8s.io"})
	if err != nil {
		t.Fatal(err)
	}
	s := etcdstore.NewWithOptions(e.Client, "/registry", etcdstore.Options{RequestTimeout: timeout, Metrics: metrics})
	ctx := testContext(t) // 30s: much longer than the store's timeout
	ref := etcdstore.Ref{Resource: "configmaps", Namespace: "default", Name: "a"}
	if _, err := s.Create(ctx, ref, []byte("v")); err != nil {
		t.Fatalf("Create: %v", err)
	}
	if n, err := s.Count(ctx, "configmaps"); err != nil || n != 1 {
		t.Fatalf("Count = %d, %v; want 1", n, err)
	}
	if err := s.Check(ctx); err != nil {
		t.Fatalf("Check with etcd up = %v; want nil", err)
	}

	e.Stop()

	calls := []struct {
		name string
		call func() error
	}{
		{"Get", func() error { _, err := s.Get(ctx, ref, 0); return err }},
		{"List", func() error { _, err := s.List(ctx, "configmaps", "", etcdstore.ListOptions{}); return err }},
		{"Count", func() error { _, err := s.Count(ctx, "configmaps"); return err }},
		{"Create", func() error {
			_, err := s.Create(ctx, etcdstore.Ref{Resource: "configmaps", Name: "b"}, []byte("v"))
			return err
		}},
		{"Update", func() error { _, err := s.Update(ctx, ref, []byte("v2"), 1); return err }},
		{"Delete", func() error { _, err := s.Delete(ctx, ref, 1); return err }},
		{"CurrentRevision", func() error { _, err := s.CurrentRevision(ctx); return err }},
		{"Check", func() error { return s.Check(ctx) }},
		{"compaction round", func() error { _, err := s.NewCompactor().Round(ctx); return err }},
	}
	for _, c := range calls {
		start := time.Now()
		err := c.call()
		took := time.Since(start)
		if took > timeout+time.Second {
			t.Errorf("%s with etcd gone took %s; want about the request timeout %s", c.name, took, timeout)
		}
		if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, etcdstore.ErrUnavailable) {
			t.Errorf("%s with etcd gone = %v; want context.DeadlineExceeded or ErrUnavailable", c.name, err)
		}
	}
	if ctx.Err() != nil {
		t.Fatal("the caller's context ended; the store's timeout should have")
	}

	// Every request was timed; those etcd did not answer are counted as
	// errors (the Create and Count before the stop are not).
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			key := f.GetName() + "{" + strings.Join(labels, ",") + "}"
			if h := m.GetHistogram(); h != nil {
				got[key] = float64(h.GetSampleCount())
			} else {
				got[key] = m.GetCounter().GetValue()
			}
		}
	}
	want := map[string]float64{
		"etcd_request_duration_seconds{group=,operation=compact,resource=}":          1,
		"etcd_request_duration_seconds{group=,operation=count,resource=configmaps}":  2,
		"etcd_request_duration_seconds{group=,operation=create,resource=configmaps}": 2,
		"etcd_request_duration_seconds{group=,operation=delete,resource=configmaps}": 1,
		"etcd_request_duration_seconds{group=,operation=get,resource=configmaps}":    1,
		"etcd_request_duration_seconds{group=,operation=list,resource=configmaps}":   1,
		"etcd_request_duration_seconds{group=,operation=revision,resource=}":         1,
		"etcd_request_duration_seconds{group=,operation=update,resource=configmaps}": 1,
		"etcd_request_errors_total{group=,operation=compact,resource=}":              1,
		"etcd_request_errors_total{group=,operation=count,resource=configmaps}":      1,
		"etcd_request_errors_total{group=,operation=create,resource=configmaps}":     1,
		"etcd_request_errors_total{group=,operation=delete,resource=configmaps}":     1,
		"etcd_request_errors_total{group=,operation=get,resource=configmaps}":        1,
		"etcd_request_errors_total{group=,operation=list,resource=configmaps}":       1,
		"etcd_request_errors_total{group=,operation=revision,resource=}":             1,
		"etcd_request_errors_total{group=,operation=update,resource=configmaps}":     1,
	}
	if diff := cmp.Diff(got, want); diff != "" {
		t.Errorf("store metrics (-got +want):\n%s", diff)
	}
}

// TestWatchStartIsTimed: starting a watch is timed under the resource's
// group.
func TestWatchStartIsTimed(t *testing.T) {
	e := etcdtest.Start(t)
	reg := prometheus.NewRegistry()
	metrics, err := etcdstore.NewMetrics(reg, map[string]string{"leases": "coordination.k8s.io"})
	if err != nil {
		t.Fatal(err)
	}
	s := etcdstore.NewWithOptions(e.Client, "/registry", etcdstore.Options{Metrics: metrics})
	ctx, cancel := context.WithCancel(testContext(t))
	defer cancel()
	if _, err := s.Watch(ctx, "leases", 0, etcdstore.WatchOptions{}); err != nil {
		t.Fatal(err)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "etcd_request_duration_seconds" {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["operation"] == "watch-start" && labels["group"] == "coordination.k8s.io" && labels["resource"] == "leases" && m.GetHistogram().GetSampleCount() == 1 {
				return
			}
		}
	}
	t.Errorf("no etcd_request_duration_seconds{operation=watch-start,group=coordination.k8s.io,resource=leases} with one sample")
}
