package registry

import (
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/api/validate/content"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/api/validation/path"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/policy/mutating/patch"
	"k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	"k8s.io/apiserver/pkg/cel/environment"
	"k8s.io/client-go/util/jsonpath"
	"k8s.io/utils/ptr"

	"github.com/concord-dev/concord/etcdstore"
)

// AdmissionPolicyStoragePrefix is the part of the etcd keys of the four
// admission policy resources: <prefix>/admissionregistration.k8s.io/<plural>/<name>,
// so that one etcd watch sees every change to them and to
// AdmissionPolicyGeneration (apiserver/admission's policy view). kube keys
// them /registry/<plural>/...; no client sees the difference.
const AdmissionPolicyStoragePrefix = admissionregistrationv1.GroupName

// AdmissionPolicyGeneration is the key every write of the four policy
// resources puts in its own transaction (etcdstore.Options.Bump:
// AdmissionPolicyBump): its ModRevision is the revision of the last change
// to them, the guard of a write admitted on a view that may be behind.
var AdmissionPolicyGeneration = etcdstore.Ref{Resource: AdmissionPolicyStoragePrefix, Name: "generation"}

// AdmissionPolicyBump is the etcdstore.Options.Bump of the policy resources.
func AdmissionPolicyBump() map[string]etcdstore.Ref {
	m := map[string]etcdstore.Ref{}
	for _, r := range AdmissionPolicyResources {
		m[r.storagePrefix()] = AdmissionPolicyGeneration
	}
	return m
}

// ValidatingAdmissionPolicies, ValidatingAdmissionPolicyBindings,
// MutatingAdmissionPolicies and MutatingAdmissionPolicyBindings are
// admissionregistration.k8s.io/v1, the CEL admission policies every write
// is admitted by (apiserver/admission), defaulted as kube's v1 defaults and
// validated as kube's pkg/apis/admissionregistration/validation, their CEL
// compiled as kube compiles it. A ValidatingAdmissionPolicy has a status
// subresource (its type checking, written by
// controller/admissionpolicystatus); a MutatingAdmissionPolicy has none,
// as in kube 1.37. kube's strategies refuse a replace without a
// resourceVersion and a replace of a missing object; their update
// validation is relaxed by the stored object (expressions it holds compile
// in the stored environment), so an update is judged against it only.
var (
	ValidatingAdmissionPolicies = &Resource{
		GroupVersion:   admissionregistrationv1.SchemeGroupVersion,
		Kind:           "ValidatingAdmissionPolicy",
		Plural:         "validatingadmissionpolicies",
		Singular:       "validatingadmissionpolicy",
		StoragePrefix:  AdmissionPolicyStoragePrefix + "/validatingadmissionpolicies",
		Categories:     []string{"api-extensions"},
		NameValidation: apivalidation.NameIsDNSSubdomain,
		New:            func() Object { return &admissionregistrationv1.ValidatingAdmissionPolicy{} },
		NewList:        func() runtime.Object { return &admissionregistrationv1.ValidatingAdmissionPolicyList{} },
		Strategy:       validatingPolicyStrategy{},
		StatusStrategy: validatingPolicyStatusStrategy{},
		TableColumns: []metav1.TableColumnDefinition{
			{Name: "Validations", Type: "integer", Description: "Validations indicates the number of validation rules defined in this configuration"},
			paramKindColumn,
		},
		TableCells: func(obj Object) []any {
			p := obj.(*admissionregistrationv1.ValidatingAdmissionPolicy)
			return []any{int64(len(p.Spec.Validations)), paramKindCell(p.Spec.ParamKind)}
		},
		ResetFields:         []string{"status"},
		StatusResetFields:   []string{"spec"},
		ValidateCreatesOnly: true,
	}
	ValidatingAdmissionPolicyBindings = &Resource{
		GroupVersion:   admissionregistrationv1.SchemeGroupVersion,
		Kind:           "ValidatingAdmissionPolicyBinding",
		Plural:         "validatingadmissionpolicybindings",
		Singular:       "validatingadmissionpolicybinding",
		StoragePrefix:  AdmissionPolicyStoragePrefix + "/validatingadmissionpolicybindings",
		Categories:     []string{"api-extensions"},
		NameValidation: apivalidation.NameIsDNSSubdomain,
		New:            func() Object { return &admissionregistrationv1.ValidatingAdmissionPolicyBinding{} },
		NewList:        func() runtime.Object { return &admissionregistrationv1.ValidatingAdmissionPolicyBindingList{} },
		Strategy:       policyBindingStrategy{},
		TableColumns:   policyBindingColumns,
		TableCells: func(obj Object) []any {
			b := obj.(*admissionregistrationv1.ValidatingAdmissionPolicyBinding)
			return []any{b.Spec.PolicyName, paramRefCell(b.Spec.ParamRef)}
		},
		ValidateCreatesOnly: true,
	}
	MutatingAdmissionPolicies = &Resource{
		GroupVersion:   admissionregistrationv1.SchemeGroupVersion,
		Kind:           "MutatingAdmissionPolicy",
		Plural:         "mutatingadmissionpolicies",
		Singular:       "mutatingadmissionpolicy",
		StoragePrefix:  AdmissionPolicyStoragePrefix + "/mutatingadmissionpolicies",
		Categories:     []string{"api-extensions"},
		NameValidation: apivalidation.NameIsDNSSubdomain,
		New:            func() Object { return &admissionregistrationv1.MutatingAdmissionPolicy{} },
		NewList:        func() runtime.Object { return &admissionregistrationv1.MutatingAdmissionPolicyList{} },
		Strategy:       mutatingPolicyStrategy{},
		TableColumns: []metav1.TableColumnDefinition{
			{Name: "Mutations", Type: "integer", Description: "Mutation indicates the number of mutations rules defined in this configuration"},
			paramKindColumn,
		},
		TableCells: func(obj Object) []any {
			p := obj.(*admissionregistrationv1.MutatingAdmissionPolicy)
			return []any{int64(len(p.Spec.Mutations)), paramKindCell(p.Spec.ParamKind)}
		},
		ValidateCreatesOnly: true,
	}
	MutatingAdmissionPolicyBindings = &Resource{
		GroupVersion:   admissionregistrationv1.SchemeGroupVersion,
		Kind:           "MutatingAdmissionPolicyBinding",
		Plural:         "mutatingadmissionpolicybindings",
		Singular:       "mutatingadmissionpolicybinding",
		StoragePrefix:  AdmissionPolicyStoragePrefix + "/mutatingadmissionpolicybindings",
		Categories:     []string{"api-extensions"},
		NameValidation: apivalidation.NameIsDNSSubdomain,
		New:            func() Object { return &admissionregistrationv1.MutatingAdmissionPolicyBinding{} },
		NewList:        func() runtime.Object { return &admissionregistrationv1.MutatingAdmissionPolicyBindingList{} },
		Strategy:       policyBindingStrategy{},
		TableColumns:   policyBindingColumns,
		TableCells: func(obj Object) []any {
			b := obj.(*admissionregistrationv1.MutatingAdmissionPolicyBinding)
			return []any{b.Spec.PolicyName, paramRefCell(b.Spec.ParamRef)}
		},
		ValidateCreatesOnly: true,
	}
)

