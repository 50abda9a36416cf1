package apiserver_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/concord-dev/concord/apiserver"
	"github.com/concord-dev/concord/etcdstore"
	"github.com/concord-dev/concord/internal/syncbuf"
	"github.com/concord-dev/concord/registry"
)

// TestHealthFormats checks kube-apiserver's health answers byte for byte.
func TestHealthFormats(t *testing.T) {
	s := startServerWithOptions(t, serverOptions{shutdown: make(chan struct{})})
	tests := []struct {
		path     string
		wantCode int
		wantBody string
	}{
		{"/livez", 200, "ok"},
		{"/readyz", 200, "ok"},
		{"/healthz", 200, "ok"},
		{"/livez?verbose", 200, "[+]ping ok\nlivez check passed\n"},
		{"/readyz?verbose", 200, "[+]ping ok\n[+]etcd ok\n[+]shutdown ok\nreadyz check passed\n"},
		{"/healthz?verbose", 200, "[+]ping ok\n[+]etcd ok\nhealthz check passed\n"},
		{"/readyz?verbose&exclude=etcd", 200, "[+]ping ok\n[+]etcd excluded: ok\n[+]shutdown ok\nreadyz check passed\n"},
		{"/readyz?verbose&exclude=etcd&exclude=shutdown", 200, "[+]ping ok\n[+]etcd excluded: ok\n[+]shutdown excluded: ok\nreadyz check passed\n"},
		{"/readyz?verbose&exclude=nope&exclude=gone", 200, "[+]ping ok\n[+]etcd ok\n[+]shutdown ok\nwarn: some health checks cannot be excluded: no matches for \"gone\",\"nope\"\nreadyz check passed\n"},
		{"/readyz?exclude=etcd", 200, "ok"},
		{"/readyz/etcd", 200, "ok"},
		{"/readyz/ping", 200, "ok"},
		{"/readyz/shutdown", 200, "ok"},
		{"/livez/ping", 200, "ok"},
		{"/healthz/etcd", 200, "ok"},
	}
	for _, tc := range tests {
		resp := s.do(t, http.MethodGet, tc.path, nil)
		if resp.Code != tc.wantCode || string(resp.Body) != tc.wantBody {
			t.Errorf("GET %s = %d %q; want %d %q", tc.path, resp.Code, resp.Body, tc.wantCode, tc.wantBody)
		}
		if ct := resp.Header.Get("Content-Type"); ct != "text/plain; charset=utf-8" {
			t.Errorf("GET %s: Content-Type %q; want text/plain; charset=utf-8", tc.path, ct)
		}
		if resp.Header.Get("Audit-Id") == "" {
			t.Errorf("GET %s: no Audit-Id header", tc.path)
		}
	}

	// Checks an endpoint does not have, and the bare directory, are 404.
	for _, path := range []string{"/livez/etcd", "/livez/shutdown", "/healthz/shutdown", "/readyz/nope", "/readyz/"} {
		resp := s.do(t, http.MethodGet, path, nil)
		if resp.Code != http.StatusNotFound {
			t.Errorf("GET %s = %d %s; want 404", path, resp.Code, resp.Body)
			continue
		}
		resp.status(t)
	}
}

// TestReadyzFailsFirstOnShutdown: once shutdown begins /readyz fails with
// the shutdown check while the server still serves everything else.
func TestReadyzFailsFirstOnShutdown(t *testing.T) {
	shutdown := make(chan struct{})
	s := startServerWithOptions(t, serverOptions{shutdown: shutdown})
	s.do(t, http.MethodPost, "/api/v1/namespaces/default/configmaps", map[string]any{"metadata": map[string]string{"name": "still"}})
	if resp := s.do(t, http.MethodGet, "/readyz", nil); resp.Code != http.StatusOK {
		t.Fatalf("before shutdown: GET /readyz = %d %s; want 200", resp.Code, resp.Body)
	}

	close(shutdown)

	tests := []struct {
		path     string
		wantCode int
		wantBody string
	}{
		{"/readyz", 500, "[+]ping ok\n[+]etcd ok\n[-]shutdown failed: reason withheld\nreadyz check failed\n"},
		{"/readyz?verbose", 500, "[+]ping ok\n[+]etcd ok\n[-]shutdown failed: reason withheld\nreadyz check failed\n"},
		{"/readyz/shutdown", 500, "internal server error: reason withheld\n"},
		{"/readyz?exclude=shutdown", 200, "ok"},
		{"/livez", 200, "ok"},
		{"/healthz", 200, "ok"},
	}
	for _, tc := range tests {
		resp := s.do(t, http.MethodGet, tc.path, nil)
		if resp.Code != tc.wantCode || string(resp.Body) != tc.wantBody {
			t.Errorf("after shutdown began: GET %s = %d %q; want %d %q", tc.path, resp.Code, resp.Body, tc.wantCode, tc.wantBody)
		}
	}
	if resp := s.do(t, http.MethodGet, "/api/v1/namespaces/default/configmaps/still", nil); resp.Code != http.StatusOK {
		t.Errorf("after shutdown began: GET configmap = %d %s; want 200 (still serving)", resp.Code, resp.Body)
	}
}

