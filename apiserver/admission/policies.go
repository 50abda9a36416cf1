package admission

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/admission/plugin/policy/generic"
	"k8s.io/apiserver/pkg/admission/plugin/policy/matching"
	"k8s.io/apiserver/pkg/admission/plugin/policy/mutating"
	"k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	"k8s.io/client-go/informers"

	"github.com/concord-dev/concord/apiserver/filters"
	"github.com/concord-dev/concord/registry"
	"github.com/concord-dev/concord/registry/controller"
)

// PolicyConfig names what the admission policies are read from.
type PolicyConfig struct {
	// Storage is etcd, through the registry's storage: one watch of
	// registry.AdmissionPolicyStoragePrefix sees every policy, binding and
	// the generation key.
	Storage controller.PrefixStorage
	// The stores of the four policy resources decode their values; the
	// namespaces' give namespaceObject and namespaceSelector's labels.
	ValidatingPolicies, ValidatingBindings, MutatingPolicies, MutatingBindings, Namespaces *registry.Store
	// Stores are every served resource's: params, and the types of
	// ApplyConfiguration mutations. Subscribe, when set, has a function
	// called whenever they change (registry.Catalog.Subscribe): a
	// paramKind served later (a CRD created after its policy) counts then.
	Stores    Stores
	Subscribe func(func())
	// Generation reads the revision of registry.AdmissionPolicyGeneration
	// from etcd, by which a refusal is confirmed (nil: refusals are not).
	Generation func(context.Context) (int64, error)
	// Authorizer answers expressions' `authorizer`.
	Authorizer filters.Authorizer
	Log        *slog.Logger
}

// awaitTimeout bounds how long a write waits for the policy view to catch
// up with a generation it knows etcd has (kube's consistent reads wait
// 3 s).
const awaitTimeout = 3 * time.Second

// Policies admits writes by the stored ValidatingAdmissionPolicies and
// MutatingAdmissionPolicies and their bindings, with kube's policy
// dispatchers (k8s.io/apiserver/pkg/admission/plugin/policy/...): kube's
// matching, CEL evaluation, params, messages and errors. Concord keeps the
// policies itself, in a view of one etcd watch. A write is admitted on the
// view as it is, and guarded by its generation
// (registry.AdmissionGuardedStorage): a policy or binding counts on every
// replica from the moment its write returned (kube's take up to a
// second). A refusal is confirmed against etcd before it is answered
// (confirmed), so a policy deleted or relaxed a moment ago refuses nothing.
type Policies struct {
	cfg     PolicyConfig
	catchup *controller.Catchup
	authz   authorizerOf
	types   typeConverters

	// mu guards hooks and the view below, which the watch's handler
	// changes and writes read.
	mu    sync.RWMutex
	hooks *policyHooks
	// objects are the stored policies and bindings by key
	// (<plural>/<name>), as of the view's revision; loading are those of
	// a watch's initial read.
	objects, loading map[string]registry.Object
	// gen is the ModRevision of registry.AdmissionPolicyGeneration as of
	// the view's revision (0: none), and loadingGen the initial read's.
	gen, loadingGen int64
	// loaded: the view has been read once; synced is closed then.
	loaded   bool
	syncedCh chan struct{}
	// compiled are the evaluators by policy key and resourceVersion.
	compiledV map[string]compiledPolicy[validating.Validator]
	compiledM map[string]compiledPolicy[mutating.PolicyEvaluator]
}

type compiledPolicy[E any] struct {
	version   string
	evaluator E
}

// policyHooks are the hooks of one state of the view, as kube's policy
// source builds them: a policy with the bindings that name it.
type policyHooks struct {
	validating filteredHooks[*admissionregistrationv1.ValidatingAdmissionPolicy, *admissionregistrationv1.ValidatingAdmissionPolicyBinding, validating.Validator]
	mutating   filteredHooks[*admissionregistrationv1.MutatingAdmissionPolicy, *admissionregistrationv1.MutatingAdmissionPolicyBinding, mutating.PolicyEvaluator]
	// gen is the generation key's revision this state is of.
	gen int64
}

// NewPolicies builds the policies' admission; Run keeps them current.
func NewPolicies(cfg PolicyConfig) *Policies {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	return &Policies{
		cfg:       cfg,
		catchup:   controller.NewCatchup(),
		authz:     authorizerOf{authz: cfg.Authorizer},
		types:     typeConverters{stores: cfg.Stores},
		hooks:     &policyHooks{},
		syncedCh:  make(chan struct{}),
		objects:   map[string]registry.Object{},
		compiledV: map[string]compiledPolicy[validating.Validator]{},
		compiledM: map[string]compiledPolicy[mutating.PolicyEvaluator]{},
	}
}

