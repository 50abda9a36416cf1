package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"sync/atomic"
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
	// groups maps a resource to its API group, for the group label; it is
	// replaced, never changed (SetGroup), so that requests read it without
	// a lock.
	groups  atomic.Pointer[map[string]string]
	groupMu sync.Mutex // serialises SetGroup
}

// NewMetrics registers the store's metrics with reg. groups maps each
// resource (its part of the keys, "configmaps") to its API group ("" for
// the core group), for the group label; SetGroup adds more. A resource
// that is not in it is labelled with the group its part of the keys names
// ("<group>/<plural>", as custom resources are keyed), else the core
// group.
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
	}
	groups = maps.Clone(groups)
	if groups == nil {
		groups = map[string]string{}
	}
	m.groups.Store(&groups)
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
	group, resource := m.labels(resource)
	m.duration.WithLabelValues(op, group, resource).Observe(took.Seconds())
	if err != nil && !errors.Is(err, context.Canceled) {
		m.errors.WithLabelValues(op, group, resource).Inc()
	}
}

// SetGroup labels the requests of resource (its part of the keys) with
// group from now on: for resources served after NewMetrics. Safe for
// concurrent use.
func (m *Metrics) SetGroup(resource, group string) {
	m.groupMu.Lock()
	defer m.groupMu.Unlock()
	groups := maps.Clone(*m.groups.Load())
	groups[resource] = group
	m.groups.Store(&groups)
}

// labels are the group and resource labels of a resource's part of the
// keys: the group it was given, else (not given) the group a
// "<group>/<plural>" names, else the core group; the resource label is the
// plural.
func (m *Metrics) labels(resource string) (group, plural string) {
	group, known := (*m.groups.Load())[resource]
	i := strings.LastIndexByte(resource, '/')
	if i < 0 {
		return group, resource
	}
	if !known {
		group = resource[:i]
	}
	return group, resource[i+1:]
}
