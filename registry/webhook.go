package registry

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/api/validate/content"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/matchconditions"
	"k8s.io/apiserver/pkg/cel"
	"k8s.io/apiserver/pkg/cel/environment"
	"k8s.io/apiserver/pkg/util/webhook"
	"k8s.io/utils/ptr"
)

// ValidatingWebhookConfigurations and MutatingWebhookConfigurations are
// admissionregistration.k8s.io/v1, defaulted as kube's v1 defaults and
// validated as kube's pkg/apis/admissionregistration/validation, with
// their matchConditions compiled as kube compiles them. They are stored
// only: Concord calls no admission webhook yet.
var (
	ValidatingWebhookConfigurations = &Resource{
		GroupVersion:   admissionregistrationv1.SchemeGroupVersion,
		Kind:           "ValidatingWebhookConfiguration",
		Plural:         "validatingwebhookconfigurations",
		Singular:       "validatingwebhookconfiguration",
		Categories:     []string{"api-extensions"},
		NameValidation: apivalidation.NameIsDNSSubdomain,
		New:            func() Object { return &admissionregistrationv1.ValidatingWebhookConfiguration{} },
		NewList:        func() runtime.Object { return &admissionregistrationv1.ValidatingWebhookConfigurationList{} },
		Strategy:       validatingWebhookStrategy{},
		TableColumns:   webhookColumns,
		TableCells: func(obj Object) []any {
			return []any{int64(len(obj.(*admissionregistrationv1.ValidatingWebhookConfiguration).Webhooks))}
		},
		// kube's update validation is relaxed by the stored object (rules
		// it accepted before stay accepted), so an update is only judged
		// against it.
		ValidateCreatesOnly: true,
		// kube's strategies refuse a replace without a resourceVersion.
		AllowUnconditionalUpdate: false,
	}
	MutatingWebhookConfigurations = &Resource{
		GroupVersion:   admissionregistrationv1.SchemeGroupVersion,
		Kind:           "MutatingWebhookConfiguration",
		Plural:         "mutatingwebhookconfigurations",
		Singular:       "mutatingwebhookconfiguration",
		Categories:     []string{"api-extensions"},
		NameValidation: apivalidation.NameIsDNSSubdomain,
		New:            func() Object { return &admissionregistrationv1.MutatingWebhookConfiguration{} },
		NewList:        func() runtime.Object { return &admissionregistrationv1.MutatingWebhookConfigurationList{} },
		Strategy:       mutatingWebhookStrategy{},
		TableColumns:   webhookColumns,
		TableCells: func(obj Object) []any {
			return []any{int64(len(obj.(*admissionregistrationv1.MutatingWebhookConfiguration).Webhooks))}
		},
		ValidateCreatesOnly:      true,
		AllowUnconditionalUpdate: false,
	}
)

// webhookColumns are kube's printer's, between Name and Age.
var webhookColumns = []metav1.TableColumnDefinition{
	{Name: "Webhooks", Type: "integer", Description: "Webhooks indicates the number of webhooks registered in this configuration"},
}

type (
	validatingWebhookStrategy struct{}
	mutatingWebhookStrategy   struct{}
)

var (
	_ Strategy         = validatingWebhookStrategy{}
	_ RequestDefaulter = validatingWebhookStrategy{}
	_ Strategy         = mutatingWebhookStrategy{}
	_ RequestDefaulter = mutatingWebhookStrategy{}
)

// PrepareForCreate defaults the webhooks and starts the generation at 1,
// as kube's strategy; PrepareForUpdate bumps it when the webhooks change.
func (validatingWebhookStrategy) PrepareForCreate(obj Object) {
	c := obj.(*admissionregistrationv1.ValidatingWebhookConfiguration)
	defaultValidatingWebhooks(c)
	c.Generation = 1
}

func (validatingWebhookStrategy) PrepareForUpdate(obj, old Object) {
	c, oldC := obj.(*admissionregistrationv1.ValidatingWebhookConfiguration), old.(*admissionregistrationv1.ValidatingWebhookConfiguration)
	defaultValidatingWebhooks(c)
	if !reflect.DeepEqual(c.Webhooks, oldC.Webhooks) {
		c.Generation = oldC.Generation + 1
	}
}

