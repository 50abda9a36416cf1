package app

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"

	"github.com/concord-dev/concord/registry"
)

// The steps of New before etcd: each reads or opens what the settings
// name, so that a bad setting fails the start before etcd starts.

// loadSettings loads the etcd TLS and encryption configurations and
// the store options.
func (s *Server) loadSettings(context.Context) error {
	s.cfg.logIgnoredFlags(s.log)
	var err error
	if s.etcdTLS, err = s.cfg.etcdTLS(); err != nil {
		return err
	}
	if s.encryptAtRest, err = s.cfg.encryption(); err != nil {
		return err
	}
	unconditional, err := registry.ParseUnconditionalUpdate(s.cfg.UnconditionalUpdate)
	if err != nil {
		return fmt.Errorf("--unconditional-update: %w", err)
	}
	if s.encryptAtRest != nil {
		s.log.Info("encryption at rest", "config", s.cfg.EncryptionProviderConfig, "writes", s.encryptAtRest.Writers(servedResources()))
	}
	s.storeOpts = []registry.StoreOption{registry.WithEncryption(s.encryptAtRest), registry.WithUnconditionalUpdate(unconditional), registry.WithAdmission(&s.admission)}
	if !s.cfg.WatchCache {
		s.storeOpts = append(s.storeOpts, registry.WithoutReadCache())
	}
	s.storeOpts = append(s.storeOpts, s.opts.storeOpts...)
	return nil
}

// listen binds the port first: a taken port is the most common start-up
// failure, and it should be reported before anything else starts.
func (s *Server) listen(context.Context) error {
	addr := net.JoinHostPort(s.cfg.BindAddress, strconv.Itoa(s.cfg.Port))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("cannot listen on %s: %w (is another server using the port? pick another with --port, or --port 0 for a free one)", addr, err)
	}
	s.ln = ln
	s.onRelease(func() { ln.Close() })
	return nil
}

// secure loads TLS, authentication, authorization, the audit log and the
// ServiceAccount keys, before etcd starts: a bad file or certificate fails
// the start at once.
func (s *Server) secure(context.Context) error {
	sec, err := s.cfg.buildSecurity(s.log)
	if err != nil {
		return err
	}
	s.sec = sec
	if sec.audit != nil {
		s.onRelease(func() { sec.audit.Close() })
	}
	s.saKeys, err = s.cfg.serviceAccountKeys(s.log)
	return err
}

func newLogger(format string, out io.Writer) *slog.Logger {
	if format == "json" {
		return slog.New(slog.NewJSONHandler(out, nil))
	}
	return slog.New(slog.NewTextHandler(out, nil))
}
