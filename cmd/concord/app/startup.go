package app

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/concord-dev/concord/apiserver"
	"github.com/concord-dev/concord/registry"
)

// Backoff between the attempts of a start-up step: doubling from the
// first, capped, each delay drawn between half and all of it so that
// replicas started together do not retry in step.
const (
	startupFirstRetry = 200 * time.Millisecond
	startupMaxRetry   = 5 * time.Second
)

// startupStep is start-up work that needs etcd (the system namespaces,
// the default RBAC roles), done while the replica serves, as
// kube-apiserver's post-start hooks: run tries it until it succeeds or
// the process stops — an etcd election or quorum loss at start-up must not
// end the process — and /readyz's check poststarthook/<name> fails
// meanwhile. The work must be idempotent: an attempt whose outcome is
// unknown is tried again.
type startupStep struct {
	name string
	do   func(ctx context.Context) error
	// attemptTimeout bounds one attempt.
	attemptTimeout time.Duration

	mu       sync.Mutex
	done     bool
	attempts int
	err      error // of the last attempt
}

// hook is the step's /readyz check.
func (s *startupStep) hook() apiserver.PostStartHook {
	return apiserver.PostStartHook{Name: s.name, Check: s.check}
}

func (s *startupStep) check() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.done:
		return nil
	case s.attempts == 0:
		return fmt.Errorf("%s: not started: waits for the start-up steps before it", s.name)
	}
	return fmt.Errorf("%s: waiting for etcd, %d attempts: %w", s.name, s.attempts, s.err)
}

// run tries the step until it succeeds (true) or ctx ends (false).
func (s *startupStep) run(ctx context.Context, log *slog.Logger) bool {
	retry := startupFirstRetry
	for {
		attemptCtx, cancel := context.WithTimeout(ctx, s.attemptTimeout)
		err := s.do(attemptCtx)
		cancel()
		s.mu.Lock()
		s.attempts++
		s.done, s.err = err == nil, err
		attempts := s.attempts
		s.mu.Unlock()
		if err == nil {
			if attempts > 1 {
				log.Info("start-up step done", "step", s.name, "attempts", attempts)
			}
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		wait := retry/2 + rand.N(retry/2+1)
		log.Warn("start-up step failed; retrying, /readyz fails until it is done: check etcd", "step", s.name, "attempt", attempts, "retryIn", wait.Round(time.Millisecond).String(), "err", err)
		select {
		case <-ctx.Done():
			return false
		case <-time.After(wait):
		}
		retry = min(2*retry, startupMaxRetry)
	}
}

// startup is a replica's start-up steps, run in order.
type startup struct {
	steps []*startupStep
	done  chan struct{} // closed once every step is done
}

// startupSteps are the replica's start-up steps: the system namespaces
// (then the controllers, whose Leases live in kube-system), then, with
// RBAC, kube's default roles and bindings. Their /readyz checks have
// kube-apiserver's names.
func (s *Server) startupSteps() *startup {
	namespaces := &startupStep{name: "start-system-namespaces-controller", attemptTimeout: s.cfg.EtcdDialTimeout, do: func(stepCtx context.Context) error {
		if err := registry.EnsureSystemNamespaces(stepCtx, s.stores); err != nil {
			return fmt.Errorf("create the system namespaces: %w", err)
		}
		s.startControllers()
		return nil
	}}
	steps := &startup{steps: []*startupStep{namespaces}, done: make(chan struct{})}
	if bootstrap := s.startAuthorization(); bootstrap != nil {
		steps.steps = append(steps.steps, &startupStep{name: "rbac/bootstrap-roles", attemptTimeout: s.cfg.EtcdDialTimeout, do: bootstrap})
	}
	return steps
}

func (s *startup) hooks() []apiserver.PostStartHook {
	out := make([]apiserver.PostStartHook, len(s.steps))
	for i, step := range s.steps {
		out[i] = step.hook()
	}
	return out
}

// run runs the steps in order until all are done or ctx ends.
func (s *startup) run(ctx context.Context, log *slog.Logger) {
	for _, step := range s.steps {
		if !step.run(ctx, log) {
			return
		}
	}
	close(s.done)
}

// waitStarted waits until every channel of started is closed, ctx ends or
// timeout passes (then says that /readyz fails until they are).
func waitStarted(ctx context.Context, log *slog.Logger, timeout time.Duration, started ...<-chan struct{}) {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for _, c := range started {
		select {
		case <-c:
		case <-ctx.Done():
			return
		case <-deadline.C:
			log.Warn("start-up is not done (the system namespaces, the default RBAC roles, the stored CustomResourceDefinitions); serving, /readyz fails until it is: check the etcd connection", "waited", timeout.String())
			return
		}
	}
}