// DefaultRequest applies the defaults kube's decoder applies, so that the
// writer owns them in managedFields.
func (validatingWebhookStrategy) DefaultRequest(obj, _ Object) {
	defaultValidatingWebhooks(obj.(*admissionregistrationv1.ValidatingWebhookConfiguration))
}

func (validatingWebhookStrategy) Validate(obj Object) field.ErrorList {
	c := obj.(*admissionregistrationv1.ValidatingWebhookConfiguration)
	return append(validateWebhooks(validatingViews(c.Webhooks), strictWebhookRules), validateStaticSuffix(c.Name)...)
}

func (validatingWebhookStrategy) ValidateUpdate(obj, old Object) field.ErrorList {
	hooks := validatingViews(obj.(*admissionregistrationv1.ValidatingWebhookConfiguration).Webhooks)
	return validateWebhooks(hooks, webhookRulesFor(hooks, validatingViews(old.(*admissionregistrationv1.ValidatingWebhookConfiguration).Webhooks)))
}

func (mutatingWebhookStrategy) PrepareForCreate(obj Object) {
	c := obj.(*admissionregistrationv1.MutatingWebhookConfiguration)
	defaultMutatingWebhooks(c)
	c.Generation = 1
}

func (mutatingWebhookStrategy) PrepareForUpdate(obj, old Object) {
	c, oldC := obj.(*admissionregistrationv1.MutatingWebhookConfiguration), old.(*admissionregistrationv1.MutatingWebhookConfiguration)
	defaultMutatingWebhooks(c)
	if !reflect.DeepEqual(c.Webhooks, oldC.Webhooks) {
		c.Generation = oldC.Generation + 1
	}
}

func (mutatingWebhookStrategy) DefaultRequest(obj, _ Object) {
	defaultMutatingWebhooks(obj.(*admissionregistrationv1.MutatingWebhookConfiguration))
}

func (mutatingWebhookStrategy) Validate(obj Object) field.ErrorList {
	c := obj.(*admissionregistrationv1.MutatingWebhookConfiguration)
	return append(validateWebhooks(mutatingViews(c.Webhooks), strictWebhookRules), validateStaticSuffix(c.Name)...)
}

func (mutatingWebhookStrategy) ValidateUpdate(obj, old Object) field.ErrorList {
	hooks := mutatingViews(obj.(*admissionregistrationv1.MutatingWebhookConfiguration).Webhooks)
	return validateWebhooks(hooks, webhookRulesFor(hooks, mutatingViews(old.(*admissionregistrationv1.MutatingWebhookConfiguration).Webhooks)))
}

// defaultValidatingWebhooks and defaultMutatingWebhooks are kube's v1
// defaults (pkg/apis/admissionregistration/v1/defaults.go).
func defaultValidatingWebhooks(c *admissionregistrationv1.ValidatingWebhookConfiguration) {
	for i := range c.Webhooks {
		h := &c.Webhooks[i]
		defaultWebhookPolicies(&h.FailurePolicy, &h.MatchPolicy, &h.NamespaceSelector, &h.ObjectSelector, &h.TimeoutSeconds)
		defaultWebhookTarget(h.Rules, &h.ClientConfig)
	}
}

func defaultMutatingWebhooks(c *admissionregistrationv1.MutatingWebhookConfiguration) {
	for i := range c.Webhooks {
		h := &c.Webhooks[i]
		defaultWebhookPolicies(&h.FailurePolicy, &h.MatchPolicy, &h.NamespaceSelector, &h.ObjectSelector, &h.TimeoutSeconds)
		if h.ReinvocationPolicy == nil {
			h.ReinvocationPolicy = ptr.To(admissionregistrationv1.NeverReinvocationPolicy)
		}
		defaultWebhookTarget(h.Rules, &h.ClientConfig)
	}
}

