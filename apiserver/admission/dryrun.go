package admission

import (
	"context"
	"errors"
	"fmt"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/admission/plugin/policy/generic"
	"k8s.io/apiserver/pkg/admission/plugin/policy/matching"
	"k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/predicates/rules"
	"k8s.io/apiserver/pkg/warning"
	corelisters "k8s.io/client-go/listers/core/v1"

	"github.com/concord-dev/concord/registry"
)

// The dry run of a ValidatingAdmissionPolicyBinding (docs/admission.md,
// "Dry run of a policy against stored objects"): a create or update of a
// binding with dryRun=All evaluates it, with its stored policy and as if
// its validationActions were [Deny], against every stored object its
// policy's matchConstraints and its matchResources select, each as a
// CREATE of that object, with kube's dispatcher; the objects it would deny
// are answered as warnings. kube's Warn and Audit only see new writes.

// Bounds of one dry run.
const (
	// dryRunMaxDenials is how many objects that would be denied are named,
	// each in a warning; dryRunDenialChars bounds their length together,
	// so that they, "... and N more" and the summary fit in the 4 KiB of
	// warnings a response carries (kube's recorder cuts every warning to
	// 256 characters past 4 KiB, and drops those after).
	dryRunMaxDenials  = 100
	dryRunDenialChars = 3 * 1024
	// dryRunPage is how many objects are read at a time.
	dryRunPage = 500
	// dryRunTimeout bounds the whole dry run.
	dryRunTimeout = 30 * time.Second
)

// dryRunMaxPerResource is how many objects of one resource are checked
// (and how many namespaces are read for namespaceSelector); a variable
// for the tests.
var dryRunMaxPerResource = 10000

// isBindingDryRun says whether req is the dry-run create or update of a
// ValidatingAdmissionPolicyBinding that starts a dry run.
func isBindingDryRun(req *registry.AdmissionRequest) bool {
	return req.DryRun && req.Subresource == "" &&
		(req.Operation == admission.Create || req.Operation == admission.Update) &&
		req.Resource.GroupResource() == registry.ValidatingAdmissionPolicyBindings.GroupResource()
}

// dryRun runs the dry run of the binding req writes and adds its warnings
// to ctx's recorder. It fails nothing: the write is answered as it would
// be without it.
func (p *Policies) dryRun(ctx context.Context, req *registry.AdmissionRequest) {
	binding, ok := req.Object.(*admissionregistrationv1.ValidatingAdmissionPolicyBinding)
	if !ok {
		return
	}
	r := &dryRunReport{ctx: ctx, prefix: fmt.Sprintf("dry run of ValidatingAdmissionPolicyBinding '%s': ", binding.Name)}
	obj, err := p.cfg.ValidatingPolicies.Get(ctx, "", binding.Spec.PolicyName)
	if apierrors.IsNotFound(err) {
		r.warn(fmt.Sprintf("ValidatingAdmissionPolicy '%s' not found, nothing checked", binding.Spec.PolicyName))
		return
	}
	if err != nil {
		r.warn(fmt.Sprintf("ValidatingAdmissionPolicy '%s' could not be read, nothing checked: %v", binding.Spec.PolicyName, err))
		return
	}
	policy := obj.(*admissionregistrationv1.ValidatingAdmissionPolicy)
	binding = binding.DeepCopy()
	binding.Spec.ValidationActions = []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}

	ctx, cancel := context.WithTimeout(ctx, dryRunTimeout)
	defer cancel()
	namespaces, err := p.namespaceSnapshot(ctx)
	if err != nil {
		r.warn(fmt.Sprintf("namespaces could not be read, nothing checked: %v", err))
		return
	}
	matcher := generic.NewPolicyMatcher(matching.NewMatcher(namespaces, namespaceClient{store: p.cfg.Namespaces}))
	informer, scope, cfgErr := p.params(policy.Spec.ParamKind)
	d := &policyDryRun{
		policy:  policy,
		binding: binding,
		matcher: matcher,
		// A dispatcher of its own: the same as the admission's, but for
		// the namespaces it reads.
		dispatcher: validating.NewDispatcher(authorizerOf{authz: p.cfg.Authorizer}, matcher),
		hooks: []validating.PolicyHook{{
			Policy:             policy,
			Bindings:           []*admissionregistrationv1.ValidatingAdmissionPolicyBinding{binding},
			Evaluator:          compileValidatingPolicy(policy),
			ParamInformer:      informer,
			ParamScope:         scope,
			ConfigurationError: cfgErr,
		}},
		report: r,
	}
	d.run(ctx, p.cfg.Stores())
	r.finish(ctx)
}

