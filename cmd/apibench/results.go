package main

import (
	"math"
	"slices"
	"strconv"
	"time"
)

var nan = math.NaN()

// jfloat is a float in the JSON output: null when unknown (NaN), at most
// four decimals otherwise.
type jfloat float64

func (f jfloat) MarshalJSON() ([]byte, error) {
	if math.IsNaN(float64(f)) || math.IsInf(float64(f), 0) {
		return []byte("null"), nil
	}
	return strconv.AppendFloat(nil, math.Round(float64(f)*1e4)/1e4, 'f', -1, 64), nil
}

// RoundResult is what one target did in one window.
type RoundResult struct {
	Round      int     `json:"round"`
	Seconds    jfloat  `json:"seconds"`
	Ops        int64   `json:"ops"`
	OpsPerSec  jfloat  `json:"opsPerSec"`
	Errors     int64   `json:"errors"`
	FirstError string  `json:"firstError,omitempty"`
	P50ms      jfloat  `json:"p50ms"`
	P99ms      jfloat  `json:"p99ms"`
	MaxMs      jfloat  `json:"maxMs"`
	CPU        CPUJSON `json:"cpuCores"`
	// CPUPerOp is the window's CPU time per operation, in µs.
	CPUPerOp CPUJSON `json:"cpuMicrosPerOp"`
	// contended
	Conflicts         int64 `json:"conflicts,omitempty"`
	CounterDelta      int64 `json:"counterDelta,omitempty"`
	LostIncrements    int64 `json:"lostIncrements,omitempty"`
	UnknownIncrements int64 `json:"unknownIncrements,omitempty"`
	// list: the items of the checked lists (-1: none checked).
	Items int `json:"items,omitempty"`
	// watch
	Watch *WatchRound `json:"watch,omitempty"`

	samples      []time.Duration // sorted
	itemsChecked bool
}

// CPUJSON is one CPU figure per process, cores busy or µs per operation:
// client is apibench itself.
type CPUJSON struct {
	Client jfloat `json:"client"`
	Server jfloat `json:"server"`
	Etcd   jfloat `json:"etcd"`
}

func cpuJSON(u cpuUse) CPUJSON {
	return CPUJSON{Client: jfloat(u.Client), Server: jfloat(u.Server), Etcd: jfloat(u.Etcd)}
}

// WatchRound is what the watchers of one window received.
type WatchRound struct {
	Watchers   int    `json:"watchers"`
	Opened     int    `json:"opened"`
	OpenFailed int    `json:"openFailed"`
	OpenSec    jfloat `json:"openSeconds"`
	// RSSPerWatcherKiB is the server's RSS growth while the watches were
	// opened, per open watch (null without --server-pid). Over several
	// rounds it is the largest growth: a Go server reuses the memory the
	// previous round's watches freed, so later rounds grow less.
	RSSPerWatcherKiB jfloat `json:"rssPerWatcherKiB"`
	Writes           int    `json:"writes"`
	WriteErrors      int    `json:"writeErrors"`
	WriteRate        jfloat `json:"writeRate"`
	Events           int64  `json:"events"`
	Lost             int64  `json:"lost"`
	Duplicated       int64  `json:"duplicated"`
	OutOfOrder       int64  `json:"outOfOrder"`
	Unexpected       int64  `json:"unexpected"`
	// Rewatches counts the streams the server ended during the window
	// (the watcher watched again from its last resourceVersion).
	Rewatches int `json:"rewatches"`
	// RewatchFailed counts watchers that could not watch again;
	// Stuck the ones still running after the window.
	RewatchFailed int    `json:"rewatchFailed"`
	Stuck         int    `json:"stuck"`
	FirstError    string `json:"firstError,omitempty"`
}