func defaultWebhookPolicies(failure **admissionregistrationv1.FailurePolicyType, match **admissionregistrationv1.MatchPolicyType, namespaces, objects **metav1.LabelSelector, timeout **int32) {
	if *failure == nil {
		*failure = ptr.To(admissionregistrationv1.Fail)
	}
	if *match == nil {
		*match = ptr.To(admissionregistrationv1.Equivalent)
	}
	if *namespaces == nil {
		*namespaces = &metav1.LabelSelector{}
	}
	if *objects == nil {
		*objects = &metav1.LabelSelector{}
	}
	if *timeout == nil {
		*timeout = ptr.To(int32(10))
	}
}

func defaultWebhookTarget(rules []admissionregistrationv1.RuleWithOperations, cc *admissionregistrationv1.WebhookClientConfig) {
	for i := range rules {
		if rules[i].Scope == nil {
			rules[i].Scope = ptr.To(admissionregistrationv1.AllScopes)
		}
	}
	if cc.Service != nil && cc.Service.Port == nil {
		cc.Service.Port = ptr.To(int32(443))
	}
}

// webhookView is what a validating and a mutating webhook have in common,
// so that one validation serves both kinds; reinvocationPolicy is the
// mutating webhook's only.
type webhookView struct {
	name                    string
	clientConfig            admissionregistrationv1.WebhookClientConfig
	rules                   []admissionregistrationv1.RuleWithOperations
	failurePolicy           *admissionregistrationv1.FailurePolicyType
	matchPolicy             *admissionregistrationv1.MatchPolicyType
	namespaceSelector       *metav1.LabelSelector
	objectSelector          *metav1.LabelSelector
	sideEffects             *admissionregistrationv1.SideEffectClass
	timeoutSeconds          *int32
	admissionReviewVersions []string
	matchConditions         []admissionregistrationv1.MatchCondition
	reinvocationPolicy      *admissionregistrationv1.ReinvocationPolicyType
}

func validatingViews(hooks []admissionregistrationv1.ValidatingWebhook) []webhookView {
	views := make([]webhookView, len(hooks))
	for i, h := range hooks {
		views[i] = webhookView{h.Name, h.ClientConfig, h.Rules, h.FailurePolicy, h.MatchPolicy, h.NamespaceSelector, h.ObjectSelector, h.SideEffects, h.TimeoutSeconds, h.AdmissionReviewVersions, h.MatchConditions, nil}
	}
	return views
}

func mutatingViews(hooks []admissionregistrationv1.MutatingWebhook) []webhookView {
	views := make([]webhookView, len(hooks))
	for i, h := range hooks {
		views[i] = webhookView{h.Name, h.ClientConfig, h.Rules, h.FailurePolicy, h.MatchPolicy, h.NamespaceSelector, h.ObjectSelector, h.SideEffects, h.TimeoutSeconds, h.AdmissionReviewVersions, h.MatchConditions, h.ReinvocationPolicy}
	}
	return views
}

// webhookRules are kube's validationOptions: what a create must meet, and
// what an update need not meet when the stored object did not.
type webhookRules struct {
	requireNoSideEffects                    bool
	requireRecognizedAdmissionReviewVersion bool
	requireUniqueWebhookNames               bool
	allowInvalidLabelValueInSelector        bool
	// ignoreMatchConditions: they are as stored, and not checked again.
	ignoreMatchConditions bool
	// storedExpressions are the stored matchConditions' expressions, which
	// compile in CEL's stored-expressions environment, as kube's: it has
	// the libraries too new for a new expression at the compatibility
	// version, so that a server rolled back still reads them.
	storedExpressions sets.Set[string]
}

var strictWebhookRules = webhookRules{requireNoSideEffects: true, requireRecognizedAdmissionReviewVersion: true, requireUniqueWebhookNames: true}

