package apiserver_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"

	"github.com/concord-dev/concord/etcdstore"
	"github.com/concord-dev/concord/registry"
)

// scrape reads /metrics over HTTP and parses the text format.
func scrape(t *testing.T, s *testServer) map[string]*dto.MetricFamily {
	t.Helper()
	resp := s.do(t, http.MethodGet, "/metrics", nil)
	if resp.Code != http.StatusOK {
		t.Fatalf("GET /metrics = %d %s", resp.Code, resp.Body)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(string(resp.Body)))
	if err != nil {
		t.Fatalf("parse /metrics: %v\n%s", err, resp.Body)
	}
	return families
}

// find returns the series of family name whose labels are exactly labels.
func find(families map[string]*dto.MetricFamily, name string, labels map[string]string) (*dto.Metric, bool) {
	f, ok := families[name]
	if !ok {
		return nil, false
	}
	for _, m := range f.GetMetric() {
		got := map[string]string{}
		for _, l := range m.GetLabel() {
			got[l.GetName()] = l.GetValue()
		}
		if len(got) != len(labels) {
			continue
		}
		match := true
		for k, v := range labels {
			if got[k] != v {
				match = false
				break
			}
		}
		if match {
			return m, true
		}
	}
	return nil, false
}

// value is the value of a counter or gauge series, or a histogram's sample
// count; it fails the test if the series does not exist.
func value(t *testing.T, families map[string]*dto.MetricFamily, name string, labels map[string]string) float64 {
	t.Helper()
	m, ok := find(families, name, labels)
	if !ok {
		t.Fatalf("no series %s%v; have:\n%s", name, labels, seriesOf(families[name]))
	}
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Histogram != nil:
		return float64(m.Histogram.GetSampleCount())
	}
	t.Fatalf("series %s%v is neither counter, gauge nor histogram", name, labels)
	return 0
}

func seriesOf(f *dto.MetricFamily) string {
	if f == nil {
		return "  (no such family)"
	}
	var b strings.Builder
	for _, m := range f.GetMetric() {
		fmt.Fprintf(&b, "  %v\n", m.GetLabel())
	}
	return b.String()
}

// requestLabels are apiserver_request_total's labels of a request to
// configmaps in a namespace.
func requestLabels(verb, scope, code string) map[string]string {
	l := map[string]string{"verb": verb, "dry_run": "", "group": "", "version": "v1", "resource": "configmaps", "subresource": "", "scope": scope, "component": "apiserver"}
	if code != "" {
		l["code"] = code
	}
	return l
}

