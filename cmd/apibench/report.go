package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strings"
	"text/tabwriter"
)

// num formats x with the given verb, "-" when unknown.
func num(verb string, x jfloat) string {
	if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
		return "-"
	}
	return fmt.Sprintf(verb, float64(x))
}

// fmtMs prints a latency with three significant digits or so.
func fmtMs(x jfloat) string {
	f := float64(x)
	switch {
	case math.IsNaN(f):
		return "-"
	case f < 1:
		return fmt.Sprintf("%.3fms", f)
	case f < 10:
		return fmt.Sprintf("%.2fms", f)
	case f < 100:
		return fmt.Sprintf("%.1fms", f)
	}
	return fmt.Sprintf("%.0fms", f)
}

func fmtRatio(x jfloat) string { return num("%.2f×", x) }

// roundLine is the progress line of a finished window.
func roundLine(r RoundResult) string {
	var b strings.Builder
	if w := r.Watch; w != nil {
		fmt.Fprintf(&b, "%d/%d watches open in %.2fs, %d writes, %s events/s, p50 %s p99 %s max %s, lost %d dup %d out-of-order %d",
			w.Opened, w.Watchers, float64(w.OpenSec), w.Writes, num("%.0f", r.OpsPerSec), fmtMs(r.P50ms), fmtMs(r.P99ms), fmtMs(r.MaxMs), w.Lost, w.Duplicated, w.OutOfOrder)
		if w.Rewatches > 0 {
			fmt.Fprintf(&b, ", %d re-watches (first end: %s)", w.Rewatches, w.FirstError)
		}
		if !math.IsNaN(float64(w.RSSPerWatcherKiB)) {
			fmt.Fprintf(&b, ", server RSS %+.1f KiB/watcher", float64(w.RSSPerWatcherKiB))
		}
	} else {
		fmt.Fprintf(&b, "%s ops/s, p50 %s p99 %s", num("%.0f", r.OpsPerSec), fmtMs(r.P50ms), fmtMs(r.P99ms))
		if r.Conflicts > 0 || r.CounterDelta > 0 {
			fmt.Fprintf(&b, ", %d conflicts, counter +%d, %d lost", r.Conflicts, r.CounterDelta, r.LostIncrements)
		}
	}
	fmt.Fprintf(&b, ", CPU client %s server %s etcd %s", num("%.2f", r.CPU.Client), num("%.2f", r.CPU.Server), num("%.2f", r.CPU.Etcd))
	if r.Errors > 0 {
		fmt.Fprintf(&b, ", %d errors (first: %s)", r.Errors, r.FirstError)
	}
	return b.String()
}

