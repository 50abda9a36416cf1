package registry

import (
	"context"
	"fmt"
	"math"
	"strings"

	corev1 "k8s.io/api/core/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel/model"
	structuraldefaulting "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	structurallisttype "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/listtype"
	schemaobjectmeta "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/objectmeta"
	apiservervalidation "k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/operation"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
	apimachineryvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/apiserver/pkg/cel/common"
	"k8s.io/apiserver/pkg/features"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
)

// This file holds the small pieces of kube-apiserver's custom resource
// code that its packages do not export (pkg/registry/customresource's
// validator and strategy), as they are there, and thin calls of the ones
// they do.

// kube's CEL limits: a rule's cost per call (compile time), and the whole
// object's per validation.
const (
	celPerCallLimit      = celconfig.PerCallLimit
	celRuntimeCostBudget = celconfig.RuntimeCELCostBudget
)

// objectMetaOf reads obj's metadata into an ObjectMeta, with the unknown
// fields' paths when c tracks them.
func objectMetaOf(obj map[string]any, c coercion) (*metav1.ObjectMeta, bool, []string, error) {
	return schemaobjectmeta.GetObjectMetaWithOptions(obj, schemaobjectmeta.ObjectMetaOptions{
		DropMalformedFields:     c.dropInvalidMetadata,
		ReturnUnknownFieldPaths: c.trackUnknown,
	})
}

// setObjectMeta writes objectMeta back as obj's metadata.
func setObjectMeta(obj map[string]any, objectMeta *metav1.ObjectMeta) error {
	return schemaobjectmeta.SetObjectMeta(obj, objectMeta)
}

// schemaPasses says which of kube's passes over an object a structural
// schema can make do anything: each pass follows the schema's properties,
// additionalProperties and items, and acts only where the schema has a
// default, an x-kubernetes-list-type set or map, or an embedded resource.
// A pass that cannot act is skipped: the answer is the same, the CPU not
// spent (these passes copy the schema node of every field they visit).
type schemaPasses struct {
	defaults, listTypes, embedded bool
}

func passesOf(s *structuralschema.Structural) schemaPasses {
	var p schemaPasses
	var walk func(*structuralschema.Structural)
	walk = func(s *structuralschema.Structural) {
		if s == nil {
			return
		}
		p.defaults = p.defaults || s.Default.Object != nil
		p.listTypes = p.listTypes || (s.XListType != nil && (*s.XListType == "set" || *s.XListType == "map"))
		p.embedded = p.embedded || s.XEmbeddedResource
		for k := range s.Properties {
			prop := s.Properties[k]
			walk(&prop)
		}
		if s.AdditionalProperties != nil {
			walk(s.AdditionalProperties.Structural)
		}
		walk(s.Items)
	}
	walk(s)
	return p
}

// passes are the passes the schema of version needs.
func (d *customResourceDefinition) passesOf(s *structuralschema.Structural) schemaPasses {
	return d.passes[s]
}

// containsNull reports whether x holds a JSON null anywhere: kube's pruning
// of non-nullable nulls has nothing to do otherwise.
func containsNull(x any) bool {
	switch x := x.(type) {
	case nil:
		return true
	case map[string]any:
		for _, v := range x {
			if containsNull(v) {
				return true
			}
		}
	case []any:
		for _, v := range x {
			if containsNull(v) {
				return true
			}
		}
	}
	return false
}

// pruneNulls is kube's PruneNonNullableNullsWithoutDefaults.
func pruneNulls(obj map[string]any, s *structuralschema.Structural) {
	if containsNull(obj) {
		structuraldefaulting.PruneNonNullableNullsWithoutDefaults(obj, s)
	}
}

// applyDefaults is kube's defaulting.
func (d *customResourceDefinition) applyDefaults(obj map[string]any, s *structuralschema.Structural) {
	if d.passesOf(s).defaults {
		structuraldefaulting.Default(obj, s)
	}
}

// coerceEmbedded checks the apiVersion and kind of the embedded resources
// (x-kubernetes-embedded-resource) and prunes their ObjectMeta.
func (d *customResourceDefinition) coerceEmbedded(obj map[string]any, s *structuralschema.Structural, c coercion) ([]string, error) {
	if !d.passesOf(s).embedded {
		return nil, nil
	}
	fieldErr, unknown := schemaobjectmeta.CoerceWithOptions(nil, obj, s, false, schemaobjectmeta.CoerceOptions{
		DropInvalidFields:       c.dropInvalidMetadata,
		ReturnUnknownFieldPaths: c.trackUnknown,
	})
	if fieldErr != nil {
		return nil, fieldErr
	}
	return unknown, nil
}

// validateEmbedded checks the embedded resources' TypeMeta and ObjectMeta
// (kube's ValidateEmbeddedResource: apiVersion and kind are required, the
// metadata a valid ObjectMeta, its name a path segment).
func (d *customResourceDefinition) validateEmbedded(ctx context.Context, obj map[string]any, s *structuralschema.Structural) field.ErrorList {
	if !d.passesOf(s).embedded {
		return nil
	}
	return schemaobjectmeta.Validate(ctx, nil, obj, s, false)
}