// Synced is closed once the view has read the stored policies.
func (p *Policies) Synced() <-chan struct{} { return p.syncedCh }

// Run watches the policies until ctx ends.
func (p *Policies) Run(ctx context.Context) {
	if p.cfg.Subscribe != nil {
		p.cfg.Subscribe(func() {
			p.mu.Lock()
			defer p.mu.Unlock()
			if p.loaded {
				p.rebuildLocked()
			}
		})
	}
	controller.WatchPrefix(ctx, p.cfg.Storage, registry.AdmissionPolicyStoragePrefix, controller.WatchOptions{Name: "admission policies", Log: p.cfg.Log}, controller.PrefixHandler{
		Event: p.event, Synced: p.synced, Progress: p.progress, Ended: p.ended,
	})
}

// generationKey is registry.AdmissionPolicyGeneration's key as the view
// reads it.
var generationKey = registry.AdmissionPolicyGeneration.Name

func (p *Policies) event(_ context.Context, kvs []controller.KV, initial bool) error {
	if initial {
		if p.loading == nil {
			p.loading = map[string]registry.Object{}
		}
		for _, kv := range kvs {
			if kv.Key == generationKey {
				p.loadingGen = kv.Revision
				continue
			}
			p.apply(p.loading, kv)
		}
		return nil
	}
	p.mu.Lock()
	var rev int64
	for _, kv := range kvs {
		rev = kv.Revision
		if kv.Key == generationKey {
			p.gen = 0
			if kv.Value != nil {
				p.gen = kv.Revision
			}
			continue
		}
		p.apply(p.objects, kv)
	}
	p.rebuildLocked()
	p.mu.Unlock()
	p.catchup.Advanced(rev)
	return nil
}

func (p *Policies) synced(_ context.Context, rev int64, w *controller.PrefixWatch) error {
	objects, gen := p.loading, p.loadingGen
	if objects == nil {
		objects = map[string]registry.Object{}
	}
	p.loading, p.loadingGen = nil, 0
	p.mu.Lock()
	if !p.loaded {
		close(p.syncedCh)
	}
	p.objects, p.gen, p.loaded = objects, gen, true
	p.rebuildLocked()
	p.mu.Unlock()
	p.catchup.Synced(rev, w)
	return nil
}

func (p *Policies) progress(_ context.Context, rev int64) error {
	p.catchup.Advanced(rev)
	return nil
}

func (p *Policies) ended(error) {
	p.loading, p.loadingGen = nil, 0
	p.catchup.Ended()
}

// apply decodes the value at kv's key (<plural>/<name>) into objects; a
// deleted key, or a value that does not decode, is removed.
func (p *Policies) apply(objects map[string]registry.Object, kv controller.KV) {
	plural, name, _ := strings.Cut(kv.Key, "/")
	var store *registry.Store
	switch plural {
	case registry.ValidatingAdmissionPolicies.Plural:
		store = p.cfg.ValidatingPolicies
	case registry.ValidatingAdmissionPolicyBindings.Plural:
		store = p.cfg.ValidatingBindings
	case registry.MutatingAdmissionPolicies.Plural:
		store = p.cfg.MutatingPolicies
	case registry.MutatingAdmissionPolicyBindings.Plural:
		store = p.cfg.MutatingBindings
	default:
		return
	}
	if kv.Value == nil {
		delete(objects, kv.Key)
		return
	}
	obj, err := store.Decode(name, kv.Object)
	if err != nil {
		delete(objects, kv.Key)
		p.cfg.Log.Error("admission policies: a stored object that cannot be read is not enforced", "key", kv.Key, "err", err)
		return
	}
	objects[kv.Key] = obj
}

