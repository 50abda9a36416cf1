package main

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/concord-dev/concord/internal/procfs"
)

// watchOpeners is how many watches are being opened at once.
const watchOpeners = 64

// watchWL: W watchers watch a namespace that holds one object, from the
// resourceVersion of a list, while a writer updates that object at a fixed
// rate. Every update carries the time it was sent; a watcher's latency is
// the time it received the event minus that.
type watchWL struct {
	wlBase
	rv int64 // of the watched object
	// pid is the process whose RSS is measured (0: none).
	pid int
}

const watchedObject = "watched"

func (w *watchWL) setup(ctx context.Context, p *progress) error {
	rvs, err := w.fixtures(ctx, p, "watch", 1, func(int) string { return watchedObject },
		func(int) map[string]string {
			return map[string]string{"payload": w.payload, "sent": "0", "seq": "setup"}
		})
	if err != nil {
		return err
	}
	w.rv = rvs[0]
	w.pid = w.t.serverPID
	if w.pid == 0 {
		w.pid = w.t.etcdPID
	}
	if w.pid > 0 {
		if _, err := procfs.VmRSS(w.pid); err != nil {
			p.note(fmt.Sprintf("warning: target %s: RSS of pid %d: %v", w.t.spec.Name, w.pid, err))
			w.pid = 0
		}
	}
	return nil
}

// watcher is one client's watch and what it received. Like an informer,
// it watches again from the last resourceVersion it received when the
// server ends the stream (a server may end any watch at any time), so an
// event counts as lost only if it never arrives.
type watcher struct {
	maxRV atomic.Int64
	ops   *atomic.Int64
	done  chan struct{}

	// Written by the stream goroutines (one at a time), read after done.
	rvs        []int64
	sent       []int64 // the event's "sent" (Unix ns), 0 if it has none
	recv       []time.Time
	other      int // events that are not a MODIFIED of the object
	rewatches  int
	openErr    error // the first watch failed
	streamErr  error // the first reason a stream ended early
	gaveUpOpen bool
}

func (wt *watcher) handle(ev watchEvent) {
	if ev.Type != "MODIFIED" {
		wt.other++
		return
	}
	sent, _ := strconv.ParseInt(ev.Data["sent"], 10, 64)
	wt.rvs = append(wt.rvs, ev.RV)
	wt.sent = append(wt.sent, sent)
	wt.recv = append(wt.recv, ev.Received)
	if ev.RV > wt.maxRV.Load() {
		wt.maxRV.Store(ev.RV)
	}
	wt.ops.Add(1)
}

// maxRewatches bounds the re-watches of one watcher in one window.
const maxRewatches = 100

