package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/concord-dev/concord/cmd/concord/app"
	apptesting "github.com/concord-dev/concord/cmd/concord/app/testing"
	"github.com/concord-dev/concord/etcdstore/etcdtest"
	"github.com/concord-dev/concord/internal/syncbuf"
)

// startConcord runs a Concord server (cmd/concord/app) on loopback over a
// real embedded etcd (fsync off), serving plain HTTP to everyone, with the
// controllers of CRDs and of the deletion of namespaces, until the test
// ends; it returns its URL and the etcd.
func startConcord(t *testing.T) (string, *etcdtest.Etcd) {
	t.Helper()
	e := etcdtest.Start(t)
	cfg := apptesting.PlainConfig(t, e.Endpoint)
	// No in-flight limits: the benchmark measures the server, not them.
	cfg.MaxRequestsInFlight, cfg.MaxMutatingRequestsInFlight, cfg.MaxRequestBytesInFlight = 0, 0, 0
	srv := apptesting.Run(t, cfg, app.WithControllers(app.Controllers{CRDs: true, Namespaces: true}))
	return srv.URL(), e
}

// benchConfig is a short run against Concord (first) and the raw etcd
// under it, which share the key space and keep apart by name.
func benchConfig(url string, e *etcdtest.Etcd, workloads ...string) Config {
	cfg := DefaultConfig()
	cfg.Targets = []TargetSpec{{Name: "concord", Kind: kindURL, Addr: url}, {Name: "etcd", Kind: kindEtcd, Addr: e.Endpoint}}
	cfg.Workloads = workloads
	cfg.Rounds = 1
	cfg.Duration = time.Second
	cfg.Workers = 4
	cfg.Progress = "line"
	cfg.RequestTimeout = 10 * time.Second
	cfg.Complete()
	return cfg
}

func runBench(t *testing.T, cfg Config) (*Report, string) {
	t.Helper()
	if err := cfg.Validate(); err != nil {
		t.Fatalf("config: %v", err)
	}
	var progress syncbuf.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rep, err := run(ctx, cfg, &progress)
	t.Logf("progress:\n%s", progress.String())
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	var table bytes.Buffer
	writeTable(&table, rep)
	t.Logf("table:\n%s", table.String())
	if err := writeJSON(io.Discard, rep); err != nil {
		t.Errorf("JSON output: %v", err)
	}
	return rep, progress.String()
}

// result is the summary of workload on target; target may be
// name/resource.
func result(t *testing.T, rep *Report, workload, target string) *Summary {
	t.Helper()
	name, res, _ := strings.Cut(target, "/")
	for _, s := range rep.Results {
		if s.Workload == workload && s.Target == name && (res == "" || s.Resource == res) {
			return s
		}
	}
	t.Fatalf("no result for %s on %s", workload, target)
	return nil
}