// TestMetrics makes a known set of requests and checks the exact series
// they leave on /metrics.
func TestMetrics(t *testing.T) {
	s := startServer(t)
	const base = "/api/v1/namespaces/default/configmaps"
	cm := func(name string) map[string]any { return map[string]any{"metadata": map[string]string{"name": name}} }

	if resp := s.do(t, http.MethodPost, base, cm("a")); resp.Code != http.StatusCreated {
		t.Fatalf("POST a: %d %s", resp.Code, resp.Body)
	}
	if resp := s.do(t, http.MethodPost, base, cm("a")); resp.Code != http.StatusConflict {
		t.Fatalf("POST a again: %d %s; want 409 AlreadyExists", resp.Code, resp.Body)
	}
	if resp := s.do(t, http.MethodPost, base+"?dryRun=All", cm("dry")); resp.Code != http.StatusCreated {
		t.Fatalf("POST dry run: %d %s", resp.Code, resp.Body)
	}
	stale := corev1.ConfigMap{}
	stale.Name, stale.Namespace, stale.ResourceVersion = "a", "default", "1"
	if resp := s.do(t, http.MethodPut, base+"/a", &stale); resp.Code != http.StatusConflict {
		t.Fatalf("PUT stale: %d %s; want 409 Conflict", resp.Code, resp.Body)
	}
	stale.ResourceVersion = ""
	if resp := s.do(t, http.MethodPut, base+"/a", &stale, "If-Match", `"1"`); resp.Code != http.StatusPreconditionFailed {
		t.Fatalf("PUT If-Match stale: %d %s; want 412", resp.Code, resp.Body)
	}
	list := s.do(t, http.MethodGet, base, nil)
	if list.Code != http.StatusOK {
		t.Fatalf("LIST: %d %s", list.Code, list.Body)
	}
	var l corev1.ConfigMapList
	list.decode(t, &l)
	if resp := s.do(t, http.MethodGet, "/api/v1/configmaps", nil); resp.Code != http.StatusOK {
		t.Fatalf("LIST all namespaces: %d %s", resp.Code, resp.Body)
	}
	if resp := s.do(t, http.MethodGet, "/api/v1/namespaces/default", nil); resp.Code != http.StatusOK {
		t.Fatalf("GET namespace: %d %s", resp.Code, resp.Body)
	}
	if resp := s.do(t, http.MethodGet, "/api", nil); resp.Code != http.StatusOK {
		t.Fatalf("GET /api: %d %s", resp.Code, resp.Body)
	}
	// Unknown paths and made-up methods add no series of their own.
	for _, req := range [][2]string{{http.MethodGet, "/nowhere/x1"}, {http.MethodGet, "/nowhere/x2"}, {"BREW", "/api/v1/namespaces/default/configmaps"}, {"BREW", "/nowhere"}} {
		if resp := s.do(t, req[0], req[1], nil); resp.Code != http.StatusNotFound && resp.Code != http.StatusMethodNotAllowed {
			t.Fatalf("%s %s: %d %s; want 404 or 405", req[0], req[1], resp.Code, resp.Body)
		}
	}

	w := s.watch(t, base, url.Values{"watch": {"1"}, "resourceVersion": {l.ResourceVersion}})
	if resp := s.do(t, http.MethodPost, base, cm("b")); resp.Code != http.StatusCreated {
		t.Fatalf("POST b: %d %s", resp.Code, resp.Body)
	}
	w.expect(t, "ADDED default/b")

	families := scrape(t, s)
	watchLabels := map[string]string{"verb": "WATCH", "group": "", "version": "v1", "resource": "configmaps", "subresource": "", "scope": "namespace", "component": "apiserver"}
	if got := value(t, families, "apiserver_longrunning_requests", watchLabels); got != 1 {
		t.Errorf("apiserver_longrunning_requests with a watch open = %v; want 1", got)
	}
	w.cancel()
	// The server sees the client leave at its next read; wait for it, and
	// for the request to be counted (just after the gauge goes down).
	deadline := time.Now().Add(10 * time.Second)
	for {
		families = scrape(t, s)
		_, counted := find(families, "apiserver_request_total", requestLabels("WATCH", "namespace", "200"))
		if value(t, families, "apiserver_longrunning_requests", watchLabels) == 0 && counted {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("apiserver_longrunning_requests still %v after the watch ended; want 0", value(t, families, "apiserver_longrunning_requests", watchLabels))
		}
		time.Sleep(50 * time.Millisecond)
	}

	dryRun := requestLabels("POST", "namespace", "201")
	dryRun["dry_run"] = "All"
	counts := []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"apiserver_request_total", requestLabels("POST", "namespace", "201"), 2},
		{"apiserver_request_total", requestLabels("POST", "namespace", "409"), 1},
		{"apiserver_request_total", dryRun, 1},
		{"apiserver_request_total", requestLabels("PUT", "namespace", "409"), 1},
		{"apiserver_request_total", requestLabels("PUT", "namespace", "412"), 1},
		{"apiserver_request_total", requestLabels("LIST", "namespace", "200"), 1},
		{"apiserver_request_total", requestLabels("LIST", "cluster", "200"), 1},
		{"apiserver_request_total", requestLabels("WATCH", "namespace", "200"), 1},
		{"apiserver_request_total", map[string]string{"verb": "GET", "dry_run": "", "group": "", "version": "v1", "resource": "namespaces", "subresource": "", "scope": "namespace", "component": "apiserver", "code": "200"}, 1},
		{"apiserver_request_total", map[string]string{"verb": "GET", "dry_run": "", "group": "", "version": "", "resource": "", "subresource": "/api", "scope": "", "component": "apiserver", "code": "200"}, 1},
		{"apiserver_request_total", map[string]string{"verb": "GET", "dry_run": "", "group": "", "version": "", "resource": "", "subresource": "", "scope": "", "component": "apiserver", "code": "404"}, 2},
		{"apiserver_request_total", map[string]string{"verb": "other", "dry_run": "", "group": "", "version": "", "resource": "", "subresource": "", "scope": "", "component": "apiserver", "code": "404"}, 1},
		{"apiserver_request_total", requestLabels("other", "namespace", "405"), 1},
		{"apiserver_request_duration_seconds", requestLabels("LIST", "namespace", ""), 1},
		{"apiserver_request_duration_seconds", requestLabels("POST", "namespace", ""), 3},
		{"apiserver_watch_events_total", map[string]string{"group": "", "version": "v1", "resource": "configmaps"}, 1},
		{"concord_precondition_failures_total", map[string]string{"code": "409", "resource": "configmaps"}, 1},
		{"concord_precondition_failures_total", map[string]string{"code": "412", "resource": "configmaps"}, 1},
		{"apiserver_resource_objects", map[string]string{"group": "", "resource": "configmaps"}, 2},
		{"apiserver_resource_objects", map[string]string{"group": "", "resource": "namespaces"}, float64(len(registry.SystemNamespaces))},
		{"apiserver_resource_objects", map[string]string{"group": "coordination.k8s.io", "resource": "leases"}, 0},
		// a, the second a, b: one etcd create each (the dry run writes nothing).
		{"etcd_request_duration_seconds", map[string]string{"operation": "create", "group": "", "resource": "configmaps"}, 3},
	}
	for _, c := range counts {
		if got := value(t, families, c.name, c.labels); got != c.want {
			t.Errorf("%s%v = %v; want %v", c.name, c.labels, got, c.want)
		}
	}
	// Reads of etcd are timed too.
	for _, op := range []string{"get", "list"} {
		if got := value(t, families, "etcd_request_duration_seconds", map[string]string{"operation": op, "group": "", "resource": "configmaps"}); got < 1 {
			t.Errorf("etcd_request_duration_seconds{operation=%q, configmaps} count = %v; want at least 1", op, got)
		}
	}
	// The AlreadyExists 409 is not a precondition failure: only the one
	// Conflict counts (checked above); and the buckets are kube-apiserver's.
	h, _ := find(families, "apiserver_request_duration_seconds", requestLabels("LIST", "namespace", ""))
	var bounds []float64
	for _, b := range h.GetHistogram().GetBucket() {
		bounds = append(bounds, b.GetUpperBound())
	}
	if want := []float64{0.005, 0.025, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 1.25, 1.5, 2, 3, 4, 5, 6, 8, 10, 15, 20, 30, 45, 60, math.Inf(1)}; !slices.Equal(bounds, want) {
		t.Errorf("apiserver_request_duration_seconds buckets = %v; want %v", bounds, want)
	}
}