// run opens the watch from rv, calls opened with the outcome of that first
// open, and keeps watching until ctx ends.
func (wt *watcher) run(ctx context.Context, b backend, ns string, rv int64, opened func(error)) {
	defer close(wt.done)
	s, err := b.watch(ctx, ns, rv, wt.handle)
	opened(err)
	if err != nil {
		wt.openErr = err
		return
	}
	for {
		<-s.Done
		if ctx.Err() != nil {
			return
		}
		if wt.streamErr == nil {
			wt.streamErr = s.Err
		}
		if wt.rewatches++; wt.rewatches > maxRewatches {
			return
		}
		from := max(rv, wt.maxRV.Load())
		for {
			if s, err = b.watch(ctx, ns, from, wt.handle); err == nil {
				break
			}
			if ctx.Err() != nil {
				return
			}
			if wt.rewatches++; wt.rewatches > maxRewatches {
				wt.gaveUpOpen = true
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// finished reports a watcher that has stopped for good.
func (wt *watcher) finished() bool {
	select {
	case <-wt.done:
		return true
	default:
		return false
	}
}

// write updates the watched object, stamped with the time it is sent.
func (w *watchWL) write(ctx context.Context, seq string) (int64, error) {
	data := map[string]string{"payload": w.payload, "sent": strconv.FormatInt(time.Now().UnixNano(), 10), "seq": seq}
	rv, err := w.b.update(ctx, w.ns, watchedObject, data, w.rv)
	if err != nil {
		if _, cur, gerr := w.b.get(ctx, w.ns, watchedObject); gerr == nil {
			w.rv = cur
		}
		return 0, err
	}
	w.rv = rv
	return rv, nil
}

// waitAll waits, at most d, until every watcher has rv or its stream ended.
func waitAll(ctx context.Context, watchers []*watcher, rv int64, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for {
		pending := 0
		for _, wt := range watchers {
			if wt.maxRV.Load() < rv && !wt.finished() {
				pending++
			}
		}
		if pending == 0 {
			return true
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func (w *watchWL) round(ctx context.Context, _ int, ops *atomic.Int64) RoundResult {
	start := time.Now()
	wr := &WatchRound{Watchers: w.cfg.Watchers, WriteRate: jfloat(w.cfg.WriteRate), RSSPerWatcherKiB: jfloat(nan)}
	r := RoundResult{Watch: wr}
	fail := func(err error) RoundResult {
		r.Errors++
		if r.FirstError == "" {
			r.FirstError = err.Error()
		}
		r.Seconds = jfloat(time.Since(start).Seconds())
		return r
	}
	_, listRV, err := w.b.list(ctx, w.ns, true)
	if err != nil {
		return fail(fmt.Errorf("list for the watch's resourceVersion: %w", err))
	}

	var rssBefore int64
	if w.pid > 0 {
		rssBefore, _ = procfs.VmRSS(w.pid)
	}

	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	watchers := make([]*watcher, w.cfg.Watchers)
	var (
		opening  sync.WaitGroup
		openMu   sync.Mutex
		openErrs []error
		sem      = make(chan struct{}, watchOpeners)
	)
	openStart := time.Now()
	for i := range watchers {
		wt := &watcher{ops: ops, done: make(chan struct{})}
		watchers[i] = wt
		opening.Add(1)
		sem <- struct{}{}
		go wt.run(wctx, w.b, w.ns, listRV, func(err error) {
			if err != nil {
				openMu.Lock()
				openErrs = append(openErrs, err)
				openMu.Unlock()
			}
			<-sem
			opening.Done()
		})
	}
	opening.Wait()
	wr.OpenSec = jfloat(time.Since(openStart).Seconds())
	wr.OpenFailed = len(openErrs)
	wr.Opened = len(watchers) - wr.OpenFailed
	if len(openErrs) > 0 {
		wr.FirstError = openErrs[0].Error()
	}
	if w.pid > 0 && rssBefore > 0 && wr.Opened > 0 {
		if rss, err := procfs.VmRSS(w.pid); err == nil {
			wr.RSSPerWatcherKiB = jfloat(float64(rss-rssBefore) / float64(wr.Opened))
		}
	}

	// A first update that every watcher receives before the measured ones:
	// it is counted for loss but not for latency, so that starting the
	// server's own etcd watch is not counted as delivery latency.
	var want []int64
	timed := map[int64]bool{}
	if rv, err := w.write(ctx, "warm-up"); err == nil {
		want = append(want, rv)
		waitAll(ctx, watchers, rv, w.cfg.WatchDrain)
	} else {
		wr.WriteErrors++
		r.Errors++
		r.FirstError = err.Error()
	}

	interval := time.Duration(float64(time.Second) / w.cfg.WriteRate)
	writeStart := time.Now()
	for i := 0; ctx.Err() == nil; i++ {
		at := writeStart.Add(time.Duration(i) * interval)
		if !at.Before(writeStart.Add(w.cfg.Duration)) {
			break
		}
		if d := time.Until(at); d > 0 {
			time.Sleep(d)
		}
		rv, err := w.write(ctx, strconv.Itoa(i))
		if err != nil {
			wr.WriteErrors++
			r.Errors++
			if r.FirstError == "" {
				r.FirstError = err.Error()
			}
			continue
		}
		want = append(want, rv)
		timed[rv] = true
	}
	writeSecs := time.Since(writeStart).Seconds()
	wr.Writes = len(timed)
	if len(want) > 0 {
		waitAll(ctx, watchers, want[len(want)-1], w.cfg.WatchDrain)
	}

	// Close every watch and wait for its reader.
	cancel()
	stopDeadline := time.After(w.cfg.WatchDrain)
	for _, wt := range watchers {
		select {
		case <-wt.done:
		case <-stopDeadline:
		}
	}

	wantSet := make(map[int64]bool, len(want))
	for _, rv := range want {
		wantSet[rv] = true
	}
	var lat []time.Duration
	for _, wt := range watchers {
		if !wt.finished() {
			// Still running after the drain: do not touch its slices.
			wr.Stuck++
			continue
		}
		if wt.openErr != nil {
			continue // counted in OpenFailed
		}
		wr.Rewatches += wt.rewatches
		if wt.gaveUpOpen {
			wr.RewatchFailed++
		}
		if wt.streamErr != nil && wr.FirstError == "" {
			wr.FirstError = wt.streamErr.Error()
		}
		seen := make(map[int64]bool, len(wt.rvs))
		var top int64
		for i, rv := range wt.rvs {
			switch {
			case seen[rv]:
				wr.Duplicated++
			case rv < top:
				wr.OutOfOrder++
			}
			if !wantSet[rv] {
				wr.Unexpected++
			} else if timed[rv] && !seen[rv] && wt.sent[i] > 0 {
				lat = append(lat, wt.recv[i].Sub(time.Unix(0, wt.sent[i])))
				wr.Events++
			}
			seen[rv] = true
			top = max(top, rv)
		}
		wr.Unexpected += int64(wt.other)
		for _, rv := range want {
			if !seen[rv] {
				wr.Lost++
			}
		}
	}
	r.Errors += int64(wr.OpenFailed + wr.RewatchFailed + wr.Stuck)
	if r.Errors > 0 && r.FirstError == "" {
		r.FirstError = wr.FirstError
	}

	r.Seconds = jfloat(time.Since(start).Seconds())
	r.samples = merge(lat)
	r.Ops = int64(len(r.samples))
	r.OpsPerSec = jfloat(float64(r.Ops) / writeSecs)
	r.P50ms = jfloat(ms(percentile(r.samples, 0.50)))
	r.P99ms = jfloat(ms(percentile(r.samples, 0.99)))
	r.MaxMs = jfloat(ms(percentile(r.samples, 1)))
	if len(r.samples) == 0 {
		r.P50ms, r.P99ms, r.MaxMs = jfloat(math.NaN()), jfloat(math.NaN()), jfloat(math.NaN())
	}
	if ctx.Err() != nil && r.FirstError == "" {
		r.FirstError = ctx.Err().Error()
	}
	return r
}
