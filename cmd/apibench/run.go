package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// target is one measured endpoint, for an API with the resource its
// workloads write, and what the run created on it.
type target struct {
	spec TargetSpec
	// res is what the workloads write (ConfigMaps for etcd targets);
	// label names the target in progress lines: its name, with
	// "/<resource>" when the run writes other resources than ConfigMaps.
	res       resource
	label     string
	b         backend
	api       *httpBackend // nil for an etcd target
	serverPID int
	etcdPID   int

	mu sync.Mutex
	// objects are the names written per namespace, for the clean-up;
	// namespaces are the ones this run created, in order.
	objects    map[string]map[string]struct{}
	namespaces []string
	// crds are the CRDs this run created, deleted after the namespaces.
	crds []string
}

func (t *target) track(ns string, names ...string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.objects == nil {
		t.objects = map[string]map[string]struct{}{}
	}
	if t.objects[ns] == nil {
		t.objects[ns] = map[string]struct{}{}
	}
	for _, n := range names {
		t.objects[ns][n] = struct{}{}
	}
}

// ensureNamespace makes ns exist on the target and remembers that the run
// created it.
func (t *target) ensureNamespace(ctx context.Context, ns string) error {
	created, err := t.b.ensureNamespace(ctx, ns)
	if err != nil {
		return fmt.Errorf("target %s: %w", t.label, err)
	}
	if created {
		t.mu.Lock()
		t.namespaces = append(t.namespaces, ns)
		t.mu.Unlock()
	}
	return nil
}

// window is one target's turn in one round of one workload.
type window struct {
	Workload string
	Round    int
	Target   int
}

// schedule is the order of the windows: workload after workload, and for
// each, round after round, every target in flag order (A B A B …), so that
// a machine that gets slower or faster during the run affects every target
// alike.
func schedule(workloads []string, rounds, targets int) []window {
	var out []window
	for _, w := range workloads {
		for r := 1; r <= rounds; r++ {
			for t := range targets {
				out = append(out, window{Workload: w, Round: r, Target: t})
			}
		}
	}
	return out
}

// connect makes a backend for every target: an API target is measured
// once per resource of cfg.Resources (each its own target, over the same
// connections), an etcd target once.
func connect(cfg Config) ([]*target, error) {
	conns := cfg.Workers + 16
	if slices.Contains(cfg.Workloads, "watch") {
		conns += cfg.Watchers
	}
	var out []*target
	closeAll := func() {
		for _, t := range out {
			t.b.close()
		}
	}
	onlyConfigMaps := len(cfg.Resources) == 1 && cfg.Resources[0] == configMaps.Name
	for _, spec := range cfg.Targets {
		add := func(res resource, b backend, api *httpBackend) {
			label := spec.Name
			if !onlyConfigMaps && api != nil {
				label += "/" + res.Name
			}
			out = append(out, &target{spec: spec, res: res, label: label, b: b, api: api,
				serverPID: cfg.ServerPIDs[spec.Name], etcdPID: cfg.EtcdPIDs[spec.Name]})
		}
		var api *httpBackend
		var err error
		switch spec.Kind {
		case kindURL:
			api = newHTTPBackend(spec.Addr, conns, cfg.RequestTimeout)
		case kindKubeconfig:
			api, err = newKubeconfigBackend(spec.Addr, cfg.RequestTimeout)
		case kindEtcd:
			var b backend
			b, err = newEtcdBackend(strings.Split(spec.Addr, ","), cfg.EtcdPrefix, cfg.RequestTimeout)
			if err == nil {
				add(configMaps, b, nil)
			}
		default:
			err = fmt.Errorf("unknown kind %q", spec.Kind)
		}
		if err != nil {
			closeAll()
			return nil, fmt.Errorf("target %s: %w", spec.Name, err)
		}
		if api != nil {
			api.pb = cfg.Protobuf
			for _, name := range cfg.Resources {
				b := api.withResource(resourceNamed(name))
				add(b.res, b, b)
			}
		}
	}
	return out, nil
}

