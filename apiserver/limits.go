package apiserver

import (
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/concord-dev/concord/apiserver/filters"
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

// writeDeadlineGrace is how long after the request's deadline its response
// may still be written: enough to send the 504 of a request that timed out,
// not to let a client that does not read hold the handler.
const writeDeadlineGrace = 5 * time.Second

// inFlight counts the requests being served, read-only (GET, HEAD, OPTIONS)
// apart from mutating (every other method), as kube-apiserver's
// max-in-flight filter does.
type inFlight struct {
	readOnly, mutating atomic.Int64
	// maxReadOnly and maxMutating are the limits; 0 is unlimited.
	maxReadOnly, maxMutating int64
}

// withLimits serves at most maxReadOnly read-only and maxMutating mutating
// requests at once (0: no limit); one more is answered 429 TooManyRequests
// with Retry-After: 1 at once, without reading its body. Watches are
// long-running and not counted, as in kube-apiserver. A slow client holds
// its slot only until the request's deadline: see setDeadlines.
//
// The apiserver_current_inflight_requests gauge, registered in reg, is the
// number of requests of each kind being served.
func withLimits(next http.Handler, maxReadOnly, maxMutating int, reg prometheus.Registerer) http.Handler {
	l := &inFlight{maxReadOnly: int64(max(maxReadOnly, 0)), maxMutating: int64(max(maxMutating, 0))}
	for kind, counter := range map[string]*atomic.Int64{"readOnly": &l.readOnly, "mutating": &l.mutating} {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name:        "apiserver_current_inflight_requests",
			Help:        "Number of requests currently served, by kind (readOnly, mutating), which --max-requests-inflight and --max-mutating-requests-inflight limit; watches are not counted.",
			ConstLabels: prometheus.Labels{"request_kind": kind},
		}, func() float64 { return float64(counter.Load()) }))
	}

	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if filters.IsWatch(r) {
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

// setDeadlines bounds the connection's reads of the request's body and
// writes of its response by the request's deadline (--request-timeout;
// watches have none), for every request, whether it is served, refused
// (401, 403, 429) or a probe: readBody, and the server's own reading of a
// body the handler left unread, stop there; writing to a client that does
// not read stops writeDeadlineGrace later. So a client that trickles its
// body or does not read the response cannot hold a handler, its in-flight
// slot or its connection longer. readBody lifts the read deadline once it
// has the whole body, so that it cannot fire while the server waits for
// the connection's next request.
func setDeadlines(w http.ResponseWriter, r *http.Request) {
	deadline, ok := r.Context().Deadline()
	if !ok {
		return
	}
	rc := http.NewResponseController(w)
	if r.ContentLength != 0 {
		if err := rc.SetReadDeadline(deadline); err != nil {
			logger(r).Debug("cannot bound the request body's read", "err", err)
		}
	}
	if err := rc.SetWriteDeadline(deadline.Add(writeDeadlineGrace)); err != nil {
		logger(r).Debug("cannot bound the response's write", "err", err)
	}
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