// rebuildLocked builds the hooks of the view's objects, as kube's policy
// source does (policies without a binding, and bindings without their
// policy, make none), compiling only the policies that changed.
func (p *Policies) rebuildLocked() {
	hooks := &policyHooks{gen: p.gen}
	vBindings := map[string][]*admissionregistrationv1.ValidatingAdmissionPolicyBinding{}
	mBindings := map[string][]*admissionregistrationv1.MutatingAdmissionPolicyBinding{}
	for _, obj := range p.objects {
		switch b := obj.(type) {
		case *admissionregistrationv1.ValidatingAdmissionPolicyBinding:
			vBindings[b.Spec.PolicyName] = append(vBindings[b.Spec.PolicyName], b)
		case *admissionregistrationv1.MutatingAdmissionPolicyBinding:
			mBindings[b.Spec.PolicyName] = append(mBindings[b.Spec.PolicyName], b)
		}
	}
	seenV, seenM := map[string]bool{}, map[string]bool{}
	for _, key := range sortedKeys(p.objects) {
		switch policy := p.objects[key].(type) {
		case *admissionregistrationv1.ValidatingAdmissionPolicy:
			if bindings := vBindings[policy.Name]; len(bindings) > 0 {
				seenV[key] = true
				hooks.validating.add(hookOf(p, key, policy, bindings, policy.Spec.ParamKind, p.compiledV, compileValidatingPolicy), filterOf(policy.Spec.MatchConstraints))
			}
		case *admissionregistrationv1.MutatingAdmissionPolicy:
			if bindings := mBindings[policy.Name]; len(bindings) > 0 {
				seenM[key] = true
				hooks.mutating.add(hookOf(p, key, policy, bindings, policy.Spec.ParamKind, p.compiledM, compileMutatingPolicy), filterOf(policy.Spec.MatchConstraints))
			}
		}
	}
	forgetUnseen(p.compiledV, seenV)
	forgetUnseen(p.compiledM, seenM)
	p.hooks = hooks
}

// params are the informer and scope of a policy's paramKind, or kube's
// configuration error when it is not served.
func (p *Policies) params(kind *admissionregistrationv1.ParamKind) (informers.GenericInformer, meta.RESTScope, error) {
	if kind == nil {
		return nil, nil, nil
	}
	gv, err := schema.ParseGroupVersion(kind.APIVersion)
	if err != nil {
		return nil, nil, fmt.Errorf("failed to parse paramKind APIVersion: %w", err)
	}
	gvk := gv.WithKind(kind.Kind)
	s, ok := p.cfg.Stores.byKind(gvk)
	if !ok {
		return nil, nil, errNoParamKind(gvk)
	}
	return paramInformer{stores: p.cfg.Stores, kind: gvk}, scopeOf(s.Resource), nil
}

// hookOf is the hook of policy (the view's object at key) and its
// bindings, as kube's policy source builds it; the policy is compiled once
// per resourceVersion (cache).
func hookOf[P interface {
	runtime.Object
	GetResourceVersion() string
}, B interface {
	runtime.Object
	GetName() string
}, E generic.Evaluator](p *Policies, key string, policy P, bindings []B, paramKind *admissionregistrationv1.ParamKind, cache map[string]compiledPolicy[E], compile func(P) E) generic.PolicyHook[P, B, E] {
	c, ok := cache[key]
	if !ok || c.version != policy.GetResourceVersion() {
		c = compiledPolicy[E]{version: policy.GetResourceVersion(), evaluator: compile(policy)}
		cache[key] = c
	}
	informer, scope, cfgErr := p.params(paramKind)
	return generic.PolicyHook[P, B, E]{
		Policy:             policy,
		Bindings:           sortedByName(bindings),
		Evaluator:          c.evaluator,
		ParamInformer:      informer,
		ParamScope:         scope,
		ConfigurationError: cfgErr,
	}
}

func forgetUnseen[E any](cache map[string]compiledPolicy[E], seen map[string]bool) {
	for key := range cache {
		if !seen[key] {
			delete(cache, key)
		}
	}
}

func sortedKeys(m map[string]registry.Object) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func sortedByName[B interface{ GetName() string }](bindings []B) []B {
	slices.SortFunc(bindings, func(a, b B) int { return strings.Compare(a.GetName(), b.GetName()) })
	return bindings
}

