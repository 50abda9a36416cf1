package apiserver

import (
	"context"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/concord-dev/concord/apiserver/filters"
	"github.com/concord-dev/concord/registry"
)

// requestInfo describes a request for its metrics, as kube-apiserver's
// RequestInfo does. withRequestContext puts one in the request's context;
// the handler that serves the request fills it in, and withRequestContext
// records the metrics from it once the handler has returned.
type requestInfo struct {
	// verb is kube-apiserver's: GET, LIST, WATCH, POST, PUT, PATCH, DELETE
	// or DELETECOLLECTION on resources; the HTTP method elsewhere.
	verb                                  string
	group, version, resource, subresource string
	// scope is namespace, cluster or resource (a cluster-scoped object);
	// empty for paths that are not resources.
	scope     string
	component string
	// reason is the reason of the Status answered, if it was a failure.
	reason metav1.StatusReason
	// probe marks health and metrics requests: they are logged at debug
	// level, so that load balancers' probes do not flood the log.
	probe bool
	// attrs are what the request asks and who sent it (attrs.User, once
	// authenticated), as the authentication filter parsed it (audit log).
	attrs *filters.Attributes
	// auditAnnotations are what admission added for the audit log.
	auditAnnotations *filters.AuditAnnotations

	// auditID names the request in every log line; log is the server's
	// logger, and requestLog (made on first use) the one with the auditID.
	auditID        string
	log            *slog.Logger
	requestLogOnce sync.Once
	requestLog     *slog.Logger
	// rest or parked, set by a handler, are the rest of the request (a
	// watch), once the filters and routing have returned. rest runs on a
	// goroutine of its own after the handler returned, when the handler
	// took its connection over from net/http, so that net/http lets go of
	// the connection's goroutine and buffers (HTTP/1.1). parked goes on on
	// the handler's goroutine, which waits with a shallow stack that the
	// runtime shrinks, and without the request's context and clones
	// (HTTP/2). The request is logged, counted and audited once it ends.
	rest   func()
	parked parkedRest
	// base is the context net/http gave the request, without the values
	// the filters add: a parked watch ends with it.
	base context.Context
}

// logger is the request's logger, made on first use: its lines carry the
// request's auditID.
func (info *requestInfo) logger() *slog.Logger {
	if info.log == nil {
		return slog.Default()
	}
	info.requestLogOnce.Do(func() { info.requestLog = info.log.With("auditID", info.auditID) })
	return info.requestLog
}

// componentAPIServer is kube-apiserver's component label of API requests.
const componentAPIServer = "apiserver"

type requestInfoKey struct{}

// infoOf returns the request's info; outside withRequestContext (never, in
// the server) a throwaway one.
func infoOf(r *http.Request) *requestInfo {
	if info, ok := r.Context().Value(requestInfoKey{}).(*requestInfo); ok {
		return info
	}
	return &requestInfo{}
}

// describeResource fills in the labels of a request to a resource: verb in
// kube-apiserver's form, namespace and name from the path.
func describeResource(r *http.Request, res *registry.Resource, verb, namespace, name string) {
	info := infoOf(r)
	info.verb = verb
	info.group, info.version, info.resource, info.subresource = res.GroupVersion.Group, res.GroupVersion.Version, res.Plural, ""
	switch {
	case namespace != "":
		info.scope = "namespace"
	case name != "" && res.IsNamespace:
		// kube-apiserver's RequestInfo reads /namespaces/{name} as the
		// namespace {name}.
		info.scope = "namespace"
	case name != "":
		info.scope = "resource"
	default:
		info.scope = "cluster"
	}
}

// metrics are the API's Prometheus metrics, with kube-apiserver's names and
// labels (apiserver/pkg/endpoints/metrics), plus Concord's own.
type metrics struct {
	requests             *prometheus.CounterVec
	duration             *prometheus.HistogramVec
	longRunning          *prometheus.GaugeVec
	watchEvents          *prometheus.CounterVec
	preconditionFailures *prometheus.CounterVec
}

