package main

import (
	"encoding/json"
	"flag"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestPercentile(t *testing.T) {
	ms := func(xs ...int) []time.Duration {
		out := make([]time.Duration, len(xs))
		for i, x := range xs {
			out[i] = time.Duration(x) * time.Millisecond
		}
		return out
	}
	hundred := make([]int, 100)
	for i := range hundred {
		hundred[i] = i + 1
	}
	for _, tc := range []struct {
		name    string
		samples []time.Duration
		q       float64
		want    time.Duration
	}{
		{"empty", nil, 0.5, 0},
		{"one sample", ms(7), 0.99, 7 * time.Millisecond},
		{"p50 of 1..100 is 50", ms(hundred...), 0.50, 50 * time.Millisecond},
		{"p99 of 1..100 is 99", ms(hundred...), 0.99, 99 * time.Millisecond},
		{"max", ms(hundred...), 1, 100 * time.Millisecond},
		{"p50 of 4 is the second", ms(1, 2, 3, 4), 0.5, 2 * time.Millisecond},
		{"p99 of 4 is the last", ms(1, 2, 3, 4), 0.99, 4 * time.Millisecond},
		{"tiny q is the first", ms(1, 2, 3), 0.0001, time.Millisecond},
	} {
		if got := percentile(tc.samples, tc.q); got != tc.want {
			t.Errorf("%s: percentile(q=%g) = %s; want %s", tc.name, tc.q, got, tc.want)
		}
	}
}

func TestMergeSorts(t *testing.T) {
	got := merge([]time.Duration{5, 1}, nil, []time.Duration{3, 2, 4})
	if diff := cmp.Diff([]time.Duration{1, 2, 3, 4, 5}, got); diff != "" {
		t.Errorf("merge (-want +got):\n%s", diff)
	}
}

func TestMedianMinMaxRatio(t *testing.T) {
	if got := median([]float64{3, 1, 2}); got != 2 {
		t.Errorf("median odd = %g; want 2", got)
	}
	xs := []float64{4, 1, 3, 2}
	if got := median(xs); got != 2.5 {
		t.Errorf("median even = %g; want 2.5", got)
	}
	if xs[0] != 4 {
		t.Errorf("median sorted its argument: %v", xs)
	}
	if !math.IsNaN(median(nil)) {
		t.Error("median(nil) is not NaN")
	}
	if got := medianKnown([]float64{math.NaN(), 5, 1, math.NaN(), 3}); got != 3 {
		t.Errorf("medianKnown = %g; want 3 (NaNs ignored)", got)
	}
	lo, hi := minMax([]float64{3, 9, 1})
	if lo != 1 || hi != 9 {
		t.Errorf("minMax = %g, %g; want 1, 9", lo, hi)
	}
	if got := ratio(250, 1000); got != 0.25 {
		t.Errorf("ratio = %g; want 0.25", got)
	}
	for _, bad := range [][2]float64{{1, 0}, {math.NaN(), 1}, {1, math.NaN()}} {
		if got := ratio(bad[0], bad[1]); !math.IsNaN(got) {
			t.Errorf("ratio(%g, %g) = %g; want NaN", bad[0], bad[1], got)
		}
	}
}

// TestSummarize checks the median of the rounds, the range, the pooled
// percentiles and the ratios to the first target.
func TestSummarize(t *testing.T) {
	round := func(opsPerSec float64, lat ...time.Duration) RoundResult {
		return RoundResult{OpsPerSec: jfloat(opsPerSec), Ops: int64(len(lat)), samples: merge(lat),
			CPU: CPUJSON{Client: 0.5, Server: jfloat(nan), Etcd: 1}}
	}
	base := &Summary{Workload: "create", Target: "etcd", Rounds: []RoundResult{
		round(1000, 1*time.Millisecond), round(1200, 2*time.Millisecond), round(800, 3*time.Millisecond)}}
	summarize(base, nil)
	other := &Summary{Workload: "create", Target: "concord", Rounds: []RoundResult{
		round(300, 4*time.Millisecond), round(250, 6*time.Millisecond), round(400, 5*time.Millisecond)}}
	summarize(other, base)

	if base.OpsMedian != 1000 || base.OpsMin != 800 || base.OpsMax != 1200 || base.Ratio != 1 {
		t.Errorf("base: median %g min %g max %g ratio %g; want 1000 800 1200 1", base.OpsMedian, base.OpsMin, base.OpsMax, base.Ratio)
	}
	if other.OpsMedian != 300 || other.Ratio != 0.3 {
		t.Errorf("other: median %g ratio %g; want 300 0.3", other.OpsMedian, other.Ratio)
	}
	if base.P50ms != 2 || other.P50ms != 5 || other.MaxMs != 6 {
		t.Errorf("pooled latency: base p50 %g, other p50 %g max %g; want 2, 5, 6", base.P50ms, other.P50ms, other.MaxMs)
	}
	if other.P99Ratio != 2 { // 6ms / 3ms
		t.Errorf("p99 ratio = %g; want 2", other.P99Ratio)
	}
	if other.CPU.Client != 0.5 || !math.IsNaN(float64(other.CPU.Server)) || other.CPU.Etcd != 1 {
		t.Errorf("CPU = %+v; want client 0.5, server unknown, etcd 1", other.CPU)
	}
}

func TestSummarizeContended(t *testing.T) {
	s := &Summary{Workload: "contended", Rounds: []RoundResult{
		{OpsPerSec: 10, Ops: 30, Conflicts: 70, LostIncrements: 0, samples: merge([]time.Duration{1})},
	}}
	summarize(s, nil)
	if s.ConflictRate != 0.7 || s.Verified == nil || !*s.Verified {
		t.Errorf("conflict rate %g verified %v; want 0.7 true", s.ConflictRate, s.Verified)
	}
	s = &Summary{Workload: "contended", Rounds: []RoundResult{{Ops: 30, LostIncrements: 2}}}
	summarize(s, nil)
	if s.Verified == nil || *s.Verified {
		t.Errorf("2 lost increments: verified %v; want false", s.Verified)
	}
}

// TestScheduleInterleaves checks the order of the windows: per workload,
// round after round, every target in flag order.
func TestScheduleInterleaves(t *testing.T) {
	var got []string
	for _, w := range schedule([]string{"create", "get"}, 3, 2) {
		got = append(got, w.Workload+"/"+string(rune('0'+w.Round))+"/"+string(rune('A'+w.Target)))
	}
	want := []string{
		"create/1/A", "create/1/B", "create/2/A", "create/2/B", "create/3/A", "create/3/B",
		"get/1/A", "get/1/B", "get/2/A", "get/2/B", "get/3/A", "get/3/B",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("schedule (-want +got):\n%s", diff)
	}
}

func parseFlags(t *testing.T, args ...string) (Config, error) {
	t.Helper()
	cfg := DefaultConfig()
	fs := flag.NewFlagSet("apibench", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	cfg.AddFlags(fs)
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	cfg.Complete()
	return cfg, cfg.Validate()
}

func TestFlags(t *testing.T) {
	cfg, err := parseFlags(t,
		"--target", "concord=http://127.0.0.1:8080",
		"--etcd", "etcd=http://127.0.0.1:2379,http://127.0.0.1:2380",
		"--kubeconfig", "kube=/tmp/kubeconfig",
		"--workload", "list,create,contended",
		"--rounds", "3", "--duration", "2s", "--workers", "4",
		"--server-pid", "concord=123", "--etcd-pid", "concord=456", "--server-pid", "etcd=456",
		"--json")
	if err != nil {
		t.Fatalf("valid flags: %v", err)
	}
	wantTargets := []TargetSpec{
		{Name: "concord", Kind: kindURL, Addr: "http://127.0.0.1:8080"},
		{Name: "etcd", Kind: kindEtcd, Addr: "http://127.0.0.1:2379,http://127.0.0.1:2380"},
		{Name: "kube", Kind: kindKubeconfig, Addr: "/tmp/kubeconfig"},
	}
	if diff := cmp.Diff(wantTargets, cfg.Targets); diff != "" {
		t.Errorf("targets, in flag order (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"create", "contended", "list"}, cfg.Workloads); diff != "" {
		t.Errorf("workloads, in run order (-want +got):\n%s", diff)
	}
	if cfg.Rounds != 3 || cfg.Duration != 2*time.Second || cfg.Workers != 4 || !cfg.JSON {
		t.Errorf("rounds %d duration %s workers %d json %v", cfg.Rounds, cfg.Duration, cfg.Workers, cfg.JSON)
	}
	if diff := cmp.Diff(map[string]int{"concord": 123, "etcd": 456}, cfg.ServerPIDs); diff != "" {
		t.Errorf("server pids (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]int{"concord": 456}, cfg.EtcdPIDs); diff != "" {
		t.Errorf("etcd pids (-want +got):\n%s", diff)
	}

	d := DefaultConfig()
	if d.Rounds != 5 || d.Duration != 5*time.Second || d.Workers != 16 || d.ListObjects != 2000 || d.EtcdPrefix != "/registry" || d.Namespace != "apibench" {
		t.Errorf("defaults: %+v", d)
	}
}

func TestFlagsInvalid(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "no target"},
		{[]string{"--target", "concord"}, "not name=URL"},
		{[]string{"--target", "concord=127.0.0.1:8080"}, "not a URL"},
		{[]string{"--etcd", "etcd=127.0.0.1:2379"}, "is not a URL"},
		{[]string{"--target", "Con_cord=http://x"}, "lower-case"},
		{[]string{"--target", "a=http://x", "--etcd", "a=http://y"}, "used twice"},
		{[]string{"--target", "a=http://x", "--workload", "create,delete"}, `"delete" is not one of`},
		{[]string{"--target", "a=http://x", "--server-pid", "b=12"}, "there is no target"},
		{[]string{"--target", "a=http://x", "--server-pid", "a=x"}, "not name=PID"},
		{[]string{"--target", "a=http://x", "--rounds", "0"}, "--rounds: 0 must be positive"},
		{[]string{"--target", "a=http://x", "--duration", "0s"}, "--duration"},
		{[]string{"--target", "a=http://x", "--namespace", "Bad_NS"}, "--namespace"},
		{[]string{"--target", "a=http://x", "--etcd-prefix", "registry"}, "--etcd-prefix"},
		{[]string{"--target", "a=http://x", "--write-rate", "0"}, "--write-rate"},
	} {
		_, err := parseFlags(t, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("flags %q: error %v; want one containing %q", tc.args, err, tc.want)
		}
	}
}

// TestKubeconfigTarget checks that a kubeconfig's current context gives
// the host the requests go to.
func TestKubeconfigTarget(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kubeconfig")
	const kubeconfig = `apiVersion: v1
kind: Config
clusters:
- name: c
  cluster:
    server: https://127.0.0.1:6443/prefix
    insecure-skip-tls-verify: true
users:
- name: u
  user:
    token: secret
contexts:
- name: ctx
  context: {cluster: c, user: u}
current-context: ctx
`
	if err := os.WriteFile(path, []byte(kubeconfig), 0o600); err != nil {
		t.Fatal(err)
	}
	b, err := newKubeconfigBackend(path, time.Second)
	if err != nil {
		t.Fatalf("kubeconfig backend: %v", err)
	}
	defer b.close()
	if got, want := b.configMaps("ns"), "https://127.0.0.1:6443/prefix/api/v1/namespaces/ns/configmaps"; got != want {
		t.Errorf("configmaps URL = %q; want %q", got, want)
	}
	if _, err := newKubeconfigBackend(filepath.Join(t.TempDir(), "missing"), time.Second); err == nil {
		t.Error("a missing kubeconfig gave no error")
	}
}

func TestProcParsing(t *testing.T) {
	// Field 2 may hold spaces and parentheses; utime 250 and stime 50
	// ticks are 3 s.
	stat := []byte("4242 (my (odd) cmd) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 8 0 12345 1000000 200 18446744073709551615\n")
	got, err := parseStatCPU(stat)
	if err != nil || got != 3*time.Second {
		t.Errorf("parseStatCPU = %s, %v; want 3s", got, err)
	}
	if _, err := parseStatCPU([]byte("garbage")); err == nil {
		t.Error("parseStatCPU(garbage): no error")
	}
	// This process can be read like any other.
	if _, err := procCPU(os.Getpid()); err != nil {
		t.Errorf("procCPU(self): %v", err)
	}
}

func TestJSONNumbers(t *testing.T) {
	data, err := json.Marshal(struct {
		A, B, C jfloat
	}{jfloat(math.NaN()), 1.23456789, 2})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(data), `{"A":null,"B":1.2346,"C":2}`; got != want {
		t.Errorf("JSON = %s; want %s", got, want)
	}
}

func TestStoredConfigMap(t *testing.T) {
	value, err := storedConfigMap("ns", "name", map[string]string{"payload": payload(1024)})
	if err != nil {
		t.Fatal(err)
	}
	var cm struct {
		Kind       string `json:"kind"`
		APIVersion string `json:"apiVersion"`
		Metadata   struct {
			Name, Namespace, UID, ResourceVersion, CreationTimestamp string
		} `json:"metadata"`
		Data map[string]string `json:"data"`
	}
	if err := json.Unmarshal(value, &cm); err != nil {
		t.Fatal(err)
	}
	if cm.Kind != "ConfigMap" || cm.APIVersion != "v1" || cm.Metadata.Name != "name" || cm.Metadata.Namespace != "ns" ||
		len(cm.Metadata.UID) != 36 || cm.Metadata.ResourceVersion != "" || cm.Metadata.CreationTimestamp == "" || len(cm.Data["payload"]) != 1024 {
		t.Errorf("stored ConfigMap: %s", value)
	}
	if !strings.HasPrefix(string(value), `{"kind":"ConfigMap","apiVersion":"v1",`) {
		t.Errorf("stored ConfigMap does not start as Concord's: %.60s", value)
	}
}