// admittedOn are the view's hooks, recorded as those the request is
// admitted on: its writes are guarded by their generation
// (registry.RecordAdmissionPolicies), so that a write admitted on a view
// behind a policy's or binding's write is refused by etcd and admitted
// again on a view that has it. Before the view is loaded, a write waits
// for it (kube's plugins wait 10 s, then 403 "not yet ready").
func (p *Policies) admittedOn(ctx context.Context, attrs admission.Attributes) (*policyHooks, error) {
	p.mu.RLock()
	hooks, loaded := p.hooks, p.loaded
	p.mu.RUnlock()
	if !loaded {
		timer := time.NewTimer(notReadyTimeout)
		defer timer.Stop()
		select {
		case <-p.syncedCh:
		case <-timer.C:
			return nil, admission.NewForbidden(attrs, errors.New("not yet ready to handle request"))
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		p.mu.RLock()
		hooks = p.hooks
		p.mu.RUnlock()
	}
	registry.RecordAdmissionPolicies(ctx, hooks.gen)
	return hooks, nil
}

// notReadyTimeout is how long a write waits for the view's first load.
const notReadyTimeout = 10 * time.Second

// confirmed reports whether a refusal decided on hooks stands: the
// policies' generation in etcd is still theirs. If the view is behind it,
// confirmed waits until the view has caught up and returns its hooks, on
// which the refusal is decided again: a policy or binding deleted or
// relaxed a moment ago on another replica refuses nothing from then on. A
// refusal the view cannot confirm (etcd unavailable) stands.
func (p *Policies) confirmed(ctx context.Context, hooks *policyHooks) (*policyHooks, bool) {
	if p.cfg.Generation == nil {
		return nil, true
	}
	gen, err := p.cfg.Generation(ctx)
	if err != nil || gen == hooks.gen {
		return nil, true
	}
	if err := p.catchup.Await(ctx, gen, awaitTimeout); err != nil {
		return nil, true
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.hooks, false
}

// AwaitRevision waits until the view holds etcd's state as of rev
// (registry.AdmissionGuardedStorage's catch-up).
func (p *Policies) AwaitRevision(ctx context.Context, rev int64) error {
	return p.catchup.Await(ctx, rev, awaitTimeout)
}

// MayMutate says whether a bound mutating policy is stored, or may be:
// before the view is loaded, one is assumed (registry.MutationChecker).
func (p *Policies) MayMutate(*registry.Resource) bool {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return !p.loaded || len(p.hooks.mutating.all) > 0
}

// mutate runs the mutating policies on attrs' object (kube's
// MutatingAdmissionPolicy plugin).
func (p *Policies) mutate(ctx context.Context, attrs admission.Attributes, o admission.ObjectInterfaces) error {
	if attrs.GetOperation() == admission.Delete || excludedFromPolicies(attrs.GetResource().GroupResource()) {
		return nil // kube's plugin handles no delete: there is no object
	}
	return p.dispatch(ctx, attrs, func(hooks *policyHooks) error {
		candidates := hooks.mutating.forRequest(attrs, o)
		if len(candidates) == 0 {
			return nil
		}
		return mutating.NewDispatcher(p.authz, p.matcher(ctx), p.types).Dispatch(ctx, attrs, o, withContext(ctx, candidates))
	})
}

// validate runs the validating policies (kube's ValidatingAdmissionPolicy
// plugin).
func (p *Policies) validate(ctx context.Context, attrs admission.Attributes, o admission.ObjectInterfaces) error {
	if excludedFromPolicies(attrs.GetResource().GroupResource()) {
		return nil
	}
	return p.dispatch(ctx, attrs, func(hooks *policyHooks) error {
		candidates := hooks.validating.forRequest(attrs, o)
		if len(candidates) == 0 {
			return nil
		}
		return validating.NewDispatcher(p.authz, generic.NewPolicyMatcher(p.matcher(ctx))).Dispatch(ctx, attrs, o, withContext(ctx, candidates))
	})
}

// dispatch runs one step on the view's hooks; a refusal is decided again
// once if the view was behind etcd (confirmed).
func (p *Policies) dispatch(ctx context.Context, attrs admission.Attributes, step func(*policyHooks) error) error {
	hooks, err := p.admittedOn(ctx, attrs)
	if err != nil {
		return err
	}
	if err = step(hooks); err == nil {
		return nil
	}
	if current, ok := p.confirmed(ctx, hooks); !ok {
		return step(current)
	}
	return err
}

// matcher is kube's policy matcher for one request: it reads namespaces
// (namespaceSelector, namespaceObject) from the namespaces' read cache as
// it is, as kube reads them from an informer, in the request's ctx; one
// the cache does not have is read from etcd. Making one is a few
// allocations.
func (p *Policies) matcher(ctx context.Context) *matching.Matcher {
	return matching.NewMatcher(namespaceLister{store: p.cfg.Namespaces, ctx: ctx, recent: true}, namespaceClient{store: p.cfg.Namespaces})
}

// withContext are hooks whose params are read in ctx: a copy, when any
// has params.
func withContext[P, B runtime.Object, E generic.Evaluator](ctx context.Context, hooks []generic.PolicyHook[P, B, E]) []generic.PolicyHook[P, B, E] {
	var out []generic.PolicyHook[P, B, E]
	for i, h := range hooks {
		informer, ok := h.ParamInformer.(paramInformer)
		if !ok {
			continue
		}
		if out == nil {
			out = slices.Clone(hooks)
		}
		informer.ctx = ctx
		out[i].ParamInformer = informer
	}
	if out == nil {
		return hooks
	}
	return out
}

// excludedFromPolicies are the policy resources themselves, which kube's
// policy plugins never admit (a policy could lock itself in).
func excludedFromPolicies(gr schema.GroupResource) bool {
	for _, r := range registry.AdmissionPolicyResources {
		if r.GroupResource() == gr {
			return true
		}
	}
	return false
}