// AdmissionPolicyResources are the four policy resources.
var AdmissionPolicyResources = []*Resource{ValidatingAdmissionPolicies, ValidatingAdmissionPolicyBindings, MutatingAdmissionPolicies, MutatingAdmissionPolicyBindings}

// The columns of kube's printers, between Name and Age (their
// descriptions' typos are kube's).
var (
	paramKindColumn      = metav1.TableColumnDefinition{Name: "ParamKind", Type: "string", Description: "ParamKind specifies the kind of resources used to parameterize this policy"}
	policyBindingColumns = []metav1.TableColumnDefinition{
		{Name: "PolicyName", Type: "string", Description: "PolicyName indicates the policy definition which the policy binding binded to"},
		{Name: "ParamRef", Type: "string", Description: "ParamRef indicates the param resource which sets the configration param"},
	}
)

func paramKindCell(k *admissionregistrationv1.ParamKind) string {
	if k == nil {
		return "<unset>"
	}
	return k.APIVersion + "/" + k.Kind
}

// paramRefCell is kube's: a named param without a namespace is "*/name",
// as the printer cannot tell whether the param kind is namespaced.
func paramRefCell(r *admissionregistrationv1.ParamRef) string {
	switch {
	case r == nil:
		return "<unset>"
	case r.Name != "" && r.Namespace != "":
		return r.Namespace + "/" + r.Name
	case r.Name != "":
		return "*/" + r.Name
	case r.Selector != nil:
		return r.Selector.String()
	default:
		return "<unset>"
	}
}

type (
	validatingPolicyStrategy       struct{}
	validatingPolicyStatusStrategy struct{}
	mutatingPolicyStrategy         struct{}
	policyBindingStrategy          struct{}
)

var (
	_ Strategy         = validatingPolicyStrategy{}
	_ RequestDefaulter = validatingPolicyStrategy{}
	_ UpdateStrategy   = validatingPolicyStatusStrategy{}
	_ Strategy         = mutatingPolicyStrategy{}
	_ RequestDefaulter = mutatingPolicyStrategy{}
	_ Strategy         = policyBindingStrategy{}
	_ RequestDefaulter = policyBindingStrategy{}
)

// PrepareForCreate defaults the spec, starts the generation at 1 and drops
// a status, as kube's strategy; PrepareForUpdate keeps the stored status
// and bumps the generation when the spec changes.
func (validatingPolicyStrategy) PrepareForCreate(obj Object) {
	p := obj.(*admissionregistrationv1.ValidatingAdmissionPolicy)
	defaultValidatingPolicy(p)
	p.Status = admissionregistrationv1.ValidatingAdmissionPolicyStatus{}
	p.Generation = 1
}

func (validatingPolicyStrategy) PrepareForUpdate(obj, old Object) {
	p, oldP := obj.(*admissionregistrationv1.ValidatingAdmissionPolicy), old.(*admissionregistrationv1.ValidatingAdmissionPolicy)
	defaultValidatingPolicy(p)
	p.Status = oldP.Status
	if !reflect.DeepEqual(p.Spec, oldP.Spec) {
		p.Generation = oldP.Generation + 1
	}
}

// DefaultRequest applies the defaults kube's decoder applies, so that the
// writer owns them in managedFields.
func (validatingPolicyStrategy) DefaultRequest(obj, _ Object) {
	defaultValidatingPolicy(obj.(*admissionregistrationv1.ValidatingAdmissionPolicy))
}

func (validatingPolicyStrategy) Validate(obj Object) field.ErrorList {
	p := obj.(*admissionregistrationv1.ValidatingAdmissionPolicy)
	return append(validateValidatingPolicySpec(p.Name, &p.Spec, policyRules{}, field.NewPath("spec")), validateStaticSuffix(p.Name)...)
}

