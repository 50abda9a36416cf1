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

// fmtMicros prints CPU µs per operation with three significant digits or
// so, "-" when unknown.
func fmtMicros(x jfloat) string {
	f := float64(x)
	switch {
	case math.IsNaN(f) || math.IsInf(f, 0):
		return "-"
	case f < 10:
		return fmt.Sprintf("%.2f", f)
	case f < 100:
		return fmt.Sprintf("%.1f", f)
	}
	return fmt.Sprintf("%.0f", f)
}

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
	if line := encodingLine(rep); line != "" {
		fmt.Fprintln(out, line)
	}
	fmt.Fprintf(out, "machine: %d CPUs, load average %s at the start, %s at the end\n\n", rep.CPUs, rep.LoadStart, rep.LoadEnd)
	multi := len(rep.Resources) > 1
	custom := multi || (len(rep.Resources) == 1 && rep.Resources[0] != configMaps.Name)
	if len(rep.Objects) > 0 && custom {
		fmt.Fprintln(out, "objects (JSON bytes as sent to create one, and as a GET answers it):")
		for _, o := range rep.Objects {
			fmt.Fprintf(out, "  %s %s: %d sent, %d served (payload %d)\n", o.Target, o.Resource, o.Sent, o.Served, o.Payload)
		}
		fmt.Fprintln(out)
	}
	// Extra columns when the run wrote custom objects: the resource and,
	// with several, the ratio to the same target's first resource.
	resCols := func(s *Summary) string {
		if !custom {
			return ""
		}
		c := "\t" + s.Resource
		if multi {
			c += "\t" + fmtRatio(s.ResourceRatio)
		}
		return c
	}
	resHead := ""
	if custom {
		resHead = "\tresource"
		if multi {
			resHead += "\tvs " + rep.Resources[0]
		}
	}
	var ops, watch []*Summary
	for _, s := range rep.Results {
		if s.Skipped != "" {
			continue // its note says why
		}
		if s.Workload == "watch" {
			watch = append(watch, s)
		} else {
			ops = append(ops, s)
		}
	}
	if len(ops) > 0 {
		tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
		fmt.Fprintf(tw, "workload\ttarget%s\tops/s\tmin–max\tvs %s\tp50\tp99\tCPU client\tserver\tetcd\tµs/op server\tetcd\tnotes\n", resHead, first)
		for _, s := range ops {
			fmt.Fprintf(tw, "%s\t%s%s\t%s\t%s–%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", s.Workload, s.Target, resCols(s),
				num("%.0f", s.OpsMedian), num("%.0f", s.OpsMin), num("%.0f", s.OpsMax), fmtRatio(s.Ratio),
				fmtMs(s.P50ms), fmtMs(s.P99ms), num("%.2f", s.CPU.Client), num("%.2f", s.CPU.Server), num("%.2f", s.CPU.Etcd),
				fmtMicros(s.CPUPerOp.Server), fmtMicros(s.CPUPerOp.Etcd), notes(s))
		}
		tw.Flush()
		fmt.Fprintln(out)
	}
	if len(watch) > 0 {
		w := watch[0].Watch
		fmt.Fprintf(out, "watch: %d watchers, %s writes/s for %s per round\n", w.Watchers, num("%g", w.WriteRate), rep.Duration)
		tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
		fmt.Fprintf(tw, "target%s\tevents/s\tp50\tp99\tmax\tp99 vs %s\tlost\tdup\tout-of-order\topen (s)\tRSS/watcher\tCPU client\tserver\tetcd\tµs/event server\tetcd\tnotes\n", resHead, first)
		for _, s := range watch {
			w := s.Watch
			rss := "-"
			if !math.IsNaN(float64(w.RSSPerWatcherKiB)) {
				rss = fmt.Sprintf("%.1f KiB", float64(w.RSSPerWatcherKiB))
			}
			fmt.Fprintf(tw, "%s%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", s.Target, resCols(s), num("%.0f", s.OpsMedian),
				fmtMs(s.P50ms), fmtMs(s.P99ms), fmtMs(s.MaxMs), fmtRatio(s.P99Ratio), w.Lost, w.Duplicated, w.OutOfOrder,
				num("%.2f", w.OpenSec), rss, num("%.2f", s.CPU.Client), num("%.2f", s.CPU.Server), num("%.2f", s.CPU.Etcd),
				fmtMicros(s.CPUPerOp.Server), fmtMicros(s.CPUPerOp.Etcd), notes(s))
		}
		tw.Flush()
		fmt.Fprintln(out)
	}
	if multi {
		writeResourceRatios(out, rep)
	}
	writeApplyRatios(out, rep)
	for _, c := range rep.CRDs {
		writeCRDs(out, rep, c)
	}
	if len(ops)+len(watch) > 0 {
		fmt.Fprintln(out, "ops/s: median of the rounds (min–max); p50/p99 over every operation of every round.")
		fmt.Fprintln(out, "CPU: cores busy during the windows (1.00 = one core all the time), median of the rounds; client is apibench itself.")
		fmt.Fprintln(out, "µs/op: the process's CPU time over every round divided by the operations they completed (watch: by the events received).")
	}
	if custom && len(ops)+len(watch) > 0 {
		fmt.Fprintln(out, "resource: what the workload wrote (etcd targets: Concord's ConfigMap layout); a custom object's payload is shorter, so that its JSON is as long as a ConfigMap's.")
	}
	if len(watch) > 0 {
		fmt.Fprintln(out, "watch: latency = receive time - send time (in the object); RSS/watcher = the server's RSS growth while the watches opened, the largest of the rounds.")
	}
	for _, s := range rep.Results {
		for _, n := range s.Notes {
			fmt.Fprintf(out, "%s on %s: %s\n", s.Workload, summaryLabel(rep, s), n)
		}
	}
	if rep.Interrupt {
		fmt.Fprintln(out, "INTERRUPTED: the results are partial.")
	}
	for _, f := range rep.Failures {
		fmt.Fprintf(out, "FAILED: %s\n", f)
	}
}

