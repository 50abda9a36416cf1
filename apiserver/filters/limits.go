package filters

import (
	"net/http"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// kube-apiserver's defaults of --max-requests-inflight and
// --max-mutating-requests-inflight.
const (
	DefaultMaxRequestsInFlight         = 400
	DefaultMaxMutatingRequestsInFlight = 200
)

// tooManyRequestsMessage and tooManyRequestsRetryAfter are kube-apiserver's:
// client-go waits Retry-After seconds and retries (up to 10 times).
const (
	tooManyRequestsMessage    = "Too many requests, please try again later."
	tooManyRequestsRetryAfter = 1
)

// inFlight counts the requests being served, read-only (GET, HEAD, OPTIONS)
// apart from mutating (every other method), as kube-apiserver's
// max-in-flight filter does.
type inFlight struct {
	readOnly, mutating atomic.Int64
	// maxReadOnly and maxMutating are the limits; 0 is unlimited.
	maxReadOnly, maxMutating int64
}

// WithLimits serves at most maxReadOnly read-only and maxMutating mutating
// requests at once (0: no limit); one more is answered at once, without
// reading its body, with writeError's 429 TooManyRequests and Retry-After:
// 1. Watches are long-running and not counted, as in kube-apiserver. A slow client holds its slot only until the request's
// deadline, by which the server bounds the connection's reads and writes.
//
// The apiserver_current_inflight_requests gauge, registered in reg, is the
// number of requests of each kind being served.
func WithLimits(next http.Handler, maxReadOnly, maxMutating int, reg prometheus.Registerer, writeError func(http.ResponseWriter, *http.Request, error)) http.Handler {
	l := &inFlight{maxReadOnly: int64(max(maxReadOnly, 0)), maxMutating: int64(max(maxMutating, 0))}
	for kind, counter := range map[string]*atomic.Int64{"readOnly": &l.readOnly, "mutating": &l.mutating} {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name:        "apiserver_current_inflight_requests",
			Help:        "Number of requests currently served, by kind (readOnly, mutating), which --max-requests-inflight and --max-mutating-requests-inflight limit; watches are not counted.",
			ConstLabels: prometheus.Labels{"request_kind": kind},
		}, func() float64 { return float64(counter.Load()) }))
	}

	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if IsWatch(r) {
			next.ServeHTTP(w, r)
			return
		}
		counter, limit := &l.mutating, l.maxMutating
		switch r.Method {
		case http.MethodGet, http.MethodHead, http.MethodOptions:
			counter, limit = &l.readOnly, l.maxReadOnly
		}
		if !acquire(counter, limit) {
			writeError(w, r, apierrors.NewTooManyRequests(tooManyRequestsMessage, tooManyRequestsRetryAfter))
			return
		}
		defer counter.Add(-1)
		next.ServeHTTP(w, r)
	})
}

// acquire counts one more request unless limit (0: none) are counted
// already.
func acquire(counter *atomic.Int64, limit int64) bool {
	for {
		n := counter.Load()
		if limit > 0 && n >= limit {
			return false
		}
		if counter.CompareAndSwap(n, n+1) {
			return true
		}
	}
}