// ValidateUpdate is kube's ValidateValidatingAdmissionPolicyUpdate: the
// matchConditions are not checked again while they and the paramKind are
// as stored, and the stored expressions compile in the stored environment.
func (validatingPolicyStrategy) ValidateUpdate(obj, old Object) field.ErrorList {
	p, oldP := obj.(*admissionregistrationv1.ValidatingAdmissionPolicy), old.(*admissionregistrationv1.ValidatingAdmissionPolicy)
	rules := policyRules{
		ignoreMatchConditions: reflect.DeepEqual(p.Spec.ParamKind, oldP.Spec.ParamKind) && reflect.DeepEqual(p.Spec.MatchConditions, oldP.Spec.MatchConditions),
		matchConditions:       sets.New[string](),
		validations:           sets.New[string](),
		messageExpressions:    sets.New[string](),
		auditAnnotations:      sets.New[string](),
	}
	for _, mc := range oldP.Spec.MatchConditions {
		rules.matchConditions.Insert(mc.Expression)
	}
	for _, v := range oldP.Spec.Validations {
		rules.validations.Insert(v.Expression)
		if v.MessageExpression != "" {
			rules.messageExpressions.Insert(v.MessageExpression)
		}
	}
	for _, a := range oldP.Spec.AuditAnnotations {
		rules.auditAnnotations.Insert(a.ValueExpression)
	}
	return validateValidatingPolicySpec(p.Name, &p.Spec, rules, field.NewPath("spec"))
}

// PrepareForUpdate of the status keeps the stored spec and metadata; the
// generation stays.
func (validatingPolicyStatusStrategy) PrepareForUpdate(obj, old Object) {
	p, oldP := obj.(*admissionregistrationv1.ValidatingAdmissionPolicy), old.(*admissionregistrationv1.ValidatingAdmissionPolicy)
	p.Spec = *oldP.Spec.DeepCopy()
	metav1.ResetObjectMetaForStatus(&p.ObjectMeta, oldP.ObjectMeta.DeepCopy())
}

// ValidateUpdate is kube's ValidateValidatingAdmissionPolicyStatusUpdate:
// the type checking's warnings and the conditions.
func (validatingPolicyStatusStrategy) ValidateUpdate(obj, _ Object) field.ErrorList {
	status := obj.(*admissionregistrationv1.ValidatingAdmissionPolicy).Status
	p := field.NewPath("status")
	var errs field.ErrorList
	if status.TypeChecking != nil {
		wp := p.Child("typeChecking", "expressionWarnings")
		for i, w := range status.TypeChecking.ExpressionWarnings {
			if w.Warning == "" {
				errs = append(errs, field.Required(wp.Index(i).Child("warning"), ""))
			}
			errs = append(errs, validateFieldRef(w.FieldRef, wp.Index(i).Child("fieldRef"))...)
		}
	}
	return append(errs, metav1validation.ValidateConditions(status.Conditions, p.Child("conditions"))...)
}

// validateFieldRef is kube's: a JSONPath, checked no further so that an
// upgrade or a rollback keeps what the other version wrote.
func validateFieldRef(ref string, p *field.Path) field.ErrorList {
	ref = strings.TrimSpace(ref)
	if ref == "" {
		return field.ErrorList{field.Required(p, "")}
	}
	if err := jsonpath.New("spec").Parse(fmt.Sprintf("{%s}", ref)); err != nil {
		return field.ErrorList{field.Invalid(p, ref, fmt.Sprintf("invalid JSONPath: %v", err))}
	}
	return nil
}

func (mutatingPolicyStrategy) PrepareForCreate(obj Object) {
	p := obj.(*admissionregistrationv1.MutatingAdmissionPolicy)
	defaultMutatingPolicy(p)
	p.Generation = 1
}

func (mutatingPolicyStrategy) PrepareForUpdate(obj, old Object) {
	p, oldP := obj.(*admissionregistrationv1.MutatingAdmissionPolicy), old.(*admissionregistrationv1.MutatingAdmissionPolicy)
	defaultMutatingPolicy(p)
	if !reflect.DeepEqual(p.Spec, oldP.Spec) {
		p.Generation = oldP.Generation + 1
	}
}

func (mutatingPolicyStrategy) DefaultRequest(obj, _ Object) {
	defaultMutatingPolicy(obj.(*admissionregistrationv1.MutatingAdmissionPolicy))
}

func (mutatingPolicyStrategy) Validate(obj Object) field.ErrorList {
	p := obj.(*admissionregistrationv1.MutatingAdmissionPolicy)
	return append(validateMutatingPolicySpec(&p.Spec, policyRules{}, field.NewPath("spec")), validateStaticSuffix(p.Name)...)
}

// ValidateUpdate relaxes the rules by the stored policy as the validating
// policy's: its matchConditions are not checked again while they and the
// paramKind are as stored, and its stored expressions compile in the
// stored environment.
func (mutatingPolicyStrategy) ValidateUpdate(obj, old Object) field.ErrorList {
	p, oldP := obj.(*admissionregistrationv1.MutatingAdmissionPolicy), old.(*admissionregistrationv1.MutatingAdmissionPolicy)
	rules := policyRules{
		ignoreMatchConditions: reflect.DeepEqual(p.Spec.ParamKind, oldP.Spec.ParamKind) && reflect.DeepEqual(p.Spec.MatchConditions, oldP.Spec.MatchConditions),
		matchConditions:       sets.New[string](),
		mutations:             sets.New[string](),
		variables:             sets.New[string](),
	}
	for _, mc := range oldP.Spec.MatchConditions {
		rules.matchConditions.Insert(mc.Expression)
	}
	for _, v := range oldP.Spec.Variables {
		rules.variables.Insert(v.Expression)
	}
	for _, m := range oldP.Spec.Mutations {
		if m.ApplyConfiguration != nil {
			rules.mutations.Insert(strings.TrimSpace(m.ApplyConfiguration.Expression))
		}
		if m.JSONPatch != nil {
			rules.mutations.Insert(strings.TrimSpace(m.JSONPatch.Expression))
		}
	}
	return validateMutatingPolicySpec(&p.Spec, rules, field.NewPath("spec"))
}