// run measures every workload on every target, interleaved, cleans up
// (unless cfg.Keep) and returns the report. Progress goes to progressOut.
// A cancelled ctx stops the measuring; the clean-up still runs.
func run(ctx context.Context, cfg Config, progressOut io.Writer) (*Report, error) {
	targets, err := connect(cfg)
	if err != nil {
		return nil, err
	}
	defer func() {
		for _, t := range targets {
			t.b.close()
		}
	}()
	if slices.Contains(cfg.Workloads, "watch") {
		raiseNoFile()
	}
	p := newProgress(progressOut, cfg.Progress)
	defer p.close()

	rep := &Report{Started: time.Now().UTC(), RunID: newRunID(), Targets: cfg.Targets, Resources: cfg.Resources, Protobuf: cfg.Protobuf, Rounds: cfg.Rounds,
		Duration: cfg.Duration.String(), Workers: cfg.Workers, Object: cfg.ObjectSize, CPUs: runtime.NumCPU(), LoadStart: loadAverage()}

	measureErr := measure(ctx, cfg, rep, targets, p)
	rep.LoadEnd = loadAverage()
	if ctx.Err() != nil {
		rep.Interrupt = true
	}

	if !cfg.Keep {
		// The clean-up gets its own time: it must run after an interrupt.
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		// Objects first on every target, then namespaces: targets may
		// share a store, and deleting a namespace deletes what is in it
		// one object at a time.
		for _, t := range targets {
			if err := cleanupObjects(cctx, t, p); err != nil {
				p.note(fmt.Sprintf("clean-up of target %s: %v", t.label, err))
				measureErr = errors.Join(measureErr, fmt.Errorf("clean-up of target %s: %w", t.label, err))
			}
		}
		for _, t := range targets {
			for _, ns := range slices.Backward(t.namespaces) {
				if err := t.b.deleteNamespace(cctx, ns); err != nil {
					measureErr = errors.Join(measureErr, fmt.Errorf("clean-up of target %s: delete namespace %s: %w", t.label, ns, err))
				}
			}
		}
		// CRDs last: deleting one deletes its objects, one at a time.
		for _, t := range targets {
			if err := deleteCRDs(cctx, t.api, t.crds, cfg.Workers, p); err != nil {
				measureErr = errors.Join(measureErr, fmt.Errorf("clean-up of target %s: %w", t.label, err))
			}
		}
	}
	return rep, measureErr
}

// measure runs the schedule: before a workload's first window it prepares
// that workload on every target, after its last it checks the results.
func measure(ctx context.Context, cfg Config, rep *Report, targets []*target, p *progress) error {
	if err := installResources(ctx, cfg, targets, p); err != nil {
		return err
	}
	for _, t := range targets {
		if err := t.ensureNamespace(ctx, cfg.Namespace); err != nil {
			return err
		}
	}
	if err := measureSizes(ctx, cfg, rep, targets, p); err != nil {
		return err
	}
	var (
		current   string
		workloads []workload
		summaries []*Summary
	)
	finish := func() {
		for i, w := range workloads {
			if w != nil {
				w.finish(ctx, summaries[i])
			}
		}
		for i, s := range summaries {
			var base *Summary
			if i > 0 {
				base = summaries[0]
			}
			summarize(s, base)
			if s.Verified != nil && !*s.Verified {
				rep.Failures = append(rep.Failures, fmt.Sprintf("%s on %s: %s", s.Workload, targets[i].label, failureText(s)))
			}
		}
		resourceRatios(summaries, cfg.Resources[0])
		rep.Results = append(rep.Results, summaries...)
		workloads, summaries = nil, nil
	}
	windowed := slices.DeleteFunc(slices.Clone(cfg.Workloads), func(w string) bool { return w == "crds" })
	for _, win := range schedule(windowed, cfg.Rounds, len(targets)) {
		if ctx.Err() != nil {
			break
		}
		if win.Workload != current {
			if current != "" {
				finish()
			}
			current = win.Workload
			for _, t := range targets {
				s := &Summary{Workload: win.Workload, Target: t.spec.Name, Kind: t.spec.Kind, Resource: t.res.Name}
				if t.api != nil {
					s.Encoding = t.api.encoding()
				}
				if why := notApplicable(win.Workload, t); why != "" {
					// No windows on this target, and no row in the table.
					s.Skipped = why
					s.Notes = append(s.Notes, why)
					workloads, summaries = append(workloads, nil), append(summaries, s)
					continue
				}
				w := newWorkload(win.Workload, cfg, rep.RunID, t)
				p.status(fmt.Sprintf("setup %s target=%s", win.Workload, t.label), nil, time.Now())
				if err := w.setup(ctx, p); err != nil {
					return fmt.Errorf("set up %s on target %s: %w", win.Workload, t.label, err)
				}
				workloads = append(workloads, w)
				summaries = append(summaries, s)
			}
		}
		if workloads[win.Target] == nil {
			continue
		}
		t := targets[win.Target]
		var ops atomic.Int64
		label := fmt.Sprintf("round %d/%d %s target=%s", win.Round, cfg.Rounds, win.Workload, t.label)
		p.status(label, &ops, time.Now())
		cpu := startCPU(t.serverPID, t.etcdPID)
		r := workloads[win.Target].round(ctx, win.Round, &ops)
		use := cpu.stop()
		r.Round = win.Round
		r.CPU = cpuJSON(use)
		r.CPUPerOp = use.time().perOp(r.Ops)
		s := summaries[win.Target]
		s.cpuSec = s.cpuSec.plus(use.time())
		s.Rounds = append(s.Rounds, r)
		p.done(fmt.Sprintf("%s: %s", label, roundLine(r)))
	}
	if current != "" {
		finish()
	}
	if slices.Contains(cfg.Workloads, "crds") && ctx.Err() == nil {
		return measureCRDs(ctx, cfg, rep, targets, p)
	}
	return nil
}

