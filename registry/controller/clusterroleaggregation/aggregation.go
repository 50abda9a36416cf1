// Package clusterroleaggregation fills the rules of the ClusterRoles with
// an aggregationRule, as kube-controller-manager's clusterrole-aggregation
// controller does (Aggregator). Evaluating RBAC is apiserver/authorization/rbac's.
package clusterroleaggregation

import (
	"context"
	"log/slog"
	"slices"
	"sort"
	"sync/atomic"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/concord-dev/concord/registry"
)

// Aggregator fills the rules of every ClusterRole with an aggregationRule
// with the rules of the ClusterRoles its selectors match, as
// kube-controller-manager's clusterrole-aggregation controller does: in the
// order of the matched roles' names, each rule once. It keeps a copy of the
// ClusterRoles from a watch and, after each change, writes the aggregated
// roles whose rules differ (guarded by their version: a conflict is
// retried from the next state). One replica runs it (a Lease).
type Aggregator struct {
	clusterRoles *registry.Store
	log          *slog.Logger
	// latest is the state the watch handed over last; the syncer takes it.
	latest atomic.Pointer[[]*rbacv1.ClusterRole]
}

// NewAggregator returns the controller over the ClusterRole store.
func NewAggregator(clusterRoles *registry.Store, log *slog.Logger) *Aggregator {
	return &Aggregator{clusterRoles: clusterRoles, log: log}
}

// Run works until ctx ends.
func (c *Aggregator) Run(ctx context.Context) {
	for ctx.Err() == nil {
		if err := c.watchOnce(ctx); err != nil && ctx.Err() == nil {
			c.log.Warn("clusterrole aggregation: watch ended; watching again", "err", err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func (c *Aggregator) watchOnce(ctx context.Context) error {
	yes := true
	w, err := c.clusterRoles.Watch(ctx, "", &metainternalversion.ListOptions{
		Watch: true, SendInitialEvents: &yes, AllowWatchBookmarks: true, ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan,
	})
	if err != nil {
		return err
	}
	roles := map[string]*rbacv1.ClusterRole{}
	synced := false
	changed := make(chan struct{}, 1)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- w.Run(ctx, func(ev watch.Event, _ *registry.Encodings) error {
			switch ev.Type {
			case watch.Added, watch.Modified:
				r := ev.Object.(*rbacv1.ClusterRole)
				roles[r.Name] = r
			case watch.Deleted:
				delete(roles, ev.Object.(*rbacv1.ClusterRole).Name)
			case watch.Bookmark:
				synced = true // the end of the initial events
			}
			if synced {
				snapshot := make([]*rbacv1.ClusterRole, 0, len(roles))
				for _, r := range roles {
					snapshot = append(snapshot, r)
				}
				c.latest.Store(&snapshot)
				select {
				case changed <- struct{}{}:
				default:
				}
			}
			return nil
		})
	}()
	for {
		select {
		case err := <-done:
			return err
		case <-changed:
			c.syncAll(ctx)
		}
	}
}

func (c *Aggregator) syncAll(ctx context.Context) {
	p := c.latest.Load()
	if p == nil {
		return
	}
	roles := *p
	sort.Slice(roles, func(i, j int) bool { return roles[i].Name < roles[j].Name })
	for _, r := range roles {
		if r.AggregationRule == nil {
			continue
		}
		want := Aggregate(r, roles)
		if apiequality.Semantic.DeepEqual(want, r.Rules) {
			continue
		}
		updated := r.DeepCopy()
		updated.Rules = want
		_, _, err := c.clusterRoles.Update(ctx, "", r.Name, updated, registry.WriteOptions{FieldManager: "clusterrole-aggregation-controller"})
		switch {
		case err == nil:
			c.log.Info("clusterrole aggregation: updated the rules", "clusterrole", r.Name, "rules", len(want))
		case apierrors.IsConflict(err), apierrors.IsNotFound(err):
			// The watch brings the new state, and another round.
		default:
			c.log.Warn("clusterrole aggregation: update failed; retrying at the next change", "clusterrole", r.Name, "err", err)
		}
	}
}

// Aggregate is the rules of role's aggregationRule among roles: those of
// every other role a selector matches, in name order, each rule once (as
// kube's controller).
func Aggregate(role *rbacv1.ClusterRole, roles []*rbacv1.ClusterRole) []rbacv1.PolicyRule {
	var rules []rbacv1.PolicyRule
	for _, sel := range role.AggregationRule.ClusterRoleSelectors {
		s, err := metav1.LabelSelectorAsSelector(&sel)
		if err != nil {
			continue
		}
		for _, r := range roles {
			if r.Name == role.Name || !s.Matches(labels.Set(r.Labels)) {
				continue
			}
			for _, rule := range r.Rules {
				if !slices.ContainsFunc(rules, func(have rbacv1.PolicyRule) bool { return apiequality.Semantic.DeepEqual(have, rule) }) {
					rules = append(rules, rule)
				}
			}
		}
	}
	return rules
}