// webhookRulesFor are kube's rules for an update of old to hooks: each
// strict rule holds only if old met it.
func webhookRulesFor(hooks, old []webhookView) webhookRules {
	r := webhookRules{
		requireNoSideEffects:                    true,
		requireRecognizedAdmissionReviewVersion: true,
		requireUniqueWebhookNames:               true,
		ignoreMatchConditions:                   len(hooks) == len(old),
		storedExpressions:                       sets.New[string](),
	}
	names := sets.New[string]()
	for i, h := range old {
		if h.sideEffects == nil || !noSideEffectClasses.Has(string(*h.sideEffects)) {
			r.requireNoSideEffects = false
		}
		if len(h.admissionReviewVersions) > 0 && !hasAcceptedAdmissionReviewVersion(h.admissionReviewVersions) {
			r.requireRecognizedAdmissionReviewVersion = false
		}
		if names.Has(h.name) {
			r.requireUniqueWebhookNames = false
		}
		names.Insert(h.name)
		strict := metav1validation.LabelSelectorValidationOptions{}
		for _, sel := range []*metav1.LabelSelector{h.namespaceSelector, h.objectSelector} {
			if sel != nil && len(metav1validation.ValidateLabelSelector(sel, strict, nil)) > 0 {
				r.allowInvalidLabelValueInSelector = true
			}
		}
		if r.ignoreMatchConditions && !reflect.DeepEqual(hooks[i].matchConditions, h.matchConditions) {
			r.ignoreMatchConditions = false
		}
		for _, mc := range h.matchConditions {
			r.storedExpressions.Insert(mc.Expression)
		}
	}
	return r
}

func hasAcceptedAdmissionReviewVersion(versions []string) bool {
	return slices.ContainsFunc(versions, func(v string) bool { return slices.Contains(acceptedAdmissionReviewVersions, v) })
}

var (
	// acceptedAdmissionReviewVersions are the AdmissionReview versions kube
	// can send a webhook, in kube's order (its messages list them so).
	acceptedAdmissionReviewVersions = []string{"v1", "v1beta1"}
	supportedFailurePolicies        = sets.New(string(admissionregistrationv1.Ignore), string(admissionregistrationv1.Fail))
	supportedMatchPolicies          = sets.New(string(admissionregistrationv1.Exact), string(admissionregistrationv1.Equivalent))
	supportedSideEffectClasses      = sets.New(
		string(admissionregistrationv1.SideEffectClassUnknown),
		string(admissionregistrationv1.SideEffectClassNone),
		string(admissionregistrationv1.SideEffectClassSome),
		string(admissionregistrationv1.SideEffectClassNoneOnDryRun),
	)
	noSideEffectClasses = sets.New(string(admissionregistrationv1.SideEffectClassNone), string(admissionregistrationv1.SideEffectClassNoneOnDryRun))
	supportedOperations = sets.New(
		string(admissionregistrationv1.OperationAll),
		string(admissionregistrationv1.Create),
		string(admissionregistrationv1.Update),
		string(admissionregistrationv1.Delete),
		string(admissionregistrationv1.Connect),
	)
	supportedReinvocationPolicies = sets.New(string(admissionregistrationv1.NeverReinvocationPolicy), string(admissionregistrationv1.IfNeededReinvocationPolicy))
	supportedScopes               = sets.New(string(admissionregistrationv1.ClusterScope), string(admissionregistrationv1.NamespacedScope), string(admissionregistrationv1.AllScopes))
)

// validateWebhooks is kube's validateValidatingWebhookConfiguration and
// validateMutatingWebhookConfiguration beyond the object meta, which the
// store checks: each webhook, its admissionReviewVersions, then the
// uniqueness of its name, in kube's order.
func validateWebhooks(hooks []webhookView, rules webhookRules) field.ErrorList {
	var errs field.ErrorList
	names := sets.New[string]()
	for i, h := range hooks {
		p := field.NewPath("webhooks").Index(i)
		errs = append(errs, validateWebhook(h, rules, p)...)
		errs = append(errs, validateAdmissionReviewVersions(h.admissionReviewVersions, rules.requireRecognizedAdmissionReviewVersion, p.Child("admissionReviewVersions"))...)
		if rules.requireUniqueWebhookNames && h.name != "" {
			if names.Has(h.name) {
				errs = append(errs, field.Duplicate(p.Child("name"), h.name))
			}
			names.Insert(h.name)
		}
	}
	return errs
}

