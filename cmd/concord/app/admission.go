package app

import (
	"context"
	"fmt"

	"github.com/concord-dev/concord/apiserver/admission"
	"github.com/concord-dev/concord/registry"
)

// webhookAdmission is the stores' registry.Admission: the admission
// webhooks of the stored configurations. The stores are made before the
// webhooks, which read three of them; admitWebhooks sets webhooks before
// anything writes.
type webhookAdmission struct {
	webhooks *admission.Webhooks
}

func (a *webhookAdmission) Mutate(ctx context.Context, req *registry.AdmissionRequest) error {
	return a.webhooks.Mutate(ctx, req)
}

func (a *webhookAdmission) MayMutate(res *registry.Resource) bool {
	return a.webhooks.MayMutate(res)
}

func (a *webhookAdmission) Validate(ctx context.Context, req *registry.AdmissionRequest) error {
	return a.webhooks.Validate(ctx, req)
}

// admitWebhooks makes every write call the admission webhooks of the
// stored ValidatingWebhookConfigurations and MutatingWebhookConfigurations,
// which this replica keeps current by watches that run until shutdown.
// A write that comes before they have read the stored configurations once
// waits for that (kube's webhook plugins wait up to 10 s), so none is
// admitted without them; Ready waits for it too.
func (s *Server) admitWebhooks(context.Context) error {
	w, err := admission.New(admission.Config{
		Validating: coreStore(s.catalog, registry.ValidatingWebhookConfigurations),
		Mutating:   coreStore(s.catalog, registry.MutatingWebhookConfigurations),
		Namespaces: coreStore(s.catalog, registry.Namespaces),
		Log:        s.log.With("component", "admission"),
	})
	if err != nil {
		return fmt.Errorf("admission webhooks: %w", err)
	}
	s.admission.webhooks = w
	s.goBackground(w.Run)
	return nil
}