func (policyBindingStrategy) PrepareForCreate(obj Object) {
	defaultPolicyBinding(obj)
	obj.SetGeneration(1)
}

func (policyBindingStrategy) PrepareForUpdate(obj, old Object) {
	defaultPolicyBinding(obj)
	if !reflect.DeepEqual(bindingSpec(obj), bindingSpec(old)) {
		obj.SetGeneration(old.GetGeneration() + 1)
	} else {
		obj.SetGeneration(old.GetGeneration())
	}
}

func (policyBindingStrategy) DefaultRequest(obj, _ Object) { defaultPolicyBinding(obj) }

func bindingSpec(obj Object) any {
	switch b := obj.(type) {
	case *admissionregistrationv1.ValidatingAdmissionPolicyBinding:
		return b.Spec
	case *admissionregistrationv1.MutatingAdmissionPolicyBinding:
		return b.Spec
	}
	return nil
}

func (policyBindingStrategy) Validate(obj Object) field.ErrorList {
	return append(validatePolicyBinding(obj), validateStaticSuffix(obj.GetName())...)
}

// ValidateUpdate is kube's: the create's validation, the stored binding
// relaxing nothing.
func (policyBindingStrategy) ValidateUpdate(obj, _ Object) field.ErrorList {
	return validatePolicyBinding(obj)
}

// defaultValidatingPolicy, defaultMutatingPolicy and defaultPolicyBinding are
// kube's v1 defaults (pkg/apis/admissionregistration/v1/defaults.go and its
// generated defaulters): failurePolicy Fail, then the match resources'. A
// paramRef's parameterNotFoundAction and a mutating policy's
// reinvocationPolicy have no default in v1: they are required.
func defaultValidatingPolicy(p *admissionregistrationv1.ValidatingAdmissionPolicy) {
	if p.Spec.FailurePolicy == nil {
		p.Spec.FailurePolicy = ptr.To(admissionregistrationv1.Fail)
	}
	defaultMatchResources(p.Spec.MatchConstraints)
}

func defaultMutatingPolicy(p *admissionregistrationv1.MutatingAdmissionPolicy) {
	if p.Spec.FailurePolicy == nil {
		p.Spec.FailurePolicy = ptr.To(admissionregistrationv1.Fail)
	}
	defaultMatchResources(p.Spec.MatchConstraints)
}

func defaultPolicyBinding(obj Object) {
	switch b := obj.(type) {
	case *admissionregistrationv1.ValidatingAdmissionPolicyBinding:
		defaultMatchResources(b.Spec.MatchResources)
	case *admissionregistrationv1.MutatingAdmissionPolicyBinding:
		defaultMatchResources(b.Spec.MatchResources)
	}
}

func defaultMatchResources(m *admissionregistrationv1.MatchResources) {
	if m == nil {
		return
	}
	if m.MatchPolicy == nil {
		m.MatchPolicy = ptr.To(admissionregistrationv1.Equivalent)
	}
	if m.NamespaceSelector == nil {
		m.NamespaceSelector = &metav1.LabelSelector{}
	}
	if m.ObjectSelector == nil {
		m.ObjectSelector = &metav1.LabelSelector{}
	}
	for _, rules := range [][]admissionregistrationv1.NamedRuleWithOperations{m.ResourceRules, m.ExcludeResourceRules} {
		for i := range rules {
			if rules[i].Scope == nil {
				rules[i].Scope = ptr.To(admissionregistrationv1.AllScopes)
			}
		}
	}
}

// policyRules are kube's validationOptions of a policy: on an update, its
// matchConditions may be left unchecked, and the stored expressions
// compile in CEL's stored-expressions environment, which has the libraries
// too new for a new expression at the compatibility version. Nil sets: a
// create, every expression new.
type policyRules struct {
	ignoreMatchConditions bool
	matchConditions       sets.Set[string]
	// validations are the stored validations' expressions; kube compiles a
	// variable in the stored environment when its expression is one of
	// them too.
	validations        sets.Set[string]
	messageExpressions sets.Set[string]
	auditAnnotations   sets.Set[string]
	variables          sets.Set[string]
	mutations          sets.Set[string]
}

const (
	maxAuditAnnotations = 20
	// maxAuditAnnotationValueExpressionLength is kube's 5kb, less than an
	// annotation value's 10kb limit, since a value often outgrows its
	// expression.
	maxAuditAnnotationValueExpressionLength = 5 * 1024
)

var (
	supportedValidationPolicyReasons = sets.New(string(metav1.StatusReasonForbidden), string(metav1.StatusReasonInvalid), string(metav1.StatusReasonRequestEntityTooLarge))
	supportedValidationActions       = sets.New(string(admissionregistrationv1.Deny), string(admissionregistrationv1.Warn), string(admissionregistrationv1.Audit))
	supportedPatchTypes              = sets.New(string(admissionregistrationv1.PatchTypeApplyConfiguration), string(admissionregistrationv1.PatchTypeJSONPatch))
	// supportedMutatingOperations: a mutating policy cannot match DELETE.
	supportedMutatingOperations = sets.New(string(admissionregistrationv1.OperationAll), string(admissionregistrationv1.Create), string(admissionregistrationv1.Update), string(admissionregistrationv1.Connect))
	newlines                    = regexp.MustCompile(`[\n\r]+`)
	celIdentifier               = regexp.MustCompile(`^[_a-zA-Z][_a-zA-Z0-9]*$`)
	celReserved                 = sets.New("true", "false", "null", "in", "as", "break", "const", "continue", "else",
		"for", "function", "if", "import", "let", "loop", "package", "namespace", "return", "var", "void", "while")
)

