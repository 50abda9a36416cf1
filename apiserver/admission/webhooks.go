// Package admission calls the admission webhooks of the stored
// ValidatingWebhookConfigurations and MutatingWebhookConfigurations, as
// kube-apiserver does, with kube's own webhook plugins
// (k8s.io/apiserver/pkg/admission/plugin/webhook/{mutating,validating})
// behind registry.Admission.
package admission

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/mutating"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/validating"
	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/concord-dev/concord/apiserver/filters"
	"github.com/concord-dev/concord/registry"
)

// Config names the stores the webhooks are read from.
type Config struct {
	// Validating and Mutating are the stores of
	// validatingwebhookconfigurations and mutatingwebhookconfigurations;
	// Namespaces the namespaces' (labels for namespaceSelector).
	Validating, Mutating, Namespaces *registry.Store
	Log                              *slog.Logger
}

// Webhooks is registry.Admission by the stored webhook configurations.
type Webhooks struct {
	validating *validating.Plugin
	mutating   *mutating.Plugin
	factory    *informerFactory
	cfg        Config
	synced     chan struct{}
}

var _ registry.Admission = (*Webhooks)(nil)

// New builds the webhooks' admission; Run keeps their configurations
// current, and until its watches have synced (Synced) a write waits for
// them as kube's does (10 s at most, then 403 "not yet ready").
func New(cfg Config) (*Webhooks, error) {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	f := &informerFactory{
		validating: newConfigInformer(),
		mutating:   newConfigInformer(),
		namespaces: namespaceInformer{store: cfg.Namespaces},
	}
	v, err := validating.NewValidatingAdmissionWebhook(nil)
	if err != nil {
		return nil, fmt.Errorf("validating admission webhooks: %w", err)
	}
	m, err := mutating.NewMutatingWebhook(nil)
	if err != nil {
		return nil, fmt.Errorf("mutating admission webhooks: %w", err)
	}
	client := namespaceClient{store: cfg.Namespaces}
	v.SetExternalKubeClientSet(client)
	v.SetExternalKubeInformerFactory(f)
	if err := v.ValidateInitialization(); err != nil {
		return nil, fmt.Errorf("validating admission webhooks: %w", err)
	}
	m.SetExternalKubeClientSet(client)
	m.SetExternalKubeInformerFactory(f)
	if err := m.ValidateInitialization(); err != nil {
		return nil, fmt.Errorf("mutating admission webhooks: %w", err)
	}
	return &Webhooks{validating: v, mutating: m, factory: f, cfg: cfg, synced: make(chan struct{})}, nil
}

// MayMutate says whether a mutating webhook configuration is stored, or
// may be: before the configurations were read, one is assumed
// (registry.MutationChecker).
func (w *Webhooks) MayMutate(*registry.Resource) bool {
	m := w.factory.mutating
	return !m.HasSynced() || len(m.indexer.ListKeys()) > 0
}

// Run watches the webhook configurations until ctx ends.
func (w *Webhooks) Run(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Go(func() { w.factory.validating.watch(ctx, w.cfg.Validating, w.cfg.Log) })
	wg.Go(func() { w.factory.mutating.watch(ctx, w.cfg.Mutating, w.cfg.Log) })
	wg.Go(func() {
		for _, i := range []*configInformer{w.factory.validating, w.factory.mutating} {
			select {
			case <-i.syncedCh:
			case <-ctx.Done():
				return
			}
		}
		close(w.synced)
	})
	wg.Wait()
}

// Synced is closed when both configurations' watches have synced once
// (Run has read every stored configuration).
func (w *Webhooks) Synced() <-chan struct{} { return w.synced }

// Mutate calls the matching mutating webhooks, in kube's order, on
// req.Object, which they change in place.
func (w *Webhooks) Mutate(ctx context.Context, req *registry.AdmissionRequest) error {
	return (&Chain{Webhooks: w}).Mutate(ctx, req)
}

// Validate calls the matching validating webhooks (concurrently).
func (w *Webhooks) Validate(ctx context.Context, req *registry.AdmissionRequest) error {
	return (&Chain{Webhooks: w}).Validate(ctx, req)
}

// exempt are the Leases by which Concord's controllers elect their
// runners, so that a failing webhook cannot stop them (garbage
// collection, namespace deletion). kube's plugins exempt the webhook
// configurations themselves.
func exempt(req *registry.AdmissionRequest) bool {
	r := req.Resource
	return r.GroupVersion.Group == coordinationv1.GroupName && r.Plural == "leases" &&
		req.Namespace == metav1.NamespaceSystem && strings.HasPrefix(req.Name, "concord-")
}

// attributes are req as kube's admission sees it, with the user of ctx.
func attributes(ctx context.Context, req *registry.AdmissionRequest) (admission.Attributes, admission.ObjectInterfaces) {
	r := req.Resource
	gvr := r.GroupVersion.WithResource(r.Plural)
	kind := r.GroupVersion.WithKind(r.Kind)
	if req.Subresource == "scale" {
		kind = autoscalingv1.SchemeGroupVersion.WithKind("Scale")
	}
	// No user when the API is open (no authentication): kube's plugins
	// need one, so an empty one.
	u := &user.DefaultInfo{}
	if info := filters.UserOf(ctx); info != nil {
		u = &user.DefaultInfo{Name: info.Name, UID: info.UID, Groups: info.Groups, Extra: info.Extra}
	}
	attrs := admission.NewAttributesRecord(req.Object, req.OldObject, kind, req.Namespace, req.Name, gvr, req.Subresource, req.Operation, typedOptions(req.Options), req.DryRun, u)
	return attrs, objectInterfaces(kind)
}

// typedOptions are the write's options with their apiVersion and kind,
// as kube's handlers set them before admission (a webhook receives
// them): a copy, the store's are its own.
func typedOptions(opts runtime.Object) runtime.Object {
	if opts == nil || !opts.GetObjectKind().GroupVersionKind().Empty() {
		return opts
	}
	var kind string
	switch opts.(type) {
	case *metav1.CreateOptions:
		kind = "CreateOptions"
	case *metav1.UpdateOptions:
		kind = "UpdateOptions"
	case *metav1.DeleteOptions:
		kind = "DeleteOptions"
	default:
		return opts
	}
	opts = opts.DeepCopyObject()
	opts.GetObjectKind().SetGroupVersionKind(metav1.SchemeGroupVersion.WithKind(kind))
	return opts
}
