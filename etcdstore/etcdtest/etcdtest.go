// Package etcdtest starts a real embedded etcd for tests.
package etcdtest

import (
	"context"
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
	tb.Cleanup(e.Close)
	client, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{e.Endpoint()},
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		tb.Fatalf("etcd client: %v", err)
	}
	tb.Cleanup(func() { client.Close() })
	return &Etcd{Endpoint: e.Endpoint(), Client: client}
}
