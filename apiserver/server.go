// Package apiserver serves Concord's Kubernetes-compatible HTTP API: routes,
// content negotiation, Status errors and discovery, over the registry.
package apiserver

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"regexp"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/gorilla/mux"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/concord-dev/concord/apiserver/authentication/serviceaccount"
	"github.com/concord-dev/concord/apiserver/filters"
	"github.com/concord-dev/concord/registry"
)

// Config configures the API handler.
type Config struct {
	// Catalog is the set of resources served, one store each per served
	// version; it may change while the handler serves (a resource is
	// routed, discovered and documented from the moment it is added).
	Catalog *registry.Catalog
	// Stores, when Catalog is nil, are the resources served: a catalog of
	// them (registry.NewCatalog).
	Stores []*registry.Store
	Logger *slog.Logger
	// RequestTimeout bounds every request (kube-apiserver's --request-timeout).
	RequestTimeout time.Duration
	// CORSAllowedOrigins are the origins browsers may call from; none: CORS off.
	CORSAllowedOrigins []*regexp.Regexp
	// StorageCheck reports whether etcd serves linearizable reads; it is
	// the etcd check of /readyz and /healthz. It should answer at once from
	// a check run in the background (etcdstore.Monitor.Check), so that a
	// probe never waits for etcd; one that asks etcd is cut off after 2 s.
	// Nil leaves the check out.
	StorageCheck func(ctx context.Context) error
	// ShutdownInitiated is closed when the server begins to shut down:
	// from then on /readyz fails (its shutdown check) while requests are
	// still served. Nil: never.
	ShutdownInitiated <-chan struct{}
	// CRDsSynced is closed once the custom resources of the CRDs stored at
	// start are served: until then /readyz fails (its check
	// poststarthook/crd-informer-synced, kube's name). Nil: no such check.
	CRDsSynced <-chan struct{}
	// PostStartHooks are the start-up steps /readyz waits for, each with
	// its check poststarthook/<name>, before the CRD one.
	PostStartHooks []PostStartHook
	// Metrics receives the API's metrics and is what /metrics serves, with
	// whatever else the caller registered in it. Nil: a registry of the
	// API's metrics alone.
	Metrics *prometheus.Registry
	// MaxRequestsInFlight and MaxMutatingRequestsInFlight bound the
	// read-only (GET, HEAD, OPTIONS) and the other requests served at once
	// (kube-apiserver's --max-requests-inflight and
	// --max-mutating-requests-inflight); more are answered 429 with
	// Retry-After. Watches are not counted. 0: no limit.
	MaxRequestsInFlight         int
	MaxMutatingRequestsInFlight int
	// MaxRequestBytesInFlight bounds the bodies of the requests served at
	// once: each counts its Content-Length, or MaxRequestBodyBytes without
	// one (chunked); more are answered 429 with Retry-After. 0: no limit.
	MaxRequestBytesInFlight int64
	// Authentication, when set, authenticates every API request (health
	// endpoints and /metrics are answered before it) and Authorizer
	// authorizes it, before any storage access: 401 and 403 Status. Nil:
	// the API is open to everyone, unauthenticated (tests of other
	// concerns; the concord binary always sets it).
	Authentication *filters.Authentication
	// Authorizer decides what authenticated users may do. Nil: only the
	// built-in rules (system:masters may do everything; everyone
	// authenticated may read discovery).
	Authorizer filters.Authorizer
	// AuditLog, when set, receives one JSON line per API request: who,
	// what, and how it ended.
	AuditLog io.Writer
	// TokenIssuer, when set, answers TokenRequests (POST
	// .../serviceaccounts/{name}/token). Nil: that path is 404.
	TokenIssuer *serviceaccount.Issuer
	// OpenIDMetadata, when set, is served at
	// /.well-known/openid-configuration and /openid/v1/jwks.
	OpenIDMetadata *serviceaccount.Metadata
	// Profiling serves Go's profiles under /debug/pprof/ (kube-apiserver's
	// --profiling), behind authentication and authorization like any
	// non-resource URL: by default only system:masters may read them.
	Profiling bool
}

