package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// workload is one workload on one target: setup before its first window
// (not measured), round for every window, finish after its last window
// (checks that need all rounds).
type workload interface {
	setup(ctx context.Context, p *progress) error
	round(ctx context.Context, round int, ops *atomic.Int64) RoundResult
	finish(ctx context.Context, s *Summary)
}

func newWorkload(name string, cfg Config, runID string, t *target) workload {
	base := wlBase{cfg: cfg, t: t, b: t.b, ns: cfg.Namespace, runID: runID, payload: payload(t.res.payloadSize(cfg.ObjectSize))}
	switch name {
	case "create":
		return &createWL{wlBase: base, seq: make([]int, cfg.Workers)}
	case "update":
		return &updateWL{wlBase: base}
	case "apply":
		return &applyWL{wlBase: base}
	case "contended":
		return &contendedWL{wlBase: base}
	case "get":
		return &getWL{wlBase: base}
	case "list":
		base.ns = cfg.Namespace + "-list-" + t.spec.Name
		return &listWL{wlBase: base}
	case "watch":
		base.ns = cfg.Namespace + "-watch-" + t.spec.Name
		return &watchWL{wlBase: base}
	}
	panic("unknown workload " + name) // Validate refuses it
}

type wlBase struct {
	cfg     Config
	t       *target
	b       backend
	ns      string
	runID   string
	payload string
}

func (w *wlBase) name(kind string, i int) string {
	return fmt.Sprintf("%s-%s-%d", w.t.spec.Name, kind, i)
}

func (w *wlBase) finish(context.Context, *Summary) {}

// fixtures creates n objects named name(i) in the workload's namespace
// (existing ones are kept) and returns their revisions.
func (w *wlBase) fixtures(ctx context.Context, p *progress, what string, n int, name func(int) string, data func(int) map[string]string) ([]int64, error) {
	if err := w.t.ensureNamespace(ctx, w.ns); err != nil {
		return nil, err
	}
	names := make([]string, n)
	for i := range names {
		names[i] = name(i)
	}
	w.t.track(w.ns, names...)
	rvs := make([]int64, n)
	var done atomic.Int64
	p.status(fmt.Sprintf("setup %s target=%s: %d objects", what, w.t.label, n), &done, time.Now())
	err := parallel(ctx, n, max(w.cfg.Workers, 8), func(d int) { done.Store(int64(d)) }, func(ctx context.Context, i int) error {
		rv, err := w.b.create(ctx, w.ns, names[i], data(i))
		if errors.Is(err, errExists) {
			_, rv, err = w.b.get(ctx, w.ns, names[i])
		}
		if err != nil {
			return fmt.Errorf("create %s/%s: %w", w.ns, names[i], err)
		}
		rvs[i] = rv
		return nil
	})
	return rvs, err
}

// workerStats is what one worker of a closed loop saw in one window.
type workerStats struct {
	lat       []time.Duration
	errs      int64
	firstErr  error
	conflicts int64
	unknown   int64
	items     int // items of the checked lists; -1 none checked
}

// closedLoop runs op on workers goroutines for d: each starts operation
// after operation, the next when the last has finished, until the window
// is over. Operations that started before the end are waited for; the
// window's length is until the last one finished.
func closedLoop(ctx context.Context, workers int, d time.Duration, ops *atomic.Int64, op func(ctx context.Context, w int, st *workerStats) error) (time.Duration, []*workerStats) {
	stats := make([]*workerStats, workers)
	var wg sync.WaitGroup
	start := time.Now()
	deadline := start.Add(d)
	for w := range workers {
		st := &workerStats{items: -1, lat: make([]time.Duration, 0, 1024)}
		stats[w] = st
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				t0 := time.Now()
				if !t0.Before(deadline) {
					return
				}
				err := op(ctx, w, st)
				if err != nil {
					if ctx.Err() != nil {
						return
					}
					st.errs++
					if st.firstErr == nil {
						st.firstErr = err
					}
					// Do not spin on a target that fails at once.
					time.Sleep(10 * time.Millisecond)
					continue
				}
				st.lat = append(st.lat, time.Since(t0))
				ops.Add(1)
			}
		}()
	}
	wg.Wait()
	return time.Since(start), stats
}

