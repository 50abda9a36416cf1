package admission

import (
	"fmt"
	"sync"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/policy/mutating"
	"k8s.io/apiserver/pkg/admission/plugin/policy/mutating/patch"
	"k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/matchconditions"
	apiservercel "k8s.io/apiserver/pkg/cel"
	"k8s.io/apiserver/pkg/cel/environment"
)

// The policies are compiled as kube's policy plugins compile them: their
// compilePolicy functions are unexported (each plugin's policy source calls
// its own), and Concord keeps its own source of hooks (policies.go), so
// these are those functions, line for line, over kube's exported parts.
// Upgrading k8s.io/apiserver means comparing them with
// pkg/admission/plugin/policy/{validating/plugin.go,mutating/compilation.go}.

// compositionEnv is kube's getCompositionEnvTemplateWithStrictCost.
var compositionEnv = sync.OnceValue(func() *environment.EnvSet {
	return environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion())
})

// compileValidatingPolicy is kube's validating compilePolicy.
func compileValidatingPolicy(policy *admissionregistrationv1.ValidatingAdmissionPolicy) validating.Validator {
	hasParam := policy.Spec.ParamKind != nil
	optionalVars := plugincel.OptionalVariableDeclarations{HasParams: hasParam, HasAuthorizer: true}
	expressionOptionalVars := plugincel.OptionalVariableDeclarations{HasParams: hasParam, HasAuthorizer: false}
	failurePolicy := policy.Spec.FailurePolicy
	var matcher matchconditions.Matcher
	filterCompiler, err := plugincel.NewCompositedCompiler(compositionEnv())
	if err != nil {
		return validating.NewValidator(nil, nil, nil, nil, failurePolicy, err)
	}
	filterCompiler.CompileAndStoreVariables(validatingVariables(policy.Spec.Variables), optionalVars, environment.StoredExpressions)
	if conditions := policy.Spec.MatchConditions; len(conditions) > 0 {
		accessors := make([]plugincel.ExpressionAccessor, len(conditions))
		for i := range conditions {
			accessors[i] = (*matchconditions.MatchCondition)(&conditions[i])
		}
		matcher = matchconditions.NewMatcher(filterCompiler.CompileCondition(accessors, optionalVars, environment.StoredExpressions), failurePolicy, "policy", "validate", policy.Name)
	}
	return validating.NewValidator(
		filterCompiler.CompileCondition(validations(policy.Spec.Validations), optionalVars, environment.StoredExpressions),
		matcher,
		filterCompiler.CompileCondition(auditAnnotations(policy.Spec.AuditAnnotations), optionalVars, environment.StoredExpressions),
		filterCompiler.CompileCondition(messageExpressions(policy.Spec.Validations), expressionOptionalVars, environment.StoredExpressions),
		failurePolicy,
		nil,
	)
}

func validations(in []admissionregistrationv1.Validation) []plugincel.ExpressionAccessor {
	out := make([]plugincel.ExpressionAccessor, len(in))
	for i, v := range in {
		out[i] = &validating.ValidationCondition{Expression: v.Expression, Message: v.Message, Reason: v.Reason}
	}
	return out
}

func messageExpressions(in []admissionregistrationv1.Validation) []plugincel.ExpressionAccessor {
	out := make([]plugincel.ExpressionAccessor, len(in))
	for i, v := range in {
		if v.MessageExpression != "" {
			out[i] = &validating.MessageExpressionCondition{MessageExpression: v.MessageExpression}
		}
	}
	return out
}

func auditAnnotations(in []admissionregistrationv1.AuditAnnotation) []plugincel.ExpressionAccessor {
	out := make([]plugincel.ExpressionAccessor, len(in))
	for i, a := range in {
		out[i] = &validating.AuditAnnotationCondition{Key: a.Key, ValueExpression: a.ValueExpression}
	}
	return out
}

func validatingVariables(in []admissionregistrationv1.Variable) []plugincel.NamedExpressionAccessor {
	out := make([]plugincel.NamedExpressionAccessor, len(in))
	for i, v := range in {
		out[i] = &validating.Variable{Name: v.Name, Expression: v.Expression}
	}
	return out
}

// compileMutatingPolicy is kube's mutating compilePolicy.
func compileMutatingPolicy(policy *admissionregistrationv1.MutatingAdmissionPolicy) mutating.PolicyEvaluator {
	opts := plugincel.OptionalVariableDeclarations{HasParams: policy.Spec.ParamKind != nil, HasAuthorizer: true}
	compiler, err := plugincel.NewCompositedCompiler(compositionEnv())
	if err != nil {
		return mutating.PolicyEvaluator{Error: &apiservercel.Error{
			Type:   apiservercel.ErrorTypeInternal,
			Detail: fmt.Sprintf("failed to initialize CEL compiler: %v", err),
		}}
	}
	var variables []plugincel.NamedExpressionAccessor
	if policy.Spec.Variables != nil {
		variables = validatingVariables(policy.Spec.Variables)
	}
	compiler.CompileAndStoreVariables(variables, opts, environment.StoredExpressions)
	var matcher matchconditions.Matcher
	if conditions := policy.Spec.MatchConditions; len(conditions) > 0 {
		accessors := make([]plugincel.ExpressionAccessor, len(conditions))
		for i := range conditions {
			accessors[i] = (*matchconditions.MatchCondition)(&conditions[i])
		}
		matcher = matchconditions.NewMatcher(compiler.CompileCondition(accessors, opts, environment.StoredExpressions), policy.Spec.FailurePolicy, "policy", "validate", policy.Name)
	}
	var patchers []patch.Patcher
	patchOptions := opts
	patchOptions.HasPatchTypes = true
	for _, m := range policy.Spec.Mutations {
		switch m.PatchType {
		case admissionregistrationv1.PatchTypeJSONPatch:
			if m.JSONPatch != nil {
				result := compiler.CompileMutatingEvaluator(&patch.JSONPatchCondition{Expression: m.JSONPatch.Expression}, patchOptions, environment.StoredExpressions)
				patchers = append(patchers, patch.NewJSONPatcher(result))
			}
		case admissionregistrationv1.PatchTypeApplyConfiguration:
			if m.ApplyConfiguration != nil {
				result := compiler.CompileMutatingEvaluator(&patch.ApplyConfigurationCondition{Expression: m.ApplyConfiguration.Expression}, patchOptions, environment.StoredExpressions)
				patchers = append(patchers, patch.NewApplyConfigurationPatcher(result))
			}
		}
	}
	return mutating.PolicyEvaluator{Matcher: matcher, Mutators: patchers, CompositedCompiler: compiler}
}