// Handler is the HTTP handler of the API.
type Handler struct {
	rc *requestContext
	// watches counts the watches being served, also those that outlived
	// their handler (on a connection taken over from net/http).
	watches *sync.WaitGroup
}

// ServeHTTP serves r. A parked watch (HTTP/2) waits here, on net/http's
// frames and next to nothing else: the runtime halves a goroutine's stack
// only while less than a quarter of it is in use, and with the request's
// frames gone its stack drops from 8 to 4 KiB. A method, not a
// HandlerFunc, and no wrapper in between (cmd/concord's too): those
// frames alone would keep it above the quarter.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if p := h.serve(w, r); p != nil {
		for p.step() {
			<-p.ready()
		}
	}
}

// serve serves r up to where a parked watch waits. An HTTP/2 watch is
// served on a goroutine of its own up to there: the request's calls grow
// that one's stack to 8 KiB, and it gives the stack back when it ends,
// while this one waits on 4 KiB from the start instead of until
// collections halve it. Over HTTP/1.1 the watch takes the connection over
// and net/http's goroutine ends anyway. Not inlined: ServeHTTP's frame is
// under the wait.
//
//go:noinline
func (h *Handler) serve(w http.ResponseWriter, r *http.Request) *parkedRequest {
	isWatch := filters.IsWatch(r)
	if !isWatch || r.ProtoMajor < 2 {
		return h.rc.serve(w, r, isWatch)
	}
	type served struct {
		parked   *parkedRequest
		panicked any
	}
	done := make(chan served, 1)
	go func() {
		var s served
		defer func() {
			s.panicked = recover()
			done <- s
		}()
		s.parked = h.rc.serve(w, r, true)
	}()
	s := <-done
	if s.panicked != nil {
		panic(s.panicked) // to net/http, as if it happened here
	}
	return s.parked
}

// WaitWatches waits, until ctx ends, for every watch to end.
// http.Server.Shutdown does not wait for a watch that took its connection
// over from net/http; call this after it (watches end at shutdown:
// Store.StopWatches).
func (h *Handler) WaitWatches(ctx context.Context) error {
	done := make(chan struct{})
	go func() {
		h.watches.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("watches still running: %w", ctx.Err())
	}
}

// New returns the HTTP handler of the API.
func New(cfg Config) *Handler {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = time.Minute
	}
	if cfg.Metrics == nil {
		cfg.Metrics = prometheus.NewRegistry()
	}
	catalog := cfg.Catalog
	if catalog == nil {
		catalog = registry.NewCatalog(cfg.Stores)
	}
	m := newMetrics(cfg.Metrics, catalog)
	reportCorruptObjects(catalog, cfg.Logger, cfg.Metrics)
	reportUnconditionalUpdates(catalog, cfg.Logger, cfg.Metrics)
	router := mux.NewRouter()
	// Keep ".." and "." in paths so that they are refused as names, not
	// redirected somewhere else.
	router.SkipClean(true)
	router.NotFoundHandler = http.HandlerFunc(notFound)
	router.MethodNotAllowedHandler = http.HandlerFunc(notFound)
	// Other paths than resources are labelled in the metrics by their
	// route (resources are served before the router: withResourceRoutes).
	router.Use(func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if tpl, err := mux.CurrentRoute(r).GetPathTemplate(); err == nil {
				infoOf(r).subresource = tpl
			}
			next.ServeHTTP(w, r)
		})
	})

	installDiscovery(router, catalog, reviewResources...)
	installReviews(router, cfg.Authentication, cfg.Authorizer)
	installOpenAPI(router, catalog, cfg.Logger)
	if md := cfg.OpenIDMetadata; md != nil {
		router.Handle(serviceaccount.OpenIDConfigPath, serveOpenIDMetadata(md.Config, "application/json")).Methods(http.MethodGet, http.MethodHead)
		router.Handle(serviceaccount.JWKSPath, serveOpenIDMetadata(md.JWKS, "application/jwk-set+json")).Methods(http.MethodGet, http.MethodHead)
	}
	if cfg.Profiling {
		installProfiling(router)
	}
	// Resources first, through the catalog at request time: they are the
	// busy paths, and no route of the router serves one.
	routes := withResourceRoutes(router, catalog, m, cfg.TokenIssuer)
	limited := filters.WithLimits(routes, filters.Limits{
		ReadOnly: cfg.MaxRequestsInFlight, Mutating: cfg.MaxMutatingRequestsInFlight,
		Bytes: cfg.MaxRequestBytesInFlight, MaxBody: MaxRequestBodyBytes,
	}, cfg.Metrics, writeError)
	api := filters.WithCORS(filters.WithAuth(limited, cfg.Authentication, cfg.Authorizer, writeError, filteredRequests{catalog: catalog}), cfg.CORSAllowedOrigins)
	probes := probeHandler(healthEndpoints(cfg.StorageCheck, cfg.ShutdownInitiated, cfg.CRDsSynced, cfg.PostStartHooks...),
		promhttp.HandlerFor(prometheus.Gatherers{cfg.Metrics, kubeAdmissionMetrics}, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}))
	watches := &sync.WaitGroup{}
	return &Handler{rc: withRequestContext(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !probes(w, r) {
			api.ServeHTTP(w, r)
		}
	}), cfg.Logger, cfg.RequestTimeout, m, newAuditLog(cfg.AuditLog), watches), watches: watches}
}