func validateWebhook(h webhookView, rules webhookRules, p *field.Path) field.ErrorList {
	// The name is a fully qualified domain name (three segments at least).
	errs := utilvalidation.IsFullyQualifiedName(p.Child("name"), h.name)
	for i, rule := range h.rules {
		errs = append(errs, validateRuleWithOperations(rule, p.Child("rules").Index(i))...)
	}
	if h.failurePolicy != nil && !supportedFailurePolicies.Has(string(*h.failurePolicy)) {
		errs = append(errs, field.NotSupported(p.Child("failurePolicy"), *h.failurePolicy, sets.List(supportedFailurePolicies)))
	}
	if h.matchPolicy != nil && !supportedMatchPolicies.Has(string(*h.matchPolicy)) {
		errs = append(errs, field.NotSupported(p.Child("matchPolicy"), *h.matchPolicy, sets.List(supportedMatchPolicies)))
	}
	// v1 refuses Unknown and Some on create, and on an update of an object
	// whose webhooks all had no side effects.
	sideEffects := supportedSideEffectClasses
	if rules.requireNoSideEffects {
		sideEffects = noSideEffectClasses
	}
	switch {
	case h.sideEffects == nil:
		errs = append(errs, field.Required(p.Child("sideEffects"), "must specify one of "+strings.Join(sets.List(sideEffects), ", ")))
	case !sideEffects.Has(string(*h.sideEffects)):
		errs = append(errs, field.NotSupported(p.Child("sideEffects"), *h.sideEffects, sets.List(sideEffects)))
	}
	if h.timeoutSeconds != nil && (*h.timeoutSeconds > 30 || *h.timeoutSeconds < 1) {
		errs = append(errs, field.Invalid(p.Child("timeoutSeconds"), *h.timeoutSeconds, "the timeout value must be between 1 and 30 seconds"))
	}
	selectors := metav1validation.LabelSelectorValidationOptions{AllowInvalidLabelValueInSelector: rules.allowInvalidLabelValueInSelector}
	if h.namespaceSelector != nil {
		errs = append(errs, metav1validation.ValidateLabelSelector(h.namespaceSelector, selectors, p.Child("namespaceSelector"))...)
	}
	if h.objectSelector != nil {
		errs = append(errs, metav1validation.ValidateLabelSelector(h.objectSelector, selectors, p.Child("objectSelector"))...)
	}
	if h.reinvocationPolicy != nil && !supportedReinvocationPolicies.Has(string(*h.reinvocationPolicy)) {
		errs = append(errs, field.NotSupported(p.Child("reinvocationPolicy"), *h.reinvocationPolicy, sets.List(supportedReinvocationPolicies)))
	}
	errs = append(errs, validateClientConfig(h.clientConfig, p.Child("clientConfig"))...)
	if !rules.ignoreMatchConditions {
		errs = append(errs, validateMatchConditions(h.matchConditions, rules.storedExpressions, false, p.Child("matchConditions"))...)
	}
	return errs
}

// validateClientConfig is kube's, but for the service's name and namespace:
// kube passes them to ValidateWebhookService swapped and names the other
// field when one is missing (kubernetes/kubernetes#141353); Concord names
// the missing one.
func validateClientConfig(cc admissionregistrationv1.WebhookClientConfig, p *field.Path) field.ErrorList {
	switch {
	case (cc.URL == nil) == (cc.Service == nil):
		return field.ErrorList{field.Required(p, "exactly one of url or service is required")}
	case cc.URL != nil:
		return webhook.ValidateWebhookURL(p.Child("url"), *cc.URL, true)
	default:
		port := int32(443) // the default, which the strategy has set
		if cc.Service.Port != nil {
			port = *cc.Service.Port
		}
		return webhook.ValidateWebhookService(p.Child("service"), cc.Service.Namespace, cc.Service.Name, cc.Service.Path, port)
	}
}