// loopResult is the result of a closed-loop window.
func loopResult(elapsed time.Duration, stats []*workerStats) RoundResult {
	parts := make([][]time.Duration, len(stats))
	r := RoundResult{Seconds: jfloat(elapsed.Seconds())}
	for i, st := range stats {
		parts[i] = st.lat
		r.Errors += st.errs
		r.Conflicts += st.conflicts
		r.UnknownIncrements += st.unknown
		if st.firstErr != nil && r.FirstError == "" {
			r.FirstError = st.firstErr.Error()
		}
		// Any count that differs from the others is the one to show.
		if st.items >= 0 && (!r.itemsChecked || st.items != r.Items) {
			r.Items, r.itemsChecked = st.items, true
		}
	}
	r.samples = merge(parts...)
	r.Ops = int64(len(r.samples))
	r.OpsPerSec = jfloat(float64(r.Ops) / elapsed.Seconds())
	r.P50ms = jfloat(ms(percentile(r.samples, 0.50)))
	r.P99ms = jfloat(ms(percentile(r.samples, 0.99)))
	r.MaxMs = jfloat(ms(percentile(r.samples, 1)))
	return r
}

// create: every worker creates distinct objects, one after the other.
type createWL struct {
	wlBase
	seq []int // next sequence number of every worker, across rounds
}

func (w *createWL) setup(context.Context, *progress) error { return nil }

func (w *createWL) round(ctx context.Context, _ int, ops *atomic.Int64) RoundResult {
	data := map[string]string{"payload": w.payload}
	names := make([][]string, w.cfg.Workers)
	elapsed, stats := closedLoop(ctx, w.cfg.Workers, w.cfg.Duration, ops, func(ctx context.Context, wk int, st *workerStats) error {
		name := fmt.Sprintf("%s-c-%s-%d-%d", w.t.spec.Name, w.runID, wk, w.seq[wk])
		w.seq[wk]++
		// Tracked even when it failed: a timed-out create may be done.
		names[wk] = append(names[wk], name)
		_, err := w.b.create(ctx, w.ns, name, data)
		return err
	})
	for _, n := range names {
		w.t.track(w.ns, n...)
	}
	return loopResult(elapsed, stats)
}

// update: every worker replaces its own object with the resourceVersion of
// its last answer, no read in between.
type updateWL struct {
	wlBase
	rvs []int64
	n   []int
}

func (w *updateWL) setup(ctx context.Context, p *progress) error {
	var err error
	w.rvs, err = w.fixtures(ctx, p, "update", w.cfg.Workers, func(i int) string { return w.name("u", i) },
		func(int) map[string]string { return map[string]string{"payload": w.payload, "n": "0"} })
	w.n = make([]int, w.cfg.Workers)
	return err
}

func (w *updateWL) round(ctx context.Context, _ int, ops *atomic.Int64) RoundResult {
	data := make([]map[string]string, w.cfg.Workers)
	for i := range data {
		data[i] = map[string]string{"payload": w.payload}
	}
	elapsed, stats := closedLoop(ctx, w.cfg.Workers, w.cfg.Duration, ops, func(ctx context.Context, wk int, st *workerStats) error {
		w.n[wk]++
		data[wk]["n"] = strconv.Itoa(w.n[wk])
		name := w.name("u", wk)
		rv, err := w.b.update(ctx, w.ns, name, data[wk], w.rvs[wk])
		if err != nil {
			// Nothing else writes the object; a conflict means an
			// earlier update that failed did happen. Read it again.
			if _, cur, gerr := w.b.get(ctx, w.ns, name); gerr == nil {
				w.rvs[wk] = cur
			}
			return err
		}
		w.rvs[wk] = rv
		return nil
	})
	return loopResult(elapsed, stats)
}

// notApplicable is why target t cannot run workload name ("" if it can):
// raw etcd has no server-side apply.
func notApplicable(name string, t *target) string {
	if name == "apply" && t.api == nil {
		return "not applicable: raw etcd has no server-side apply"
	}
	return ""
}

// apply: every worker server-side applies its own object as its own field
// manager (apibench-<worker>), with a new data value every time; the setup
// applies each once, so that every measured apply changes an object.
type applyWL struct {
	wlBase
	n []int
}