// writeTable prints the results for people: one table for the workloads
// measured in operations per second, one for watch.
func writeTable(out io.Writer, rep *Report) {
	if len(rep.Targets) == 0 {
		return
	}
	first := rep.Targets[0].Name
	fmt.Fprintf(out, "apibench: %d round(s) × %s per target, interleaved; %d workers, %d-byte objects; ratios are to %s (the first target)\n",
		rep.Rounds, rep.Duration, rep.Workers, rep.Object, first)
	fmt.Fprintf(out, "machine: %d CPUs, load average %s at the start, %s at the end\n\n", rep.CPUs, rep.LoadStart, rep.LoadEnd)
	var ops, watch []*Summary
	for _, s := range rep.Results {
		if s.Workload == "watch" {
			watch = append(watch, s)
		} else {
			ops = append(ops, s)
		}
	}
	if len(ops) > 0 {
		tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
		fmt.Fprintf(tw, "workload\ttarget\tops/s\tmin–max\tvs %s\tp50\tp99\tCPU client\tserver\tetcd\tnotes\n", first)
		for _, s := range ops {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s–%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", s.Workload, s.Target,
				num("%.0f", s.OpsMedian), num("%.0f", s.OpsMin), num("%.0f", s.OpsMax), fmtRatio(s.Ratio),
				fmtMs(s.P50ms), fmtMs(s.P99ms), num("%.2f", s.CPU.Client), num("%.2f", s.CPU.Server), num("%.2f", s.CPU.Etcd), notes(s))
		}
		tw.Flush()
		fmt.Fprintln(out)
	}
	if len(watch) > 0 {
		w := watch[0].Watch
		fmt.Fprintf(out, "watch: %d watchers, %s writes/s for %s per round\n", w.Watchers, num("%g", w.WriteRate), rep.Duration)
		tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
		fmt.Fprintf(tw, "target\tevents/s\tp50\tp99\tmax\tp99 vs %s\tlost\tdup\tout-of-order\topen (s)\tRSS/watcher\tCPU client\tserver\tetcd\tnotes\n", first)
		for _, s := range watch {
			w := s.Watch
			rss := "-"
			if !math.IsNaN(float64(w.RSSPerWatcherKiB)) {
				rss = fmt.Sprintf("%.1f KiB", float64(w.RSSPerWatcherKiB))
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", s.Target, num("%.0f", s.OpsMedian),
				fmtMs(s.P50ms), fmtMs(s.P99ms), fmtMs(s.MaxMs), fmtRatio(s.P99Ratio), w.Lost, w.Duplicated, w.OutOfOrder,
				num("%.2f", w.OpenSec), rss, num("%.2f", s.CPU.Client), num("%.2f", s.CPU.Server), num("%.2f", s.CPU.Etcd), notes(s))
		}
		tw.Flush()
		fmt.Fprintln(out)
	}
	fmt.Fprintln(out, "ops/s: median of the rounds (min–max); p50/p99 over every operation of every round.")
	fmt.Fprintln(out, "CPU: cores busy during the windows (1.00 = one core all the time), median of the rounds; client is apibench itself.")
	if len(watch) > 0 {
		fmt.Fprintln(out, "watch: latency = receive time - send time (in the object); RSS/watcher = the server's RSS growth while the watches opened, the largest of the rounds.")
	}
	for _, s := range rep.Results {
		for _, n := range s.Notes {
			fmt.Fprintf(out, "%s on %s: %s\n", s.Workload, s.Target, n)
		}
	}
	if rep.Interrupt {
		fmt.Fprintln(out, "INTERRUPTED: the results are partial.")
	}
	for _, f := range rep.Failures {
		fmt.Fprintf(out, "FAILED: %s\n", f)
	}
}

// notes is the short remark column of a result.
func notes(s *Summary) string {
	var parts []string
	if s.Workload == "contended" {
		parts = append(parts, fmt.Sprintf("conflicts %s", num("%.0f%%", s.ConflictRate*100)))
		if s.LostIncrements > 0 {
			parts = append(parts, fmt.Sprintf("%d INCREMENTS LOST", s.LostIncrements))
		} else {
			parts = append(parts, "none lost")
		}
	}
	if s.Workload == "list" {
		for _, r := range s.Rounds {
			if r.itemsChecked {
				parts = append(parts, fmt.Sprintf("%d items", r.Items))
				break
			}
		}
	}
	if w := s.Watch; w != nil {
		if w.Rewatches > 0 {
			parts = append(parts, fmt.Sprintf("%d streams ended by the server (watched again)", w.Rewatches))
		}
		if w.OpenFailed > 0 || w.RewatchFailed > 0 || w.Stuck > 0 || w.WriteErrors > 0 {
			parts = append(parts, fmt.Sprintf("%d failed to open, %d could not watch again, %d stuck, %d write errors", w.OpenFailed, w.RewatchFailed, w.Stuck, w.WriteErrors))
		}
	}
	if s.Errors > 0 {
		first := ""
		for _, r := range s.Rounds {
			if r.FirstError != "" {
				first = r.FirstError
				break
			}
		}
		if len(first) > 80 {
			first = first[:80] + "…"
		}
		parts = append(parts, fmt.Sprintf("%d errors: %s", s.Errors, first))
	}
	return strings.Join(parts, "; ")
}

func writeJSON(out io.Writer, rep *Report) error {
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}