func validateAdmissionReviewVersions(versions []string, requireRecognized bool, p *field.Path) field.ErrorList {
	if len(versions) == 0 {
		return field.ErrorList{field.Required(p, "must specify one of "+strings.Join(acceptedAdmissionReviewVersions, ", "))}
	}
	var errs field.ErrorList
	seen := sets.New[string]()
	for i, v := range versions {
		if seen.Has(v) {
			errs = append(errs, field.Invalid(p.Index(i), v, "duplicate version"))
			continue
		}
		seen.Insert(v)
		for _, msg := range utilvalidation.IsDNS1035Label(v) {
			errs = append(errs, field.Invalid(p.Index(i), v, msg))
		}
	}
	if requireRecognized && !hasAcceptedAdmissionReviewVersion(versions) {
		errs = append(errs, field.Invalid(p, versions, "must include at least one of "+strings.Join(acceptedAdmissionReviewVersions, ", ")))
	}
	return errs
}

func validateRuleWithOperations(rule admissionregistrationv1.RuleWithOperations, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	ops := p.Child("operations")
	if len(rule.Operations) == 0 {
		errs = append(errs, field.Required(ops, ""))
	}
	if len(rule.Operations) > 1 && hasWildcard(rule.Operations) {
		errs = append(errs, field.Invalid(ops, rule.Operations, "if '*' is present, must not specify other operations"))
	}
	for i, op := range rule.Operations {
		if !supportedOperations.Has(string(op)) {
			errs = append(errs, field.NotSupported(ops.Index(i), op, sets.List(supportedOperations)))
		}
	}
	if len(rule.APIGroups) == 0 {
		errs = append(errs, field.Required(p.Child("apiGroups"), ""))
	}
	if len(rule.APIGroups) > 1 && hasWildcard(rule.APIGroups) {
		errs = append(errs, field.Invalid(p.Child("apiGroups"), rule.APIGroups, "if '*' is present, must not specify other API groups"))
	}
	// A group may be empty (the core group); a version may not.
	if len(rule.APIVersions) == 0 {
		errs = append(errs, field.Required(p.Child("apiVersions"), ""))
	}
	if len(rule.APIVersions) > 1 && hasWildcard(rule.APIVersions) {
		errs = append(errs, field.Invalid(p.Child("apiVersions"), rule.APIVersions, "if '*' is present, must not specify other API versions"))
	}
	for i, v := range rule.APIVersions {
		if v == "" {
			errs = append(errs, field.Required(p.Child("apiVersions").Index(i), ""))
		}
	}
	errs = append(errs, validateRuleResources(rule.Resources, p.Child("resources"))...)
	if rule.Scope != nil && !supportedScopes.Has(string(*rule.Scope)) {
		errs = append(errs, field.NotSupported(p.Child("scope"), *rule.Scope, sets.List(supportedScopes)))
	}
	return errs
}

func hasWildcard[T ~string](values []T) bool { return slices.Contains(values, "*") }

// validateRuleResources is kube's validateResources: resources and
// subresources ("pods/status"), whose wildcards may not overlap what else
// is listed.
func validateRuleResources(resources []string, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if len(resources) == 0 {
		errs = append(errs, field.Required(p, ""))
	}
	wildSub := sets.New[string]()      // x/*
	wildResource := sets.New[string]() // */x
	doubleWildcard, singleWildcard, withoutSubresource := false, false, false
	for i, rs := range resources {
		if rs == "" {
			errs = append(errs, field.Required(p.Index(i), ""))
			continue
		}
		doubleWildcard = doubleWildcard || rs == "*/*"
		singleWildcard = singleWildcard || rs == "*"
		res, sub, ok := strings.Cut(rs, "/")
		if !ok {
			// kube's: only the last resource without a subresource counts.
			withoutSubresource = rs != "*"
			continue
		}
		if wildSub.Has(res) {
			errs = append(errs, field.Invalid(p.Index(i), rs, fmt.Sprintf("if '%s/*' is present, must not specify %s", res, rs)))
		}
		if wildResource.Has(sub) {
			errs = append(errs, field.Invalid(p.Index(i), rs, fmt.Sprintf("if '*/%s' is present, must not specify %s", sub, rs)))
		}
		if sub == "*" {
			wildSub.Insert(res)
		}
		if res == "*" {
			wildResource.Insert(sub)
		}
	}
	if len(resources) > 1 && doubleWildcard {
		errs = append(errs, field.Invalid(p, resources, "if '*/*' is present, must not specify other resources"))
	}
	if singleWildcard && withoutSubresource {
		errs = append(errs, field.Invalid(p, resources, "if '*' is present, must not specify other resources without subresources"))
	}
	return errs
}

