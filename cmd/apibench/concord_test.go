package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/concord-dev/concord/apiserver"
	"github.com/concord-dev/concord/etcdstore"
	"github.com/concord-dev/concord/etcdstore/etcdtest"
	"github.com/concord-dev/concord/internal/syncbuf"
	"github.com/concord-dev/concord/registry"
)

// startConcord runs Concord's handler on a loopback HTTP server over a real
// embedded etcd (fsync off), as the apiserver tests do, and returns its URL
// and the etcd.
func startConcord(t *testing.T) (string, *etcdtest.Etcd) {
	t.Helper()
	e := etcdtest.Start(t)
	stores := registry.NewStores(etcdstore.New(e.Client, "/registry"), registry.DefaultWatchConfig())
	handler := apiserver.New(apiserver.Config{
		Stores: stores,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := registry.EnsureSystemNamespaces(ctx, stores); err != nil {
		t.Fatalf("system namespaces: %v", err)
	}
	srv := httptest.NewServer(handler)
	t.Cleanup(func() {
		for _, s := range stores {
			s.StopWatches()
		}
		srv.Close()
	})
	return srv.URL, e
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

func result(t *testing.T, rep *Report, workload, target string) *Summary {
	t.Helper()
	for _, s := range rep.Results {
		if s.Workload == workload && s.Target == target {
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

// TestOtherWorkloadsOnConcordAndEtcd runs update, get, list and watch,
// small, on both targets.
func TestOtherWorkloadsOnConcordAndEtcd(t *testing.T) {
	url, e := startConcord(t)
	cfg := benchConfig(url, e, "update", "get", "list", "watch")
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
	// --keep: the list objects are still there.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
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