// TestReadyzWaitsForTheStoredCRDs: a replica is not ready until it serves
// the custom resources of the CRDs stored when it started (kube's check
// poststarthook/crd-informer-synced), so a load balancer sends it none of
// their requests while it would answer 404.
func TestReadyzWaitsForTheStoredCRDs(t *testing.T) {
	synced := make(chan struct{})
	s := startServerWithOptions(t, serverOptions{crdsSynced: synced})
	want := "[+]ping ok\n[+]etcd ok\n[-]poststarthook/crd-informer-synced failed: reason withheld\n[+]shutdown ok\nreadyz check failed\n"
	if resp := s.do(t, http.MethodGet, "/readyz", nil); resp.Code != http.StatusInternalServerError || string(resp.Body) != want {
		t.Errorf("before the CRDs are served: GET /readyz = %d %q; want 500 %q", resp.Code, resp.Body, want)
	}
	if resp := s.do(t, http.MethodGet, "/livez", nil); resp.Code != http.StatusOK {
		t.Errorf("before the CRDs are served: GET /livez = %d; want 200", resp.Code)
	}
	close(synced)
	if resp := s.do(t, http.MethodGet, "/readyz?verbose", nil); resp.Code != http.StatusOK || !strings.Contains(string(resp.Body), "[+]poststarthook/crd-informer-synced ok") {
		t.Errorf("once the CRDs are served: GET /readyz?verbose = %d %q; want 200 with the check passed", resp.Code, resp.Body)
	}
}

// TestReadyzNamesTheStartupSteps: each start-up step has its check
// poststarthook/<name>, failing until the step is done, its reason in the
// log only, as every check's.
func TestReadyzNamesTheStartupSteps(t *testing.T) {
	var namespacesDone atomic.Bool
	logs := &syncBuffer{}
	s := startServerWithOptions(t, serverOptions{logOut: logs, hooks: []apiserver.PostStartHook{
		{Name: "start-system-namespaces-controller", Check: func() error {
			if namespacesDone.Load() {
				return nil
			}
			return errors.New("waiting for etcd: etcdserver: no leader")
		}},
		{Name: "rbac/bootstrap-roles", Check: func() error { return errors.New("not started") }},
	}})
	want := "[+]ping ok\n[+]etcd ok\n[-]poststarthook/start-system-namespaces-controller failed: reason withheld\n[-]poststarthook/rbac/bootstrap-roles failed: reason withheld\n[+]shutdown ok\nreadyz check failed\n"
	if resp := s.do(t, http.MethodGet, "/readyz?verbose", nil); resp.Code != http.StatusInternalServerError || string(resp.Body) != want {
		t.Errorf("GET /readyz?verbose = %d %q; want 500 %q", resp.Code, resp.Body, want)
	}
	if resp := s.do(t, http.MethodGet, "/readyz/poststarthook/rbac/bootstrap-roles", nil); resp.Code != http.StatusInternalServerError {
		t.Errorf("GET /readyz/poststarthook/rbac/bootstrap-roles = %d %q; want 500", resp.Code, resp.Body)
	}
	if !logs.waitFor(t, func(line map[string]any) bool {
		details, _ := line["details"].(string)
		return line["msg"] == "health check failed" && strings.Contains(details, "[-]poststarthook/start-system-namespaces-controller failed: waiting for etcd: etcdserver: no leader\n")
	}) {
		t.Errorf("no \"health check failed\" log line with the step's reason; log:\n%s", logs.String())
	}
	namespacesDone.Store(true)
	want = "[+]ping ok\n[+]etcd ok\n[+]poststarthook/start-system-namespaces-controller ok\n[-]poststarthook/rbac/bootstrap-roles failed: reason withheld\n[+]shutdown ok\nreadyz check failed\n"
	if resp := s.do(t, http.MethodGet, "/readyz?verbose", nil); resp.Code != http.StatusInternalServerError || string(resp.Body) != want {
		t.Errorf("one step done: GET /readyz?verbose = %d %q; want 500 %q", resp.Code, resp.Body, want)
	}
	if resp := s.do(t, http.MethodGet, "/livez", nil); resp.Code != http.StatusOK {
		t.Errorf("GET /livez during start-up = %d; want 200", resp.Code)
	}
}