func (w *applyWL) manager(i int) string { return fmt.Sprintf("apibench-%d", i) }

func (w *applyWL) data(i int) map[string]string {
	return map[string]string{"payload": w.payload, "n": strconv.Itoa(w.n[i])}
}

func (w *applyWL) setup(ctx context.Context, _ *progress) error {
	if err := w.t.ensureNamespace(ctx, w.ns); err != nil {
		return err
	}
	w.n = make([]int, w.cfg.Workers)
	for i := range w.cfg.Workers {
		w.t.track(w.ns, w.name("a", i))
	}
	return parallel(ctx, w.cfg.Workers, w.cfg.Workers, nil, func(ctx context.Context, i int) error {
		if _, err := w.t.api.apply(ctx, w.ns, w.name("a", i), w.manager(i), w.data(i)); err != nil {
			return fmt.Errorf("apply %s/%s: %w", w.ns, w.name("a", i), err)
		}
		return nil
	})
}

func (w *applyWL) round(ctx context.Context, _ int, ops *atomic.Int64) RoundResult {
	elapsed, stats := closedLoop(ctx, w.cfg.Workers, w.cfg.Duration, ops, func(ctx context.Context, wk int, _ *workerStats) error {
		w.n[wk]++
		_, err := w.t.api.apply(ctx, w.ns, w.name("a", wk), w.manager(wk), w.data(wk))
		return err
	})
	return loopResult(elapsed, stats)
}

// contended: every worker increments the counter of one object by
// read-modify-write, retrying on conflict. An operation is one successful
// increment; its latency includes the retries.
type contendedWL struct {
	wlBase
	initial int64
	total   int64 // successful increments over all rounds
	unknown int64
}

var errGaveUp = errors.New("still conflicting 10s after the window ended; gave up")

func (w *contendedWL) object() string { return w.t.spec.Name + "-contended" }

func (w *contendedWL) setup(ctx context.Context, p *progress) error {
	if _, err := w.fixtures(ctx, p, "contended", 1, func(int) string { return w.object() },
		func(int) map[string]string { return map[string]string{"payload": w.payload, "counter": "0"} }); err != nil {
		return err
	}
	var err error
	w.initial, err = w.counter(ctx)
	return err
}

func (w *contendedWL) counter(ctx context.Context) (int64, error) {
	data, _, err := w.b.get(ctx, w.ns, w.object())
	if err != nil {
		return 0, fmt.Errorf("read the counter: %w", err)
	}
	n, err := strconv.ParseInt(data["counter"], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("counter %q: %w", data["counter"], err)
	}
	return n, nil
}

func (w *contendedWL) round(ctx context.Context, _ int, ops *atomic.Int64) RoundResult {
	before, err := w.counter(ctx)
	if err != nil {
		return RoundResult{Errors: 1, FirstError: err.Error(), Seconds: jfloat(w.cfg.Duration.Seconds())}
	}
	giveUp := time.Now().Add(w.cfg.Duration + 10*time.Second)
	elapsed, stats := closedLoop(ctx, w.cfg.Workers, w.cfg.Duration, ops, func(ctx context.Context, _ int, st *workerStats) error {
		for {
			data, rv, err := w.b.get(ctx, w.ns, w.object())
			if err != nil {
				return err
			}
			n, err := strconv.ParseInt(data["counter"], 10, 64)
			if err != nil {
				return fmt.Errorf("counter %q: %w", data["counter"], err)
			}
			next := map[string]string{"payload": data["payload"], "counter": strconv.FormatInt(n+1, 10)}
			_, err = w.b.update(ctx, w.ns, w.object(), next, rv)
			switch {
			case err == nil:
				return nil
			case errors.Is(err, errConflict):
				st.conflicts++
				if time.Now().After(giveUp) {
					return errGaveUp
				}
				continue
			case errors.Is(err, errNotFound):
				return err
			}
			// A timeout or a broken connection: the increment may or may
			// not have been made.
			st.unknown++
			return err
		}
	})
	r := loopResult(elapsed, stats)
	after, err := w.counter(ctx)
	if err != nil {
		r.Errors++
		if r.FirstError == "" {
			r.FirstError = err.Error()
		}
		return r
	}
	r.CounterDelta = after - before
	r.LostIncrements = max(0, r.Ops-r.CounterDelta)
	w.total += r.Ops
	w.unknown += r.UnknownIncrements
	return r
}

