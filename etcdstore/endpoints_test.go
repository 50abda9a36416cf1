package etcdstore_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/concord-dev/concord/etcdstore"
	"github.com/concord-dev/concord/etcdstore/etcdtest"
	"github.com/concord-dev/concord/internal/syncbuf"
)

// twoEndpoints is one etcd reached through two proxies: two endpoints of
// the same data, either of which can be frozen.
func twoEndpoints(t *testing.T) (clientv3.Config, *clientv3.Client, [2]*etcdtest.Proxy) {
	t.Helper()
	e := etcdtest.Start(t)
	proxies := [2]*etcdtest.Proxy{etcdtest.StartProxy(t, e.Endpoint), etcdtest.StartProxy(t, e.Endpoint)}
	cfg := clientv3.Config{
		Endpoints:   []string{proxies[0].URL, proxies[1].URL},
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	}
	client, err := clientv3.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	// Both connections up before anything is frozen: the client sends
	// requests only on connections that are ready, so a frozen proxy whose
	// connection was still being set up would never be tried.
	for i := 0; proxies[0].Chunks.Load() < 8 || proxies[1].Chunks.Load() < 8; i++ {
		if i == 100 {
			t.Fatalf("the client does not use both proxies (%d and %d chunks forwarded)", proxies[0].Chunks.Load(), proxies[1].Chunks.Load())
		}
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		_, err := client.Get(ctx, "/warm-up")
		cancel()
		if err != nil {
			t.Fatalf("etcd through the proxies: %v", err)
		}
	}
	return cfg, client, proxies
}

type monitorLog struct {
	Level    string `json:"level"`
	Msg      string `json:"msg"`
	Endpoint string `json:"endpoint"`
	Err      string `json:"err"`
}

func logLines(t *testing.T, b *syncbuf.Buffer) []monitorLog {
	t.Helper()
	var out []monitorLog
	for line := range strings.SplitSeq(strings.TrimSpace(b.String()), "\n") {
		if line == "" {
			continue
		}
		var l monitorLog
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			t.Fatalf("log line is not JSON: %v: %s", err, line)
		}
		out = append(out, l)
	}
	return out
}

// gauges are the values of the metric name by endpoint.
func gauges(t *testing.T, reg *prometheus.Registry, name string) map[string]float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "endpoint" {
					out[l.GetValue()] = m.GetGauge().GetValue()
				}
			}
		}
	}
	return out
}

// atOnce bounds a Check that answers from the last probes: well under
// the probe timeout, which one that waited for a frozen member would take,
// and well over the stalls of a loaded 2-core machine.
const atOnce = etcdstore.DefaultProbeTimeout / 4