// maxMatchConditions is kube's limit per webhook.
const maxMatchConditions = 64

// validateMatchConditions is kube's, for webhooks and policies: a policy
// with a paramKind has params in its conditions (hasParams).
func validateMatchConditions(conditions []admissionregistrationv1.MatchCondition, stored sets.Set[string], hasParams bool, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if len(conditions) > maxMatchConditions {
		errs = append(errs, field.TooMany(p, len(conditions), maxMatchConditions))
	}
	names := sets.New[string]()
	for i, mc := range conditions {
		ip := p.Index(i)
		if expr := strings.TrimSpace(mc.Expression); expr == "" {
			errs = append(errs, field.Required(ip.Child("expression"), ""))
		} else {
			errs = append(errs, compileMatchCondition(expr, stored.Has(expr), hasParams, ip.Child("expression"))...)
		}
		if mc.Name == "" {
			errs = append(errs, field.Required(ip.Child("name"), ""))
			continue
		}
		// A qualified name, as a label key.
		for _, msg := range content.IsLabelKey(mc.Name) {
			errs = append(errs, field.Invalid(ip.Child("name"), mc.Name, msg))
		}
		if names.Has(mc.Name) {
			errs = append(errs, field.Duplicate(ip.Child("name"), mc.Name))
		}
		names.Insert(mc.Name)
	}
	return errs
}

// statelessCELCompiler is kube's stateless compiler of match conditions and
// of the expressions of a policy without variables, at the default
// compatibility version, made at its first use.
var statelessCELCompiler = sync.OnceValue(func() plugincel.Compiler {
	return plugincel.NewCompiler(environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()))
})

// compileMatchCondition is kube's validateMatchConditionsExpression: the
// expression must compile to a bool with the request, object, oldObject
// and authorizer variables (and params, with hasParams); one already
// stored compiles in the stored environment.
func compileMatchCondition(expr string, stored, hasParams bool, p *field.Path) field.ErrorList {
	accessor := &matchconditions.MatchCondition{Expression: expr}
	return compileCEL(statelessCELCompiler(), accessor, plugincel.OptionalVariableDeclarations{HasParams: hasParams, HasAuthorizer: true}, stored, p)
}

// compileCEL compiles an expression as kube's validateCELCondition does
// (in the stored environment when it is already stored) and reports its
// error as kube's convertCELErrorToValidationError.
func compileCEL(c plugincel.Compiler, accessor plugincel.ExpressionAccessor, decls plugincel.OptionalVariableDeclarations, stored bool, p *field.Path) field.ErrorList {
	envType := environment.NewExpressions
	if stored {
		envType = environment.StoredExpressions
	}
	result := c.CompileCELExpression(accessor, decls, envType)
	if result.Error == nil {
		return nil
	}
	return field.ErrorList{celFieldError(p, accessor.GetExpression(), result.Error)}
}

// celFieldError is kube's convertCELErrorToValidationError.
func celFieldError(p *field.Path, expr string, err *cel.Error) *field.Error {
	switch err.Type {
	case cel.ErrorTypeRequired:
		return field.Required(p, err.Detail)
	case cel.ErrorTypeInvalid:
		return field.Invalid(p, expr, err.Detail)
	case cel.ErrorTypeInternal:
		return field.InternalError(p, err)
	default:
		return field.InternalError(p, fmt.Errorf("unsupported error type: %w", err))
	}
}

// staticConfigSuffix ends the names kube 1.37 reserves for the admission
// configurations it loads from files (ManifestBasedAdmissionControlConfig,
// beta and on): they cannot be created through the API.
const staticConfigSuffix = ".static.k8s.io"

func validateStaticSuffix(name string) field.ErrorList {
	if strings.HasSuffix(name, staticConfigSuffix) {
		return field.ErrorList{field.Invalid(field.NewPath("metadata", "name"), name,
			fmt.Sprintf("names ending with %q are reserved for static manifest-based configurations and cannot be managed via the API", staticConfigSuffix))}
	}
	return nil
}