// Summary is one target's result for one workload over all rounds.
type Summary struct {
	Workload string `json:"workload"`
	Target   string `json:"target"`
	Kind     string `json:"kind"`
	// Resource is what the workload wrote (configmaps for etcd targets:
	// Concord's ConfigMap layout).
	Resource string `json:"resource"`
	// Encoding is what an API target's requests and answers were: json or
	// protobuf (none for etcd targets).
	Encoding string `json:"encoding,omitempty"`
	// Ops per second: the median of the rounds, and their range.
	OpsMedian jfloat `json:"opsPerSecMedian"`
	OpsMin    jfloat `json:"opsPerSecMin"`
	OpsMax    jfloat `json:"opsPerSecMax"`
	// Ratio is OpsMedian relative to the first target's.
	Ratio jfloat `json:"ratio"`
	// Latency of every operation of every round.
	P50ms jfloat `json:"p50ms"`
	P99ms jfloat `json:"p99ms"`
	MaxMs jfloat `json:"maxMs"`
	// P99Ratio is P99ms relative to the first target's.
	P99Ratio jfloat `json:"p99Ratio"`
	// ResourceRatio is, with several --resource, this result relative to
	// the same target's with the first resource (ops/s; for watch, p99),
	// e.g. widgets/configmaps; null for etcd targets and single-resource
	// runs.
	ResourceRatio jfloat `json:"resourceRatio"`
	// CPU: the median over the rounds of the cores used, and CPU time per
	// operation (all rounds' CPU over all rounds' operations).
	CPU      CPUJSON `json:"cpuCores"`
	CPUPerOp CPUJSON `json:"cpuMicrosPerOp"`
	Errors   int64   `json:"errors"`
	// contended
	Conflicts         int64  `json:"conflicts,omitempty"`
	ConflictRate      jfloat `json:"conflictRate,omitempty"`
	LostIncrements    int64  `json:"lostIncrements,omitempty"`
	UnknownIncrements int64  `json:"unknownIncrements,omitempty"`
	// Verified: the counter check found no lost increment (contended);
	// no event lost, duplicated or out of order (watch).
	Verified *bool `json:"verified,omitempty"`
	// Watch totals.
	Watch *WatchRound `json:"watch,omitempty"`
	// Skipped is why the target did not run the workload (no rounds).
	Skipped string        `json:"skipped,omitempty"`
	Notes   []string      `json:"notes,omitempty"`
	Rounds  []RoundResult `json:"rounds"`

	cpuSec cpuTime // summed over the rounds
}

// Report is a whole run.
type Report struct {
	Started   time.Time    `json:"started"`
	RunID     string       `json:"runID"`
	Targets   []TargetSpec `json:"targets"`
	Resources []string     `json:"resources"`
	// Protobuf is --protobuf; each result's Encoding is what it used.
	Protobuf bool `json:"protobuf"`
	// Objects is the JSON size of one object of every target.
	Objects  []ObjectSize `json:"objects"`
	Rounds   int          `json:"rounds"`
	Duration string       `json:"duration"`
	Workers  int          `json:"workers"`
	Object   int          `json:"objectBytes"`
	// CPUs and the load average (1, 5, 15 min) at the start and the end
	// of the measuring, to tell a quiet machine from a busy one.
	CPUs      int        `json:"cpus"`
	LoadStart string     `json:"loadAverageStart,omitempty"`
	LoadEnd   string     `json:"loadAverageEnd,omitempty"`
	Results   []*Summary `json:"results"`
	// CRDs are the results of the crds workload, one per API target.
	CRDs      []*CRDResult `json:"crds,omitempty"`
	Failures  []string     `json:"failures,omitempty"`
	Interrupt bool         `json:"interrupted,omitempty"`
}

// ObjectSize is how long one object of a target's workloads is as JSON:
// the body apibench sends to create it, and the object as the target
// answers a GET (with uid, resourceVersion, creationTimestamp; a custom
// object also with its generation). For an etcd target both are the stored
// value.
type ObjectSize struct {
	Target   string `json:"target"`
	Resource string `json:"resource"`
	Payload  int    `json:"payloadBytes"`
	Sent     int    `json:"sentBytes"`
	Served   int    `json:"servedBytes"`
}

// resourceRatios sets the ResourceRatio of the summaries of one workload:
// each API target's result relative to its result with resource first.
func resourceRatios(summaries []*Summary, first string) {
	base := map[string]*Summary{}
	resources := map[string]bool{}
	for _, s := range summaries {
		s.ResourceRatio = jfloat(nan)
		if s.Kind == kindEtcd {
			continue
		}
		resources[s.Resource] = true
		if s.Resource == first {
			base[s.Target] = s
		}
	}
	if len(resources) < 2 {
		return
	}
	for _, s := range summaries {
		b := base[s.Target]
		if s.Kind == kindEtcd || b == nil {
			continue
		}
		if s.Workload == "watch" {
			s.ResourceRatio = jfloat(ratio(float64(s.P99ms), float64(b.P99ms)))
		} else {
			s.ResourceRatio = jfloat(ratio(float64(s.OpsMedian), float64(b.OpsMedian)))
		}
	}
}

