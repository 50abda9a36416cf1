package app

import (
	"context"
	"fmt"

	"github.com/concord-dev/concord/apiserver/authorization/rbac"
	"github.com/concord-dev/concord/registry"
	"github.com/concord-dev/concord/registry/controller/clusterroleaggregation"
)

// startAuthorization builds the authorizer chain of --authorization-mode.
// With RBAC it starts the replica's view of the RBAC objects and puts the
// escalation checks on the RBAC stores; it returns the reconciliation of
// kube's default roles and bindings (every replica, idempotently), a
// start-up step that then runs the ClusterRole aggregation under a Lease
// — nil without RBAC.
func (s *Server) startAuthorization() func(context.Context) error {
	sec, catalog, log := s.sec, s.catalog, s.log
	if !sec.rbacEnabled() {
		sec.authorize(s.opts.authorizers, nil)
		return nil
	}
	src := rbac.Source{
		Storage: s.storage,
		Roles:   coreStore(catalog, registry.Roles), ClusterRoles: coreStore(catalog, registry.ClusterRoles),
		RoleBindings: coreStore(catalog, registry.RoleBindings), ClusterRoleBindings: coreStore(catalog, registry.ClusterRoleBindings),
	}
	view := rbac.NewView(src, log.With("component", "rbac"))
	s.goBackground(view.Run)
	authz := rbac.NewAuthorizer(view)
	sec.authorize(s.opts.authorizers, authz)
	(&rbac.Escalation{Rules: authz, Authorizer: sec.authz}).Install(src.Roles, src.ClusterRoles, src.RoleBindings, src.ClusterRoleBindings)
	return func(stepCtx context.Context) error {
		if err := rbac.Bootstrap(stepCtx, src.ClusterRoles, src.ClusterRoleBindings, log); err != nil {
			return fmt.Errorf("reconcile the default RBAC roles and bindings: %w", err)
		}
		if s.opts.controllers.ClusterRoleAggregation {
			s.underLease("concord-clusterrole-aggregation", clusterroleaggregation.NewAggregator(src.ClusterRoles, log.With("controller", "clusterrole-aggregation")).Run)
		}
		return nil
	}
}