// newMetrics registers the API's metrics with reg, and a collector that
// counts the objects of the catalog's stores in etcd at every scrape (the
// stores served at the time). Every label is set when it is first used, so
// resources that are added later are counted as the built-ins are. It
// panics if they are registered already: one registry serves one handler.
func newMetrics(reg prometheus.Registerer, catalog *registry.Catalog) *metrics {
	requestLabels := []string{"verb", "dry_run", "group", "version", "resource", "subresource", "scope", "component"}
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "apiserver_request_total",
			Help: "Counter of apiserver requests broken out for each verb, dry run value, group, version, resource, scope, component, and HTTP response code.",
		}, append(slices.Clone(requestLabels), "code")),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "apiserver_request_duration_seconds",
			Help: "Response latency distribution in seconds for each verb, dry run value, group, version, resource, subresource, scope and component.",
			// kube-apiserver's buckets.
			Buckets: []float64{0.005, 0.025, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 1.25, 1.5, 2, 3, 4, 5, 6, 8, 10, 15, 20, 30, 45, 60},
		}, requestLabels),
		longRunning: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "apiserver_longrunning_requests",
			Help: "Gauge of all active long-running apiserver requests broken out by verb, group, version, resource, scope and component.",
		}, []string{"verb", "group", "version", "resource", "subresource", "scope", "component"}),
		watchEvents: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "apiserver_watch_events_total",
			Help: "Number of events sent in watch clients",
		}, []string{"group", "version", "resource"}),
		preconditionFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "concord_precondition_failures_total",
			Help: "Writes refused because the object changed: 409 Conflict (stale resourceVersion, DeleteOptions preconditions) and 412 PreconditionFailed (If-Match, If-None-Match), by resource.",
		}, []string{"code", "resource"}),
	}
	reg.MustRegister(m.requests, m.duration, m.longRunning, m.watchEvents, m.preconditionFailures, &objectCounter{catalog: catalog})
	return m
}

// knownVerbs are the verb label's values; any other method is "other", as
// kube-apiserver does, so that no client can make up new series.
var knownVerbs = map[string]bool{
	"GET": true, "LIST": true, "WATCH": true, "POST": true, "PUT": true, "PATCH": true, "DELETE": true, "DELETECOLLECTION": true,
	http.MethodHead: true, http.MethodOptions: true, http.MethodConnect: true, http.MethodTrace: true,
}

// recordRequest records a finished request.
func (m *metrics) recordRequest(r requestSummary, info *requestInfo, code int, took time.Duration) {
	if !knownVerbs[info.verb] {
		info.verb = "other"
	}
	dryRun := dryRunLabel(r.url)
	m.requests.WithLabelValues(info.verb, dryRun, info.group, info.version, info.resource, info.subresource, info.scope, info.component, strconv.Itoa(code)).Inc()
	m.duration.WithLabelValues(info.verb, dryRun, info.group, info.version, info.resource, info.subresource, info.scope, info.component).Observe(took.Seconds())
	if (code == http.StatusConflict && info.reason == metav1.StatusReasonConflict) || code == http.StatusPreconditionFailed {
		m.preconditionFailures.WithLabelValues(strconv.Itoa(code), info.resource).Inc()
	}
}

// watchStarted counts an open watch until the returned func is called.
func (m *metrics) watchStarted(info *requestInfo) (ended func()) {
	g := m.longRunning.WithLabelValues(info.verb, info.group, info.version, info.resource, info.subresource, info.scope, info.component)
	g.Inc()
	return g.Dec
}

// watchEvent counts an event sent to a watcher.
func (m *metrics) watchEvent(res *registry.Resource) {
	m.watchEvents.WithLabelValues(res.GroupVersion.Group, res.GroupVersion.Version, res.Plural).Inc()
}

// dryRunLabel is kube-apiserver's dry_run label: "" without dryRun, "All",
// or "invalid".
func dryRunLabel(u *url.URL) string {
	if !strings.Contains(u.RawQuery, "dryRun") {
		return ""
	}
	values := u.Query()["dryRun"]
	if len(values) == 0 {
		return ""
	}
	for _, v := range values {
		if v != metav1.DryRunAll {
			return "invalid"
		}
	}
	return metav1.DryRunAll
}

// objectCountTimeout bounds the count of every resource at a scrape; an
// unavailable etcd must not hold up the scrape of the other metrics.
const objectCountTimeout = 2 * time.Second

// objectCounter is apiserver_resource_objects{group,resource}: the number
// of objects of each resource in etcd, counted with count-only range reads
// when Prometheus scrapes: those of the stores the catalog serves then. A
// count that fails reports -1, as kube-apiserver does.
type objectCounter struct {
	catalog *registry.Catalog
}

var objectsDesc = prometheus.NewDesc("apiserver_resource_objects",
	"Number of stored objects at the time of last check split by kind. In case of a fetching error, the value will be -1.",
	[]string{"group", "resource"}, nil)

func (c *objectCounter) Describe(ch chan<- *prometheus.Desc) { ch <- objectsDesc }

func (c *objectCounter) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), objectCountTimeout)
	defer cancel()
	stores := c.catalog.Stores()
	counts := make([]int64, len(stores))
	var wg sync.WaitGroup
	for i, s := range stores {
		wg.Go(func() {
			n, err := s.Count(ctx)
			if err != nil {
				n = -1
			}
			counts[i] = n
		})
	}
	wg.Wait()
	for i, s := range stores {
		ch <- prometheus.MustNewConstMetric(objectsDesc, prometheus.GaugeValue, float64(counts[i]), s.Resource.GroupVersion.Group, s.Resource.Plural)
	}
}
