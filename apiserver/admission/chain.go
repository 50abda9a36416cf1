package admission

import (
	"context"

	"k8s.io/apiserver/pkg/admission"
	auditinternal "k8s.io/apiserver/pkg/apis/audit"

	"github.com/concord-dev/concord/apiserver/filters"
	"github.com/concord-dev/concord/registry"
)

// Chain is the admission every write passes, in kube-apiserver's order of
// its admission plugins: the mutating admission policies, then the
// mutating webhooks — run once more when one changed the object after a
// reinvocable one ran, as kube's chain reinvokes them — then the
// validating admission policies, then the validating webhooks. Either
// part may be nil.
type Chain struct {
	Policies *Policies
	Webhooks *Webhooks
}

var _ registry.Admission = (*Chain)(nil)

func (c *Chain) Mutate(ctx context.Context, req *registry.AdmissionRequest) error {
	if exempt(req) {
		return nil
	}
	attrs, o := attributes(ctx, req)
	attrs = auditedAttributes{Attributes: attrs, ctx: ctx}
	if err := c.mutate(ctx, attrs, o); err != nil {
		return err
	}
	if rc := attrs.GetReinvocationContext(); rc.ShouldReinvoke() {
		rc.SetIsReinvoke()
		return c.mutate(ctx, attrs, o)
	}
	return nil
}

func (c *Chain) mutate(ctx context.Context, attrs admission.Attributes, o admission.ObjectInterfaces) error {
	if c.Policies != nil {
		if err := c.Policies.mutate(ctx, attrs, o); err != nil {
			return err
		}
	}
	if c.Webhooks != nil {
		return c.Webhooks.mutating.Admit(ctx, attrs, o)
	}
	return nil
}

func (c *Chain) Validate(ctx context.Context, req *registry.AdmissionRequest) error {
	if exempt(req) {
		return nil
	}
	attrs, o := attributes(ctx, req)
	attrs = auditedAttributes{Attributes: attrs, ctx: ctx}
	if c.Policies != nil {
		if err := c.Policies.validate(ctx, attrs, o); err != nil {
			return err
		}
	}
	if c.Webhooks != nil {
		if err := c.Webhooks.validating.Validate(ctx, attrs, o); err != nil {
			return err
		}
	}
	// A binding's dry run, once the write of it is admitted (dryrun.go).
	if c.Policies != nil && isBindingDryRun(req) {
		c.Policies.dryRun(ctx, req)
	}
	return nil
}

// MayMutate says whether a mutating webhook or policy may change a write
// of res (registry.MutationChecker).
func (c *Chain) MayMutate(res *registry.Resource) bool {
	return (c.Webhooks != nil && c.Webhooks.MayMutate(res)) || (c.Policies != nil && c.Policies.MayMutate(res))
}

// auditedAttributes add the annotations kube's plugins make to the audit
// line of the request (filters.AddAuditAnnotation), those of level
// Metadata: kube's audit log records them at its default level.
type auditedAttributes struct {
	admission.Attributes
	ctx context.Context
}

func (a auditedAttributes) AddAnnotation(key, value string) error {
	return a.AddAnnotationWithLevel(key, value, auditinternal.LevelMetadata)
}

func (a auditedAttributes) AddAnnotationWithLevel(key, value string, level auditinternal.Level) error {
	if err := a.Attributes.AddAnnotationWithLevel(key, value, level); err != nil {
		return err
	}
	if !level.Less(auditinternal.LevelRequest) {
		return nil
	}
	filters.AddAuditAnnotation(a.ctx, key, value)
	return nil
}