// policyDryRun is one dry run's policy, binding and evaluation.
type policyDryRun struct {
	policy     *admissionregistrationv1.ValidatingAdmissionPolicy
	binding    *admissionregistrationv1.ValidatingAdmissionPolicyBinding
	matcher    generic.PolicyMatcher
	dispatcher generic.Dispatcher[validating.PolicyHook]
	hooks      []validating.PolicyHook
	report     *dryRunReport
}

// run checks the objects of every store whose resource the policy and
// binding may select, until ctx ends: each stored object once, through
// the first of the resources serving it that they select (a custom
// resource's versions, Events at v1 and events.k8s.io/v1).
func (d *policyDryRun) run(ctx context.Context, stores []*registry.Store) {
	done := map[schema.GroupResource]bool{}
	for _, s := range stores {
		res := s.Resource
		stored := res.GroupResource()
		if res.Storage != nil {
			stored = res.Storage.Of.GroupResource()
		}
		if res.CreateOnly || excludedFromPolicies(res.GroupResource()) || done[stored] || !d.mayMatch(res) {
			continue
		}
		done[stored] = true
		if !d.checkResource(ctx, s) {
			return
		}
	}
}

// mayMatch says whether the resource rules of the policy's
// matchConstraints and the binding's matchResources may select a create
// of res (kube's rule matching; names, exclusions and selectors are left
// to the dispatcher, object by object).
func (d *policyDryRun) mayMatch(res *registry.Resource) bool {
	namespace := ""
	if res.Namespaced {
		namespace = "dry-run" // any: a rule's scope only asks whether there is one
	}
	attrs := admission.NewAttributesRecord(nil, nil, res.GroupVersionKind(), namespace, "", res.GroupVersion.WithResource(res.Plural), "", admission.Create, nil, false, nil)
	selects := func(m *admissionregistrationv1.MatchResources) bool {
		if m == nil || len(m.ResourceRules) == 0 {
			return true
		}
		for _, r := range m.ResourceRules {
			if (&rules.Matcher{Rule: r.RuleWithOperations, Attr: attrs}).Matches() {
				return true
			}
		}
		return false
	}
	return selects(d.policy.Spec.MatchConstraints) && selects(d.binding.Spec.MatchResources)
}

// checkResource checks the stored objects of s, page by page from one
// snapshot, at most dryRunMaxPerResource; it says whether to go on.
func (d *policyDryRun) checkResource(ctx context.Context, s *registry.Store) bool {
	res := s.Resource
	gr := res.GroupResource()
	opts := &metainternalversion.ListOptions{Limit: dryRunPage}
	for read := 0; ; {
		list, err := s.List(ctx, "", opts)
		if ctx.Err() != nil {
			d.report.stopped()
			return false
		}
		if err != nil {
			d.report.warn(fmt.Sprintf("%s could not be listed: %v", gr, err))
			return true
		}
		items, err := meta.ExtractList(list)
		if err != nil {
			d.report.warn(fmt.Sprintf("%s could not be listed: %v", gr, err))
			return true
		}
		for _, obj := range items {
			if read == dryRunMaxPerResource {
				d.report.warn(fmt.Sprintf("checked only the first %d %s", dryRunMaxPerResource, gr))
				return true
			}
			read++
			d.check(ctx, res, obj)
			if ctx.Err() != nil {
				d.report.stopped()
				return false
			}
		}
		listMeta, err := meta.ListAccessor(list)
		if err != nil || listMeta.GetContinue() == "" {
			return true
		}
		opts = &metainternalversion.ListOptions{Limit: dryRunPage, Continue: listMeta.GetContinue()}
	}
}