// cleanupObjects deletes the objects the run wrote on t.
func cleanupObjects(ctx context.Context, t *target, p *progress) error {
	t.mu.Lock()
	nss := make([]string, 0, len(t.objects))
	for ns := range t.objects {
		nss = append(nss, ns)
	}
	slices.Sort(nss)
	t.mu.Unlock()
	var errs []error
	for _, ns := range nss {
		t.mu.Lock()
		names := make([]string, 0, len(t.objects[ns]))
		for n := range t.objects[ns] {
			names = append(names, n)
		}
		t.mu.Unlock()
		slices.Sort(names)
		label := fmt.Sprintf("clean-up target=%s namespace=%s", t.label, ns)
		var done atomic.Int64
		p.status(label, &done, time.Now())
		err := t.b.deleteAll(ctx, ns, names, func(n int) { done.Store(int64(n)) })
		p.done(fmt.Sprintf("%s: %d objects deleted", label, done.Load()))
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func failureText(s *Summary) string {
	if s.Workload == "contended" {
		return fmt.Sprintf("%d increments lost (the counter grew by fewer than the successful updates)", s.LostIncrements)
	}
	if w := s.Watch; w != nil {
		return fmt.Sprintf("%d events lost, %d duplicated, %d out of order, %d watches failed to open, %d writes", w.Lost, w.Duplicated, w.OutOfOrder, w.OpenFailed, w.Writes)
	}
	return "failed"
}

func newRunID() string {
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// raiseNoFile lifts the soft limit on open files to the hard one, for
// thousands of watches over HTTP/1.1 (one connection each).
func raiseNoFile() {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err == nil && lim.Cur < lim.Max {
		lim.Cur = lim.Max
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim)
	}
}

// parallel runs job(0..n-1) on k goroutines, stopping at the first error,
// and reports how many finished.
func parallel(ctx context.Context, n, k int, progress func(int), job func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		next, done atomic.Int64
		wg         sync.WaitGroup
		once       sync.Once
		first      error
	)
	for range min(k, n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := job(ctx, i); err != nil {
					once.Do(func() { first = err; cancel() })
					return
				}
				d := done.Add(1)
				if progress != nil {
					progress(int(d))
				}
			}
		}()
	}
	wg.Wait()
	if first == nil && ctx.Err() != nil && done.Load() < int64(n) {
		first = ctx.Err()
	}
	return first
}
