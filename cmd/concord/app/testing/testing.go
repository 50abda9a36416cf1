// Package testing starts Concord servers inside a test process, built by
// cmd/concord/app as the binary builds its own, as kube-apiserver's
// cmd/kube-apiserver/app/testing does for kube's tests. Every in-process
// test server of the project starts here.
package testing

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/concord-dev/concord/cmd/concord/app"
)

// startTimeout bounds a server's start-up; shutdownTimeout its shutdown.
const (
	startTimeout    = 30 * time.Second
	shutdownTimeout = time.Minute
)

// Config is the binary's default Config over the etcd at endpoint, on a
// free loopback port, with its files in a directory of the test's, without
// profiling. It serves HTTPS with the certificates it generates, and
// authenticates and authorizes as the binary does; PlainConfig is the
// open server most tests want.
func Config(tb testing.TB, endpoint string) app.Config {
	tb.Helper()
	cfg := app.DefaultConfig()
	cfg.EtcdServers = []string{endpoint}
	cfg.Port = 0
	cfg.DataDir = tb.TempDir()
	cfg.Profiling = false
	return cfg
}

// PlainConfig is Config serving plain HTTP to everyone: anonymous
// requests, all allowed.
func PlainConfig(tb testing.TB, endpoint string) app.Config {
	tb.Helper()
	cfg := Config(tb, endpoint)
	cfg.Security.InsecureServing = true
	cfg.Security.AnonymousAuth = true
	cfg.Security.AuthorizationMode = app.AuthorizationAlwaysAllow
	return cfg
}

// Run completes and validates cfg as the binary does, builds its server
// and runs it until the test ends (its cleanup shuts the server down, or
// a Shutdown of the test's); it returns once the server's start-up steps
// are done. The server logs nowhere and runs no controllers unless opts
// say otherwise (app.WithLogger, app.WithControllers).
func Run(tb testing.TB, cfg app.Config, opts ...app.Option) *app.Server {
	tb.Helper()
	cfg.Complete()
	if err := cfg.Validate(); err != nil {
		tb.Fatalf("server config: %v", err)
	}
	opts = append([]app.Option{
		app.WithLogger(slog.New(slog.DiscardHandler)),
		app.WithControllers(app.Controllers{}),
	}, opts...)
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	srv, err := app.New(ctx, cfg, opts...)
	if err != nil {
		tb.Fatalf("start the server: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Run(context.Background()) }()
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			tb.Errorf("server shutdown: %v", err)
		}
	})
	select {
	case <-srv.Ready():
	case err := <-done:
		tb.Fatalf("the server stopped before it was ready: %v", err)
	case <-ctx.Done():
		tb.Fatalf("the server is not ready after %v", startTimeout)
	}
	return srv
}