// policyCompiler is kube's createCompiler: a policy's own composited
// compiler when its expressions may use variables (it is stateful: each
// variable compiled is declared to the next expressions), else the shared
// stateless one.
func policyCompiler(composited bool) (plugincel.Compiler, error) {
	if !composited {
		return statelessCELCompiler(), nil
	}
	c, err := plugincel.NewCompositedCompiler(environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()))
	if err != nil {
		return nil, fmt.Errorf("admission policy: composited CEL compiler: %w", err)
	}
	return c, nil
}

// validateValidatingPolicySpec is kube's validateValidatingAdmissionPolicySpec.
func validateValidatingPolicySpec(name string, spec *admissionregistrationv1.ValidatingAdmissionPolicySpec, rules policyRules, p *field.Path) field.ErrorList {
	compiler, err := policyCompiler(len(spec.Variables) > 0)
	if err != nil {
		return field.ErrorList{field.InternalError(p, err)}
	}
	errs := validatePolicyFailurePolicy(spec.FailurePolicy, p.Child("failurePolicy"))
	hasParams := spec.ParamKind != nil
	if hasParams {
		errs = append(errs, validateParamKind(*spec.ParamKind, p.Child("paramKind"))...)
	}
	errs = append(errs, validateMatchConstraints(spec.MatchConstraints, p.Child("matchConstraints"))...)
	if !rules.ignoreMatchConditions {
		errs = append(errs, validateMatchConditions(spec.MatchConditions, rules.matchConditions, hasParams, p.Child("matchConditions"))...)
	}
	for i, v := range spec.Variables {
		errs = append(errs, validateVariable(compiler, v, hasParams, rules.validations, p.Child("variables").Index(i))...)
	}
	if len(spec.Validations) == 0 && len(spec.AuditAnnotations) == 0 {
		return append(errs,
			field.Required(p.Child("validations"), "validations or auditAnnotations must contain at least one item"),
			field.Required(p.Child("auditAnnotations"), "validations or auditAnnotations must contain at least one item"))
	}
	for i, v := range spec.Validations {
		errs = append(errs, validateValidation(compiler, v, hasParams, rules, p.Child("validations").Index(i))...)
	}
	if len(spec.AuditAnnotations) > maxAuditAnnotations {
		errs = append(errs, field.Invalid(p.Child("auditAnnotations"), spec.AuditAnnotations, fmt.Sprintf("must not have more than %d auditAnnotations", maxAuditAnnotations)))
	}
	keys := sets.New[string]()
	for i, a := range spec.AuditAnnotations {
		ap := p.Child("auditAnnotations").Index(i)
		errs = append(errs, validateAuditAnnotation(compiler, name, a, hasParams, rules.auditAnnotations, ap)...)
		if keys.Has(a.Key) {
			errs = append(errs, field.Duplicate(ap.Child("key"), a.Key))
		}
		keys.Insert(a.Key)
	}
	return errs
}

func validatePolicyFailurePolicy(fp *admissionregistrationv1.FailurePolicyType, p *field.Path) field.ErrorList {
	switch {
	case fp == nil:
		return field.ErrorList{field.Required(p, "")}
	case !supportedFailurePolicies.Has(string(*fp)):
		return field.ErrorList{field.NotSupported(p, *fp, sets.List(supportedFailurePolicies))}
	}
	return nil
}

// validateMatchConstraints: a policy's matchConstraints are required, with
// a resourceRule at least, which gives the expressions their types.
func validateMatchConstraints(m *admissionregistrationv1.MatchResources, p *field.Path) field.ErrorList {
	if m == nil {
		return field.ErrorList{field.Required(p, "")}
	}
	errs := validateMatchResources(m, p)
	if len(m.ResourceRules) == 0 {
		errs = append(errs, field.Required(p.Child("resourceRules"), ""))
	}
	return errs
}

// validateParamKind is kube's: the apiVersion's group and version as an
// APIService's, the kind a DNS label of any case.
func validateParamKind(k admissionregistrationv1.ParamKind, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	ap := p.Child("apiVersion")
	if k.APIVersion == "" {
		errs = append(errs, field.Required(ap, ""))
	} else if strings.Count(k.APIVersion, "/") > 1 {
		errs = append(errs, field.Invalid(ap, k.APIVersion, fmt.Sprintf("unexpected GroupVersion string: %v", k.APIVersion)))
	} else {
		group, version, ok := strings.Cut(k.APIVersion, "/")
		if !ok {
			group, version = "", k.APIVersion
		}
		if group != "" {
			if msgs := utilvalidation.IsDNS1123Subdomain(group); len(msgs) > 0 {
				errs = append(errs, field.Invalid(ap, group, strings.Join(msgs, ",")))
			}
		}
		if version == "" {
			errs = append(errs, field.Invalid(ap, k.APIVersion, "version must be specified"))
		} else if msgs := utilvalidation.IsDNS1035Label(version); len(msgs) > 0 {
			errs = append(errs, field.Invalid(ap, version, strings.Join(msgs, ",")))
		}
	}
	if k.Kind == "" {
		errs = append(errs, field.Required(p.Child("kind"), ""))
	} else if msgs := utilvalidation.IsDNS1035Label(strings.ToLower(k.Kind)); len(msgs) > 0 {
		errs = append(errs, field.Invalid(p.Child("kind"), k.Kind, "may have mixed case, but should otherwise match: "+strings.Join(msgs, ",")))
	}
	return errs
}

