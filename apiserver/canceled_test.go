package apiserver_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/concord-dev/concord/etcdstore"
	"github.com/concord-dev/concord/registry"
)

// stalledStorage holds every ConfigMap create until the request's context ends, and
// then fails it as etcdstore does.
type stalledStorage struct {
	*etcdstore.Store
	arrived chan struct{}
}

func (s *stalledStorage) Create(ctx context.Context, ref etcdstore.Ref, value []byte, guards ...etcdstore.Guard) (int64, error) {
	if ref.Resource != "configmaps" {
		return s.Store.Create(ctx, ref, value, guards...)
	}
	s.arrived <- struct{}{}
	<-ctx.Done()
	return 0, fmt.Errorf("create %s: %w: %w", ref.Name, etcdstore.ErrUnknownOutcome, ctx.Err())
}

// TestClientThatHangsUpIsNoServerError: a request whose client went away
// while it waited for etcd is logged at info with code 499 and how long it
// ran, counted as 499 — no ERROR line, no 5xx in the metrics.
func TestClientThatHangsUpIsNoServerError(t *testing.T) {
	logs := &syncBuffer{}
	storage := &stalledStorage{arrived: make(chan struct{}, 1)}
	s := startServerWithOptions(t, serverOptions{logOut: logs, wrap: func(st *etcdstore.Store) registry.Storage {
		storage.Store = st
		return storage
	}})
	ctx, cancel := context.WithCancel(t.Context())
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.URL+"/api/v1/namespaces/default/configmaps", strings.NewReader(`{"metadata":{"name":"gone"}}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	done := make(chan error, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	select {
	case <-storage.arrived:
	case <-time.After(10 * time.Second):
		t.Fatal("the create never reached storage")
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("client: %v; want its own cancellation", err)
	}
	if !logs.waitFor(t, func(line map[string]any) bool {
		return line["msg"] == "request" && line["verb"] == "POST" && line["code"] == float64(499) && line["level"] == "INFO" && line["latency"] != ""
	}) {
		t.Fatalf("no INFO request line with code 499; log:\n%s", logs.String())
	}
	for _, line := range logs.lines(t) {
		if line["level"] == "ERROR" {
			t.Errorf("ERROR line for a request the client abandoned: %v", line)
		}
	}
	families := scrape(t, s)
	labels := map[string]string{"verb": "POST", "dry_run": "", "group": "", "version": "v1", "resource": "configmaps", "subresource": "",
		"scope": "namespace", "component": "apiserver", "code": "499"}
	if got := value(t, families, "apiserver_request_total", labels); got != 1 {
		t.Errorf("apiserver_request_total%v = %v; want 1", labels, got)
	}
	for _, code := range []string{"500", "504"} {
		labels["code"] = code
		if _, ok := find(families, "apiserver_request_total", labels); ok {
			t.Errorf("apiserver_request_total counts the abandoned request as %s", code)
		}
	}
}
