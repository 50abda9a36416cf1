// Package app is the Concord server's wiring: it turns a validated Config
// into a running server (New, Run, Shutdown). The concord binary, the
// in-process tests and cmd/apibench build their servers through it.
package app

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/concord-dev/concord/apiserver"
	"github.com/concord-dev/concord/etcdstore"
	"github.com/concord-dev/concord/registry"
	"github.com/concord-dev/concord/registry/controller/leaderelect"
	"github.com/concord-dev/concord/registry/crdserving"
	"github.com/concord-dev/concord/registry/encryption"
)

// Server is a Concord server: New builds it up to serving, Run serves.
type Server struct {
	cfg  Config
	opts options
	log  *slog.Logger

	// From the settings (New's first step).
	etcdTLS       *tls.Config
	encryptAtRest *encryption.Transformers
	storeOpts     []registry.StoreOption

	ln     net.Listener
	url    string
	sec    *serving
	saKeys *serviceAccountKeys

	embedded  *etcdstore.Embedded // nil with --etcd-servers
	endpoints []string
	client    *clientv3.Client
	monitor   *etcdstore.Monitor
	// storage is the store as WithStorage wraps it; the stores write
	// through fenced.
	storage      registry.Storage
	fenced       registry.Storage
	metrics      *prometheus.Registry
	storeMetrics *etcdstore.Metrics

	stores  []*registry.Store
	catalog *registry.Catalog
	// admission is the stores' admission policies and webhooks (admit).
	admission chainAdmission
	crdServer *crdserving.Server // nil when the CRD controllers do not run
	elect     *leaderelect.Elector
	steps     *startup

	handler           *apiserver.Handler
	srv               *http.Server
	drain             *drainer
	shutdownInitiated chan struct{}

	// background is the context of the work beside serving (controllers,
	// compaction, start-up steps), work counts it; it ends first on
	// shutdown.
	background     context.Context
	stopBackground context.CancelFunc
	work           sync.WaitGroup
	// closers release what New made, run in reverse order.
	closers []func()

	ready    chan struct{}
	stopping chan struct{}
	stopOnce sync.Once
	mu       sync.Mutex
	claimed  bool // by Run or Shutdown
	finished chan struct{}
	err      error // Run's, once finished is closed
}

// New builds the server cfg (completed and validated) describes, in steps,
// up to serving: a taken port, a bad file or an etcd that does not answer
// within --etcd-dial-timeout fails it. ctx bounds the building only.
func New(ctx context.Context, cfg Config, opts ...Option) (_ *Server, err error) {
	s := &Server{cfg: cfg, opts: defaultOptions(), ready: make(chan struct{}), stopping: make(chan struct{}), finished: make(chan struct{})}
	for _, o := range opts {
		o(&s.opts)
	}
	s.log = s.opts.log
	if s.log == nil {
		s.log = newLogger(cfg.LogFormat, os.Stderr)
	}
	s.background, s.stopBackground = context.WithCancel(context.Background())
	defer func() {
		if err != nil {
			s.release()
		}
	}()
	for _, step := range []func(context.Context) error{
		s.loadSettings,
		s.listen,
		s.secure,
		s.startEtcd,
		s.buildStorage,
		s.buildCatalog,
		s.admit,
		s.serveCRDs,
		s.buildStartup,
		s.buildHandler,
		s.buildHTTPServer,
	} {
		if err := step(ctx); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// URL is where the server serves: https://, or http:// with
// --insecure-serving; a loopback address when it listens on all.
func (s *Server) URL() string { return s.url }

// Handler is the API's handler, for a test that serves it on a server of
// its own.
func (s *Server) Handler() *apiserver.Handler { return s.handler }

// Catalog is the set of resources served.
func (s *Server) Catalog() *registry.Catalog { return s.catalog }

// Metrics is the registry /metrics serves.
func (s *Server) Metrics() *prometheus.Registry { return s.metrics }

// Stores are the stores of the built-in resources.
func (s *Server) Stores() []*registry.Store { return s.stores }

// Ready is closed once Run serves and the start-up is done (the system
// namespaces, the default RBAC roles, the stored CRDs served), or has not
// finished within --etcd-dial-timeout (logged; /readyz fails until it is).
func (s *Server) Ready() <-chan struct{} { return s.ready }

// goBackground runs f beside serving until the server shuts down.
func (s *Server) goBackground(f func(ctx context.Context)) {
	s.work.Add(1)
	go func() {
		defer s.work.Done()
		f(s.background)
	}()
}

// onRelease adds what release undoes, after what was added later.
func (s *Server) onRelease(f func()) { s.closers = append(s.closers, f) }

// release stops the background work and closes what New opened, in
// reverse order.
func (s *Server) release() {
	s.stopBackground()
	for i := len(s.closers) - 1; i >= 0; i-- {
		s.closers[i]()
	}
	s.closers = nil
}

// Run serves until ctx ends or Shutdown is called, then shuts down in
// order:
//
//  1. the controllers and other background work stop, and /readyz fails
//     (its shutdown check) while everything is still served;
//  2. after --shutdown-delay-duration, by when load balancers have taken
//     the replica out, stop taking requests: watches end at once (their
//     clients reconnect elsewhere), other requests may finish within
//     --shutdown-timeout;
//  3. stop the etcd endpoint monitor, close the etcd client, stop the
//     embedded etcd.
//
// It returns nil after a clean shutdown. It may be called once.
func (s *Server) Run(ctx context.Context) (err error) {
	s.mu.Lock()
	claimed := s.claimed
	s.claimed = true
	s.mu.Unlock()
	if claimed {
		return errors.New("app: Run called twice, or after Shutdown")
	}
	defer func() {
		s.err = err
		close(s.finished)
	}()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-s.stopping:
			cancel()
		case <-ctx.Done():
		}
	}()

	serveErr := s.serve()
	s.waitStarted(ctx)
	var etcdErr <-chan error
	if s.embedded != nil {
		etcdErr = s.embedded.Err()
	}
	select {
	case err := <-serveErr:
		s.release()
		return fmt.Errorf("serve: %w", err)
	case err := <-etcdErr:
		s.release()
		return fmt.Errorf("embedded etcd stopped: %w", err)
	case <-ctx.Done():
	}
	return s.shutdown(serveErr)
}