// probeHandler serves the health endpoints and /metrics, before and apart
// from the API's filters (CORS, authentication, authorization, limits):
// load balancers and Prometheus must always reach them. It reports whether
// the request was one of them.
func probeHandler(health map[string]*healthEndpoint, metrics http.Handler) func(w http.ResponseWriter, r *http.Request) bool {
	return func(w http.ResponseWriter, r *http.Request) bool {
		info := infoOf(r)
		if r.URL.Path == "/metrics" {
			info.probe, info.component, info.subresource = true, "", r.URL.Path
			metrics.ServeHTTP(w, r)
			return true
		}
		name, check, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
		h, ok := health[name]
		if !ok {
			return false
		}
		info.probe, info.component = true, ""
		if check == "" && strings.HasSuffix(r.URL.Path, "/") {
			notFound(w, r)
			return true
		}
		h.serveHTTP(w, r, check)
		return true
	}
}

func notFound(w http.ResponseWriter, r *http.Request) {
	writeError(w, r, apierrors.NewGenericServerResponse(http.StatusNotFound, "", schema.GroupResource{}, "", "", 0, false))
}

// groupVersionPath is where a group version is served: /api/v1 for the
// core group, /apis/<group>/<version> for the others.
func groupVersionPath(gv schema.GroupVersion) string {
	if gv.Group == "" {
		return "/api/" + gv.Version
	}
	return "/apis/" + gv.Group + "/" + gv.Version
}

// withRequestContext gives every request an audit ID (the Audit-Id
// response header, as kube-apiserver's, and "auditID" on every log line of
// the request), a deadline, a logger and a requestInfo; it logs one line per
// request, records its metrics and its audit line (audit may be nil), and
// turns a panic into a 500 Status. A watch is counted in watches until it
// ends, also when it outlives its handler (requestInfo.rest, .parked): it
// is then finished when it ends.
func withRequestContext(next http.Handler, log *slog.Logger, timeout time.Duration, m *metrics, audit *auditLog, watches *sync.WaitGroup) *requestContext {
	return &requestContext{next: next, log: log, timeout: timeout, m: m, audit: audit, watches: watches}
}

type requestContext struct {
	next    http.Handler
	log     *slog.Logger
	timeout time.Duration
	m       *metrics
	audit   *auditLog
	watches *sync.WaitGroup
}

