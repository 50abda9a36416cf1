package app

import (
	"context"

	"github.com/concord-dev/concord/registry"
	"github.com/concord-dev/concord/registry/controller/admissionpolicystatus"
	"github.com/concord-dev/concord/registry/controller/crdcleanup"
	"github.com/concord-dev/concord/registry/controller/crdstatus"
	"github.com/concord-dev/concord/registry/controller/garbagecollector"
	"github.com/concord-dev/concord/registry/controller/leaderelect"
	namespacecontroller "github.com/concord-dev/concord/registry/controller/namespace"
	sacontroller "github.com/concord-dev/concord/registry/controller/serviceaccount"
	"github.com/concord-dev/concord/registry/crdserving"
)

// Controllers says which controllers a server runs beside the API; the
// binary runs them all (AllControllers).
type Controllers struct {
	// CRDs serves the custom resources of the stored CRDs (and /readyz
	// waits for those stored at start) and keeps the CRDs' names and
	// conditions and cleans up after a deleted one, on every replica, as
	// every kube-apiserver does: crdserving, crdstatus, crdcleanup.
	CRDs bool
	// GarbageCollector, ServiceAccounts and Namespaces are
	// kube-controller-manager's, each on one replica at a time under a
	// Lease of its own, from when the system namespaces exist.
	GarbageCollector, ServiceAccounts, Namespaces bool
	// ClusterRoleAggregation runs with RBAC, under a Lease, from when
	// kube's default roles exist.
	ClusterRoleAggregation bool
	// AdmissionPolicyStatus type-checks the ValidatingAdmissionPolicies
	// (kube-controller-manager's validatingadmissionpolicy-status
	// controller), under a Lease.
	AdmissionPolicyStatus bool
}

// AllControllers are the controllers the binary runs.
func AllControllers() Controllers {
	return Controllers{CRDs: true, GarbageCollector: true, ServiceAccounts: true, Namespaces: true, ClusterRoleAggregation: true, AdmissionPolicyStatus: true}
}

// serveCRDs starts crdserving, crdstatus and crdcleanup over the
// catalog's CustomResourceDefinitions.
func (s *Server) serveCRDs(context.Context) error {
	if !s.opts.controllers.CRDs {
		return nil
	}
	crds := coreStore(s.catalog, registry.CustomResourceDefinitions)
	s.crdServer = crdserving.New(crds, s.catalog, s.fenced, s.newStore, s.log)
	s.goBackground(s.crdServer.Run)
	s.goBackground(crdstatus.New(crds, s.log).Run)
	s.goBackground(crdcleanup.New(crds, s.storage, s.newStore, s.log).Run)
	return nil
}

// buildStartup makes the start-up steps, which Run runs while it serves,
// and the authorizer.
func (s *Server) buildStartup(context.Context) error {
	// kube-controller-manager's controllers run on one replica at a time,
	// each under a Lease of its own in kube-system.
	s.elect = leaderelect.NewElector(s.cfg.LeaderElection, coreStore(s.catalog, registry.Leases), s.log)
	s.steps = s.startupSteps()
	return nil
}

// startControllers runs kube-controller-manager's controllers, each on
// one replica at a time.
func (s *Server) startControllers() {
	on := s.opts.controllers
	if on.GarbageCollector {
		collector := garbagecollector.New(s.catalog, garbagecollector.Config{}, s.log.With("controller", "garbage-collector"))
		s.underLease("concord-garbage-collector", collector.Run)
	}
	if on.ServiceAccounts {
		s.underLease("concord-serviceaccounts", sacontroller.New(coreStore(s.catalog, registry.Namespaces), coreStore(s.catalog, registry.ServiceAccounts), s.log).Run)
	}
	if on.Namespaces {
		s.underLease("concord-namespaces", namespacecontroller.New(coreStore(s.catalog, registry.Namespaces), s.catalog, s.log.With("controller", "namespace")).Run)
	}
	if on.AdmissionPolicyStatus {
		policies := coreStore(s.catalog, registry.ValidatingAdmissionPolicies)
		s.underLease("concord-admissionpolicy-status", admissionpolicystatus.New(policies, s.catalog, s.log.With("controller", "admissionpolicy-status")).Run)
	}
}

// underLease runs lead under the Lease kube-system/<lease> until the
// server shuts down.
func (s *Server) underLease(lease string, lead func(context.Context)) {
	s.goBackground(func(ctx context.Context) { s.elect.Run(ctx, lease, lead) })
}
