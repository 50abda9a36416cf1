// Package apiserver serves Concord's Kubernetes-compatible HTTP API: routes,
// content negotiation, Status errors and discovery, over the registry.
package apiserver

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"regexp"
	"time"

	"github.com/gorilla/mux"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/concord-dev/concord/registry"
)

// Config configures the API handler.
type Config struct {
	// Stores are the resources served, one store each.
	Stores []*registry.Store
	Logger *slog.Logger
	// RequestTimeout bounds every request (kube-apiserver's --request-timeout).
	RequestTimeout time.Duration
	// CORSAllowedOrigins are the origins browsers may call from; none: CORS off.
	CORSAllowedOrigins []*regexp.Regexp
}

// New returns the HTTP handler of the API.
func New(cfg Config) http.Handler {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = time.Minute
	}
	router := mux.NewRouter()
	// Keep ".." and "." in paths so that they are refused as names, not
	// redirected somewhere else.
	router.SkipClean(true)
	router.NotFoundHandler = http.HandlerFunc(notFound)
	router.MethodNotAllowedHandler = http.HandlerFunc(notFound)

	installDiscovery(router, cfg.Stores)
	installOpenAPI(router, cfg.Stores)
	for _, store := range cfg.Stores {
		installResource(router, store)
	}
	return withRequestContext(withCORS(router, cfg.CORSAllowedOrigins), cfg.Logger, cfg.RequestTimeout)
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

func installResource(router *mux.Router, store *registry.Store) {
	res := store.Resource
	h := &resourceHandler{store: store}
	base := groupVersionPath(res.GroupVersion)
	if res.Namespaced {
		router.Handle(base+"/namespaces/{namespace}/"+res.Plural, http.HandlerFunc(h.collection))
		router.Handle(base+"/namespaces/{namespace}/"+res.Plural+"/{name}", http.HandlerFunc(h.item))
		router.Handle(base+"/"+res.Plural, http.HandlerFunc(h.collection)) // all namespaces
		// Deprecated watch paths, still used by some clients.
		router.Handle(base+"/watch/namespaces/{namespace}/"+res.Plural, http.HandlerFunc(h.legacyWatch))
		router.Handle(base+"/watch/namespaces/{namespace}/"+res.Plural+"/{name}", http.HandlerFunc(h.legacyWatch))
		router.Handle(base+"/watch/"+res.Plural, http.HandlerFunc(h.legacyWatch))
		return
	}
	router.Handle(base+"/"+res.Plural, http.HandlerFunc(h.collection))
	router.Handle(base+"/"+res.Plural+"/{name}", http.HandlerFunc(h.item))
	router.Handle(base+"/watch/"+res.Plural, http.HandlerFunc(h.legacyWatch))
	router.Handle(base+"/watch/"+res.Plural+"/{name}", http.HandlerFunc(h.legacyWatch))
}

// withRequestContext puts a deadline and a logger on every request, logs
// one line per request, and turns a panic into a 500 Status.
func withRequestContext(next http.Handler, log *slog.Logger, timeout time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		ctx, cancel := r.Context(), context.CancelFunc(func() {})
		if !isWatch(r) {
			ctx, cancel = context.WithTimeout(ctx, timeout)
		}
		defer cancel()
		ctx = context.WithValue(ctx, loggerKey{}, log)
		r = r.WithContext(ctx)
		rec := &statusRecorder{ResponseWriter: w, code: http.StatusOK}
		defer func() {
			if p := recover(); p != nil {
				if p == http.ErrAbortHandler {
					panic(p)
				}
				writeError(rec, r, fmt.Errorf("panic: %v", p))
			}
			log.Info("request", "verb", r.Method, "path", r.URL.Path, "code", rec.code,
				"latency", time.Since(start).Round(time.Microsecond).String(), "userAgent", r.UserAgent())
		}()
		next.ServeHTTP(rec, r)
	})
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

// contextWithTimeout bounds a request by d from now.
func contextWithTimeout(r *http.Request, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), d)
}
