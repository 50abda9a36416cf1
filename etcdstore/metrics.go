package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the store's Prometheus metrics, named and labelled as
// kube-apiserver's (apiserver/pkg/storage/etcd3/metrics):
//
//	etcd_request_duration_seconds{operation,group,resource}
//	etcd_request_errors_total{operation,group,resource}
//
// operation is get, list, count, create, update, delete, revision (the
// current revision, read to start a watch), watch-start or compact. An error
// is a request etcd did not answer (unavailable, timed out), not an answer
// such as "not found" or a failed compare-and-swap.
type Metrics struct {
	duration *prometheus.HistogramVec
	errors   *prometheus.CounterVec
	// groups maps a resource to its API group, for the group label.
	groups map[string]string
}

// NewMetrics registers the store's metrics with reg. groups maps each
// resource (the plural in keys, "configmaps") to its API group ("" for the
// core group), for the group label.
func NewMetrics(reg prometheus.Registerer, groups map[string]string) (*Metrics, error) {
	labels := []string{"operation", "group", "resource"}
	m := &Metrics{
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "etcd_request_duration_seconds",
			Help: "Etcd request latency in seconds for each operation, group and resource.",
			// kube-apiserver's buckets.
			Buckets: []float64{0.005, 0.025, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 1.25, 1.5, 2, 3, 4, 5, 6, 8, 10, 15, 20, 30, 45, 60},
		}, labels),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "etcd_request_errors_total",
			Help: "Etcd failed request counts for each operation, group and resource.",
		}, labels),
		groups: groups,
	}
	for _, c := range []prometheus.Collector{m.duration, m.errors} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register etcd metrics: %w", err)
		}
	}
	return m, nil
}

// observe records one request; a nil m records nothing.
func (m *Metrics) observe(op, resource string, took time.Duration, err error) {
	if m == nil {
		return
	}
	group := m.groups[resource]
	m.duration.WithLabelValues(op, group, resource).Observe(took.Seconds())
	if err != nil && !errors.Is(err, context.Canceled) {
		m.errors.WithLabelValues(op, group, resource).Inc()
	}
}
