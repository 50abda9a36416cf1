// Package clusterroleaggregation fills the rules of the ClusterRoles with
// an aggregationRule, as kube-controller-manager's clusterrole-aggregation
// controller does (Aggregator). Evaluating RBAC is
// apiserver/authorization/rbac's.
package clusterroleaggregation

import (
	"context"
	"log/slog"
	"slices"
	"sort"
	"sync"
	"sync/atomic"

	rbacv1 "k8s.io/api/rbac/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/concord-dev/concord/registry"
	"github.com/concord-dev/concord/registry/controller"
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
	// One item, a sync of all: changes while it runs make one more after.
	q := controller.NewQueue[struct{}](controller.QueueOptions{Name: "clusterrole aggregation", Log: c.log})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		q.Run(ctx, 1, func(ctx context.Context, _ struct{}) (bool, error) {
			c.syncAll(ctx)
			return true, nil
		})
	}()
	var roles map[string]*rbacv1.ClusterRole
	// publish hands the roles to the syncer, once the initial ones are all
	// there: after Synced, each change and each bookmark.
	publish := func(context.Context, int64) error {
		snapshot := make([]*rbacv1.ClusterRole, 0, len(roles))
		for _, r := range roles {
			snapshot = append(snapshot, r)
		}
		c.latest.Store(&snapshot)
		q.Add(struct{}{})
		return nil
	}
	controller.Watch(ctx, c.clusterRoles, controller.WatchOptions{Name: "clusterrole aggregation", Log: c.log}, controller.Handler[*rbacv1.ClusterRole]{
		Opened: func(context.Context) error {
			roles = map[string]*rbacv1.ClusterRole{}
			return nil
		},
		Event: func(ctx context.Context, typ watch.EventType, r *rbacv1.ClusterRole, initial bool) error {
			if typ == watch.Deleted {
				delete(roles, r.Name)
			} else {
				roles[r.Name] = r
			}
			if initial {
				return nil
			}
			return publish(ctx, 0)
		},
		Synced:   publish,
		Progress: publish,
	})
	wg.Wait()
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