// waitEndpoints waits until the client's endpoints are want and returns
// how long that took.
func waitEndpoints(t *testing.T, client *clientv3.Client, want []string, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for !slices.Equal(client.Endpoints(), want) {
		if time.Since(start) > within {
			t.Fatalf("client endpoints %v after %s; want %v", client.Endpoints(), within, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return time.Since(start)
}

// gets sends n reads, each with its own short deadline, and returns how
// many failed.
func gets(t *testing.T, client *clientv3.Client, n int) int {
	t.Helper()
	failed := 0
	for range n {
		ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
		_, err := client.Get(ctx, "/probe-me")
		cancel()
		if err != nil {
			failed++
		}
	}
	return failed
}

// TestFrozenMemberWithoutMonitor shows what the monitor is for: a member
// that keeps its connection open and answers nothing keeps getting the
// client's requests.
func TestFrozenMemberWithoutMonitor(t *testing.T) {
	_, client, proxies := twoEndpoints(t)
	proxies[0].Freeze()
	if failed := gets(t, client, 6); failed == 0 {
		t.Errorf("6 reads with one of two members frozen and no monitor: none failed; want some sent to the frozen member")
	}
}

// TestMonitorRoutesAroundAFrozenMember: with the default probe settings,
// a frozen member is out of the client's endpoints within 2s, requests
// then succeed, the metrics and the log say so, and the member is back
// soon after it thaws.
func TestMonitorRoutesAroundAFrozenMember(t *testing.T) {
	cfg, client, proxies := twoEndpoints(t)
	reg := prometheus.NewRegistry()
	var logs syncbuf.Buffer
	m, err := etcdstore.StartMonitor(client, etcdstore.MonitorConfig{
		Client: cfg, Prefix: "/registry", Registerer: reg,
		Logger: slog.New(slog.NewJSONHandler(&logs, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	a, b := proxies[0].URL, proxies[1].URL
	if err := m.Check(t.Context()); err != nil {
		t.Fatalf("Check with both members up: %v", err)
	}
	if got, want := gauges(t, reg, "concord_etcd_endpoint_healthy"), map[string]float64{a: 1, b: 1}; !maps.Equal(got, want) {
		t.Errorf("concord_etcd_endpoint_healthy = %v; want %v", got, want)
	}

	proxies[0].Freeze()
	took := waitEndpoints(t, client, []string{b}, 3*time.Second)
	t.Logf("frozen member out of the client's endpoints after %s", took.Round(time.Millisecond))
	if took > 2*time.Second {
		t.Errorf("frozen member taken out after %s; want within 2s", took)
	}
	if failed := gets(t, client, 20); failed > 0 {
		t.Errorf("%d of 20 reads failed after the frozen member was taken out; want none", failed)
	}
	start := time.Now()
	if err := m.Check(t.Context()); err != nil {
		t.Errorf("Check with one member frozen: %v; want nil (the other answers)", err)
	}
	if took := time.Since(start); took > atOnce {
		t.Errorf("Check took %s; want it to answer from the last probes at once", took)
	}
	if got, want := gauges(t, reg, "concord_etcd_endpoint_healthy"), map[string]float64{a: 0, b: 1}; !maps.Equal(got, want) {
		t.Errorf("concord_etcd_endpoint_healthy with %s frozen = %v; want %v", a, got, want)
	}
	for ep, ts := range gauges(t, reg, "concord_etcd_endpoint_last_check_timestamp_seconds") {
		if age := time.Since(time.Unix(0, int64(ts*1e9))); age < 0 || age > 2*time.Second {
			t.Errorf("concord_etcd_endpoint_last_check_timestamp_seconds{endpoint=%q} is %s old; want a check within 2s", ep, age)
		}
	}
	states := m.Endpoints()
	if len(states) != 2 || states[0].Endpoint != a || states[0].Healthy || states[0].Err == nil || !states[1].Healthy {
		t.Errorf("Endpoints() = %+v; want %s unhealthy with an error, %s healthy", states, a, b)
	}

	proxies[0].Thaw()
	took = waitEndpoints(t, client, []string{a, b}, 3*time.Second)
	t.Logf("thawed member back in the client's endpoints after %s", took.Round(time.Millisecond))

	var out, back bool
	for _, l := range logLines(t, &logs) {
		switch {
		case l.Level == "WARN" && l.Endpoint == a && l.Err != "" && strings.HasPrefix(l.Msg, "etcd member did not answer"):
			out = true
		case l.Level == "INFO" && l.Endpoint == a && strings.HasPrefix(l.Msg, "etcd member answers again"):
			back = true
		}
	}
	if !out || !back {
		t.Errorf("log: a WARN line for %s taken out with its error: %v, an INFO line for it back: %v; want both; log:\n%s", a, out, back, logs.String())
	}
}

// TestMonitorAllMembersFrozen: with every member frozen Check fails
// within a probe timeout of ReadyWithin, at once each time, and the client
// keeps every endpoint (a client without endpoints could not recover).
func TestMonitorAllMembersFrozen(t *testing.T) {
	cfg, client, proxies := twoEndpoints(t)
	m, err := etcdstore.StartMonitor(client, etcdstore.MonitorConfig{Client: cfg, Prefix: "/registry"})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()

	proxies[0].Freeze()
	proxies[1].Freeze()
	frozen := time.Now()
	var err2 error
	for {
		start := time.Now()
		err2 = m.Check(t.Context())
		if took := time.Since(start); took > atOnce {
			t.Fatalf("Check took %s with every member frozen; want it to answer at once", took)
		}
		if err2 != nil || time.Since(frozen) > 5*time.Second {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	failedAfter := time.Since(frozen)
	t.Logf("Check failed %s after every member froze: %v", failedAfter.Round(time.Millisecond), err2)
	if err2 == nil || failedAfter > etcdstore.DefaultReadyWithin+etcdstore.DefaultProbeInterval+200*time.Millisecond {
		t.Errorf("Check %s after freezing every member: %v; want an error within ReadyWithin and a probe interval", failedAfter, err2)
	}
	if !errors.Is(err2, etcdstore.ErrUnavailable) {
		t.Errorf("Check error %v; want ErrUnavailable", err2)
	}
	time.Sleep(etcdstore.DefaultProbeTimeout + etcdstore.DefaultProbeInterval)
	if got, want := client.Endpoints(), cfg.Endpoints; !slices.Equal(got, want) {
		t.Errorf("client endpoints with every member frozen = %v; want all of them, %v", got, want)
	}

	proxies[0].Thaw()
	proxies[1].Thaw()
	thawed := time.Now()
	for m.Check(t.Context()) != nil {
		if time.Since(thawed) > 3*time.Second {
			t.Fatalf("Check still fails 3s after the thaw: %v", m.Check(t.Context()))
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("Check passes %s after the thaw", time.Since(thawed).Round(time.Millisecond))
}

// TestMonitorOneEndpoint: with one endpoint (dev mode) the monitor only
// provides the readiness check; a stopped etcd fails it.
func TestMonitorOneEndpoint(t *testing.T) {
	e := etcdtest.Start(t)
	cfg := clientv3.Config{Endpoints: []string{e.Endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()}
	m, err := etcdstore.StartMonitor(e.Client, etcdstore.MonitorConfig{Client: cfg, Prefix: "registry"})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Check(t.Context()); err != nil {
		t.Fatalf("Check: %v", err)
	}
	e.Stop()
	stopped := time.Now()
	for m.Check(t.Context()) == nil {
		if time.Since(stopped) > 3*time.Second {
			t.Fatalf("Check still passes 3s after etcd stopped")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := e.Client.Endpoints(); !slices.Equal(got, cfg.Endpoints) {
		t.Errorf("client endpoints = %v; want %v", got, cfg.Endpoints)
	}
	m.Close()
	m.Close() // a second Close is a no-op
	if err := m.Check(t.Context()); !errors.Is(err, etcdstore.ErrUnavailable) {
		t.Errorf("Check after Close = %v; want ErrUnavailable", err)
	}
}

// TestMonitorCountsLateAnswers: a member that answers every probe after
// the probe timeout but within ReadyWithin (a replica starved of CPU, a
// slow disk) keeps Check passing: etcd works, only late.
func TestMonitorCountsLateAnswers(t *testing.T) {
	e := etcdtest.Start(t)
	proxy := etcdtest.StartProxy(t, e.Endpoint)
	cfg := clientv3.Config{Endpoints: []string{proxy.URL}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()}
	client, err := clientv3.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	m, err := etcdstore.StartMonitor(client, etcdstore.MonitorConfig{
		Client: cfg, Prefix: "registry",
		ProbeInterval: 50 * time.Millisecond, ProbeTimeout: 100 * time.Millisecond, ReadyWithin: time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	if err := m.Check(t.Context()); err != nil {
		t.Fatalf("Check: %v", err)
	}
	proxy.SetDelay(150 * time.Millisecond) // each way: a probe is answered in about 300ms
	slowed := time.Now()
	for time.Since(slowed) < 3*time.Second {
		if err := m.Check(t.Context()); err != nil {
			t.Fatalf("Check %s after every answer became late: %v", time.Since(slowed).Round(time.Millisecond), err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestMonitorNeedsEndpoints(t *testing.T) {
	if _, err := etcdstore.StartMonitor(nil, etcdstore.MonitorConfig{}); err == nil {
		t.Errorf("StartMonitor without endpoints: no error")
	}
}