// TestCreateAndContendedOnConcordAndEtcd runs create and contended for one
// round of 1 s with 4 workers on a real Concord and on the raw etcd under
// it: both make progress, no increment is lost, and the clean-up leaves
// nothing behind.
func TestCreateAndContendedOnConcordAndEtcd(t *testing.T) {
	url, e := startConcord(t)
	rep, progress := runBench(t, benchConfig(url, e, "create", "contended"))

	for _, line := range []string{"round 1/1 create target=concord", "round 1/1 create target=etcd", "round 1/1 contended target=concord", "round 1/1 contended target=etcd"} {
		if !strings.Contains(progress, line) {
			t.Errorf("progress has no %q", line)
		}
	}
	if len(rep.Failures) > 0 {
		t.Errorf("failures: %q", rep.Failures)
	}
	for _, target := range []string{"concord", "etcd"} {
		c := result(t, rep, "create", target)
		if c.OpsMedian <= 0 || c.Rounds[0].Ops == 0 {
			t.Errorf("create on %s: %g ops/s, %d ops; want some", target, c.OpsMedian, c.Rounds[0].Ops)
		}
		if c.Errors > 0 {
			t.Errorf("create on %s: %d errors: %s", target, c.Errors, c.Rounds[0].FirstError)
		}
		k := result(t, rep, "contended", target)
		r := k.Rounds[0]
		if r.Ops == 0 {
			t.Errorf("contended on %s: no successful increment", target)
		}
		if k.Verified == nil || !*k.Verified || k.LostIncrements != 0 || (r.UnknownIncrements == 0 && r.CounterDelta != r.Ops) {
			t.Errorf("contended on %s: %d successes, counter grew by %d, %d lost, %d uncertain; notes %q",
				target, r.Ops, r.CounterDelta, k.LostIncrements, r.UnknownIncrements, k.Notes)
		}
		if r.Conflicts == 0 {
			t.Logf("contended on %s: no conflict with 4 workers (unusual, not wrong)", target)
		}
	}
	if got := result(t, rep, "create", "etcd").Ratio; !(got > 0) {
		t.Errorf("etcd's ratio to concord = %g; want a positive number", got)
	}

	// The clean-up deleted every object of the run, on both targets.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := e.Client.Get(ctx, "/registry/configmaps/apibench/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	if resp.Count != 0 {
		t.Errorf("%d ConfigMaps left in namespace apibench after the clean-up", resp.Count)
	}
	if resp, err := e.Client.Get(ctx, "/registry/namespaces/apibench"); err != nil || len(resp.Kvs) != 0 {
		t.Errorf("namespace apibench still exists after the clean-up (%v)", err)
	}
}

// TestOtherWorkloadsOnConcordAndEtcd runs update, get, list, watch and
// apply, small, on both targets (apply on Concord only).
func TestOtherWorkloadsOnConcordAndEtcd(t *testing.T) {
	url, e := startConcord(t)
	cfg := benchConfig(url, e, "update", "get", "list", "watch", "apply")
	cfg.GetObjects = 20
	cfg.ListObjects = 30
	cfg.Watchers = 5
	cfg.WriteRate = 50
	cfg.Keep = true
	rep, _ := runBench(t, cfg)
	if len(rep.Failures) > 0 {
		t.Errorf("failures: %q", rep.Failures)
	}
	for _, target := range []string{"concord", "etcd"} {
		for _, w := range []string{"update", "get", "list", "watch"} {
			s := result(t, rep, w, target)
			if s.OpsMedian <= 0 || s.Errors > 0 {
				t.Errorf("%s on %s: %g ops/s, %d errors (%s)", w, target, s.OpsMedian, s.Errors, s.Rounds[0].FirstError)
			}
		}
		if r := result(t, rep, "list", target).Rounds[0]; !r.itemsChecked || r.Items != 30 {
			t.Errorf("list on %s: items %d (checked %v); want 30", target, r.Items, r.itemsChecked)
		}
		w := result(t, rep, "watch", target).Watch
		if w.Opened != 5 || w.Writes < 10 || w.Lost != 0 || w.Duplicated != 0 || w.OutOfOrder != 0 || w.Events != int64(w.Writes*5) {
			t.Errorf("watch on %s: %+v; want 5 open, ~50 writes each delivered to every watcher, nothing lost", target, *w)
		}
	}
	if a := result(t, rep, "apply", "concord"); a.OpsMedian <= 0 || a.Errors > 0 {
		t.Errorf("apply on concord: %g ops/s, %d errors (%s)", a.OpsMedian, a.Errors, a.Rounds[0].FirstError)
	}
	if a := result(t, rep, "apply", "etcd"); a.Skipped == "" || len(a.Rounds) > 0 {
		t.Errorf("apply on etcd: skipped %q, %d rounds; want skipped, none", a.Skipped, len(a.Rounds))
	}
	// --keep: the list objects are still there.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// Each applied object is managed by its worker's field manager.
	if resp, err := e.Client.Get(ctx, "/registry/configmaps/apibench/concord-a-1"); err != nil || len(resp.Kvs) != 1 || !bytes.Contains(resp.Kvs[0].Value, []byte(`"manager":"apibench-1"`)) {
		t.Errorf("concord-a-1 in etcd: %v (%v); want its managedFields by apibench-1", resp, err)
	}
	resp, err := e.Client.Get(ctx, "/registry/configmaps/apibench-list-concord/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || resp.Count != 30 {
		t.Errorf("with --keep, namespace apibench-list-concord holds %v objects (%v); want 30", resp, err)
	}
	var out bytes.Buffer
	if err := writeJSON(&out, rep); err != nil {
		t.Fatal(err)
	}
	var decoded map[string]any
	if err := json.Unmarshal(out.Bytes(), &decoded); err != nil {
		t.Errorf("JSON output does not decode: %v", err)
	}
}