// summarize turns the rounds of one target into its summary; base is the
// first target's summary of the same workload (nil for the first target).
func summarize(s *Summary, base *Summary) {
	var ops, client, server, etcd []float64
	var all [][]time.Duration
	var totalOps int64
	var watch WatchRound
	var open, rss []float64
	for _, r := range s.Rounds {
		ops = append(ops, float64(r.OpsPerSec))
		client = append(client, float64(r.CPU.Client))
		server = append(server, float64(r.CPU.Server))
		etcd = append(etcd, float64(r.CPU.Etcd))
		all = append(all, r.samples)
		totalOps += r.Ops
		s.Errors += r.Errors
		s.Conflicts += r.Conflicts
		s.LostIncrements += r.LostIncrements
		s.UnknownIncrements += r.UnknownIncrements
		if w := r.Watch; w != nil {
			watch.Watchers = w.Watchers
			watch.WriteRate = w.WriteRate
			watch.Opened += w.Opened
			watch.OpenFailed += w.OpenFailed
			watch.Writes += w.Writes
			watch.WriteErrors += w.WriteErrors
			watch.Events += w.Events
			watch.Lost += w.Lost
			watch.Duplicated += w.Duplicated
			watch.OutOfOrder += w.OutOfOrder
			watch.Unexpected += w.Unexpected
			watch.Rewatches += w.Rewatches
			watch.RewatchFailed += w.RewatchFailed
			watch.Stuck += w.Stuck
			if watch.FirstError == "" {
				watch.FirstError = w.FirstError
			}
			open = append(open, float64(w.OpenSec))
			if !math.IsNaN(float64(w.RSSPerWatcherKiB)) {
				rss = append(rss, float64(w.RSSPerWatcherKiB))
			}
		}
	}
	med := func(xs []float64) jfloat { return jfloat(medianKnown(xs)) }
	s.OpsMedian = med(ops)
	lo, hi := minMax(ops)
	s.OpsMin, s.OpsMax = jfloat(lo), jfloat(hi)
	samples := merge(all...)
	s.P50ms = jfloat(ms(percentile(samples, 0.50)))
	s.P99ms = jfloat(ms(percentile(samples, 0.99)))
	s.MaxMs = jfloat(ms(percentile(samples, 1)))
	if len(samples) == 0 {
		s.P50ms, s.P99ms, s.MaxMs = jfloat(nan), jfloat(nan), jfloat(nan)
	}
	s.CPU = CPUJSON{Client: med(client), Server: med(server), Etcd: med(etcd)}
	s.CPUPerOp = s.cpuSec.perOp(totalOps)
	if s.Workload == "contended" {
		if attempts := totalOps + s.Conflicts; attempts > 0 {
			s.ConflictRate = jfloat(float64(s.Conflicts) / float64(attempts))
		}
		ok := s.LostIncrements == 0
		s.Verified = &ok
	}
	if s.Workload == "watch" {
		watch.OpenSec = med(open)
		watch.RSSPerWatcherKiB = jfloat(nan)
		if len(rss) > 0 {
			watch.RSSPerWatcherKiB = jfloat(slices.Max(rss))
		}
		s.Watch = &watch
		ok := watch.Lost == 0 && watch.Duplicated == 0 && watch.OutOfOrder == 0 && watch.OpenFailed == 0 && watch.RewatchFailed == 0 && watch.Stuck == 0 && watch.Writes > 0
		s.Verified = &ok
	}
	s.Ratio, s.P99Ratio = 1, 1
	if base != nil {
		s.Ratio = jfloat(ratio(float64(s.OpsMedian), float64(base.OpsMedian)))
		s.P99Ratio = jfloat(ratio(float64(s.P99ms), float64(base.P99ms)))
	}
}

// medianKnown is the median of the values that are not NaN.
func medianKnown(xs []float64) float64 {
	var known []float64
	for _, x := range xs {
		if !math.IsNaN(x) {
			known = append(known, x)
		}
	}
	return median(known)
}
