package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
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

// TestCPUPerOp checks CPU µs per operation: cores × window seconds × 1e6
// over the operations, per window and pooled over the rounds, and how the
// table prints it.
func TestCPUPerOp(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cores float64
		wall  float64
		ops   int64
		want  float64 // NaN: unknown
		text  string
	}{
		{"half a core for 2 s over 10,000 ops", 0.5, 2, 10000, 100, "100"},
		{"one core for 1 s over 40,000 events", 1, 1, 40000, 25, "25.0"},
		{"a tenth of a core for 3 s over 100,000 ops", 0.1, 3, 100000, 3, "3.00"},
		{"a list: 1.07 cores for 3 s over 3,126", 1.07, 3, 3126, 1026.87, "1027"},
		{"idle process", 0, 3, 100, 0, "0.00"},
		{"no operation completed", 0.5, 2, 0, nan, "-"},
		{"no pid", nan, 2, 10000, nan, "-"},
	} {
		use := cpuUse{Client: tc.cores, Server: tc.cores, Etcd: tc.cores, Wall: tc.wall}
		got := use.time().perOp(tc.ops)
		for _, x := range []jfloat{got.Client, got.Server, got.Etcd} {
			if math.IsNaN(tc.want) != math.IsNaN(float64(x)) || math.Abs(float64(x)-tc.want) > 0.01 {
				t.Errorf("%s: %g cores × %gs / %d ops = %g µs/op; want %g", tc.name, tc.cores, tc.wall, tc.ops, x, tc.want)
			}
		}
		if text := fmtMicros(got.Server); text != tc.text {
			t.Errorf("%s: fmtMicros(%g) = %q; want %q", tc.name, got.Server, text, tc.text)
		}
	}

	// A summary pools the rounds: all their CPU time over all their
	// operations, not the median of the rounds' µs/op.
	s := &Summary{Workload: "create", Rounds: []RoundResult{{Ops: 10000}, {Ops: 5000}}}
	for _, u := range []cpuUse{{Client: 0.2, Server: 0.5, Etcd: 1, Wall: 2}, {Client: 0.2, Server: 1, Etcd: nan, Wall: 1}} {
		s.cpuSec = s.cpuSec.plus(u.time())
	}
	summarize(s, nil)
	if s.CPUPerOp.Server != 2e6/15000 || !math.IsNaN(float64(s.CPUPerOp.Etcd)) {
		t.Errorf("pooled µs/op: server %g, etcd %g; want %g (2 CPU seconds over 15,000 ops), unknown (one round unknown)", s.CPUPerOp.Server, s.CPUPerOp.Etcd, 2e6/15000)
	}

	rep := &Report{Targets: []TargetSpec{{Name: "concord", Kind: kindURL}}, Resources: []string{"configmaps"}, Rounds: 1, Duration: "1s",
		Results: []*Summary{
			{Workload: "create", Target: "concord", Kind: kindURL, Resource: "configmaps", OpsMedian: 5000, Ratio: 1,
				CPU: CPUJSON{Client: 0.3, Server: 0.6, Etcd: 0.7}, CPUPerOp: CPUJSON{Client: 60, Server: 120, Etcd: 140}},
			{Workload: "watch", Target: "concord", Kind: kindURL, Resource: "configmaps", OpsMedian: 40000, P99Ratio: 1, Watch: &WatchRound{},
				CPU: CPUJSON{Client: 0.6, Server: 0.4, Etcd: 0.1}, CPUPerOp: CPUJSON{Client: 15, Server: 10.5, Etcd: jfloat(nan)}},
		}}
	var out strings.Builder
	writeTable(&out, rep)
	for _, want := range []string{"CPU client  server  etcd  µs/op server  etcd  notes", "µs/event server  etcd  notes", "µs/op: the process's CPU time"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table has no %q:\n%s", want, out.String())
		}
	}
	for _, line := range strings.Split(out.String(), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) > 1 && f[0] == "create":
			if got := strings.Join(f[len(f)-5:], " "); got != "0.30 0.60 0.70 120 140" {
				t.Errorf("create row ends %q; want the cores and µs/op of server and etcd", got)
			}
		case len(f) > 1 && f[0] == "concord":
			if got := strings.Join(f[len(f)-5:], " "); got != "0.60 0.40 0.10 10.5 -" {
				t.Errorf("watch row ends %q; want the cores and µs/event of server and etcd", got)
			}
		}
	}
	data, err := json.Marshal(rep.Results[0])
	if err != nil {
		t.Fatal(err)
	}
	if want := `"cpuMicrosPerOp":{"client":60,"server":120,"etcd":140}`; !strings.Contains(string(data), want) {
		t.Errorf("JSON %s has no %s", data, want)
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
		{[]string{"--etcd", "a=http://x", "--protobuf"}, "--protobuf: needs an API target"},
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
	if got, want := b.collection("ns"), "https://127.0.0.1:6443/prefix/api/v1/namespaces/ns/configmaps"; got != want {
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

func TestResourceFlags(t *testing.T) {
	cfg, err := parseFlags(t, "--target", "concord=http://127.0.0.1:8080", "--resource", "configmaps, widgets,configmaps")
	if err != nil {
		t.Fatalf("valid flags: %v", err)
	}
	if diff := cmp.Diff([]string{"configmaps", "widgets"}, cfg.Resources); diff != "" {
		t.Errorf("resources, in flag order, once each (-want +got):\n%s", diff)
	}
	if d := DefaultConfig(); !slices.Equal(d.Resources, []string{"configmaps"}) || !slices.Equal(d.Workloads, defaultWorkloads) || slices.Contains(d.Workloads, "crds") || d.CRDs != 500 {
		t.Errorf("defaults: resources %q, workloads %q, crds %d; want configmaps, the six without crds, 500", d.Resources, d.Workloads, d.CRDs)
	}
	cfg, err = parseFlags(t, "--target", "concord=http://127.0.0.1:8080", "--workload", "crds,get", "--crds", "20",
		"--replica-bin", "/tmp/concord", "--replica-etcd", "http://127.0.0.1:2379")
	if err != nil {
		t.Fatalf("valid crds flags: %v", err)
	}
	if diff := cmp.Diff([]string{"get", "crds"}, cfg.Workloads); diff != "" {
		t.Errorf("crds runs last (-want +got):\n%s", diff)
	}
	if cfg.CRDs != 20 || cfg.ReplicaBin != "/tmp/concord" || cfg.ReplicaEtcd != "http://127.0.0.1:2379" {
		t.Errorf("crds %d, replica %q on %q", cfg.CRDs, cfg.ReplicaBin, cfg.ReplicaEtcd)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--target", "a=http://x", "--resource", "gadgets"}, `--resource: "gadgets" is not one of configmaps,widgets`},
		{[]string{"--target", "a=http://x", "--resource", ","}, "--resource: none given"},
		{[]string{"--etcd", "a=http://x", "--workload", "crds"}, "needs an API target"},
		{[]string{"--target", "a=http://x", "--workload", "crds", "--crds", "0"}, "--crds: 0 must be"},
		{[]string{"--target", "a=http://x", "--replica-bin", "/tmp/concord"}, "give both or neither"},
		{[]string{"--target", "a=http://x", "--replica-bin", "c", "--replica-etcd", "127.0.0.1:2379"}, "--replica-etcd"},
	} {
		_, err := parseFlags(t, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("flags %q: error %v; want one containing %q", tc.args, err, tc.want)
		}
	}
}

// TestConnectPerResource checks that an API target is measured once per
// resource, over the same connections, and an etcd target once.
func TestConnectPerResource(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Targets = []TargetSpec{{Name: "etcd", Kind: kindEtcd, Addr: "http://127.0.0.1:1"}, {Name: "concord", Kind: kindURL, Addr: "http://127.0.0.1:2"}}
	cfg.ServerPIDs["concord"] = 7
	cfg.Resources = []string{"configmaps", "widgets"}
	targets, err := connect(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, t := range targets {
			t.b.close()
		}
	}()
	var got []string
	for _, tg := range targets {
		got = append(got, fmt.Sprintf("%s %s pid=%d api=%v", tg.label, tg.res.Name, tg.serverPID, tg.api != nil))
	}
	want := []string{"etcd configmaps pid=0 api=false", "concord/configmaps configmaps pid=7 api=true", "concord/widgets widgets pid=7 api=true"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("targets (-want +got):\n%s", diff)
	}
	if targets[1].api.client != targets[2].api.client {
		t.Error("the two resources of one API target do not share its connections")
	}
	if got, want := targets[2].api.collection("ns"), "http://127.0.0.1:2/apis/bench.concord.dev/v1/namespaces/ns/widgets"; got != want {
		t.Errorf("widgets URL = %q; want %q", got, want)
	}
	cfg.Resources = []string{"configmaps"}
	one, err := connect(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, tg := range one {
		tg.b.close()
	}
	if len(one) != 2 || one[1].label != "concord" {
		t.Errorf("a ConfigMaps-only run labels its API target %q; want concord, as before --resource", one[1].label)
	}
}

// TestResourceObjects checks the bodies apibench sends: a ConfigMap with
// data, a widget whose spec satisfies its CEL rule and carries the data,
// both equally long as JSON for the same payload size.
func TestResourceObjects(t *testing.T) {
	data := map[string]string{"payload": "xyz"}
	cm, err := json.Marshal(configMaps.object("ns", "o", "", data))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(cm), `{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"o","namespace":"ns"},"data":{"payload":"xyz"}}`; got != want {
		t.Errorf("ConfigMap = %s; want %s", got, want)
	}
	w, err := json.Marshal(widgets.object("ns", "o", "12", data))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(w), `{"kind":"Widget","apiVersion":"bench.concord.dev/v1","metadata":{"name":"o","namespace":"ns","resourceVersion":"12"},"spec":{"replicas":1,"maxReplicas":3,"data":{"payload":"xyz"}}}`; got != want {
		t.Errorf("widget = %s; want %s", got, want)
	}
	var back apiObject
	if err := json.Unmarshal(w, &back); err != nil || !maps.Equal(back.data(), data) {
		t.Errorf("a widget's data reads back as %v (%v); want %v", back.data(), err, data)
	}
	if err := json.Unmarshal(cm, &back); err != nil || !maps.Equal(back.data(), data) {
		t.Errorf("a ConfigMap's data reads back as %v (%v)", back.data(), err)
	}
	for _, size := range []int{200, 1024, 4096} {
		if configMaps.payloadSize(size) != size {
			t.Errorf("ConfigMap payload for %d = %d; want %d", size, configMaps.payloadSize(size), size)
		}
		body := func(r resource) int {
			b, _ := json.Marshal(r.object("apibench", "concord-c-abc123-3-17", "", map[string]string{"payload": payload(r.payloadSize(size))}))
			return len(b)
		}
		if c, w := body(configMaps), body(widgets); c != w || widgets.payloadSize(size) >= size {
			t.Errorf("--object-size %d: a ConfigMap is %d bytes of JSON, a widget %d (payload %d); want the same", size, c, w, widgets.payloadSize(size))
		}
	}
	if got, want := widgets.collection("a b"), "/apis/bench.concord.dev/v1/namespaces/a%20b/widgets"; got != want {
		t.Errorf("widgets path = %q; want %q", got, want)
	}
	if got, want := configMaps.collection("ns"), "/api/v1/namespaces/ns/configmaps"; got != want {
		t.Errorf("configmaps path = %q; want %q", got, want)
	}
	if resourceNamed("widgets") != widgets || resourceNamed("configmaps") != configMaps {
		t.Error("resourceNamed")
	}
}

// TestWidgetCRD checks the CRD apibench installs: its name and group are
// the resource's, and it has exactly one CEL rule, which the widgets
// apibench writes satisfy.
func TestWidgetCRD(t *testing.T) {
	var crd struct {
		Metadata struct{ Name string } `json:"metadata"`
		Spec     struct {
			Group    string `json:"group"`
			Names    struct{ Plural, Kind string }
			Versions []struct {
				Name   string `json:"name"`
				Schema struct {
					OpenAPIV3Schema struct {
						Properties map[string]struct {
							Validations []struct{ Rule string } `json:"x-kubernetes-validations"`
							Required    []string                `json:"required"`
						} `json:"properties"`
					} `json:"openAPIV3Schema"`
				} `json:"schema"`
			} `json:"versions"`
		} `json:"spec"`
	}
	if err := json.Unmarshal([]byte(widgetCRD), &crd); err != nil {
		t.Fatalf("widgetCRD is not JSON: %v", err)
	}
	if crd.Metadata.Name != widgets.crdName() || crd.Spec.Group != widgets.Group || crd.Spec.Names.Plural != widgets.Name || crd.Spec.Names.Kind != widgets.Kind || len(crd.Spec.Versions) != 1 || crd.Spec.Versions[0].Name != widgets.Version {
		t.Fatalf("CRD %+v does not define %+v", crd, widgets)
	}
	spec := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
	if len(spec.Validations) != 1 || spec.Validations[0].Rule != "self.replicas <= self.maxReplicas" {
		t.Errorf("CEL rules %+v; want self.replicas <= self.maxReplicas alone", spec.Validations)
	}
	if !(widgetReplicas <= widgetMaxReplicas) || !slices.Equal(spec.Required, []string{"replicas", "maxReplicas"}) {
		t.Errorf("the widgets apibench writes break the rule, or the schema does not require its fields: %v", spec.Required)
	}
}

// TestBenchCRDs checks the crds workload's CRDs: JSON, distinct groups,
// kinds and names, the run's label, names within kube's limits.
func TestBenchCRDs(t *testing.T) {
	names, groups, kinds := map[string]bool{}, map[string]bool{}, map[string]bool{}
	for i := range 500 {
		name, group, body := benchCRD("ab12cd", i)
		var crd struct {
			Metadata struct {
				Name   string            `json:"name"`
				Labels map[string]string `json:"labels"`
			} `json:"metadata"`
			Spec struct {
				Group string `json:"group"`
				Names struct {
					Plural, Singular, Kind string
				} `json:"names"`
			} `json:"spec"`
		}
		if err := json.Unmarshal(body, &crd); err != nil {
			t.Fatalf("CRD %d is not JSON: %v\n%s", i, err, body)
		}
		if crd.Metadata.Name != name || crd.Spec.Group != group || name != crd.Spec.Names.Plural+"."+group || crd.Metadata.Labels[crdLabel] != "ab12cd" {
			t.Errorf("CRD %d: %+v; name %q group %q", i, crd, name, group)
		}
		if !strings.HasSuffix(group, crdGroupSuffix("ab12cd")) || len(name) > 253 || len(strings.Split(group, ".")[0]) > 63 {
			t.Errorf("CRD %d: group %q name %q", i, group, name)
		}
		names[name], groups[group], kinds[crd.Spec.Names.Kind] = true, true, true
	}
	if len(names) != 500 || len(groups) != 500 || len(kinds) != 500 {
		t.Errorf("%d names, %d groups, %d kinds; want 500 distinct each", len(names), len(groups), len(kinds))
	}
	if got := countSuffix([]string{"g0001" + crdGroupSuffix("x"), "apps", "g0002" + crdGroupSuffix("y")}, crdGroupSuffix("x")); got != 1 {
		t.Errorf("countSuffix = %d; want 1", got)
	}
}

func TestResourceRatios(t *testing.T) {
	s := func(target, kind, res string, ops, p99 float64) *Summary {
		return &Summary{Workload: "create", Target: target, Kind: kind, Resource: res, OpsMedian: jfloat(ops), P99ms: jfloat(p99)}
	}
	raw, cm, w := s("etcd", kindEtcd, "configmaps", 1000, 1), s("concord", kindURL, "configmaps", 500, 2), s("concord", kindURL, "widgets", 450, 4)
	resourceRatios([]*Summary{raw, cm, w}, "configmaps")
	if !math.IsNaN(float64(raw.ResourceRatio)) || cm.ResourceRatio != 1 || w.ResourceRatio != 0.9 {
		t.Errorf("ratios etcd %g, configmaps %g, widgets %g; want NaN, 1, 0.9", raw.ResourceRatio, cm.ResourceRatio, w.ResourceRatio)
	}
	for _, x := range []*Summary{cm, w} {
		x.Workload = "watch"
	}
	resourceRatios([]*Summary{cm, w}, "configmaps")
	if w.ResourceRatio != 2 {
		t.Errorf("watch: widgets ratio %g; want 2 (p99 4ms / 2ms)", w.ResourceRatio)
	}
	only := s("concord", kindURL, "widgets", 1, 1)
	resourceRatios([]*Summary{only}, "widgets")
	if !math.IsNaN(float64(only.ResourceRatio)) {
		t.Errorf("one resource: ratio %g; want NaN", only.ResourceRatio)
	}
}

func TestMetricValue(t *testing.T) {
	text := "# HELP go_memstats_heap_inuse_bytes x\n# TYPE go_memstats_heap_inuse_bytes gauge\ngo_memstats_heap_inuse_bytes 1.7743872e+07\ngo_memstats_heap_inuse_bytes_total 3\n"
	if got := metricValue(text, "go_memstats_heap_inuse_bytes"); got != 1.7743872e+07 {
		t.Errorf("metricValue = %g", got)
	}
	if got := metricValue(text, "missing"); !math.IsNaN(got) {
		t.Errorf("missing metric = %g; want NaN", got)
	}
	if got := perCRD(3000, 1000, 500); got != 4 {
		t.Errorf("perCRD = %g; want 4", got)
	}
	if got := perCRD(jfloat(nan), 1000, 500); !math.IsNaN(got) {
		t.Errorf("perCRD of unknown = %g; want NaN", got)
	}
}

// TestTablesWithResources checks the columns a custom-resource run adds,
// and the crds section.
func TestTablesWithResources(t *testing.T) {
	rep := &Report{Targets: []TargetSpec{{Name: "concord", Kind: kindURL}}, Resources: []string{"configmaps", "widgets"}, Rounds: 1, Duration: "1s",
		Objects: []ObjectSize{{Target: "concord", Resource: "widgets", Payload: 971, Sent: 1144, Served: 1271}},
		Results: []*Summary{
			{Workload: "create", Target: "concord", Kind: kindURL, Resource: "configmaps", OpsMedian: 100, Ratio: 1, ResourceRatio: 1},
			{Workload: "create", Target: "concord", Kind: kindURL, Resource: "widgets", OpsMedian: 93, Ratio: 0.93, ResourceRatio: 0.93},
		},
		CRDs: []*CRDResult{{Target: "concord", CRDs: 500, Workers: 16, CreatedSec: 10, EstablishedSec: 11, ServedSec: 12,
			Replicas:     []ReplicaResult{{CRDs: 0, ReadySec: 0.5, ServedSec: jfloat(nan), Memory: Memory{RSSKiB: 50 << 10, HeapKiB: 20 << 10}}, {CRDs: 500, ReadySec: 0.9, ServedSec: 2, Memory: Memory{RSSKiB: 100 << 10, HeapKiB: 60 << 10}}},
			RSSPerCRDKiB: 102.4, HeapPerCRDKiB: 81.9, TargetRSSPerCRDKiB: jfloat(nan), TargetHeapPerCRDKiB: jfloat(nan),
			Endpoints: []*EndpointResult{{Name: "openapi v2", Path: "/openapi/v2", Code: 200, Bytes: 2e6, FirstMs: 1500, Requests: 3, P50ms: 400, P99ms: 1200, MaxMs: 1200}}}},
	}
	var out strings.Builder
	writeTable(&out, rep)
	for _, want := range []string{
		"concord widgets: 1144 sent, 1271 served (payload 971)",
		"resource    vs configmaps",
		"widgets on concord, widgets/configmaps in this run: create 0.93×",
		"crds: 500 CRDs",
		"memory per idle CRD: 102.4 KiB of RSS, 81.9 KiB of heap in use",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table has no %q:\n%s", want, out.String())
		}
	}
	for _, line := range strings.Split(out.String(), "\n") {
		if f := strings.Fields(line); len(f) > 0 && strings.Contains(line, "/openapi/v2") {
			if got := strings.Join(f[len(f)-5:], " "); got != "3 400ms 1200ms 1200ms NO" {
				t.Errorf("openapi v2 row ends %q; want its requests, p50, p99, max and NO (a request over 1 s)", got)
			}
		}
	}
}

// TestApplyWorkload checks the apply workload's flag, that raw etcd does
// not run it (a note, no row), and the apply/update ratio per API target.
func TestApplyWorkload(t *testing.T) {
	cfg, err := parseFlags(t, "--target", "concord=http://127.0.0.1:8080", "--workload", "apply,update")
	if err != nil {
		t.Fatalf("valid flags: %v", err)
	}
	if diff := cmp.Diff([]string{"update", "apply"}, cfg.Workloads); diff != "" || slices.Contains(defaultWorkloads, "apply") {
		t.Errorf("apply runs after update and only when named (-want +got):\n%s", diff)
	}
	if why := notApplicable("apply", &target{}); why == "" {
		t.Error("apply on an etcd target (no API backend): applicable; want a reason")
	}
	if why := notApplicable("apply", &target{api: &httpBackend{}}); why != "" {
		t.Errorf("apply on an API target: %q; want applicable", why)
	}
	if why := notApplicable("update", &target{}); why != "" {
		t.Errorf("update on an etcd target: %q; want applicable", why)
	}
	skip := "not applicable: raw etcd has no server-side apply"
	rep := &Report{Targets: []TargetSpec{{Name: "etcd", Kind: kindEtcd}, {Name: "concord", Kind: kindURL}}, Resources: []string{"configmaps"}, Rounds: 1, Duration: "1s",
		Results: []*Summary{
			{Workload: "update", Target: "etcd", Kind: kindEtcd, Resource: "configmaps", OpsMedian: 1000, P99ms: 2, Ratio: 1},
			{Workload: "update", Target: "concord", Kind: kindURL, Resource: "configmaps", OpsMedian: 500, P99ms: 4, Ratio: 0.5},
			{Workload: "apply", Target: "etcd", Kind: kindEtcd, Resource: "configmaps", OpsMedian: jfloat(nan), Skipped: skip, Notes: []string{skip}},
			{Workload: "apply", Target: "concord", Kind: kindURL, Resource: "configmaps", OpsMedian: 400, P99ms: 6, Ratio: jfloat(nan)},
		}}
	if diff := cmp.Diff([]string{"apply/update on concord in this run: ops/s 0.80×, p99 1.50×"}, applyRatios(rep)); diff != "" {
		t.Errorf("apply ratios (-want +got):\n%s", diff)
	}
	var out strings.Builder
	writeTable(&out, rep)
	if !strings.Contains(out.String(), "apply on etcd: "+skip) || !strings.Contains(out.String(), "apply/update on concord in this run: ops/s 0.80×") {
		t.Errorf("table has no skip note or ratio:\n%s", out.String())
	}
	for _, line := range strings.Split(out.String(), "\n") {
		if f := strings.Fields(line); len(f) > 1 && f[0] == "apply" && f[1] == "etcd" {
			t.Errorf("a row for the skipped apply on etcd: %q", line)
		}
	}
}

// TestProtobufFlag checks --protobuf: off by default, on for the API
// targets' ConfigMaps only (widgets stay JSON), and with raw etcd only
// refused (TestFlagsInvalid).
func TestProtobufFlag(t *testing.T) {
	if DefaultConfig().Protobuf {
		t.Error("protobuf is on by default; want JSON")
	}
	cfg, err := parseFlags(t, "--etcd", "etcd=http://127.0.0.1:1", "--target", "concord=http://127.0.0.1:2", "--protobuf", "--resource", "configmaps,widgets")
	if err != nil || !cfg.Protobuf {
		t.Fatalf("--protobuf with an API and an etcd target: protobuf %v, %v", cfg.Protobuf, err)
	}
	targets, err := connect(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, tg := range targets {
		tg.b.close()
		enc := "etcd"
		if tg.api != nil {
			enc = tg.api.encoding() + " accepts " + tg.api.accept()
		}
		got = append(got, tg.label+": "+enc)
	}
	want := []string{
		"etcd: etcd",
		"concord/configmaps: protobuf accepts application/vnd.kubernetes.protobuf, application/json",
		"concord/widgets: json accepts application/json",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("encodings (-want +got):\n%s", diff)
	}
	for _, tc := range []struct {
		contentType string
		want        bool
	}{
		{"application/vnd.kubernetes.protobuf", true},
		{"application/vnd.kubernetes.protobuf;stream=watch", true},
		{"application/vnd.kubernetes.protobuf ; stream=watch", true},
		{"application/json", false},
		{"", false},
	} {
		if got := isProtobuf(tc.contentType); got != tc.want {
			t.Errorf("isProtobuf(%q) = %v; want %v", tc.contentType, got, tc.want)
		}
	}
}

// TestEncodingLine checks the header line that says what the API targets'
// requests and answers were.
func TestEncodingLine(t *testing.T) {
	result := func(res, enc string) *Summary { return &Summary{Workload: "create", Resource: res, Encoding: enc} }
	for _, tc := range []struct {
		name     string
		protobuf bool
		results  []*Summary
		want     string
	}{
		{"JSON, the default", false, []*Summary{result("configmaps", encodingJSON), result("configmaps", "")},
			"encoding on the API targets: JSON for configmaps"},
		{"protobuf", true, []*Summary{result("configmaps", ""), result("configmaps", encodingProtobuf), result("configmaps", encodingProtobuf)},
			"encoding on the API targets: protobuf (application/vnd.kubernetes.protobuf) for configmaps"},
		{"protobuf and widgets", true, []*Summary{result("configmaps", encodingProtobuf), result("widgets", encodingJSON)},
			"encoding on the API targets: protobuf (application/vnd.kubernetes.protobuf) for configmaps; JSON for widgets (kube serves no protobuf for custom resources)"},
		{"widgets alone with protobuf", true, []*Summary{result("widgets", encodingJSON)},
			"encoding on the API targets: JSON for widgets (kube serves no protobuf for custom resources)"},
		{"JSON with widgets", false, []*Summary{result("configmaps", encodingJSON), result("widgets", encodingJSON)},
			"encoding on the API targets: JSON for configmaps; JSON for widgets"},
		{"raw etcd alone", false, []*Summary{result("configmaps", "")}, ""},
	} {
		if got := encodingLine(&Report{Protobuf: tc.protobuf, Results: tc.results}); got != tc.want {
			t.Errorf("%s: encodingLine = %q; want %q", tc.name, got, tc.want)
		}
	}
}