// failingStorage fails the read of the object named "boom" with an error
// the registry does not know.
type failingStorage struct {
	*etcdstore.Store
}

func (f failingStorage) Get(ctx context.Context, ref etcdstore.Ref, rev int64) (etcdstore.Object, error) {
	if ref.Name == "boom" {
		return etcdstore.Object{}, errors.New("disk on fire")
	}
	return f.Store.Get(ctx, ref, rev)
}

var uuidPattern = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

// TestAuditID: every response carries its own Audit-Id, and the request's
// log line and its internal-error line carry it as auditID.
func TestAuditID(t *testing.T) {
	logs := &syncBuffer{}
	s := startServerWithOptions(t, serverOptions{
		wrap:   func(st *etcdstore.Store) registry.Storage { return failingStorage{st} },
		logOut: logs,
		// Gets must reach the failing storage, not the cache.
		storeOpts: []registry.StoreOption{registry.WithoutReadCache()},
	})
	paths := []string{"/api/v1/namespaces/default/configmaps", "/api/v1/namespaces/default/configmaps/missing", "/readyz", "/api", "/nowhere"}
	seen := map[string]string{}
	for _, p := range paths {
		for range 2 {
			resp := s.do(t, http.MethodGet, p, nil)
			id := resp.Header.Get("Audit-Id")
			if !uuidPattern.MatchString(id) {
				t.Errorf("GET %s: Audit-Id %q; want a UUID", p, id)
			}
			if prev, dup := seen[id]; dup {
				t.Errorf("GET %s: Audit-Id %s already answered for %s", p, id, prev)
			}
			seen[id] = p
			if !logs.waitFor(t, func(line map[string]any) bool {
				return line["msg"] == "request" && line["auditID"] == id && line["path"] == p
			}) {
				t.Errorf("GET %s: no request log line with auditID %s", p, id)
			}
		}
	}

	resp := s.do(t, http.MethodGet, "/api/v1/namespaces/default/configmaps/boom", nil)
	if resp.Code != http.StatusInternalServerError {
		t.Fatalf("GET boom = %d %s; want 500", resp.Code, resp.Body)
	}
	if strings.Contains(string(resp.Body), "disk on fire") {
		t.Errorf("500 body leaks the internal error: %s", resp.Body)
	}
	id := resp.Header.Get("Audit-Id")
	if !logs.waitFor(t, func(line map[string]any) bool {
		err, _ := line["err"].(string)
		return line["msg"] == "internal error" && line["level"] == "ERROR" && line["auditID"] == id && strings.Contains(err, "disk on fire")
	}) {
		t.Errorf("no internal error log line with auditID %s; log:\n%s", id, logs.String())
	}
	// Probes are logged at debug level, API requests at info.
	for _, line := range logs.lines(t) {
		if line["msg"] != "request" {
			continue
		}
		want := "INFO"
		if line["path"] == "/readyz" {
			want = "DEBUG"
		}
		if line["level"] != want {
			t.Errorf("request log line %v: level %v; want %s", line, line["level"], want)
		}
	}
}
