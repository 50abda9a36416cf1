package app

import (
	"context"
	"log/slog"
	"maps"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/concord-dev/concord/apiserver/filters"
	"github.com/concord-dev/concord/etcdstore"
	"github.com/concord-dev/concord/registry"
)

// buildStorage makes the metrics registry, the etcd endpoint monitor and
// the etcd store, and starts the compaction of etcd's history.
func (s *Server) buildStorage(context.Context) error {
	// Metrics go to a registry of this server's own, never the global one.
	s.metrics = prometheus.NewRegistry()
	s.metrics.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	// The groups of the resources are set as the catalog serves them
	// (buildCatalog).
	storeMetrics, err := etcdstore.NewMetrics(s.metrics, nil)
	if err != nil {
		return err
	}
	compactions := newCompactionMetrics(s.metrics)
	// The monitor keeps requests away from members that stop answering and
	// is what /readyz's etcd check reads: it fails once no member answered
	// for the etcd request timeout, since requests wait that long. A
	// shorter outage (an election, a starved probe) must not take every
	// replica out of the load balancer at once.
	monitor, err := etcdstore.StartMonitor(s.client, etcdstore.MonitorConfig{
		Client: etcdClientConfig(s.endpoints, s.etcdTLS), Prefix: s.cfg.EtcdPrefix, Logger: s.log, Registerer: s.metrics,
		ReadyWithin: s.cfg.EtcdRequestTimeout,
	})
	if err != nil {
		return err
	}
	s.monitor = monitor
	s.onRelease(monitor.Close)

	store := etcdstore.NewWithOptions(s.client, s.cfg.EtcdPrefix, etcdstore.Options{
		RequestTimeout: s.cfg.EtcdRequestTimeout,
		Metrics:        storeMetrics,
		TTL:            map[string]time.Duration{registry.Events.Plural: s.cfg.EventTTL},
		Bump:           bumps(registry.RBACBump(), registry.AdmissionPolicyBump()),
		// Revision reads go round the members the monitor sees answer.
		Monitor: monitor,
	})
	s.storage = s.opts.wrapStorage(store)
	if s.cfg.EtcdCompactionInterval > 0 {
		compactor := store.NewCompactor()
		s.goBackground(func(ctx context.Context) {
			runCompactor(ctx, s.log, compactor, s.cfg.EtcdCompactionInterval, compactions)
		})
	}
	s.storeMetrics = storeMetrics
	return nil
}

// buildCatalog makes the stores of the built-in resources and the catalog
// of the resources served: the built-ins now, others as they are added.
func (s *Server) buildCatalog(context.Context) error {
	// Writes allowed by RBAC without waiting carry its guard (filters.Fence).
	// ... and the guard of the admission policies they were admitted on.
	policyGuarded := registry.AdmissionGuardedStorage(s.storage, func(ctx context.Context, rev int64) error {
		return s.admission.chain.Policies.AwaitRevision(ctx, rev)
	})
	s.fenced = registry.FencedStorage(policyGuarded, filters.FenceOf)
	s.stores = registry.NewStores(s.fenced, s.opts.watch, s.storeOpts...)
	s.catalog = registry.NewCatalog(s.stores)
	storeMetrics := s.storeMetrics
	s.catalog.OnAdd(func(st *registry.Store) {
		if res := st.Resource; res.Storage == nil { // the key space is the stored version's
			storeMetrics.SetGroup(keyResource(res), res.GroupVersion.Group)
		}
	})
	return nil
}

// keyResource is a declaration's part of its etcd keys, which the etcd
// metrics know it by.
func keyResource(res *registry.Resource) string {
	if res.StoragePrefix != "" {
		return res.StoragePrefix
	}
	return res.Plural
}

// newStore makes the store of a resource added while serving (a CRD's).
func (s *Server) newStore(storage registry.Storage, res *registry.Resource) *registry.Store {
	return registry.NewStore(storage, res, s.opts.watch, s.storeOpts...)
}

// compactionMetrics say whether compaction runs: with several replicas one
// of them compacts each round, so watch their sum.
type compactionMetrics struct {
	compactions prometheus.Counter
	revision    prometheus.Gauge
}

func newCompactionMetrics(reg prometheus.Registerer) *compactionMetrics {
	m := &compactionMetrics{
		compactions: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "concord_etcd_compactions_total",
			Help: "Compactions of etcd's history this replica did (one replica compacts per --etcd-compaction-interval).",
		}),
		revision: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "concord_etcd_compacted_revision",
			Help: "The etcd revision this replica last compacted to (0: none yet).",
		}),
	}
	reg.MustRegister(m.compactions, m.revision)
	return m
}

// runCompactor runs a compaction round every interval until ctx ends.
func runCompactor(ctx context.Context, log *slog.Logger, c *etcdstore.Compactor, interval time.Duration, m *compactionMetrics) {
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
			roundCtx, cancel := context.WithTimeout(ctx, time.Minute)
			rev, err := c.Round(roundCtx)
			cancel()
			switch {
			case err != nil:
				log.Warn("etcd compaction failed; will retry next interval", "err", err)
			case rev > 0:
				m.compactions.Inc()
				m.revision.Set(float64(rev))
				log.Info("etcd history compacted", "revision", rev)
			}
		}
	}
}

// bumps are the etcdstore.Options.Bump of every generation key.
func bumps(all ...map[string]etcdstore.Ref) map[string]etcdstore.Ref {
	m := map[string]etcdstore.Ref{}
	for _, b := range all {
		maps.Copy(m, b)
	}
	return m
}