// validateMatchResources is kube's: the defaulted fields are required (a
// write without them was defaulted), the selectors strict.
func validateMatchResources(m *admissionregistrationv1.MatchResources, p *field.Path) field.ErrorList {
	if m == nil {
		return nil
	}
	var errs field.ErrorList
	switch {
	case m.MatchPolicy == nil:
		errs = append(errs, field.Required(p.Child("matchPolicy"), ""))
	case !supportedMatchPolicies.Has(string(*m.MatchPolicy)):
		errs = append(errs, field.NotSupported(p.Child("matchPolicy"), *m.MatchPolicy, sets.List(supportedMatchPolicies)))
	}
	for _, sel := range []struct {
		name     string
		selector *metav1.LabelSelector
	}{{"namespaceSelector", m.NamespaceSelector}, {"objectSelector", m.ObjectSelector}} {
		if sel.selector == nil {
			errs = append(errs, field.Required(p.Child(sel.name), ""))
			continue
		}
		errs = append(errs, metav1validation.ValidateLabelSelector(sel.selector, metav1validation.LabelSelectorValidationOptions{}, p.Child(sel.name))...)
	}
	for i, r := range m.ResourceRules {
		errs = append(errs, validateNamedRule(r, p.Child("resourceRules").Index(i))...)
	}
	for i, r := range m.ExcludeResourceRules {
		errs = append(errs, validateNamedRule(r, p.Child("excludeResourceRules").Index(i))...)
	}
	return errs
}

func validateNamedRule(r admissionregistrationv1.NamedRuleWithOperations, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	names := sets.New[string]()
	for i, name := range r.ResourceNames {
		for _, msg := range path.ValidatePathSegmentName(name, false) {
			errs = append(errs, field.Invalid(p.Child("resourceNames").Index(i), name, msg))
		}
		if names.Has(name) {
			errs = append(errs, field.Duplicate(p.Child("resourceNames").Index(i), name))
		}
		names.Insert(name)
	}
	return append(errs, validateRuleWithOperations(r.RuleWithOperations, p)...)
}

// validateMutatingOperations is kube's: every operation of every resource
// rule may be mutated; the path has no index, as kube's.
func validateMutatingOperations(rules []admissionregistrationv1.NamedRuleWithOperations, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	for _, r := range rules {
		for _, op := range r.Operations {
			if !supportedMutatingOperations.Has(string(op)) {
				errs = append(errs, field.NotSupported(p, op, sets.List(supportedMutatingOperations)))
			}
		}
	}
	return errs
}

// validateVariable is kube's: the variable is compiled and declared to the
// expressions after it. stored are the expressions that compile in the
// stored environment.
func validateVariable(compiler plugincel.Compiler, v admissionregistrationv1.Variable, hasParams bool, stored sets.Set[string], p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if strings.TrimSpace(v.Name) == "" {
		errs = append(errs, field.Required(p.Child("name"), "name is not specified"))
	} else if !celIdentifier.MatchString(v.Name) || celReserved.Has(v.Name) {
		errs = append(errs, field.Invalid(p.Child("name"), v.Name, "name is not a valid CEL identifier"))
	}
	if strings.TrimSpace(v.Expression) == "" {
		return append(errs, field.Required(p.Child("expression"), "expression is not specified"))
	}
	composited, ok := compiler.(*plugincel.CompositedCompiler)
	if !ok {
		return append(errs, field.InternalError(p, errors.New("variable composition is not allowed")))
	}
	envType := environment.NewExpressions
	if stored.Has(v.Expression) {
		envType = environment.StoredExpressions
	}
	variable := &validating.Variable{Name: v.Name, Expression: v.Expression}
	result := composited.CompileAndStoreVariable(variable, plugincel.OptionalVariableDeclarations{HasParams: hasParams, HasAuthorizer: true}, envType)
	if result.Error != nil {
		errs = append(errs, celFieldError(p.Child("expression"), v.Expression, result.Error))
	}
	return errs
}

// validateValidation is kube's: the expression compiles to a bool, the
// messageExpression to a string (without the authorizer, and with params
// when the policy has a paramKind), the message is one line.
func validateValidation(compiler plugincel.Compiler, v admissionregistrationv1.Validation, hasParams bool, rules policyRules, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if strings.TrimSpace(v.Expression) == "" {
		errs = append(errs, field.Required(p.Child("expression"), "expression is not specified"))
	} else {
		errs = append(errs, compileCEL(compiler, &validating.ValidationCondition{Expression: v.Expression},
			plugincel.OptionalVariableDeclarations{HasParams: hasParams, HasAuthorizer: true}, rules.validations.Has(v.Expression), p.Child("expression"))...)
	}
	trimmedMessageExpression := strings.TrimSpace(v.MessageExpression)
	if v.MessageExpression != "" && trimmedMessageExpression == "" {
		errs = append(errs, field.Invalid(p.Child("messageExpression"), v.MessageExpression, "must be non-empty if specified"))
	} else if trimmedMessageExpression != "" {
		// Untrimmed, so that the compiler's columns are right.
		errs = append(errs, compileCEL(compiler, &validating.MessageExpressionCondition{MessageExpression: v.MessageExpression},
			plugincel.OptionalVariableDeclarations{HasParams: hasParams}, rules.messageExpressions.Has(v.MessageExpression), p.Child("messageExpression"))...)
	}
	trimmedMessage := strings.TrimSpace(v.Message)
	if v.Message != "" && trimmedMessage == "" {
		errs = append(errs, field.Invalid(p.Child("message"), v.Message, "message must be non-empty if specified"))
	} else if newlines.MatchString(trimmedMessage) {
		errs = append(errs, field.Invalid(p.Child("message"), v.Message, "message must not contain line breaks"))
	}
	if v.Reason != nil && !supportedValidationPolicyReasons.Has(string(*v.Reason)) {
		errs = append(errs, field.NotSupported(p.Child("reason"), *v.Reason, sets.List(supportedValidationPolicyReasons)))
	}
	return errs
}

