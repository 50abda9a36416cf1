package main

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/concord-dev/concord/internal/procfs"
)

// The crds workload installs --crds CRDs (distinct groups and kinds, one
// version, a small schema each) through an API target and measures what
// many idle CRDs cost:
//
//  1. with --replica-bin, a replica started on the target's etcd before
//     the install: its start-up and its memory with none of them;
//  2. the install: every CRD created (--workers at a time), the time until
//     a watch has seen each Established, and until the target's aggregated
//     discovery lists every one;
//  3. with --replica-bin, a replica started after: the time until /readyz
//     answers 200 and until its aggregated discovery lists every CRD, and
//     its memory; (memory with all) - (memory with none) / --crds is the
//     memory per idle CRD;
//  4. the latency of discovery and OpenAPI on the target, after one
//     warm-up request each: --rounds rounds, each giving every endpoint a
//     window of --duration, one request after the other;
//  5. the CRDs deleted (unless --keep), and the time until they are gone.

// CRDResult is what the crds workload measured on one API target.
type CRDResult struct {
	Target  string `json:"target"`
	CRDs    int    `json:"crds"`
	Workers int    `json:"workers"`
	// From the first create sent: until the last create was answered,
	// until every CRD was Established (as a watch of them saw it), until
	// the target's aggregated discovery listed every one.
	CreatedSec     jfloat `json:"createdSeconds"`
	EstablishedSec jfloat `json:"establishedSeconds"`
	ServedSec      jfloat `json:"servedSeconds"`
	// CreateP50ms/P99ms: one create's latency; EstablishP50ms/P99ms: a
	// CRD's create sent → its Established event.
	CreateP50ms    jfloat  `json:"createP50ms"`
	CreateP99ms    jfloat  `json:"createP99ms"`
	EstablishP50ms jfloat  `json:"establishP50ms"`
	EstablishP99ms jfloat  `json:"establishP99ms"`
	InstallCPU     CPUJSON `json:"installCpuCores"`
	// Replicas (--replica-bin): started before the install (none of the
	// CRDs in etcd) and after it (all of them).
	Replicas      []ReplicaResult `json:"replicas,omitempty"`
	RSSPerCRDKiB  jfloat          `json:"rssPerCRDKiB"`
	HeapPerCRDKiB jfloat          `json:"heapPerCRDKiB"`
	// The target's own memory (--server-pid; heap: its /metrics) before
	// and after the install, idle, after a garbage collection.
	TargetBefore        Memory `json:"targetMemoryBefore"`
	TargetAfter         Memory `json:"targetMemoryAfter"`
	TargetRSSPerCRDKiB  jfloat `json:"targetRSSPerCRDKiB"`
	TargetHeapPerCRDKiB jfloat `json:"targetHeapPerCRDKiB"`

	Endpoints  []*EndpointResult `json:"endpoints"`
	DeletedSec jfloat            `json:"deletedSeconds"`
	Notes      []string          `json:"notes,omitempty"`
}

// Memory is a process's idle memory in KiB: RSS (/proc) and Go heap in
// use (go_memstats_heap_inuse_bytes), after a forced garbage collection;
// null when unknown.
type Memory struct {
	RSSKiB  jfloat `json:"rssKiB"`
	HeapKiB jfloat `json:"heapInuseKiB"`
}

// ReplicaResult is one replica's start-up with CRDs of the run in etcd.
type ReplicaResult struct {
	CRDs int `json:"crds"`
	// Groups is how many API groups its aggregated discovery lists.
	Groups int `json:"discoveryGroups"`
	// From the process's start: until /readyz answered 200, until its
	// aggregated discovery listed every CRD of the run (null for none).
	ReadySec  jfloat `json:"readySeconds"`
	ServedSec jfloat `json:"servedSeconds"`
	Memory
}

// EndpointResult is the latency of one discovery or OpenAPI request.
type EndpointResult struct {
	Name   string `json:"name"`
	Path   string `json:"path"`
	Accept string `json:"accept"`
	// Code and Bytes of the last answer; FirstMs is the warm-up request.
	Code       int    `json:"code"`
	Bytes      int    `json:"bytes"`
	FirstMs    jfloat `json:"firstMs"`
	Requests   int    `json:"requests"`
	P50ms      jfloat `json:"p50ms"`
	P99ms      jfloat `json:"p99ms"`
	MaxMs      jfloat `json:"maxMs"`
	Errors     int64  `json:"errors"`
	FirstError string `json:"firstError,omitempty"`

	samples []time.Duration
}

