package app

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"

	"github.com/concord-dev/concord/etcdstore/etcdtest"
	"github.com/concord-dev/concord/internal/syncbuf"
)

// newTestServer builds a server over e, serving plain HTTP to everyone.
func newTestServer(t *testing.T, e *etcdtest.Etcd, logs *syncbuf.Buffer, opts ...Option) *Server {
	t.Helper()
	cfg := DefaultConfig()
	cfg.EtcdServers = []string{e.Endpoint}
	cfg.Port = 0
	cfg.DataDir = t.TempDir()
	openServing(&cfg)
	cfg.Complete()
	if err := cfg.Validate(); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv, err := New(ctx, cfg, append([]Option{WithLogger(newLogger("json", logs))}, opts...)...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return srv
}

// leaseHolder is the holder of the Lease kube-system/<name> stored in e
// ("" for none).
func leaseHolder(t *testing.T, e *etcdtest.Etcd, name string) (string, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := e.Client.Get(ctx, "/registry/leases/kube-system/"+name)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) == 0 {
		return "", false
	}
	var l coordinationv1.Lease
	if err := json.Unmarshal(resp.Kvs[0].Value, &l); err != nil {
		t.Fatalf("decode the Lease %s: %v", name, err)
	}
	if l.Spec.HolderIdentity == nil {
		return "", true
	}
	return *l.Spec.HolderIdentity, true
}

// TestShutdownEndsRun: Shutdown ends Run, which returns nil once the
// server stopped serving and its controllers stopped, having released
// their Leases while etcd was still connected; Run cannot be called again.
// The controllers not asked for do not run.
func TestShutdownEndsRun(t *testing.T) {
	e := etcdtest.Start(t)
	logs := &syncbuf.Buffer{}
	srv := newTestServer(t, e, logs, WithControllers(Controllers{Namespaces: true}))
	done := make(chan error, 1)
	go func() { done <- srv.Run(context.Background()) }()
	select {
	case <-srv.Ready():
	case err := <-done:
		t.Fatalf("Run ended before it was ready: %v", err)
	case <-time.After(time.Minute):
		t.Fatal("not ready after a minute")
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if h, _ := leaseHolder(t, e, "concord-namespaces"); h != "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the namespace controller holds no Lease 10s after the server was ready")
		}
	}
	for _, lease := range []string{"concord-garbage-collector", "concord-serviceaccounts", "concord-admissionpolicy-status"} {
		if _, ok := leaseHolder(t, e, lease); ok {
			t.Errorf("the Lease %s exists; want its controller not run", lease)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown = %v; want nil", err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run = %v; want nil", err)
		}
	default:
		t.Error("Run had not returned when Shutdown did")
	}
	if h, ok := leaseHolder(t, e, "concord-namespaces"); !ok || h != "" {
		t.Errorf("after Shutdown the Lease concord-namespaces is held by %q (stored: %v); want released", h, ok)
	}
	if _, err := http.Get(srv.URL() + "/livez"); err == nil {
		t.Error("GET /livez after Shutdown: the server still answers")
	}
	if !strings.Contains(logs.String(), `"msg":"stopped"`) {
		t.Errorf("no \"stopped\" in the log:\n%s", logs.String())
	}
	if err := srv.Run(context.Background()); err == nil {
		t.Error("a second Run = nil; want an error")
	}
}

// TestShutdownBeforeRun: a server that never ran is released by Shutdown
// (its port free again) and cannot run afterwards.
func TestShutdownBeforeRun(t *testing.T) {
	srv := newTestServer(t, etcdtest.Start(t), &syncbuf.Buffer{})
	if err := srv.Shutdown(context.Background()); err != nil {
		t.Fatalf("Shutdown = %v; want nil", err)
	}
	u, err := url.Parse(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", u.Host)
	if err != nil {
		t.Fatalf("listen on the released server's %s: %v", u.Host, err)
	}
	ln.Close()
	if err := srv.Run(context.Background()); err == nil {
		t.Error("Run after Shutdown = nil; want an error")
	}
}