// validateListSetsAndMaps checks the x-kubernetes-list-type set and map
// invariants (unique items, unique keys).
func (d *customResourceDefinition) validateListSetsAndMaps(s *structuralschema.Structural, obj map[string]any) field.ErrorList {
	if !d.passesOf(s).listTypes {
		return nil
	}
	return structurallisttype.ValidateListSetsAndMaps(nil, s, obj)
}

// validateSchemaUpdate is kube's ValidateCustomResourceUpdate with
// ratcheting. Ratcheting validates the new object as
// a create does and turns the errors of what did not change into warnings
// (which kube does not report), so an object the plain validation accepts
// is accepted — by openAPIAccepts, else by the validator — and the dearer
// ratcheting pass only runs for one it refuses.
func validateSchemaUpdate(path *field.Path, obj, old any, validator apiservervalidation.SchemaValidator, checker *openAPIChecker, opts ...apiservervalidation.ValidationOption) field.ErrorList {
	if validator == nil || checker.accepts(obj) {
		return nil
	}
	if validator.Validate(obj).IsValid() {
		return nil
	}
	return apiservervalidation.ValidateCustomResourceUpdate(path, obj, old, validator, opts...)
}

// newCorrelatedObject pairs new and old for ratcheting.
func newCorrelatedObject(obj, old map[string]any, s *structuralschema.Structural) *common.CorrelatedObject {
	return common.NewCorrelatedObject(obj, old, &model.Structural{Structural: s})
}

// equalExceptMetadata is kube's test for a new generation: the objects
// differ in more than their metadata (kube compares copies without it with
// apiequality.Semantic.DeepEqual, which for JSON values is equalJSON).
func equalExceptMetadata(a, b map[string]any) bool {
	n := 0
	for key, va := range a {
		if key == "metadata" {
			continue
		}
		vb, ok := b[key]
		if !ok || !equalJSON(va, vb) {
			return false
		}
		n++
	}
	for key := range b {
		if key != "metadata" {
			n--
		}
	}
	return n == 0
}

// equalJSON is apiequality.Semantic.DeepEqual of two decoded JSON values:
// reflect.DeepEqual, but for nil and empty maps and slices, which are
// equal (the semantic equalities it adds are for Go types JSON decoding
// never gives).
func equalJSON(a, b any) bool {
	switch a := a.(type) {
	case map[string]any:
		b, ok := b.(map[string]any)
		if !ok || len(a) != len(b) {
			return false
		}
		for key, va := range a {
			vb, ok := b[key]
			if !ok || !equalJSON(va, vb) {
				return false
			}
		}
		return true
	case []any:
		b, ok := b.([]any)
		if !ok || len(a) != len(b) {
			return false
		}
		for i := range a {
			if !equalJSON(a[i], b[i]) {
				return false
			}
		}
		return true
	case nil, bool, string, int64, float64:
		return a == b
	}
	return apiequality.Semantic.DeepEqual(a, b)
}