// Shutdown ends Run as the end of its context does and waits until Run
// returned, or ctx ended; it returns Run's error. A server Run was not
// called on is released at once.
func (s *Server) Shutdown(ctx context.Context) error {
	s.stopOnce.Do(func() { close(s.stopping) })
	s.mu.Lock()
	running := s.claimed
	s.claimed = true
	s.mu.Unlock()
	if !running {
		s.release()
		close(s.finished)
		return nil
	}
	select {
	case <-s.finished:
		return s.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// serve starts serving and the start-up steps; the channel receives the
// error that ended serving.
func (s *Server) serve() <-chan error {
	serveErr := make(chan error, 1)
	go func() {
		if s.sec.tls != nil {
			serveErr <- s.srv.ServeTLS(s.ln, "", "") // the certificate is in TLSConfig
			return
		}
		serveErr <- s.srv.Serve(s.ln)
	}()
	s.goBackground(func(ctx context.Context) { s.steps.run(ctx, s.log) })
	return serveErr
}

// waitStarted waits for the start-up, says the server is ready and closes
// Ready. Ready means the start-up steps done and the custom resources of
// the stored CRDs served too, as /readyz says (its poststarthook checks).
func (s *Server) waitStarted(ctx context.Context) {
	started := []<-chan struct{}{s.steps.done, s.admission.chain.Webhooks.Synced(), s.admission.chain.Policies.Synced()}
	if s.crdServer != nil {
		started = append(started, s.crdServer.Synced())
	}
	waitStarted(ctx, s.log, s.cfg.EtcdDialTimeout, started...)
	s.log.Info("concord ready", "url", s.url, "kubeconfig", s.cfg.WriteKubeconfig, "etcd", strings.Join(s.endpoints, ","), "prefix", s.cfg.EtcdPrefix)
	close(s.ready)
}

// shutdown is Run's shutdown, in order; serveErr ends the delay early.
func (s *Server) shutdown(serveErr <-chan error) error {
	defer s.release()
	s.stopBackground()
	close(s.shutdownInitiated)
	if s.cfg.ShutdownDelayDuration > 0 {
		s.log.Info("shutting down: /readyz fails now; still serving while load balancers notice", "delay", s.cfg.ShutdownDelayDuration.String())
		select {
		case err := <-serveErr:
			return fmt.Errorf("serve: %w", err)
		case <-time.After(s.cfg.ShutdownDelayDuration):
		}
	}
	s.log.Info("shutting down: finishing in-flight requests", "timeout", s.cfg.ShutdownTimeout.String())
	shutdownCtx, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownTimeout)
	defer cancel()
	if err := s.drain.shutdown(shutdownCtx, s.srv); err != nil {
		return fmt.Errorf("shutdown: in-flight requests did not finish within %s: %w", s.cfg.ShutdownTimeout, err)
	}
	// Watches that took their connection over from net/http are not
	// among the requests Shutdown waits for.
	if err := s.handler.WaitWatches(shutdownCtx); err != nil {
		return fmt.Errorf("shutdown: watches did not end within %s: %w", s.cfg.ShutdownTimeout, err)
	}
	// The controllers release their Leases before the etcd client closes.
	if !waitGroup(shutdownCtx, &s.work) {
		s.log.Warn("shutting down: the controllers did not stop in time; closing etcd under them", "timeout", s.cfg.ShutdownTimeout.String())
	}
	s.log.Info("stopped")
	return nil
}

// waitGroup waits for wg, or until ctx ends (false).
func waitGroup(ctx context.Context, wg *sync.WaitGroup) bool {
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return true
	case <-ctx.Done():
		return false
	}
}
