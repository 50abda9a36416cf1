package main

import (
	"math"
	"slices"
	"time"
)

// percentile is the nearest-rank q-quantile (0 < q <= 1) of sorted: the
// smallest sample with at least q of the samples at or below it. q = 1 is
// the maximum; an empty slice gives 0.
func percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(rank, 0), len(sorted)-1)]
}

// median of xs (the mean of the two middle values for an even count); NaN
// when xs is empty. xs is not changed.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// minMax of xs; NaN, NaN when xs is empty.
func minMax(xs []float64) (float64, float64) {
	if len(xs) == 0 {
		return math.NaN(), math.NaN()
	}
	return slices.Min(xs), slices.Max(xs)
}

// ratio is x / base, NaN when either is unknown or base is 0.
func ratio(x, base float64) float64 {
	if math.IsNaN(x) || math.IsNaN(base) || base == 0 {
		return math.NaN()
	}
	return x / base
}

// merge joins the samples of every worker, sorted.
func merge(parts ...[]time.Duration) []time.Duration {
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	out := make([]time.Duration, 0, n)
	for _, p := range parts {
		out = append(out, p...)
	}
	slices.Sort(out)
	return out
}

// ms is d in milliseconds.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