// crdLabel marks the CRDs of a run: bench.concord.dev/run=<runID>.
const crdLabel = "bench.concord.dev/run"

// crdGroupSuffix ends the group of every CRD of a run.
func crdGroupSuffix(runID string) string { return ".r" + runID + ".bench.concord.dev" }

// benchCRD is the i-th CRD of a run: group g<i>.r<runID>.bench.concord.dev,
// kind Gizmo<i>, namespaced, one version with a two-field spec.
func benchCRD(runID string, i int) (name, group string, body []byte) {
	group = fmt.Sprintf("g%04d%s", i, crdGroupSuffix(runID))
	singular := fmt.Sprintf("gizmo%04d", i)
	name = singular + "s." + group
	body = fmt.Appendf(nil, `{"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition",
"metadata":{"name":%q,"labels":{%q:%q,"app.kubernetes.io/managed-by":"apibench"}},
"spec":{"group":%q,"scope":"Namespaced",
"names":{"plural":"%ss","singular":%q,"kind":"Gizmo%04d","listKind":"Gizmo%04dList"},
"versions":[{"name":"v1","served":true,"storage":true,"schema":{"openAPIV3Schema":{"type":"object","properties":{
"spec":{"type":"object","properties":{"size":{"type":"string","enum":["small","large"]},"count":{"type":"integer","minimum":0}}}}}}}]}}`,
		name, crdLabel, runID, group, singular, singular, i, i)
	return name, group, body
}

// measureCRDs runs the crds workload on every API target, one after the
// other.
func measureCRDs(ctx context.Context, cfg Config, rep *Report, targets []*target, p *progress) error {
	done := map[string]bool{}
	for _, t := range targets {
		if t.api == nil || done[t.spec.Name] {
			continue
		}
		done[t.spec.Name] = true
		r, err := crdsOn(ctx, cfg, rep.RunID, t, p)
		if r != nil {
			rep.CRDs = append(rep.CRDs, r)
		}
		if err != nil {
			return fmt.Errorf("crds on target %s: %w", t.spec.Name, err)
		}
	}
	return nil
}

func crdsOn(ctx context.Context, cfg Config, runID string, t *target, p *progress) (*CRDResult, error) {
	r := &CRDResult{Target: t.spec.Name, CRDs: cfg.CRDs, Workers: cfg.Workers, RSSPerCRDKiB: jfloat(nan), HeapPerCRDKiB: jfloat(nan)}
	n := cfg.CRDs
	names, groups, bodies := make([]string, n), make([]string, n), make([][]byte, n)
	for i := range n {
		names[i], groups[i], bodies[i] = benchCRD(runID, i)
	}
	suffix := crdGroupSuffix(runID)
	label := "crds target=" + t.spec.Name

	if cfg.ReplicaBin != "" {
		rr, err := measureReplica(ctx, cfg, p, label, suffix, 0)
		if err != nil {
			return r, err
		}
		r.Replicas = append(r.Replicas, rr)
	}
	p.status(label+": the target's memory before", nil, time.Now())
	r.TargetBefore = idleMemory(ctx, t.api, t.serverPID)

	if err := installCRDs(ctx, cfg, t, r, runID, names, bodies, p); err != nil {
		return r, err
	}

	if cfg.ReplicaBin != "" {
		rr, err := measureReplica(ctx, cfg, p, label, suffix, n)
		if err != nil {
			return r, err
		}
		r.Replicas = append(r.Replicas, rr)
		base := r.Replicas[0]
		r.RSSPerCRDKiB = jfloat(perCRD(rr.RSSKiB, base.RSSKiB, n))
		r.HeapPerCRDKiB = jfloat(perCRD(rr.HeapKiB, base.HeapKiB, n))
	}
	p.status(label+": the target's memory after", nil, time.Now())
	r.TargetAfter = idleMemory(ctx, t.api, t.serverPID)
	r.TargetRSSPerCRDKiB = jfloat(perCRD(r.TargetAfter.RSSKiB, r.TargetBefore.RSSKiB, n))
	r.TargetHeapPerCRDKiB = jfloat(perCRD(r.TargetAfter.HeapKiB, r.TargetBefore.HeapKiB, n))

	if err := measureEndpoints(ctx, cfg, t, r, groups[n-1], p); err != nil {
		return r, err
	}
	if cfg.Keep {
		return r, nil
	}
	start := time.Now()
	if err := deleteCRDs(ctx, t.api, names, cfg.Workers, p); err != nil {
		return r, err
	}
	var left atomic.Int64
	left.Store(int64(n))
	p.status(label+": CRDs left", &left, start)
	for {
		items, _, err := t.api.listCRDs(ctx, crdLabel+"="+runID)
		if err != nil {
			return r, err
		}
		left.Store(int64(len(items)))
		if len(items) == 0 {
			break
		}
		if time.Since(start) > 5*time.Minute {
			return r, fmt.Errorf("%d CRDs still there 5 minutes after their deletion", len(items))
		}
		time.Sleep(200 * time.Millisecond)
	}
	r.DeletedSec = jfloat(time.Since(start).Seconds())
	t.crds = slices.DeleteFunc(t.crds, func(name string) bool { return slices.Contains(names, name) })
	p.done(fmt.Sprintf("%s: %d CRDs deleted and gone in %.1fs", label, n, float64(r.DeletedSec)))
	return r, nil
}

