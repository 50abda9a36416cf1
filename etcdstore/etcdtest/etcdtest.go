// Package etcdtest starts a real embedded etcd for tests.
package etcdtest

import (
	"context"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/concord-dev/concord/etcdstore"
)

// Etcd is a running test etcd and a client connected to it.
type Etcd struct {
	Endpoint string
	Client   *clientv3.Client

	server   *etcdstore.Embedded
	stopOnce sync.Once
}

// Stop stops the etcd server, as if it crashed or was partitioned away:
// Client stays open and its requests fail or wait. Safe to call twice; the
// test's cleanup calls it too.
func (e *Etcd) Stop() {
	e.stopOnce.Do(e.server.Close)
}

// Start runs a single-member etcd in a temporary directory (fsync off) for
// the duration of the test.
func Start(tb testing.TB) *Etcd {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e, err := etcdstore.StartEmbedded(ctx, etcdstore.EmbeddedConfig{
		Dir:     tb.TempDir(),
		LogFile: "/dev/null",
		NoFsync: true,
	})
	if err != nil {
		tb.Fatalf("start etcd: %v", err)
	}
	out := &Etcd{Endpoint: e.Endpoint(), server: e}
	tb.Cleanup(out.Stop)
	client, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{e.Endpoint()},
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		tb.Fatalf("etcd client: %v", err)
	}
	tb.Cleanup(func() { client.Close() })
	out.Client = client
	return out
}
