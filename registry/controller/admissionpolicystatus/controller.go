// Package admissionpolicystatus type-checks the expressions of
// ValidatingAdmissionPolicies, as kube-controller-manager's
// ValidatingAdmissionPolicy status controller does: each policy's
// validations are compiled by kube's type checker against the schemas of
// the kinds its matchConstraints name, and status.typeChecking (one
// expressionWarning per expression that does not check) and
// status.observedGeneration are written through the status subresource,
// once per generation. One replica runs it at a time (a Lease, cmd/concord).
package admissionpolicystatus

import (
	"context"
	"log/slog"
	"sync"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	"k8s.io/apiserver/pkg/cel/openapi/resolver"

	"github.com/concord-dev/concord/registry"
	"github.com/concord-dev/concord/registry/controller"
	"github.com/concord-dev/concord/registry/openapidefs"
)

// FieldManager is who the status writes name in managedFields: kube's
// controller applies the status as its controller name.
const FieldManager = "validatingadmissionpolicy-status-controller"

// workers is how many policies are checked at once (kube's
// ConcurrentPolicySyncs defaults to 5).
const workers = 5

// Pauses: before a watch is opened again, and the first and the longest
// before a policy whose write failed is checked again.
const (
	rewatchDelay = 500 * time.Millisecond
	minRetry     = 100 * time.Millisecond
	maxRetry     = 5 * time.Second
)

// Controller writes the type checking of ValidatingAdmissionPolicies.
type Controller struct {
	policies *registry.Store
	catalog  *registry.Catalog
	// builtIns resolves the schemas of the built-in kinds, from the
	// OpenAPI definitions (built once: it indexes all of them).
	builtIns *resolver.DefinitionsSchemaResolver
	log      *slog.Logger
}

// New returns the controller of the policies in policies; catalog is what
// the kinds a policy matches are looked up in, built-in and custom.
func New(policies *registry.Store, catalog *registry.Catalog, log *slog.Logger) *Controller {
	return &Controller{
		policies: policies,
		catalog:  catalog,
		builtIns: resolver.NewDefinitionsSchemaResolver(openapidefs.Definitions, registry.Scheme),
		log:      log,
	}
}

// Run works until ctx ends.
func (c *Controller) Run(ctx context.Context) {
	q := controller.NewQueue[string](controller.QueueOptions{Name: "admission policy status", Log: c.log, MinRetry: minRetry, MaxRetry: maxRetry})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		q.Run(ctx, workers, c.sync)
	}()
	// Every policy from its current state, so a start finds those written
	// while no replica checked them.
	controller.Watch(ctx, c.policies, controller.WatchOptions{Name: "admission policy status", Log: c.log, RewatchDelay: rewatchDelay}, controller.Handler[*admissionregistrationv1.ValidatingAdmissionPolicy]{
		Event: func(_ context.Context, typ watch.EventType, p *admissionregistrationv1.ValidatingAdmissionPolicy, _ bool) error {
			if typ != watch.Deleted && p.Generation > p.Status.ObservedGeneration {
				q.Add(p.Name)
			}
			return nil
		},
	})
	wg.Wait()
}

// sync checks the policy name and writes its status, guarded by the
// resourceVersion read: done when it is gone or its status is of its
// generation; a conflict (the policy changed meanwhile) is checked again.
func (c *Controller) sync(ctx context.Context, name string) (done bool, _ error) {
	obj, err := c.policies.Get(ctx, "", name)
	if apierrors.IsNotFound(err) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	policy := obj.(*admissionregistrationv1.ValidatingAdmissionPolicy)
	if policy.Generation <= policy.Status.ObservedGeneration {
		return true, nil
	}
	// A generation not observed yet: the status written differs.
	next := policy.DeepCopy()
	next.Status = Status(policy, c.typeChecker())
	_, err = c.policies.UpdateStatus(ctx, "", name, next, registry.WriteOptions{FieldManager: FieldManager})
	switch {
	case apierrors.IsNotFound(err):
		return true, nil
	case apierrors.IsConflict(err):
		return false, nil
	case err != nil:
		return false, err
	}
	return true, nil
}

// typeChecker is kube's type checker over the kinds served now.
func (c *Controller) typeChecker() *validating.TypeChecker {
	stores := c.catalog.Stores()
	return &validating.TypeChecker{
		SchemaResolver: c.builtIns.Combine(customSchemas(stores)),
		RestMapper:     restMapper(stores),
	}
}

// Status is the status kube's controller writes for policy: the policy's
// generation observed, and typeChecking with the warnings of checker (an
// empty typeChecking when every expression checks). Its conditions are
// kept.
func Status(policy *admissionregistrationv1.ValidatingAdmissionPolicy, checker *validating.TypeChecker) admissionregistrationv1.ValidatingAdmissionPolicyStatus {
	st := *policy.Status.DeepCopy()
	st.ObservedGeneration = policy.Generation
	st.TypeChecking = &admissionregistrationv1.TypeChecking{ExpressionWarnings: checker.Check(policy)}
	return st
}