// serve serves r up to where a parked watch waits, which it returns.
func (rc *requestContext) serve(w http.ResponseWriter, r *http.Request, isWatch bool) (parked *parkedRequest) {
	log, m, audit := rc.log, rc.m, rc.audit
	start := time.Now()
	auditID := uuid.NewString()
	w.Header().Set("Audit-Id", auditID)
	info := &requestInfo{verb: r.Method, component: componentAPIServer, auditID: auditID, log: log, base: r.Context()}
	ctx, cancel := r.Context(), context.CancelFunc(func() {})
	ended := func() {}
	var timeoutErr error
	if isWatch {
		// Counted before its handler can take the connection over, so
		// that no watch slips between http.Server.Shutdown and
		// WaitWatches.
		rc.watches.Add(1)
		ended = rc.watches.Done
	} else {
		var timeout time.Duration
		timeout, timeoutErr = requestTimeout(r, rc.timeout)
		ctx, cancel = context.WithTimeout(ctx, timeout)
	}
	defer cancel()
	ctx = context.WithValue(ctx, requestInfoKey{}, info)
	ctx = registry.WithRevisionMemo(ctx)
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		// Only writes are admitted: what admission records (the policies'
		// guard, the audit annotations) is not made for reads and watches.
		ctx = registry.WithAdmissionRecord(ctx)
		ctx, info.auditAnnotations = filters.WithAuditAnnotations(ctx)
	}
	r = r.WithContext(ctx)
	setDeadlines(w, r)
	rec := &statusRecorder{ResponseWriter: w, code: http.StatusOK}
	defer func() {
		if p := recover(); p != nil {
			if p == http.ErrAbortHandler {
				ended()
				panic(p)
			}
			writeError(rec, r, fmt.Errorf("panic: %v", p))
		}
		// finish must not hold rec, r or ctx: they would keep net/http's
		// buffers, the request's headers and context of a request that
		// outlives its handler alive.
		code, req := rec.code, summarize(r)
		finish := func() {
			took := time.Since(start)
			m.recordRequest(req, info, code, took)
			audit.record(req, auditID, info, code, start, took)
			level := slog.LevelInfo
			if info.probe {
				level = slog.LevelDebug
			}
			log.LogAttrs(context.Background(), level, "request", slog.String("auditID", auditID), slog.String("verb", req.method),
				slog.String("path", req.url.Path), slog.Int("code", code),
				slog.String("latency", took.Round(time.Microsecond).String()), slog.String("userAgent", req.userAgent))
		}
		switch {
		case info.rest != nil:
			go serveDetached(info, info.rest, finish, ended)
		case info.parked != nil:
			parked = &parkedRequest{parkedRest: info.parked, end: func() { finish(); ended() }}
		default:
			finish()
			ended()
		}
	}()
	if timeoutErr != nil {
		writeError(rec, r, timeoutErr)
		return nil
	}
	rc.next.ServeHTTP(rec, r)
	return nil
}

// parkedRest is the rest of a request that goes on on its handler's
// goroutine once the filters and routing have returned (an HTTP/2 watch):
// step does what there is to do and reports whether there will be more,
// and ready holds a value when there may be.
type parkedRest interface {
	step() bool
	ready() <-chan struct{}
}

// parkedRequest is a parked rest and what ends its request.
type parkedRequest struct {
	parkedRest
	end func()
}

func (p *parkedRequest) step() (more bool) {
	// Also when step panics (net/http then resets the stream).
	defer func() {
		if !more {
			p.end()
		}
	}()
	return p.parkedRest.step()
}

// requestSummary is what the log line, the metrics and the audit line of
// a finished request read of it, and no more: a request that outlives its
// handler keeps this, not its headers and context.
type requestSummary struct {
	method, remoteAddr, userAgent string
	url                           *url.URL
}

func summarize(r *http.Request) requestSummary {
	return requestSummary{method: r.Method, remoteAddr: r.RemoteAddr, userAgent: r.UserAgent(), url: r.URL}
}

// serveDetached runs the rest of a request whose handler returned (a watch
// on a connection taken over from net/http), then finish and ended.
// Without net/http around it, it recovers its own panics: the stream is
// then cut off, as net/http cuts off a handler that panics.
func serveDetached(info *requestInfo, run, finish, ended func()) {
	defer ended()
	defer finish()
	defer func() {
		if p := recover(); p != nil && p != http.ErrAbortHandler {
			info.logger().Error("panic serving a detached request", "panic", p, "stack", string(debug.Stack()))
		}
	}()
	run()
}

type statusRecorder struct {
	http.ResponseWriter
	code int
}

func (s *statusRecorder) WriteHeader(code int) {
	s.code = code
	s.ResponseWriter.WriteHeader(code)
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }
