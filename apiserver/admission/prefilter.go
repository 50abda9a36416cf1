package admission

import (
	"strings"
	"sync"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/admission/plugin/policy/generic"
)

// A fast path in front of kube's policy matcher: kube's dispatcher asks its
// matcher about every bound policy on every write (parsing two label
// selectors and walking the rules each time), so 100 policies for other
// resources cost a write about 70 µs. A policy none of whose
// matchConstraints.resourceRules names the written resource, or "*",
// matches none of its writes, whatever its selectors and exclusions say
// (kube's rules.Matcher: a rule's resource "res/sub" matches a request
// whose resource is res, or any when res is "*"); such hooks are left out
// before kube's dispatcher runs. Everything else — the rules' groups,
// versions, operations, scope and subresources, the selectors, the
// exclusions, the bindings — is kube's to decide. A request whose resource
// has equivalents (matchPolicy Equivalent may then match another resource's
// rules) is given every hook. prefilter_test.go proves the hooks left out
// are never matched by kube's matcher (a differential test and a fuzz
// target).

// resourceFilter is what the fast path knows of one policy: the resources
// its rules name, or that they may name any.
type resourceFilter struct {
	any       bool
	resources map[string]bool
}

func filterOf(constraints *admissionregistrationv1.MatchResources) resourceFilter {
	if constraints == nil || len(constraints.ResourceRules) == 0 {
		return resourceFilter{any: true} // kube matches every resource then
	}
	f := resourceFilter{resources: map[string]bool{}}
	for _, rule := range constraints.ResourceRules {
		for _, r := range rule.Resources {
			res, _, _ := strings.Cut(r, "/")
			if res == "*" {
				return resourceFilter{any: true}
			}
			f.resources[res] = true
		}
	}
	return f
}

func (f resourceFilter) mayMatch(resource string) bool { return f.any || f.resources[resource] }

// filteredHooks are a state's hooks of one kind, and those that may match
// each resource, in their order, built on first use.
type filteredHooks[P, B runtime.Object, E generic.Evaluator] struct {
	all     []generic.PolicyHook[P, B, E]
	filters []resourceFilter
	// byResource are the hooks by resource, each built when first asked
	// for; never changed once stored.
	byResource sync.Map
}

func (h *filteredHooks[P, B, E]) add(hook generic.PolicyHook[P, B, E], f resourceFilter) {
	h.all = append(h.all, hook)
	h.filters = append(h.filters, f)
}

// forRequest are the hooks kube's matcher may match a request with.
func (h *filteredHooks[P, B, E]) forRequest(attrs admission.Attributes, o admission.ObjectInterfaces) []generic.PolicyHook[P, B, E] {
	if len(h.all) == 0 {
		return nil
	}
	gvr := attrs.GetResource()
	if m := o.GetEquivalentResourceMapper(); m != nil && len(m.EquivalentResourcesFor(gvr, attrs.GetSubresource())) > 0 {
		return h.all
	}
	if hooks, ok := h.byResource.Load(gvr.Resource); ok {
		return hooks.([]generic.PolicyHook[P, B, E])
	}
	var hooks []generic.PolicyHook[P, B, E]
	for i, hook := range h.all {
		if h.filters[i].mayMatch(gvr.Resource) {
			hooks = append(hooks, hook)
		}
	}
	h.byResource.Store(gvr.Resource, hooks)
	return hooks
}
