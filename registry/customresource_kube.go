package registry

import (
	"context"
	"fmt"
	"math"
	"strings"

	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel/model"
	structurallisttype "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/listtype"
	schemaobjectmeta "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/objectmeta"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/operation"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
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

// coerceEmbedded checks the apiVersion and kind of the embedded resources
// (x-kubernetes-embedded-resource) and prunes their ObjectMeta.
func coerceEmbedded(obj map[string]any, s *structuralschema.Structural, c coercion) ([]string, error) {
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
// (kube's ValidateEmbeddedResource: metadata may only hold name and
// generateName, each valid, apiVersion and kind are required).
func validateEmbedded(ctx context.Context, obj map[string]any, s *structuralschema.Structural) field.ErrorList {
	return schemaobjectmeta.Validate(ctx, nil, obj, s, false)
}

// validateListSetsAndMaps checks the x-kubernetes-list-type set and map
// invariants (unique items, unique keys).
func validateListSetsAndMaps(s *structuralschema.Structural, obj map[string]any) field.ErrorList {
	return structurallisttype.ValidateListSetsAndMaps(nil, s, obj)
}

// newCorrelatedObject pairs new and old for ratcheting.
func newCorrelatedObject(obj, old map[string]any, s *structuralschema.Structural) *common.CorrelatedObject {
	return common.NewCorrelatedObject(obj, old, &model.Structural{Structural: s})
}

// equalExceptMetadata is kube's test for a new generation: the objects
// differ in more than their metadata.
func equalExceptMetadata(a, b map[string]any) bool {
	return apiequality.Semantic.DeepEqual(copyNonMetadata(a), copyNonMetadata(b))
}

func copyNonMetadata(original map[string]any) map[string]any {
	ret := make(map[string]any, len(original))
	for key, val := range original {
		if key == "metadata" {
			continue
		}
		ret[key] = val
	}
	return ret
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