func perCRD(with, without jfloat, n int) float64 {
	return ratio(float64(with)-float64(without), float64(n))
}

// installCRDs creates the CRDs and waits until all are Established (a
// watch of the run's label) and in the target's aggregated discovery.
func installCRDs(ctx context.Context, cfg Config, t *target, r *CRDResult, runID string, names []string, bodies [][]byte, p *progress) error {
	n := len(names)
	label := "crds target=" + t.spec.Name
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	var (
		mu       sync.Mutex
		at       = map[string]time.Time{}
		allEst   = make(chan struct{})
		estCount atomic.Int64
	)
	ready, werr := make(chan struct{}), make(chan error, 1)
	go func() {
		werr <- t.api.watchEstablished(wctx, crdLabel+"="+runID, ready, func(name string, when time.Time) {
			mu.Lock()
			defer mu.Unlock()
			at[name] = when
			if estCount.Add(1) == int64(n) {
				close(allEst)
			}
		})
	}()
	select {
	case <-ready:
	case err := <-werr:
		return fmt.Errorf("watch the CRDs: %w", err)
	case <-time.After(cfg.RequestTimeout):
		return fmt.Errorf("watch the CRDs: not open after %s", cfg.RequestTimeout)
	}
	// Tracked before they exist: an interrupted run deletes them too.
	t.crds = append(t.crds, names...)

	cpu := startCPU(t.serverPID, t.etcdPID)
	start := time.Now()
	sent, lat := make([]time.Time, n), make([]time.Duration, n)
	var created atomic.Int64
	p.status(fmt.Sprintf("%s: create %d CRDs", label, n), &created, start)
	err := parallel(ctx, n, cfg.Workers, func(d int) { created.Store(int64(d)) }, func(ctx context.Context, i int) error {
		sent[i] = time.Now()
		ok, err := t.api.createCRD(ctx, bodies[i])
		lat[i] = time.Since(sent[i])
		if err == nil && !ok {
			err = errExists
		}
		if err != nil {
			return fmt.Errorf("create CRD %s: %w", names[i], err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	r.CreatedSec = jfloat(time.Since(start).Seconds())

	p.status(fmt.Sprintf("%s: %d created in %.1fs; Established", label, n, float64(r.CreatedSec)), &estCount, start)
	wait := crdWait + time.Duration(n)*100*time.Millisecond
	select {
	case <-allEst:
	case err := <-werr:
		return fmt.Errorf("watch the CRDs: %w (%d of %d Established)", err, estCount.Load(), n)
	case <-time.After(wait):
		return fmt.Errorf("%d of %d CRDs Established after %s", estCount.Load(), n, wait)
	case <-ctx.Done():
		return ctx.Err()
	}
	stopWatch()
	mu.Lock()
	var last time.Time
	est := make([]time.Duration, n)
	for i, name := range names {
		est[i] = at[name].Sub(sent[i])
		if at[name].After(last) {
			last = at[name]
		}
	}
	mu.Unlock()
	r.EstablishedSec = jfloat(last.Sub(start).Seconds())

	var served atomic.Int64
	p.status(fmt.Sprintf("%s: all Established after %.1fs; in aggregated discovery", label, float64(r.EstablishedSec)), &served, start)
	suffix := crdGroupSuffix(runID)
	for {
		groups, _, err := t.api.discoveryGroups(ctx)
		if err != nil {
			return err
		}
		served.Store(int64(countSuffix(groups, suffix)))
		if served.Load() >= int64(n) {
			break
		}
		if time.Since(last) > wait {
			return fmt.Errorf("aggregated discovery lists %d of %d CRDs %s after all were Established", served.Load(), n, wait)
		}
		time.Sleep(50 * time.Millisecond)
	}
	r.ServedSec = jfloat(time.Since(start).Seconds())
	r.InstallCPU = cpuJSON(cpu.stop())

	createLat, estLat := merge(lat), merge(est)
	r.CreateP50ms, r.CreateP99ms = jfloat(ms(percentile(createLat, 0.5))), jfloat(ms(percentile(createLat, 0.99)))
	r.EstablishP50ms, r.EstablishP99ms = jfloat(ms(percentile(estLat, 0.5))), jfloat(ms(percentile(estLat, 0.99)))
	p.done(fmt.Sprintf("%s: %d CRDs created in %.1fs, all Established after %.1fs, all in aggregated discovery after %.1fs; create→Established p50 %s p99 %s; CPU server %s etcd %s",
		label, n, float64(r.CreatedSec), float64(r.EstablishedSec), float64(r.ServedSec), fmtMs(r.EstablishP50ms), fmtMs(r.EstablishP99ms),
		num("%.2f", r.InstallCPU.Server), num("%.2f", r.InstallCPU.Etcd)))
	return nil
}

// measureReplica starts a replica with want CRDs of the run in etcd, times
// its start-up, reads its idle memory and stops it.
func measureReplica(ctx context.Context, cfg Config, p *progress, label, suffix string, want int) (ReplicaResult, error) {
	rr := ReplicaResult{CRDs: want, ReadySec: jfloat(nan), ServedSec: jfloat(nan)}
	label = fmt.Sprintf("%s: replica with %d CRDs", label, want)
	p.status(label+": start", nil, time.Now())
	rep, err := startReplica(ctx, cfg)
	if err != nil {
		return rr, err
	}
	defer rep.stop()
	ready, err := rep.waitReady(ctx)
	if err != nil {
		return rr, err
	}
	rr.ReadySec = jfloat(ready.Seconds())
	served, groups, err := rep.waitServed(ctx, suffix, want)
	if err != nil {
		return rr, err
	}
	rr.Groups = groups
	if want > 0 {
		rr.ServedSec = jfloat(served.Seconds())
	}
	p.status(label+": idle memory", nil, time.Now())
	rr.Memory = idleMemory(ctx, rep.api, rep.cmd.Process.Pid)
	p.done(fmt.Sprintf("%s: /readyz 200 after %.2fs, all CRDs served after %s, %d API groups; idle RSS %s MiB, heap in use %s MiB",
		label, float64(rr.ReadySec), num("%.2fs", rr.ServedSec), rr.Groups, num("%.1f", rr.RSSKiB/1024), num("%.1f", rr.HeapKiB/1024)))
	return rr, nil
}

// idleMemory waits replicaSettle, has the server collect its garbage (its
// heap profile with gc=1), waits a second and reads the RSS of pid (0:
// unknown) and the heap in use of the server's /metrics.
func idleMemory(ctx context.Context, api *httpBackend, pid int) Memory {
	time.Sleep(replicaSettle)
	_, _, _, _ = api.fetch(ctx, "/debug/pprof/heap?gc=1", "application/octet-stream", false)
	time.Sleep(time.Second)
	m := Memory{RSSKiB: jfloat(nan), HeapKiB: jfloat(nan)}
	if pid > 0 {
		if kib, err := procfs.VmRSS(pid); err == nil {
			m.RSSKiB = jfloat(kib)
		}
	}
	if code, _, buf, err := api.fetch(ctx, "/metrics", "text/plain", true); err == nil {
		if code == http.StatusOK {
			m.HeapKiB = jfloat(metricValue(buf.String(), "go_memstats_heap_inuse_bytes") / 1024)
		}
		bufPool.Put(buf)
	}
	return m
}

// measureEndpoints times discovery and OpenAPI on the target: one warm-up
// request each, then rounds of windows, every endpoint one window of
// --duration per round, one request after the other.
func measureEndpoints(ctx context.Context, cfg Config, t *target, r *CRDResult, group string, p *progress) error {
	r.Endpoints = []*EndpointResult{
		{Name: "aggregated discovery", Path: "/apis", Accept: aggregatedDiscovery},
		{Name: "discovery /apis", Path: "/apis", Accept: "application/json"},
		{Name: "openapi v2", Path: "/openapi/v2", Accept: "application/json"},
		{Name: "openapi v3 index", Path: "/openapi/v3", Accept: "application/json"},
		{Name: "openapi v3 of a CRD group", Path: "/openapi/v3/apis/" + group + "/v1", Accept: "application/json"},
	}
	label := "crds target=" + t.spec.Name
	get := func(ctx context.Context, ep *EndpointResult) (time.Duration, error) {
		t0 := time.Now()
		code, n, _, err := t.api.fetch(ctx, ep.Path, ep.Accept, false)
		d := time.Since(t0)
		if err != nil {
			return d, err
		}
		ep.Code, ep.Bytes = code, n
		if code >= 500 || code == http.StatusTooManyRequests {
			return d, fmt.Errorf("GET %s: %d", ep.Path, code)
		}
		return d, nil
	}
	for _, ep := range r.Endpoints {
		p.status(fmt.Sprintf("%s: warm-up %s", label, ep.Name), nil, time.Now())
		d, err := get(ctx, ep)
		if err != nil {
			return fmt.Errorf("warm-up %s: %w", ep.Name, err)
		}
		ep.FirstMs = jfloat(ms(d))
	}
	if ep := r.Endpoints[4]; ep.Code == http.StatusNotFound {
		r.Notes = append(r.Notes, fmt.Sprintf("%s answers 404: custom resources are not in Concord's OpenAPI (docs/crds.md, not served yet)", ep.Path))
	}
	for round := 1; round <= cfg.Rounds && ctx.Err() == nil; round++ {
		for _, ep := range r.Endpoints {
			var ops atomic.Int64
			wl := fmt.Sprintf("round %d/%d crds %s target=%s", round, cfg.Rounds, ep.Name, t.spec.Name)
			p.status(wl, &ops, time.Now())
			elapsed, stats := closedLoop(ctx, 1, cfg.Duration, &ops, func(ctx context.Context, _ int, _ *workerStats) error {
				_, err := get(ctx, ep)
				return err
			})
			rr := loopResult(elapsed, stats)
			ep.samples = append(ep.samples, rr.samples...)
			ep.Errors += rr.Errors
			if ep.FirstError == "" {
				ep.FirstError = rr.FirstError
			}
			p.done(fmt.Sprintf("%s: %d requests, p50 %s max %s; answer %d, %s", wl, rr.Ops, fmtMs(rr.P50ms), fmtMs(rr.MaxMs), ep.Code, fmtBytes(ep.Bytes)))
		}
	}
	for _, ep := range r.Endpoints {
		slices.Sort(ep.samples)
		ep.Requests = len(ep.samples)
		ep.P50ms, ep.P99ms, ep.MaxMs = jfloat(nan), jfloat(nan), jfloat(nan)
		if len(ep.samples) > 0 {
			ep.P50ms = jfloat(ms(percentile(ep.samples, 0.5)))
			ep.P99ms = jfloat(ms(percentile(ep.samples, 0.99)))
			ep.MaxMs = jfloat(ms(percentile(ep.samples, 1)))
		}
	}
	return nil
}

// fmtBytes is a size for people: 812 B, 12.3 KB, 1.52 MB.
func fmtBytes(n int) string {
	switch {
	case n < 1000:
		return fmt.Sprintf("%d B", n)
	case n < 1000*1000:
		return fmt.Sprintf("%.1f KB", float64(n)/1000)
	}
	return fmt.Sprintf("%.2f MB", float64(n)/1e6)
}