// finish checks the whole run: the counter grew by exactly the successful
// increments (plus at most the ones whose outcome is unknown).
func (w *contendedWL) finish(ctx context.Context, s *Summary) {
	final, err := w.counter(ctx)
	if err != nil {
		s.Notes = append(s.Notes, "final counter check not done: "+err.Error())
		return
	}
	grew := final - w.initial
	switch {
	case grew < w.total:
		s.Notes = append(s.Notes, fmt.Sprintf("LOST INCREMENTS: the counter grew by %d over the run, but %d increments succeeded", grew, w.total))
		lost := w.total - grew
		// The per-round checks may have found them already.
		var perRound int64
		for _, r := range s.Rounds {
			perRound += r.LostIncrements
		}
		if lost > perRound && len(s.Rounds) > 0 {
			s.Rounds[len(s.Rounds)-1].LostIncrements += lost - perRound
		}
	case grew > w.total+w.unknown:
		s.Notes = append(s.Notes, fmt.Sprintf("the counter grew by %d, more than the %d successful and %d uncertain increments: something else writes %s", grew, w.total, w.unknown, w.object()))
	default:
		s.Notes = append(s.Notes, fmt.Sprintf("no increment lost: the counter grew by %d for %d successful increments (%d uncertain)", grew, w.total, w.unknown))
	}
}

// get: quorum reads of random objects of a pre-created set.
type getWL struct{ wlBase }

func (w *getWL) setup(ctx context.Context, p *progress) error {
	_, err := w.fixtures(ctx, p, "get", w.cfg.GetObjects, func(i int) string { return w.name("g", i) },
		func(int) map[string]string { return map[string]string{"payload": w.payload} })
	return err
}

func (w *getWL) round(ctx context.Context, round int, ops *atomic.Int64) RoundResult {
	rngs := make([]*rand.Rand, w.cfg.Workers)
	for i := range rngs {
		rngs[i] = rand.New(rand.NewPCG(uint64(round), uint64(i)))
	}
	elapsed, stats := closedLoop(ctx, w.cfg.Workers, w.cfg.Duration, ops, func(ctx context.Context, wk int, _ *workerStats) error {
		_, _, err := w.b.get(ctx, w.ns, w.name("g", rngs[wk].IntN(w.cfg.GetObjects)))
		return err
	})
	return loopResult(elapsed, stats)
}

// list: full quorum lists of a namespace that holds exactly the pre-created
// objects. The client reads every answer to its end; it decodes (and
// counts) the first list of every worker in every window.
type listWL struct{ wlBase }

func (w *listWL) setup(ctx context.Context, p *progress) error {
	if _, err := w.fixtures(ctx, p, "list", w.cfg.ListObjects, func(i int) string { return fmt.Sprintf("o-%05d", i) },
		func(int) map[string]string { return map[string]string{"payload": w.payload} }); err != nil {
		return err
	}
	items, _, err := w.b.list(ctx, w.ns, true)
	if err != nil {
		return err
	}
	if items != w.cfg.ListObjects {
		p.note(fmt.Sprintf("warning: target %s: namespace %s holds %d %s, not %d (left over from another run?); lists return them all", w.t.label, w.ns, items, w.t.res.Name, w.cfg.ListObjects))
	}
	return nil
}

func (w *listWL) round(ctx context.Context, _ int, ops *atomic.Int64) RoundResult {
	elapsed, stats := closedLoop(ctx, w.cfg.Workers, w.cfg.Duration, ops, func(ctx context.Context, _ int, st *workerStats) error {
		check := st.items < 0
		items, _, err := w.b.list(ctx, w.ns, check)
		if err == nil && check {
			st.items = items
		}
		return err
	})
	return loopResult(elapsed, stats)
}

func (w *listWL) finish(_ context.Context, s *Summary) {
	for _, r := range s.Rounds {
		if r.itemsChecked && r.Items != w.cfg.ListObjects {
			s.Notes = append(s.Notes, fmt.Sprintf("round %d: a list returned %d items, not %d", r.Round, r.Items, w.cfg.ListObjects))
		}
	}
}
