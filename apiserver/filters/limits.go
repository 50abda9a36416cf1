package filters

import (
	"net/http"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// kube-apiserver's defaults of --max-requests-inflight and
// --max-mutating-requests-inflight, and Concord's of
// --max-request-bytes-inflight: 64 requests with bodies of 1 MiB at once,
// or 21 of the largest (3 MiB), and thousands of ordinary writes.
const (
	DefaultMaxRequestsInFlight         = 400
	DefaultMaxMutatingRequestsInFlight = 200
	DefaultMaxRequestBytesInFlight     = 64 << 20
)

// tooManyRequestsMessage and tooManyRequestsRetryAfter are kube-apiserver's:
// client-go waits Retry-After seconds and retries (up to 10 times).
const (
	tooManyRequestsMessage    = "Too many requests, please try again later."
	tooManyRequestsRetryAfter = 1
)

// Limits are what WithLimits lets in at once; 0 is no limit.
type Limits struct {
	// ReadOnly and Mutating bound the read-only (GET, HEAD, OPTIONS) and
	// the other requests served at once (kube-apiserver's
	// --max-requests-inflight and --max-mutating-requests-inflight).
	ReadOnly, Mutating int
	// Bytes bounds the request bodies being read or held at once (of both
	// kinds): each request counts its Content-Length, and one that does
	// not announce it (a chunked body) counts MaxBody, the most it may
	// send.
	Bytes int64
	// MaxBody is the largest body a request may send; a larger one is
	// refused unread, and counts MaxBody.
	MaxBody int64
}

// inFlight counts the requests being served, read-only apart from
// mutating, as kube-apiserver's max-in-flight filter does, and the bytes
// of their bodies.
type inFlight struct {
	readOnly, mutating, bytes atomic.Int64
	// maxReadOnly, maxMutating and maxBytes are the limits (0: none);
	// maxBody is what a body of unknown length counts.
	maxReadOnly, maxMutating, maxBytes, maxBody int64
}

// WithLimits serves at most limits.ReadOnly read-only and limits.Mutating
// mutating requests at once, whose bodies add up to at most limits.Bytes;
// one more is answered at once, without reading its body, with
// writeError's 429 TooManyRequests and Retry-After: 1. A request whose
// body alone exceeds limits.Bytes is let in when no other body is in
// flight. Watches are long-running and not counted, as in kube-apiserver.
// A slow client holds its slot only until the request's deadline, by which
// the server bounds the connection's reads and writes.
//
// The apiserver_current_inflight_requests gauge, registered in reg, is the
// number of requests of each kind being served;
// apiserver_current_inflight_request_bytes the bytes their bodies count.
func WithLimits(next http.Handler, limits Limits, reg prometheus.Registerer, writeError func(http.ResponseWriter, *http.Request, error)) http.Handler {
	l := &inFlight{
		maxReadOnly: int64(max(limits.ReadOnly, 0)), maxMutating: int64(max(limits.Mutating, 0)),
		maxBytes: max(limits.Bytes, 0), maxBody: max(limits.MaxBody, 0),
	}
	l.register(reg)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if IsWatch(r) {
			next.ServeHTTP(w, r)
			return
		}
		release, ok := l.acquire(r)
		if !ok {
			writeError(w, r, apierrors.NewTooManyRequests(tooManyRequestsMessage, tooManyRequestsRetryAfter))
			return
		}
		defer release()
		next.ServeHTTP(w, r)
	})
}

func (l *inFlight) register(reg prometheus.Registerer) {
	for kind, counter := range map[string]*atomic.Int64{"readOnly": &l.readOnly, "mutating": &l.mutating} {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name:        "apiserver_current_inflight_requests",
			Help:        "Number of requests currently served, by kind (readOnly, mutating), which --max-requests-inflight and --max-mutating-requests-inflight limit; watches are not counted.",
			ConstLabels: prometheus.Labels{"request_kind": kind},
		}, func() float64 { return float64(counter.Load()) }))
	}
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "apiserver_current_inflight_request_bytes",
		Help: "Bytes the bodies of the requests currently served count (their Content-Length; the largest body allowed when they announce none), which --max-request-bytes-inflight limits.",
	}, func() float64 { return float64(l.bytes.Load()) }))
}

// acquire counts r in, unless a limit is reached; release counts it out.
func (l *inFlight) acquire(r *http.Request) (release func(), ok bool) {
	counter, limit := &l.mutating, l.maxMutating
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		counter, limit = &l.readOnly, l.maxReadOnly
	}
	if !acquire(counter, limit, 1, false) {
		return nil, false
	}
	size := l.bodySize(r)
	if !acquire(&l.bytes, l.maxBytes, size, true) {
		counter.Add(-1)
		return nil, false
	}
	return func() {
		l.bytes.Add(-size)
		counter.Add(-1)
	}, true
}

// bodySize is what r's body counts: its Content-Length up to maxBody,
// maxBody when it announces none.
func (l *inFlight) bodySize(r *http.Request) int64 {
	if l.maxBody > 0 && (r.ContentLength < 0 || r.ContentLength > l.maxBody) {
		return l.maxBody
	}
	return max(r.ContentLength, 0)
}

// acquire adds n to counter unless that would take it above limit (0:
// none); with aloneFits, also when counter is 0. Adding 0 always
// succeeds.
func acquire(counter *atomic.Int64, limit, n int64, aloneFits bool) bool {
	for {
		c := counter.Load()
		if limit > 0 && n > 0 && c+n > limit && !(aloneFits && c == 0) {
			return false
		}
		if counter.CompareAndSwap(c, c+n) {
			return true
		}
	}
}
