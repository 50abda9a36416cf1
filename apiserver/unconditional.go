package apiserver

import (
	"context"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/concord-dev/concord/registry"
)

// reportUnconditionalUpdates counts every replace without a version that a
// store carried out (--unconditional-update: Helm's release records by
// default) in concord_unconditional_updates_total, and logs it at debug
// level with the object's etcd key, in the request's log (its auditID):
// for the catalog's stores now and those added later, each from before it
// serves.
func reportUnconditionalUpdates(catalog *registry.Catalog, log *slog.Logger, reg prometheus.Registerer) {
	count := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "concord_unconditional_updates_total",
		Help: "Replaces without a resourceVersion or If-Match that --unconditional-update allowed (by default Helm's release records), by resource; each is one etcd transaction guarded by the revision it read.",
	}, []string{"group", "resource"})
	reg.MustRegister(count)
	allowed := func(res *registry.Resource) bool { return res.AllowUnconditionalUpdate }
	catalog.OnAdd(func(s *registry.Store) {
		res := s.Resource
		if !allowed(res) {
			return // never allowed: no series
		}
		counter := count.WithLabelValues(res.GroupVersion.Group, res.Plural) // 0 until one is done
		s.OnUnconditionalUpdate(func(ctx context.Context, u registry.UnconditionalReplace) {
			counter.Inc()
			l := log
			if info, ok := ctx.Value(requestInfoKey{}).(*requestInfo); ok {
				l = info.logger()
			}
			l.Debug("unconditional update", "key", u.Key, "group", res.GroupVersion.Group, "resource", res.Plural, "resourceVersion", u.ResourceVersion)
		})
	})
	forgetRemoved(catalog, allowed, count)
}