// validateAuditAnnotation is kube's: "<policy name>/<key>" is a qualified
// name (the audit annotation's key), the value expression compiles to a
// string or null.
func validateAuditAnnotation(compiler plugincel.Compiler, policyName string, a admissionregistrationv1.AuditAnnotation, hasParams bool, stored sets.Set[string], p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if policyName != "" {
		key := policyName + "/" + a.Key
		for _, msg := range content.IsLabelKey(key) {
			errs = append(errs, field.Invalid(p.Child("key"), key, msg))
		}
	} else {
		errs = append(errs, field.Invalid(p.Child("key"), a.Key, "requires metadata.name be non-empty"))
	}
	vp := p.Child("valueExpression")
	trimmed := strings.TrimSpace(a.ValueExpression)
	switch {
	case trimmed == "":
		errs = append(errs, field.Required(vp, "valueExpression is not specified"))
	case len(trimmed) > maxAuditAnnotationValueExpressionLength:
		errs = append(errs, field.Required(vp, fmt.Sprintf("must not exceed %d bytes in length", maxAuditAnnotationValueExpressionLength)))
	default:
		envType := environment.NewExpressions
		if stored.Has(a.ValueExpression) {
			envType = environment.StoredExpressions
		}
		result := compiler.CompileCELExpression(&validating.AuditAnnotationCondition{ValueExpression: trimmed},
			plugincel.OptionalVariableDeclarations{HasParams: hasParams, HasAuthorizer: true}, envType)
		if result.Error != nil {
			// kube reports the expression as written, untrimmed.
			errs = append(errs, celFieldError(vp, a.ValueExpression, result.Error))
		}
	}
	return errs
}

// validateMutatingPolicySpec is kube's validateMutatingAdmissionPolicySpec;
// its expressions compile with a composited compiler, variables or not.
func validateMutatingPolicySpec(spec *admissionregistrationv1.MutatingAdmissionPolicySpec, rules policyRules, p *field.Path) field.ErrorList {
	compiler, err := policyCompiler(true)
	if err != nil {
		return field.ErrorList{field.InternalError(p, err)}
	}
	errs := validatePolicyFailurePolicy(spec.FailurePolicy, p.Child("failurePolicy"))
	hasParams := spec.ParamKind != nil
	if hasParams {
		errs = append(errs, validateParamKind(*spec.ParamKind, p.Child("paramKind"))...)
	}
	errs = append(errs, validateMatchConstraints(spec.MatchConstraints, p.Child("matchConstraints"))...)
	if spec.MatchConstraints != nil {
		errs = append(errs, validateMutatingOperations(spec.MatchConstraints.ResourceRules, p.Child("matchConstraints", "resourceRules", "operations"))...)
	}
	if !rules.ignoreMatchConditions {
		errs = append(errs, validateMatchConditions(spec.MatchConditions, rules.matchConditions, hasParams, p.Child("matchConditions"))...)
	}
	for i, v := range spec.Variables {
		errs = append(errs, validateVariable(compiler, v, hasParams, rules.variables, p.Child("variables").Index(i))...)
	}
	if len(spec.Mutations) == 0 {
		errs = append(errs, field.Required(p.Child("mutations"), "mutations must contain at least one item"))
	}
	for i, m := range spec.Mutations {
		errs = append(errs, validateMutation(compiler, m, hasParams, rules.mutations, p.Child("mutations").Index(i))...)
	}
	switch {
	case spec.ReinvocationPolicy == "":
		errs = append(errs, field.Required(p.Child("reinvocationPolicy"), ""))
	case !supportedReinvocationPolicies.Has(string(spec.ReinvocationPolicy)):
		errs = append(errs, field.NotSupported(p.Child("reinvocationPolicy"), spec.ReinvocationPolicy, sets.List(supportedReinvocationPolicies)))
	}
	return errs
}