// TestCustomResourceOnConcord runs create, update, get, list and watch on
// ConfigMaps and on widgets (the CRD apibench installs, with its CEL rule)
// in one run, with the raw etcd first: every workload makes progress on
// both resources without errors, the objects are as long as JSON, the
// ratio widgets/configmaps is printed per workload, and the clean-up
// deletes the objects and the CRD.
func TestCustomResourceOnConcord(t *testing.T) {
	url, e := startConcord(t)
	cfg := benchConfig(url, e, "create", "update", "get", "list", "watch")
	cfg.Targets = []TargetSpec{cfg.Targets[1], cfg.Targets[0]} // etcd first
	cfg.Resources = []string{"configmaps", "widgets"}
	cfg.GetObjects = 20
	cfg.ListObjects = 30
	cfg.Watchers = 3
	cfg.WriteRate = 50
	rep, progress := runBench(t, cfg)
	if len(rep.Failures) > 0 {
		t.Errorf("failures: %q", rep.Failures)
	}
	for _, line := range []string{"CRD widgets.bench.concord.dev created, Established after", "round 1/1 create target=concord/widgets", "round 1/1 create target=concord/configmaps", "round 1/1 create target=etcd:"} {
		if !strings.Contains(progress, line) {
			t.Errorf("progress has no %q", line)
		}
	}
	for _, w := range []string{"create", "update", "get", "list", "watch"} {
		for _, target := range []string{"etcd", "concord/configmaps", "concord/widgets"} {
			s := result(t, rep, w, target)
			if s.OpsMedian <= 0 || s.Errors > 0 {
				t.Errorf("%s on %s: %g ops/s, %d errors (%s)", w, target, s.OpsMedian, s.Errors, s.Rounds[0].FirstError)
			}
		}
		wid, cm, raw := result(t, rep, w, "concord/widgets"), result(t, rep, w, "concord/configmaps"), result(t, rep, w, "etcd")
		want := wid.OpsMedian / cm.OpsMedian
		if w == "watch" {
			want = wid.P99ms / cm.P99ms
		}
		if math.Abs(float64(wid.ResourceRatio-want)) > 1e-9 || cm.ResourceRatio != 1 || !math.IsNaN(float64(raw.ResourceRatio)) {
			t.Errorf("%s: resource ratios widgets %g (want %g), configmaps %g (want 1), etcd %g (want NaN)", w, wid.ResourceRatio, want, cm.ResourceRatio, raw.ResourceRatio)
		}
	}
	if r := result(t, rep, "list", "concord/widgets").Rounds[0]; !r.itemsChecked || r.Items != 30 {
		t.Errorf("list of widgets: items %d (checked %v); want 30", r.Items, r.itemsChecked)
	}
	if w := result(t, rep, "watch", "concord/widgets").Watch; w.Lost != 0 || w.Writes == 0 || w.Events != int64(w.Writes*3) {
		t.Errorf("watch of widgets: %+v; want every write delivered to the 3 watchers", *w)
	}
	sizes := map[string]ObjectSize{}
	for _, o := range rep.Objects {
		sizes[o.Target+"/"+o.Resource] = o
	}
	cm, wid := sizes["concord/configmaps"], sizes["concord/widgets"]
	// A widget is served longer by its generation and its managedFields
	// entry, of a longer apiVersion naming more fields.
	if cm.Sent == 0 || cm.Sent != wid.Sent || wid.Payload >= cm.Payload || wid.Served < cm.Served || wid.Served > cm.Served+100 {
		t.Errorf("object sizes: %+v; want the same JSON sent, a widget served at most 100 bytes longer (generation, managedFields)", rep.Objects)
	}
	var table bytes.Buffer
	writeTable(&table, rep)
	for _, want := range []string{"vs configmaps", "widgets on concord, widgets/configmaps in this run: create ", "concord widgets: "} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("table has no %q", want)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, prefix := range []string{"/registry/bench.concord.dev/widgets/", "/registry/configmaps/apibench"} {
		resp, err := e.Client.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil || resp.Count != 0 {
			t.Errorf("after the clean-up, %d keys under %s (%v)", resp.Count, prefix, err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := e.Client.Get(ctx, "/registry/apiextensions.k8s.io/customresourcedefinitions/widgets.bench.concord.dev")
		if err == nil && len(resp.Kvs) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("the widgets CRD is still there 10 s after the clean-up (%v)", err)
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestCRDsWorkload installs 5 CRDs through a real Concord and times
// discovery and OpenAPI (no replica: that needs the binary), then deletes
// them.
func TestCRDsWorkload(t *testing.T) {
	url, e := startConcord(t)
	cfg := benchConfig(url, e, "crds")
	cfg.Targets = cfg.Targets[:1]
	cfg.CRDs = 5
	cfg.Duration = 200 * time.Millisecond
	rep, progress := runBench(t, cfg)
	if len(rep.CRDs) != 1 {
		t.Fatalf("%d crds results; want 1", len(rep.CRDs))
	}
	c := rep.CRDs[0]
	if !(c.CreatedSec > 0 && c.EstablishedSec > 0 && c.ServedSec >= c.EstablishedSec && c.DeletedSec > 0) {
		t.Errorf("crds: created %gs, established %gs, served %gs, deleted %gs; want positive, in this order", c.CreatedSec, c.EstablishedSec, c.ServedSec, c.DeletedSec)
	}
	if len(c.Endpoints) != 5 {
		t.Fatalf("%d endpoints; want 5", len(c.Endpoints))
	}
	for _, ep := range c.Endpoints[:4] {
		if ep.Code != 200 || ep.Requests == 0 || ep.Errors > 0 || ep.Bytes == 0 {
			t.Errorf("endpoint %s: %+v; want 200s, some requests, no errors", ep.Name, *ep)
		}
	}
	if !strings.Contains(progress, "5 CRDs created in") || !strings.Contains(progress, "round 1/1 crds openapi v2 target=concord") {
		t.Errorf("progress lacks the install or the endpoint windows")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := e.Client.Get(ctx, "/registry/apiextensions.k8s.io/customresourcedefinitions/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || resp.Count != 0 {
		t.Errorf("%d CRDs left after the run (%v)", resp.Count, err)
	}
}

// TestCustomResourceRunAfterRun runs widgets twice in a row: the second
// run finds the CRD the first deleted still terminating, waits until it
// is gone and creates it anew (a terminating CRD refuses creates).
func TestCustomResourceRunAfterRun(t *testing.T) {
	url, e := startConcord(t)
	cfg := benchConfig(url, e, "create")
	cfg.Targets = cfg.Targets[:1]
	cfg.Resources = []string{"widgets"}
	for run := range 2 {
		rep, progress := runBench(t, cfg)
		if s := result(t, rep, "create", "concord/widgets"); s.OpsMedian <= 0 || s.Errors > 0 {
			t.Errorf("run %d: %g creates/s, %d errors", run+1, s.OpsMedian, s.Errors)
		}
		if !strings.Contains(progress, "CRD widgets.bench.concord.dev created") {
			t.Errorf("run %d did not create the CRD", run+1)
		}
	}
}

// TestCRDsWorkloadWithReplica builds the concord binary and runs the crds
// workload with replicas of it on the test's etcd: each replica's start-up
// is timed and its memory read, before and after 3 CRDs.
func TestCRDsWorkloadWithReplica(t *testing.T) {
	if testing.Short() {
		t.Skip("builds cmd/concord")
	}
	bin := filepath.Join(t.TempDir(), "concord")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/concord-dev/concord/cmd/concord").CombinedOutput(); err != nil {
		t.Fatalf("go build cmd/concord: %v\n%s", err, out)
	}
	url, e := startConcord(t)
	cfg := benchConfig(url, e, "crds")
	cfg.Targets = cfg.Targets[:1]
	cfg.CRDs = 3
	cfg.Duration = 100 * time.Millisecond
	cfg.ReplicaBin, cfg.ReplicaEtcd = bin, e.Endpoint
	rep, _ := runBench(t, cfg)
	c := rep.CRDs[0]
	if len(c.Replicas) != 2 {
		t.Fatalf("%d replicas measured; want 2", len(c.Replicas))
	}
	before, after := c.Replicas[0], c.Replicas[1]
	if before.CRDs != 0 || after.CRDs != 3 || after.Groups != before.Groups+3 {
		t.Errorf("replicas: %+v then %+v; want 0 then 3 CRDs, 3 more API groups", before, after)
	}
	if !(before.ReadySec > 0) || !math.IsNaN(float64(before.ServedSec)) || !(after.ServedSec >= after.ReadySec) {
		t.Errorf("start-up: before %+v, after %+v", before, after)
	}
	if !(before.RSSKiB > 1024) || !(after.HeapKiB > 0) || math.IsNaN(float64(c.RSSPerCRDKiB)) || math.IsNaN(float64(c.HeapPerCRDKiB)) {
		t.Errorf("memory: before %+v, after %+v, per CRD %g KiB RSS, %g KiB heap", before.Memory, after.Memory, c.RSSPerCRDKiB, c.HeapPerCRDKiB)
	}
}

// mediaRecorder is a proxy in front of a server that records, for every
// request to a ConfigMap or widget path, its method, kind of path and
// status code, the Content-Type it sent, its Accept and the Content-Type
// of the answer: one line per distinct combination.
type mediaRecorder struct {
	mu   sync.Mutex
	seen map[string]bool
}

func startMediaRecorder(t *testing.T, backend string) (string, *mediaRecorder) {
	t.Helper()
	u, err := url.Parse(backend)
	if err != nil {
		t.Fatal(err)
	}
	rec := &mediaRecorder{seen: map[string]bool{}}
	proxy := httputil.NewSingleHostReverseProxy(u)
	proxy.ModifyResponse = func(resp *http.Response) error {
		r := resp.Request
		path := r.URL.Path
		res := ""
		for _, name := range []string{"configmaps", "widgets"} {
			if strings.Contains(path, "/"+name) {
				res = name
			}
		}
		// The clean-up's deletes, and the size probe's JSON read, are not
		// the workloads'.
		if res == "" || r.Method == http.MethodDelete || strings.Contains(path, "-size-") {
			return nil
		}
		kind := "object"
		switch {
		case r.URL.Query().Get("watch") != "":
			kind = "watch"
		case strings.HasSuffix(path, "/"+res):
			kind = "collection"
		}
		line := fmt.Sprintf("%s %s %s %d: sent %q, accepts %q, answered %q", r.Method, res, kind, resp.StatusCode,
			r.Header.Get("Content-Type"), r.Header.Get("Accept"), resp.Header.Get("Content-Type"))
		rec.mu.Lock()
		rec.seen[line] = true
		rec.mu.Unlock()
		return nil
	}
	srv := httptest.NewServer(proxy)
	t.Cleanup(srv.Close)
	return srv.URL, rec
}

func (r *mediaRecorder) lines() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Sorted(maps.Keys(r.seen))
}

// TestProtobufBackend sends every operation of the workloads on a
// ConfigMap as protobuf to a real Concord: the answers decode to the
// object written, the errors are still told apart (they come as protobuf
// Status), and every request and answer was protobuf.
func TestProtobufBackend(t *testing.T) {
	concord, _ := startConcord(t)
	u, rec := startMediaRecorder(t, concord)
	b := newHTTPBackend(u, 4, 10*time.Second)
	b.pb = true
	defer b.close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := b.ensureNamespace(ctx, "pb"); err != nil {
		t.Fatal(err)
	}

	data := map[string]string{"payload": payload(1024), "sent": "1"}
	rv1, err := b.create(ctx, "pb", "cm", data)
	if err != nil || rv1 <= 0 {
		t.Fatalf("create: rv %d, %v", rv1, err)
	}
	got, rv, err := b.get(ctx, "pb", "cm")
	if err != nil || rv != rv1 || !maps.Equal(got, data) {
		t.Errorf("get = %d-byte payload, rv %d, %v; want the data created, rv %d", len(got["payload"]), rv, err, rv1)
	}
	events := make(chan watchEvent, 10)
	ws, err := b.watch(ctx, "pb", rv1, func(ev watchEvent) { events <- ev })
	if err != nil {
		t.Fatalf("watch: %v", err)
	}
	data2 := map[string]string{"payload": "second", "sent": "2"}
	rv2, err := b.update(ctx, "pb", "cm", data2, rv1)
	if err != nil || rv2 <= rv1 {
		t.Fatalf("update: rv %d after %d, %v", rv2, rv1, err)
	}
	select {
	case ev := <-events:
		if ev.Type != "MODIFIED" || ev.RV != rv2 || !maps.Equal(ev.Data, data2) || ev.Received.IsZero() {
			t.Errorf("watch event %s rv %d data %v; want MODIFIED rv %d data %v", ev.Type, ev.RV, ev.Data, rv2, data2)
		}
	case <-ws.Done:
		t.Fatalf("the watch ended: %v", ws.Err)
	case <-ctx.Done():
		t.Fatal("no watch event")
	}
	if _, err := b.create(ctx, "pb", "cm2", data); err != nil {
		t.Fatal(err)
	}
	items, listRV, err := b.list(ctx, "pb", true)
	if err != nil || items != 2 || listRV < rv2 {
		t.Errorf("list = %d items, rv %d, %v; want 2, at least %d", items, listRV, err, rv2)
	}
	if items, _, err := b.list(ctx, "pb", false); err != nil || items != -1 {
		t.Errorf("unchecked list = %d, %v; want -1, nil", items, err)
	}
	applyRV, err := b.apply(ctx, "pb", "applied", "apibench-0", data)
	if err != nil || applyRV <= 0 {
		t.Errorf("apply: rv %d, %v", applyRV, err)
	}

	for _, tc := range []struct {
		name string
		op   func() error
		want error
	}{
		{"create of an existing name", func() error { _, err := b.create(ctx, "pb", "cm", data); return err }, errExists},
		{"update at an old rv", func() error { _, err := b.update(ctx, "pb", "cm", data, rv1); return err }, errConflict},
		{"get of a missing name", func() error { _, _, err := b.get(ctx, "pb", "missing"); return err }, errNotFound},
	} {
		if err := tc.op(); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v; want %v", tc.name, err, tc.want)
		}
	}

	// The errors too came as protobuf: a Status whose reason tells
	// AlreadyExists from Conflict.
	pb, accept := mediaProtobuf, acceptProtobuf
	want := []string{
		fmt.Sprintf("GET configmaps collection 200: sent \"\", accepts %q, answered %q", accept, pb),
		fmt.Sprintf("GET configmaps object 200: sent \"\", accepts %q, answered %q", accept, pb),
		fmt.Sprintf("GET configmaps object 404: sent \"\", accepts %q, answered %q", accept, pb),
		fmt.Sprintf("GET configmaps watch 200: sent \"\", accepts %q, answered %q", accept, pb+";stream=watch"),
		// kube has no protobuf apply patch; client-go sends it as YAML too.
		fmt.Sprintf("PATCH configmaps object 201: sent %q, accepts %q, answered %q", "application/apply-patch+yaml", accept, pb),
		fmt.Sprintf("POST configmaps collection 201: sent %q, accepts %q, answered %q", pb, accept, pb),
		fmt.Sprintf("POST configmaps collection 409: sent %q, accepts %q, answered %q", pb, accept, pb),
		fmt.Sprintf("PUT configmaps object 200: sent %q, accepts %q, answered %q", pb, accept, pb),
		fmt.Sprintf("PUT configmaps object 409: sent %q, accepts %q, answered %q", pb, accept, pb),
	}
	if diff := cmp.Diff(want, rec.lines()); diff != "" {
		t.Errorf("media types of the ConfigMap requests (-want +got):\n%s", diff)
	}
}

// TestProtobufRun runs the workloads with --protobuf on Concord's
// ConfigMaps and widgets and on the raw etcd under it: ConfigMaps go as
// protobuf, widgets stay JSON and the table says why, etcd is as without
// the flag; every workload makes progress without errors.
func TestProtobufRun(t *testing.T) {
	concord, e := startConcord(t)
	u, rec := startMediaRecorder(t, concord)
	cfg := benchConfig(u, e, "create", "update", "get", "list", "watch")
	cfg.Protobuf = true
	cfg.Resources = []string{"configmaps", "widgets"}
	cfg.Duration = 500 * time.Millisecond
	cfg.GetObjects = 20
	cfg.ListObjects = 30
	cfg.Watchers = 3
	cfg.WriteRate = 50
	rep, _ := runBench(t, cfg)
	if len(rep.Failures) > 0 {
		t.Errorf("failures: %q", rep.Failures)
	}
	for _, w := range []string{"create", "update", "get", "list", "watch"} {
		for target, encoding := range map[string]string{"concord/configmaps": encodingProtobuf, "concord/widgets": encodingJSON, "etcd": ""} {
			s := result(t, rep, w, target)
			if s.OpsMedian <= 0 || s.Errors > 0 || s.Encoding != encoding {
				t.Errorf("%s on %s: %g ops/s, %d errors (%s), encoding %q; want progress, no errors, encoding %q",
					w, target, s.OpsMedian, s.Errors, s.Rounds[0].FirstError, s.Encoding, encoding)
			}
		}
	}
	if r := result(t, rep, "list", "concord/configmaps").Rounds[0]; !r.itemsChecked || r.Items != 30 {
		t.Errorf("protobuf list: items %d (checked %v); want 30", r.Items, r.itemsChecked)
	}
	if w := result(t, rep, "watch", "concord/configmaps").Watch; w.Lost != 0 || w.Writes == 0 || w.Events != int64(w.Writes*3) {
		t.Errorf("protobuf watch: %+v; want every write delivered to the 3 watchers", *w)
	}
	widgetLines := 0
	for _, line := range rec.lines() {
		if strings.Contains(line, " widgets ") {
			widgetLines++
		}
		json := strings.Contains(line, `sent "application/json"`) || strings.Contains(line, `sent ""`)
		if strings.Contains(line, " widgets ") != (json && strings.Contains(line, `accepts "application/json", answered "application/json"`)) {
			t.Errorf("request %s: want protobuf for configmaps, JSON for widgets", line)
		}
	}
	if lines := rec.lines(); widgetLines == 0 || widgetLines == len(lines) {
		t.Errorf("requests seen: %q; want some to widgets and some to configmaps", lines)
	}
	var table bytes.Buffer
	writeTable(&table, rep)
	if want := "encoding on the API targets: protobuf (application/vnd.kubernetes.protobuf) for configmaps; JSON for widgets (kube serves no protobuf for custom resources)"; !strings.Contains(table.String(), want) {
		t.Errorf("table has no %q", want)
	}
}