// getObjectMeta is kube's: obj's metadata as an ObjectMeta, or the error
// of metadata that is not one.
func getObjectMeta(obj *unstructured.Unstructured) (*metav1.ObjectMeta, field.ErrorList) {
	if obj == nil || obj.UnstructuredContent() == nil {
		return &metav1.ObjectMeta{}, nil
	}
	raw := obj.UnstructuredContent()["metadata"]
	if raw == nil {
		return &metav1.ObjectMeta{}, nil
	}
	metadataMap, ok := raw.(map[string]any)
	if !ok {
		return nil, field.ErrorList{field.Invalid(field.NewPath("metadata"), raw, fmt.Sprintf("expected map[string]interface{}, got %T", raw))}
	}
	meta := &metav1.ObjectMeta{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(metadataMap, meta); err != nil {
		return nil, field.ErrorList{field.Invalid(field.NewPath("metadata"), raw, err.Error())}
	}
	return meta, nil
}

// validateObjectMetaUpdate is kube's validateObjectMetaUpdateDeclaratively:
// the ObjectMeta update rules, which kube's custom resource validator checks
// besides the generic ones the store checks (so a cause can be there twice,
// as kube answers it).
func validateObjectMetaUpdate(ctx context.Context, obj, old *unstructured.Unstructured, namespaced bool) field.ErrorList {
	metadata, errs := getObjectMeta(obj)
	if len(errs) > 0 {
		return errs
	}
	oldMetadata, errs := getObjectMeta(old)
	if len(errs) > 0 {
		return errs
	}
	return apivalidation.ValidateObjectMetaDeclaratively(ctx, operation.Update, metadata, oldMetadata, namespaced, nil, field.NewPath("metadata"), utilfeature.DefaultFeatureGate.Enabled(features.DeclarativeValidationBeta))
}

// validateScaleSpec is kube's ValidateScaleSpec: with a scale subresource,
// the spec replicas are a non-negative int32.
func (s *customResourceStrategy) validateScaleSpec(obj *unstructured.Unstructured) field.ErrorList {
	scale := s.scale
	if scale == nil {
		return nil
	}
	var allErrs field.ErrorList
	specReplicasPath := strings.TrimPrefix(scale.SpecReplicasPath, ".") // ignore leading period
	specReplicas, _, err := unstructured.NestedInt64(obj.UnstructuredContent(), strings.Split(specReplicasPath, ".")...)
	if err != nil {
		allErrs = append(allErrs, field.Invalid(field.NewPath(scale.SpecReplicasPath), specReplicas, err.Error()))
	} else if specReplicas < 0 {
		allErrs = append(allErrs, field.Invalid(field.NewPath(scale.SpecReplicasPath), specReplicas, "should be a non-negative integer"))
	} else if specReplicas > math.MaxInt32 {
		allErrs = append(allErrs, field.Invalid(field.NewPath(scale.SpecReplicasPath), specReplicas, fmt.Sprintf("should be less than or equal to %v", math.MaxInt32)))
	}
	return allErrs
}

// validateScaleStatus is kube's ValidateScaleStatus: the status replicas
// are a non-negative int32, the label selector a string.
func (s *customResourceStrategy) validateScaleStatus(obj *unstructured.Unstructured) field.ErrorList {
	scale := s.scale
	if scale == nil {
		return nil
	}
	var allErrs field.ErrorList
	statusReplicasPath := strings.TrimPrefix(scale.StatusReplicasPath, ".") // ignore leading period
	statusReplicas, _, err := unstructured.NestedInt64(obj.UnstructuredContent(), strings.Split(statusReplicasPath, ".")...)
	if err != nil {
		allErrs = append(allErrs, field.Invalid(field.NewPath(scale.StatusReplicasPath), statusReplicas, err.Error()))
	} else if statusReplicas < 0 {
		allErrs = append(allErrs, field.Invalid(field.NewPath(scale.StatusReplicasPath), statusReplicas, "should be a non-negative integer"))
	} else if statusReplicas > math.MaxInt32 {
		allErrs = append(allErrs, field.Invalid(field.NewPath(scale.StatusReplicasPath), statusReplicas, fmt.Sprintf("should be less than or equal to %v", math.MaxInt32)))
	}
	if scale.LabelSelectorPath != nil {
		labelSelectorPath := strings.TrimPrefix(*scale.LabelSelectorPath, ".") // ignore leading period
		labelSelector, _, err := unstructured.NestedString(obj.UnstructuredContent(), strings.Split(labelSelectorPath, ".")...)
		if err != nil {
			allErrs = append(allErrs, field.Invalid(field.NewPath(*scale.LabelSelectorPath), labelSelector, err.Error()))
		}
	}
	return allErrs
}

// standardFinalizers are kube's finalizers that need no domain.
var standardFinalizers = sets.New(metav1.FinalizerOrphanDependents, metav1.FinalizerDeleteDependents, string(corev1.FinalizerKubernetes))

// WarningsOnCreate is kube's customResourceStrategy.WarningsOnCreate: a
// warning for each finalizer name that is not domain-qualified.
func (s *customResourceStrategy) WarningsOnCreate(obj Object) []string {
	return finalizerWarnings(obj, nil)
}

// WarningsOnUpdate is kube's: the warnings of the finalizers added.
func (s *customResourceStrategy) WarningsOnUpdate(obj, old Object) []string {
	return finalizerWarnings(obj, old)
}

// finalizerWarnings is kube's generateWarningsFromObj with
// validateKubeFinalizerName.
func finalizerWarnings(obj, old Object) []string {
	added := sets.New(obj.GetFinalizers()...)
	if old != nil {
		added = added.Difference(sets.New(old.GetFinalizers()...))
	}
	fldPath := field.NewPath("metadata", "finalizers")
	var warnings []string
	for _, finalizer := range sets.List(added) {
		for _, msg := range apimachineryvalidation.IsQualifiedName(finalizer) {
			warnings = append(warnings, fmt.Sprintf("%s: %q: %s", fldPath.String(), finalizer, msg))
		}
		if !strings.Contains(finalizer, "/") && !standardFinalizers.Has(finalizer) {
			if strings.Contains(finalizer, ".") {
				warnings = append(warnings, fmt.Sprintf("%s: %q: prefer a domain-qualified finalizer name including a path (/) to avoid accidental conflicts with other finalizer writers", fldPath.String(), finalizer))
			} else {
				warnings = append(warnings, fmt.Sprintf("%s: %q: prefer a domain-qualified finalizer name to avoid accidental conflicts with other finalizer writers", fldPath.String(), finalizer))
			}
		}
	}
	return warnings
}
