package app

import (
	"context"
	"fmt"

	"github.com/concord-dev/concord/apiserver/admission"
	"github.com/concord-dev/concord/apiserver/filters"
	"github.com/concord-dev/concord/registry"
)

// chainAdmission is the stores' registry.Admission: the admission policies
// and webhooks of the stored configurations, in kube's order. The stores
// are made before them, which read several of them; admit sets chain
// before anything writes.
type chainAdmission struct {
	chain admission.Chain
}

func (a *chainAdmission) Mutate(ctx context.Context, req *registry.AdmissionRequest) error {
	return a.chain.Mutate(ctx, req)
}

func (a *chainAdmission) MayMutate(res *registry.Resource) bool {
	return a.chain.MayMutate(res)
}

func (a *chainAdmission) Validate(ctx context.Context, req *registry.AdmissionRequest) error {
	return a.chain.Validate(ctx, req)
}

// admit makes every write pass the stored admission policies and call the
// admission webhooks of the stored configurations, which this replica
// keeps current by watches that run until shutdown. A write that comes
// before the webhook configurations were read once waits for that (kube's
// webhook plugins wait up to 10 s), and so does one that comes before the
// policies were; Ready waits for both.
func (s *Server) admit(context.Context) error {
	w, err := admission.New(admission.Config{
		Validating: coreStore(s.catalog, registry.ValidatingWebhookConfigurations),
		Mutating:   coreStore(s.catalog, registry.MutatingWebhookConfigurations),
		Namespaces: coreStore(s.catalog, registry.Namespaces),
		Log:        s.log.With("component", "admission"),
	})
	if err != nil {
		return fmt.Errorf("admission webhooks: %w", err)
	}
	p := admission.NewPolicies(admission.PolicyConfig{
		Storage:            s.storage,
		ValidatingPolicies: coreStore(s.catalog, registry.ValidatingAdmissionPolicies),
		ValidatingBindings: coreStore(s.catalog, registry.ValidatingAdmissionPolicyBindings),
		MutatingPolicies:   coreStore(s.catalog, registry.MutatingAdmissionPolicies),
		MutatingBindings:   coreStore(s.catalog, registry.MutatingAdmissionPolicyBindings),
		Namespaces:         coreStore(s.catalog, registry.Namespaces),
		Stores:             s.catalog.Stores,
		Subscribe:          s.catalog.Subscribe,
		Generation: func(ctx context.Context) (int64, error) {
			return registry.AdmissionPolicyGenerationOf(ctx, s.storage)
		},
		Authorizer: lateAuthorizer{s.sec},
		Log:        s.log.With("component", "admission-policies"),
	})
	s.admission.chain = admission.Chain{Policies: p, Webhooks: w}
	s.goBackground(w.Run)
	s.goBackground(p.Run)
	return nil
}

// lateAuthorizer is the server's authorizer, set after the admission is
// built (startAuthorization).
type lateAuthorizer struct{ sec *serving }

func (a lateAuthorizer) Authorize(ctx context.Context, attrs filters.Attributes) (filters.Decision, string, error) {
	return a.sec.authz.Authorize(ctx, attrs)
}