// encodingLine says what the API targets' requests and answers were, per
// resource ("" when no API target ran a workload).
func encodingLine(rep *Report) string {
	var parts []string
	seen := map[string]bool{}
	for _, s := range rep.Results {
		if s.Encoding == "" || seen[s.Resource] {
			continue
		}
		seen[s.Resource] = true
		switch {
		case s.Encoding == encodingProtobuf:
			parts = append(parts, "protobuf ("+mediaProtobuf+") for "+s.Resource)
		case rep.Protobuf:
			parts = append(parts, "JSON for "+s.Resource+" (kube serves no protobuf for custom resources)")
		default:
			parts = append(parts, "JSON for "+s.Resource)
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return "encoding on the API targets: " + strings.Join(parts, "; ")
}

// summaryLabel names a result's target as progress lines do: with
// "/<resource>" when the run writes other resources than ConfigMaps.
func summaryLabel(rep *Report, s *Summary) string {
	if s.Kind == kindEtcd || (len(rep.Resources) == 1 && rep.Resources[0] == configMaps.Name) {
		return s.Target
	}
	return s.Target + "/" + s.Resource
}

// writeResourceRatios prints, per API target, every workload's ratio of
// each other resource to the first (issue: custom objects ≥ 0.9× the same
// workload on ConfigMaps, in the same run).
func writeResourceRatios(out io.Writer, rep *Report) {
	type key struct{ target, resource string }
	var order []key
	parts := map[key][]string{}
	for _, s := range rep.Results {
		if s.Kind == kindEtcd || s.Resource == rep.Resources[0] || math.IsNaN(float64(s.ResourceRatio)) {
			continue
		}
		k := key{s.Target, s.Resource}
		if _, ok := parts[k]; !ok {
			order = append(order, k)
		}
		what := ""
		if s.Workload == "watch" {
			what = " (p99)"
		}
		parts[k] = append(parts[k], fmt.Sprintf("%s %s%s", s.Workload, fmtRatio(s.ResourceRatio), what))
	}
	for _, k := range order {
		fmt.Fprintf(out, "%s on %s, %s/%s in this run: %s\n", k.resource, k.target, k.resource, rep.Resources[0], strings.Join(parts[k], ", "))
	}
	if len(order) > 0 {
		fmt.Fprintln(out)
	}
}

// applyRatios is, per API target and resource that ran both apply and
// update, apply's ops/s and p99 relative to update's, in result order.
func applyRatios(rep *Report) []string {
	var lines []string
	for _, a := range rep.Results {
		if a.Workload != "apply" || a.Skipped != "" {
			continue
		}
		for _, u := range rep.Results {
			if u.Workload == "update" && u.Target == a.Target && u.Resource == a.Resource {
				lines = append(lines, fmt.Sprintf("apply/update on %s in this run: ops/s %s, p99 %s",
					summaryLabel(rep, a), fmtRatio(jfloat(ratio(float64(a.OpsMedian), float64(u.OpsMedian)))),
					fmtRatio(jfloat(ratio(float64(a.P99ms), float64(u.P99ms))))))
			}
		}
	}
	return lines
}

func writeApplyRatios(out io.Writer, rep *Report) {
	lines := applyRatios(rep)
	for _, l := range lines {
		fmt.Fprintln(out, l)
	}
	if len(lines) > 0 {
		fmt.Fprintln(out)
	}
}

// writeCRDs prints the crds workload's results on one target.
func writeCRDs(out io.Writer, rep *Report, c *CRDResult) {
	fmt.Fprintf(out, "crds: %d CRDs (distinct groups and kinds, one version, a two-field schema each) installed through %s, %d at a time\n", c.CRDs, c.Target, c.Workers)
	fmt.Fprintf(out, "  created in %.1fs (%.0f/s; one create p50 %s, p99 %s); all Established after %.1fs; all in aggregated discovery after %.1fs\n",
		float64(c.CreatedSec), float64(c.CRDs)/float64(c.CreatedSec), fmtMs(c.CreateP50ms), fmtMs(c.CreateP99ms), float64(c.EstablishedSec), float64(c.ServedSec))
	fmt.Fprintf(out, "  a CRD's create sent → Established: p50 %s, p99 %s; CPU during the install: server %s, etcd %s, client %s\n",
		fmtMs(c.EstablishP50ms), fmtMs(c.EstablishP99ms), num("%.2f", c.InstallCPU.Server), num("%.2f", c.InstallCPU.Etcd), num("%.2f", c.InstallCPU.Client))
	kib := func(x jfloat) string { return num("%.1f MiB", x/1024) }
	if len(c.Replicas) > 0 {
		fmt.Fprintln(out, "\n  a replica started on the same etcd (apibench's --replica-bin), idle:")
		tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  CRDs of the run in etcd\tAPI groups\t/readyz 200 after\tall CRDs served after\tRSS\theap in use")
		for _, r := range c.Replicas {
			fmt.Fprintf(tw, "  %d\t%d\t%s\t%s\t%s\t%s\n", r.CRDs, r.Groups, num("%.2fs", r.ReadySec), num("%.2fs", r.ServedSec), kib(r.RSSKiB), kib(r.HeapKiB))
		}
		tw.Flush()
		fmt.Fprintf(out, "  memory per idle CRD: %s KiB of RSS, %s KiB of heap in use\n", num("%.1f", c.RSSPerCRDKiB), num("%.1f", c.HeapPerCRDKiB))
	}
	if !math.IsNaN(float64(c.TargetRSSPerCRDKiB)) || !math.IsNaN(float64(c.TargetHeapPerCRDKiB)) {
		fmt.Fprintf(out, "  %s itself, idle, before → after the install: RSS %s → %s (%s KiB per CRD), heap in use %s → %s (%s KiB per CRD)\n", c.Target,
			kib(c.TargetBefore.RSSKiB), kib(c.TargetAfter.RSSKiB), num("%.1f", c.TargetRSSPerCRDKiB),
			kib(c.TargetBefore.HeapKiB), kib(c.TargetAfter.HeapKiB), num("%.1f", c.TargetHeapPerCRDKiB))
	}
	if len(c.Endpoints) > 0 {
		fmt.Fprintf(out, "\n  discovery and OpenAPI on %s with the %d CRDs, after one warm-up request each (%d round(s) × %s per endpoint, one request at a time):\n", c.Target, c.CRDs, rep.Rounds, rep.Duration)
		tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  endpoint\tpath\tcode\tsize\twarm-up\trequests\tp50\tp99\tmax\t< 1s\tnotes")
		for _, e := range c.Endpoints {
			met := "yes"
			if !(float64(e.MaxMs) < 1000) {
				met = "NO"
			}
			note := ""
			if e.Errors > 0 {
				note = fmt.Sprintf("%d errors: %.80s", e.Errors, e.FirstError)
			}
			fmt.Fprintf(tw, "  %s\t%s\t%d\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\n", e.Name, e.Path, e.Code, fmtBytes(e.Bytes), fmtMs(e.FirstMs),
				e.Requests, fmtMs(e.P50ms), fmtMs(e.P99ms), fmtMs(e.MaxMs), met, note)
		}
		tw.Flush()
	}
	if !math.IsNaN(float64(c.DeletedSec)) && c.DeletedSec > 0 {
		fmt.Fprintf(out, "  deleted, and gone, in %.1fs\n", float64(c.DeletedSec))
	}
	for _, n := range c.Notes {
		fmt.Fprintf(out, "  note: %s\n", n)
	}
	fmt.Fprintln(out)
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