// TestEtcdOutage stops etcd under a running server: /readyz fails within
// about a second and a half, answering at once every time, /livez stays
// ok, and API requests answer a 5xx Status with Retry-After within the
// etcd request timeout instead of hanging.
func TestEtcdOutage(t *testing.T) {
	const etcdTimeout = time.Second
	logs := &syncBuffer{}
	s := startServerWithOptions(t, serverOptions{etcdRequestTimeout: etcdTimeout, logOut: logs})
	if resp := s.do(t, http.MethodPost, "/api/v1/namespaces/default/configmaps", map[string]any{"metadata": map[string]string{"name": "before"}}); resp.Code != http.StatusCreated {
		t.Fatalf("POST: %d %s", resp.Code, resp.Body)
	}
	if resp := s.do(t, http.MethodGet, "/readyz", nil); resp.Code != http.StatusOK {
		t.Fatalf("before the outage: GET /readyz = %d %s; want 200", resp.Code, resp.Body)
	}

	s.Etcd.Stop()
	stopped := time.Now()

	// /readyz answers from the endpoint monitor's last probes, at once,
	// and fails once no linearizable read succeeded for a second.
	var resp response
	for {
		start := time.Now()
		resp = s.do(t, http.MethodGet, "/readyz?verbose", nil)
		// A /readyz that waited for etcd would take its request timeout;
		// 100ms was within a loaded 2-core machine's stalls.
		if took := time.Since(start); took > etcdTimeout/2 {
			t.Errorf("GET /readyz took %s; want it to answer from the monitor at once", took)
		}
		if resp.Code != http.StatusOK || time.Since(stopped) > 5*time.Second {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	failedAfter := time.Since(stopped)
	t.Logf("/readyz failed %s after etcd stopped", failedAfter.Round(time.Millisecond))
	if limit := etcdstore.DefaultReadyWithin + etcdstore.DefaultProbeInterval + 500*time.Millisecond; failedAfter > limit {
		t.Errorf("/readyz failed %s after etcd stopped; want within %s", failedAfter, limit)
	}
	if want := "[+]ping ok\n[-]etcd failed: reason withheld\n[+]shutdown ok\nreadyz check failed\n"; resp.Code != 500 || string(resp.Body) != want {
		t.Errorf("etcd stopped: GET /readyz = %d %q; want 500 %q", resp.Code, resp.Body, want)
	}
	if resp := s.do(t, http.MethodGet, "/healthz", nil); resp.Code != 500 || !strings.Contains(string(resp.Body), "[-]etcd failed: reason withheld\n") {
		t.Errorf("etcd stopped: GET /healthz = %d %q; want 500 with [-]etcd failed", resp.Code, resp.Body)
	}
	start := time.Now()
	if resp := s.do(t, http.MethodGet, "/livez", nil); resp.Code != 200 || string(resp.Body) != "ok" {
		t.Errorf("etcd stopped: GET /livez = %d %q; want 200 ok", resp.Code, resp.Body)
	}
	if took := time.Since(start); took > 500*time.Millisecond {
		t.Errorf("GET /livez took %s; it must not wait for etcd", took)
	}

	// The real reason is in the log, at warn level.
	if !logs.waitFor(t, func(line map[string]any) bool {
		details, _ := line["details"].(string)
		return line["msg"] == "health check failed" && line["level"] == "WARN" && strings.Contains(details, "[-]etcd failed: ") && !strings.Contains(details, "withheld")
	}) {
		t.Errorf("no WARN \"health check failed\" log line with the etcd error; log:\n%s", logs.String())
	}

	// A write sent to an etcd that does not answer may have been applied:
	// its 504 has no Retry-After (client-go would re-send it); reads are
	// safe to retry.
	requests := []struct {
		method, path string
		body         any
		write        bool
	}{
		{http.MethodGet, "/api/v1/namespaces/default/configmaps/before", nil, false},
		{http.MethodGet, "/api/v1/namespaces/default/configmaps", nil, false},
		{http.MethodPost, "/api/v1/namespaces/default/configmaps", map[string]any{"metadata": map[string]string{"name": "during"}}, true},
		{http.MethodGet, "/api/v1/namespaces/default/configmaps?watch=1", nil, false},
	}
	for _, req := range requests {
		start := time.Now()
		resp := s.do(t, req.method, req.path, req.body)
		took := time.Since(start)
		t.Logf("%s %s: %d in %s: %s", req.method, req.path, resp.Code, took, resp.Body)
		// Every etcd request gives up after etcdTimeout; a request makes a
		// few before it fails (a create reads its namespace first).
		if took > 3*etcdTimeout {
			t.Errorf("%s %s took %s; want it bounded by the etcd request timeout %s", req.method, req.path, took, etcdTimeout)
		}
		if resp.Code != http.StatusServiceUnavailable && resp.Code != http.StatusGatewayTimeout {
			t.Errorf("%s %s = %d %s; want 503 or 504", req.method, req.path, resp.Code, resp.Body)
			continue
		}
		if req.write {
			checkOutcomeUnknown(t, req.method+" "+req.path, resp)
			continue
		}
		checkRetryAfter(t, req.method+" "+req.path, resp)
	}

	// The scrape still answers; the object counts say they failed.
	start = time.Now()
	families := scrape(t, s)
	if took := time.Since(start); took > 4*time.Second {
		t.Errorf("GET /metrics took %s with etcd down; want the object counts to give up within 2s", took)
	}
	if got := value(t, families, "apiserver_resource_objects", map[string]string{"group": "", "resource": "configmaps"}); got != -1 {
		t.Errorf("apiserver_resource_objects{configmaps} with etcd down = %v; want -1", got)
	}
}

// checkRetryAfter asserts a 5xx Status whose details.retryAfterSeconds is
// also the Retry-After header.
func checkRetryAfter(t *testing.T, what string, resp response) {
	t.Helper()
	st := resp.status(t)
	if st.Details == nil || st.Details.RetryAfterSeconds <= 0 {
		t.Errorf("%s: Status details %+v; want retryAfterSeconds > 0", what, st.Details)
		return
	}
	if got, want := resp.Header.Get("Retry-After"), strconv.Itoa(int(st.Details.RetryAfterSeconds)); got != want {
		t.Errorf("%s: Retry-After %q; want %q (details.retryAfterSeconds)", what, got, want)
	}
	wantReason := metav1.StatusReasonTimeout
	if resp.Code == http.StatusServiceUnavailable {
		wantReason = metav1.StatusReasonServiceUnavailable
	}
	if st.Reason != wantReason {
		t.Errorf("%s: reason %q; want %q", what, st.Reason, wantReason)
	}
}

// unavailableStorage answers every read as an etcd member without a leader.
type unavailableStorage struct {
	*etcdstore.Store
}

func (unavailableStorage) Get(context.Context, etcdstore.Ref, int64) (etcdstore.Object, error) {
	return etcdstore.Object{}, fmt.Errorf("get: %w: %w", etcdstore.ErrUnavailable, rpctypes.ErrNoLeader)
}

// TestUnavailableIs503: etcd's "no leader" (any gRPC Unavailable) is a 503
// ServiceUnavailable Status with Retry-After.
func TestUnavailableIs503(t *testing.T) {
	s := startServerOn(t, registry.DefaultWatchConfig(), func(st *etcdstore.Store) registry.Storage { return unavailableStorage{st} })
	resp := s.do(t, http.MethodGet, "/api/v1/namespaces/default/configmaps/x", nil)
	if resp.Code != http.StatusServiceUnavailable {
		t.Fatalf("GET with etcd without leader = %d %s; want 503", resp.Code, resp.Body)
	}
	checkRetryAfter(t, "GET", resp)
}

// syncBuffer is a log destination the server writes while the test reads,
// with JSON-line helpers.
type syncBuffer struct{ syncbuf.Buffer }

// lines decodes the JSON log lines written so far.
func (b *syncBuffer) lines(t *testing.T) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(b.String()), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("log line is not JSON: %v: %s", err, l)
		}
		out = append(out, m)
	}
	return out
}

// waitFor reports whether a log line matching ok appears within a few
// seconds (a request's line is written after its response).
func (b *syncBuffer) waitFor(t *testing.T, ok func(line map[string]any) bool) bool {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		for _, line := range b.lines(t) {
			if ok(line) {
				return true
			}
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
}
