package etcdstore

import (
	"context"
	"fmt"
	"net/url"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

// EmbeddedConfig configures a single-member etcd run inside the process.
type EmbeddedConfig struct {
	// Dir keeps etcd's data; it survives restarts.
	Dir string
	// LogFile receives etcd's own logs ("/dev/null" to drop them).
	LogFile string
	// NoFsync trades durability for speed; for tests only.
	NoFsync bool
	// StartTimeout bounds how long to wait for etcd to be ready.
	StartTimeout time.Duration
}

// Embedded is a running single-member etcd listening on loopback.
type Embedded struct {
	etcd     *embed.Etcd
	endpoint string
}

// StartEmbedded starts etcd on free loopback ports and returns once it
// serves client requests.
func StartEmbedded(ctx context.Context, cfg EmbeddedConfig) (*Embedded, error) {
	ecfg := embed.NewConfig()
	ecfg.Name = "concord"
	ecfg.Dir = cfg.Dir
	ecfg.UnsafeNoFsync = cfg.NoFsync
	ecfg.LogLevel = "warn"
	ecfg.LogOutputs = []string{cfg.LogFile}
	// Port 0: the kernel picks free ports, so several servers (and tests) can
	// run side by side. A single member never dials its own peer URL.
	loopback := url.URL{Scheme: "http", Host: "127.0.0.1:0"}
	ecfg.ListenClientUrls = []url.URL{loopback}
	ecfg.AdvertiseClientUrls = []url.URL{loopback}
	ecfg.ListenPeerUrls = []url.URL{loopback}
	ecfg.AdvertisePeerUrls = []url.URL{loopback}
	ecfg.InitialCluster = ecfg.InitialClusterFromName(ecfg.Name)

	e, err := embed.StartEtcd(ecfg)
	if err != nil {
		return nil, fmt.Errorf("start embedded etcd in %s: %w", cfg.Dir, err)
	}
	timeout := cfg.StartTimeout
	if timeout <= 0 {
		timeout = time.Minute
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("embedded etcd in %s failed: %w", cfg.Dir, err)
	case <-timer.C:
		e.Close()
		return nil, fmt.Errorf("embedded etcd in %s not ready after %s (its log: %s)", cfg.Dir, timeout, cfg.LogFile)
	case <-ctx.Done():
		e.Close()
		return nil, ctx.Err()
	}
	return &Embedded{etcd: e, endpoint: "http://" + e.Clients[0].Addr().String()}, nil
}

// Endpoint is the client URL, for clientv3.Config.Endpoints.
func (e *Embedded) Endpoint() string { return e.endpoint }

// Err reports a fatal error of the running etcd.
func (e *Embedded) Err() <-chan error { return e.etcd.Err() }

// Close stops etcd, finishing in-flight requests; it is safe to call twice.
func (e *Embedded) Close() { e.etcd.Close() }
