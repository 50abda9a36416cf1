package app

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/concord-dev/concord/etcdstore"
)

// startEtcd starts the embedded etcd (without --etcd-servers) and
// connects to etcd.
func (s *Server) startEtcd(ctx context.Context) error {
	s.endpoints = s.cfg.EtcdServers
	if s.cfg.Embedded() {
		etcdDir := filepath.Join(s.cfg.DataDir, "etcd")
		if err := os.MkdirAll(s.cfg.DataDir, 0o700); err != nil {
			return fmt.Errorf("create --data-dir: %w", err)
		}
		etcdLog := filepath.Join(s.cfg.DataDir, "etcd.log")
		s.log.Info("starting embedded etcd", "dir", etcdDir, "log", etcdLog)
		embedded, err := etcdstore.StartEmbedded(ctx, etcdstore.EmbeddedConfig{Dir: etcdDir, LogFile: etcdLog, StartTimeout: s.cfg.EtcdDialTimeout})
		if err != nil {
			return err
		}
		s.embedded = embedded
		s.onRelease(embedded.Close)
		s.endpoints = []string{embedded.Endpoint()}
	}
	client, err := connectEtcd(ctx, s.log, etcdClientConfig(s.endpoints, s.etcdTLS), s.cfg.EtcdDialTimeout)
	if err != nil {
		return err
	}
	s.client = client
	s.onRelease(func() { client.Close() })
	return nil
}

// Keepalive of the etcd client's connections, kube-apiserver's
// (apiserver/pkg/storage/storagebackend/factory/etcd3.go, newETCD3Client):
// after etcdKeepaliveTime without a frame from a member the client pings
// it, and closes the connection when the ping is not answered within
// etcdKeepaliveTimeout, so that requests and watches move to another
// member. That takes up to 40 s; the endpoint monitor (etcdstore.Monitor)
// takes a silent member out within about a second.
const (
	etcdKeepaliveTime    = 30 * time.Second
	etcdKeepaliveTimeout = 10 * time.Second
)

// etcdClientConfig is the configuration of the server's etcd client, and of
// the endpoint monitor's clients. Like kube-apiserver it leaves
// PermitWithoutStream off: etcd's keepalive enforcement policy does not
// permit pings on a connection without streams and closes a connection
// that keeps sending them (too_many_pings); the client pings while
// requests or watches (the read caches') are open.
func etcdClientConfig(endpoints []string, tlsCfg *tls.Config) clientv3.Config {
	return clientv3.Config{
		Endpoints:            endpoints,
		DialTimeout:          5 * time.Second,
		DialKeepAliveTime:    etcdKeepaliveTime,
		DialKeepAliveTimeout: etcdKeepaliveTimeout,
		TLS:                  tlsCfg,
		Logger:               zap.NewNop(),
	}
}

// connectEtcd waits until an etcd member answers a read, for at most
// timeout, and says which endpoints did not answer and for how long.
func connectEtcd(ctx context.Context, log *slog.Logger, cfg clientv3.Config, timeout time.Duration) (*clientv3.Client, error) {
	endpoints := cfg.Endpoints
	client, err := clientv3.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("etcd client for %s: %w", strings.Join(endpoints, ","), err)
	}
	start := time.Now()
	deadline := start.Add(timeout)
	for {
		attemptCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
		// Serializable: a member answers without a leader, so a start
		// during an election or without quorum goes on (the start-up
		// steps wait for etcd, /readyz failing, and the process stays up);
		// an endpoint where no etcd answers is a configuration to fix.
		_, err = client.Get(attemptCtx, "/concord-start-probe", clientv3.WithSerializable())
		cancel()
		if err == nil {
			return client, nil
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			client.Close()
			return nil, fmt.Errorf("etcd at %s did not answer for %s (last error: %w); check --etcd-servers and that etcd is running",
				strings.Join(endpoints, ","), time.Since(start).Round(time.Second), err)
		}
		log.Warn("waiting for etcd", "endpoints", strings.Join(endpoints, ","), "waited", time.Since(start).Round(time.Second).String(), "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}