// check evaluates a CREATE of obj, as the write of it would be admitted:
// an object the policy and binding select is counted, and one the
// dispatcher refuses reported.
func (d *policyDryRun) check(ctx context.Context, res *registry.Resource, obj runtime.Object) {
	kind := res.GroupVersionKind()
	if obj.GetObjectKind().GroupVersionKind().Empty() {
		// A typed list's items are its own copies, without their kind,
		// which a created object has.
		obj.GetObjectKind().SetGroupVersionKind(kind)
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		d.report.warn(fmt.Sprintf("a %s without metadata was not checked: %v", res.GroupResource(), err))
		return
	}
	attrs, o := attributes(ctx, &registry.AdmissionRequest{
		Operation: admission.Create, Resource: res, Namespace: m.GetNamespace(), Name: m.GetName(),
		Object: obj, Options: &metav1.CreateOptions{},
	})
	matches, _, _, err := d.matcher.DefinitionMatches(attrs, o, validating.NewValidatingAdmissionPolicyAccessor(d.policy))
	if err == nil && matches {
		matches, err = d.matcher.BindingMatches(attrs, o, validating.NewValidatingAdmissionPolicyBindingAccessor(d.binding))
	}
	if err == nil && !matches {
		return
	}
	// A matching error is the dispatcher's to answer, as for the write.
	d.report.checked++
	if err := d.dispatcher.Dispatch(ctx, attrs, o, d.hooks); err != nil {
		d.report.denied(res.GroupResource(), m.GetNamespace(), m.GetName(), err)
	}
}

// dryRunReport adds a dry run's warnings.
type dryRunReport struct {
	ctx             context.Context // the request's, whose recorder takes them
	prefix          string
	checked, denies int
	named, chars    int
	timedOut        bool
}

func (r *dryRunReport) warn(msg string) {
	warning.AddWarning(r.ctx, "", r.prefix+msg)
}

// denied reports an object the binding would deny, by kube's message
// (the cause the dispatcher adds, without the Status' prefix naming the
// object, which the warning names).
func (r *dryRunReport) denied(gr schema.GroupResource, namespace, name string, err error) {
	r.denies++
	msg := err.Error()
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		if d := status.Status().Details; d != nil && len(d.Causes) > 0 {
			msg = d.Causes[len(d.Causes)-1].Message
		}
	}
	object := name
	if namespace != "" {
		object = namespace + "/" + name
	}
	text := r.prefix + fmt.Sprintf("would deny %s %s: %s", gr, object, msg)
	if r.named == r.denies-1 && r.named < dryRunMaxDenials && r.chars+len(text) <= dryRunDenialChars {
		r.named++
		r.chars += len(text)
		warning.AddWarning(r.ctx, "", text)
	}
}

func (r *dryRunReport) stopped() {
	if !r.timedOut {
		r.timedOut = true
		r.warn(fmt.Sprintf("stopped after %s", dryRunTimeout))
	}
}

// finish adds the count of the denials not named and the summary.
func (r *dryRunReport) finish(ctx context.Context) {
	if more := r.denies - r.named; more > 0 {
		r.warn(fmt.Sprintf("... and %d more", more))
	}
	if ctx.Err() != nil {
		r.stopped()
	}
	r.warn(fmt.Sprintf("checked %d objects, %d would be denied", r.checked, r.denies))
}

// namespaceSnapshot is a lister of the namespaces as read once (at most
// dryRunMaxPerResource; one not among them is read from the store when
// asked for), so that matching thousands of objects does not read each
// one's namespace again.
func (p *Policies) namespaceSnapshot(ctx context.Context) (corelisters.NamespaceLister, error) {
	byName := map[string]*corev1.Namespace{}
	opts := &metainternalversion.ListOptions{Limit: dryRunPage}
	for pages := 0; pages <= dryRunMaxPerResource/dryRunPage; pages++ {
		list, err := p.cfg.Namespaces.List(ctx, "", opts)
		if err != nil {
			return nil, fmt.Errorf("list namespaces: %w", err)
		}
		nl, ok := list.(*corev1.NamespaceList)
		if !ok {
			return nil, fmt.Errorf("list namespaces: a %T", list)
		}
		for i := range nl.Items {
			byName[nl.Items[i].Name] = &nl.Items[i]
		}
		if nl.Continue == "" {
			break
		}
		opts = &metainternalversion.ListOptions{Limit: dryRunPage, Continue: nl.Continue}
	}
	return namespaceSnapshot{byName: byName}, nil
}

type namespaceSnapshot struct {
	corelisters.NamespaceLister
	byName map[string]*corev1.Namespace
}

// Get answers NotFound for a namespace not read, which kube's matcher then
// reads itself (namespaceClient).
func (n namespaceSnapshot) Get(name string) (*corev1.Namespace, error) {
	if ns, ok := n.byName[name]; ok {
		return ns, nil
	}
	return nil, apierrors.NewNotFound(corev1.Resource("namespaces"), name)
}