// validateMutation is kube's: patchType names the one of applyConfiguration
// and jsonPatch that is set, whose expression compiles to an Object or a
// list of JSONPatch with the patch types declared.
func validateMutation(compiler plugincel.Compiler, m admissionregistrationv1.Mutation, hasParams bool, stored sets.Set[string], p *field.Path) field.ErrorList {
	decls := plugincel.OptionalVariableDeclarations{HasParams: hasParams, HasAuthorizer: true, HasPatchTypes: true}
	compile := func(accessor plugincel.ExpressionAccessor, p *field.Path) field.ErrorList {
		if accessor.GetExpression() == "" {
			return field.ErrorList{field.Required(p, "")}
		}
		return compileCEL(compiler, accessor, decls, stored.Has(accessor.GetExpression()), p)
	}
	var errs field.ErrorList
	switch m.PatchType {
	case "":
		errs = append(errs, field.Required(p.Child("patchType"), ""))
	case admissionregistrationv1.PatchTypeJSONPatch:
		if m.JSONPatch == nil {
			errs = append(errs, field.Required(p.Child("jsonPatch"), "must be specified when patchType is JSONPatch"))
		} else {
			errs = append(errs, compile(&patch.JSONPatchCondition{Expression: strings.TrimSpace(m.JSONPatch.Expression)}, p.Child("jsonPatch", "expression"))...)
		}
		if m.ApplyConfiguration != nil {
			errs = append(errs, field.Invalid(p.Child("applyConfiguration"), "{applyConfiguration}", "must not be specified when patchType is JSONPatch"))
		}
	case admissionregistrationv1.PatchTypeApplyConfiguration:
		if m.ApplyConfiguration == nil {
			errs = append(errs, field.Required(p.Child("applyConfiguration"), "must be specified when patchType is ApplyConfiguration"))
		} else {
			errs = append(errs, compile(&patch.ApplyConfigurationCondition{Expression: strings.TrimSpace(m.ApplyConfiguration.Expression)}, p.Child("applyConfiguration", "expression"))...)
		}
		if m.JSONPatch != nil {
			errs = append(errs, field.Invalid(p.Child("jsonPatch"), "{jsonPatch}", "must not be specified when patchType is ApplyConfiguration"))
		}
	default:
		errs = append(errs, field.NotSupported(p.Child("patchType"), m.PatchType, sets.List(supportedPatchTypes)))
	}
	return errs
}

// validatePolicyBinding is kube's validateValidatingAdmissionPolicyBindingSpec and
// validateMutatingAdmissionPolicyBindingSpec.
func validatePolicyBinding(obj Object) field.ErrorList {
	p := field.NewPath("spec")
	switch b := obj.(type) {
	case *admissionregistrationv1.ValidatingAdmissionPolicyBinding:
		errs := validatePolicyName(b.Spec.PolicyName, p.Child("policyName"))
		errs = append(errs, validateParamRef(b.Spec.ParamRef, p.Child("paramRef"))...)
		errs = append(errs, validateMatchResources(b.Spec.MatchResources, p.Child("matchResources"))...)
		return append(errs, validateValidationActions(b.Spec.ValidationActions, p.Child("validationActions"))...)
	case *admissionregistrationv1.MutatingAdmissionPolicyBinding:
		errs := validatePolicyName(b.Spec.PolicyName, p.Child("policyName"))
		errs = append(errs, validateParamRef(b.Spec.ParamRef, p.Child("paramRef"))...)
		errs = append(errs, validateMatchResources(b.Spec.MatchResources, p.Child("matchResources"))...)
		if b.Spec.MatchResources != nil {
			errs = append(errs, validateMutatingOperations(b.Spec.MatchResources.ResourceRules, p.Child("matchResources", "resourceRules", "operations"))...)
		}
		return errs
	}
	return nil
}

func validatePolicyName(name string, p *field.Path) field.ErrorList {
	if name == "" {
		return field.ErrorList{field.Required(p, "")}
	}
	var errs field.ErrorList
	for _, msg := range apivalidation.NameIsDNSSubdomain(name, false) {
		errs = append(errs, field.Invalid(p, name, msg))
	}
	return errs
}

// validateParamRef is kube's: a name or a selector, and what to do when
// no param is found.
func validateParamRef(r *admissionregistrationv1.ParamRef, p *field.Path) field.ErrorList {
	if r == nil {
		return nil
	}
	var errs field.ErrorList
	if r.Name != "" {
		for _, msg := range path.ValidatePathSegmentName(r.Name, false) {
			errs = append(errs, field.Invalid(p.Child("name"), r.Name, msg))
		}
		if r.Selector != nil {
			errs = append(errs, field.Forbidden(p.Child("name"), "name and selector are mutually exclusive"))
		}
	}
	if r.Selector != nil {
		errs = append(errs, metav1validation.ValidateLabelSelector(r.Selector, metav1validation.LabelSelectorValidationOptions{}, p.Child("selector"))...)
		if r.Name != "" {
			errs = append(errs, field.Forbidden(p.Child("selector"), "name and selector are mutually exclusive"))
		}
	}
	if r.Name == "" && r.Selector == nil {
		errs = append(errs, field.Required(p, "one of name or selector must be specified"))
	}
	switch action := r.ParameterNotFoundAction; {
	case action == nil || *action == "":
		errs = append(errs, field.Required(p.Child("parameterNotFoundAction"), ""))
	case *action != admissionregistrationv1.DenyAction && *action != admissionregistrationv1.AllowAction:
		// kube passes the pointer: the cause shows the value it points to.
		errs = append(errs, field.NotSupported(p.Child("parameterNotFoundAction"), action, []string{string(admissionregistrationv1.DenyAction), string(admissionregistrationv1.AllowAction)}))
	}
	return errs
}

func validateValidationActions(actions []admissionregistrationv1.ValidationAction, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	seen := sets.New[string]()
	for i, a := range actions {
		if !supportedValidationActions.Has(string(a)) {
			errs = append(errs, field.NotSupported(p.Index(i), a, sets.List(supportedValidationActions)))
		}
		if seen.Has(string(a)) {
			errs = append(errs, field.Duplicate(p.Index(i), a))
		}
		seen.Insert(string(a))
	}
	if seen.Has(string(admissionregistrationv1.Deny)) && seen.Has(string(admissionregistrationv1.Warn)) {
		errs = append(errs, field.Invalid(p, actions, "must not contain both Deny and Warn (repeating the same validation failure information in the API response and headers serves no purpose)"))
	}
	if seen.Len() == 0 {
		errs = append(errs, field.Required(p, "at least one validation action is required"))
	}
	return errs
}
