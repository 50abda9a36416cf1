package registry

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/install"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsvalidation "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/validation"
	apiservervalidation "k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation/field"
	utilversion "k8s.io/apimachinery/pkg/util/version"
	"k8s.io/apimachinery/pkg/version"
	"k8s.io/apiserver/pkg/cel/environment"
	"k8s.io/kube-openapi/pkg/validation/spec"
)

// CustomResourceDefinitions are apiextensions.k8s.io/v1
// CustomResourceDefinitions (cluster-scoped), with kube-apiserver 1.37's
// strategy (k8s.io/apiextensions-apiserver's
// pkg/registry/customresourcedefinition): kube's v1 defaults, kube's
// validation of the internal form (structural schemas, names, versions, CEL
// rules and their cost), a status the main resource keeps and the status
// subresource writes, and a generation that counts spec changes.
//
// They are stored where kube keeps them,
// /registry/apiextensions.k8s.io/customresourcedefinitions/<name>, as
// apiextensions.k8s.io/v1 JSON. Where Concord differs from kube:
//   - spec.conversion.strategy Webhook is refused (kube accepts it).
//   - a status write cannot change labels, annotations or owner
//     references (kube 1.37 lets it: see crdStatusStrategy).
//
// Nothing here acts on a CRD: its names are not checked against other
// CRDs' (status.acceptedNames, NamesAccepted and Established are a
// controller's to set), its custom resources are not served by this
// declaration, and deleting it deletes it at once, without kube's
// customresourcecleanup finalizer.
var CustomResourceDefinitions = &Resource{
	GroupVersion: apiextensionsv1.SchemeGroupVersion,
	Kind:         "CustomResourceDefinition",
	Plural:       "customresourcedefinitions",
	// kube's key: /registry/apiextensions.k8s.io/customresourcedefinitions/<name>.
	StoragePrefix: "apiextensions.k8s.io/customresourcedefinitions",
	Singular:      "customresourcedefinition",
	ShortNames:    []string{"crd", "crds"},
	Categories:    []string{"api-extensions"},
	// kube's rule that the name is <plural>.<group> needs the spec: it is
	// checked by the strategy.
	NameValidation: apivalidation.NameIsDNSSubdomain,
	New:            func() Object { return &apiextensionsv1.CustomResourceDefinition{} },
	NewList:        func() runtime.Object { return &apiextensionsv1.CustomResourceDefinitionList{} },
	Strategy:       crdStrategy{},
	StatusStrategy: crdStatusStrategy{},
	// kube's reset fields (its status strategy's leave out metadata, which
	// its status writes may change).
	ResetFields:       []string{"status"},
	StatusResetFields: []string{"spec"},
	// kube's update validation ratchets on the stored CRD (a rule it
	// accepted before stays accepted, unchanged schemas are not costed
	// again), so an update is only judged against it.
	ValidateCreatesOnly: true,
	TableColumns:        crdColumns,
	TableCells:          func(obj Object) []any { return crdCells(obj.(*apiextensionsv1.CustomResourceDefinition)) },
	TableColumnsOnly:    true,
}

// crdScheme holds apiextensions' internal types, which kube's validation
// reads, with the conversions from v1 and v1's defaults (kube's install
// package). Only the strategies use it: the served types are Scheme's.
var crdScheme = runtime.NewScheme()

func init() {
	install.Install(crdScheme)
}

// crdInternal is crd in apiextensions' internal form, as kube's decoder
// hands it to the strategy. A single schema (or subresources, columns,
// selectable fields) shared by every version moves to the spec's top level
// (spec.validation), so kube's causes name the fields there.
func crdInternal(crd *apiextensionsv1.CustomResourceDefinition) (*apiextensions.CustomResourceDefinition, error) {
	out := &apiextensions.CustomResourceDefinition{}
	if err := crdScheme.Convert(crd.DeepCopy(), out, nil); err != nil {
		return nil, fmt.Errorf("registry: convert CustomResourceDefinition %s to the internal form: %w", crd.Name, err)
	}
	return out, nil
}

// crdColumns are kube-apiserver's CustomResourceDefinition columns
// (pkg/registry/customresourcedefinition/tableconvertor); the priority 1
// ones show with kubectl get -o wide.
var crdColumns = []metav1.TableColumnDefinition{
	{Name: "Name", Type: "string", Format: "name", Description: metav1.ObjectMeta{}.SwaggerDoc()["name"]},
	{Name: "Scope", Type: "string", Description: "Cluster/Namespaced"},
	{Name: "Versions", Type: "string", Description: "Served versions"},
	{Name: "Created At", Type: "date", Description: metav1.ObjectMeta{}.SwaggerDoc()["creationTimestamp"]},
	{Name: "Group", Type: "string", Priority: 1, Description: "API group"},
	{Name: "Kind", Type: "string", Priority: 1, Description: "CustomResource kind"},
	{Name: "ShortNames", Type: "string", Priority: 1, Description: "Short names"},
	{Name: "Established", Type: "boolean", Priority: 1, Description: "Established status"},
}

// crdCells is kube's row of a CRD: the served versions sorted, the storage
// one marked.
func crdCells(crd *apiextensionsv1.CustomResourceDefinition) []any {
	var versions []string
	for _, v := range crd.Spec.Versions {
		if v.Served {
			label := v.Name
			if v.Storage {
				label += "(storage)"
			}
			versions = append(versions, label)
		}
	}
	sort.Strings(versions)
	established := false
	for _, c := range crd.Status.Conditions {
		if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
			established = true
		}
	}
	return []any{
		crd.Name,
		string(crd.Spec.Scope),
		strings.Join(versions, ","),
		crd.CreationTimestamp.Time.UTC().Format(time.RFC3339),
		crd.Spec.Group,
		crd.Spec.Names.Kind,
		strings.Join(crd.Spec.Names.ShortNames, ","),
		established,
	}
}

// crdStrategy is kube's CRD strategy, on the v1 objects Concord serves.
//
// kube's strategy also drops the fields of disabled features; in 1.37 that
// drops nothing: CRDValidationRatcheting and CustomResourceFieldSelectors
// are GA and locked on, and CRDObservedGenerationTracking (on by default)
// would only drop status fields from a status the strategy has just
// cleared or carried over unchanged.
type crdStrategy struct{}

var _ Strategy = crdStrategy{}

// PrepareForCreate applies kube's v1 defaults (Concord's decoder does not),
// clears the status but for the storage version in status.storedVersions,
// and starts the generation at 1.
func (crdStrategy) PrepareForCreate(obj Object) {
	crd := obj.(*apiextensionsv1.CustomResourceDefinition)
	crdScheme.Default(crd)
	crd.Status = apiextensionsv1.CustomResourceDefinitionStatus{}
	crd.Generation = 1
	addStorageVersion(crd)
}

// PrepareForUpdate applies kube's v1 defaults, keeps the stored status
// (only the status subresource writes it; the storage version is added to
// storedVersions), and bumps the generation when the spec changes.
func (crdStrategy) PrepareForUpdate(obj, old Object) {
	crd, oldCRD := obj.(*apiextensionsv1.CustomResourceDefinition), old.(*apiextensionsv1.CustomResourceDefinition)
	crdScheme.Default(crd)
	crd.Status = *oldCRD.Status.DeepCopy()
	if !apiequality.Semantic.DeepEqual(oldCRD.Spec, crd.Spec) {
		crd.Generation = oldCRD.Generation + 1
	}
	addStorageVersion(crd)
}

var _ RequestDefaulter = crdStrategy{}

// DefaultRequest applies kube's v1 defaults, which kube's decoder applies
// (so its writer owns them).
func (crdStrategy) DefaultRequest(obj, _ Object) {
	crdScheme.Default(obj.(*apiextensionsv1.CustomResourceDefinition))
}

// addStorageVersion adds the storage version to status.storedVersions, as
// kube's strategy does at every write of the spec.
func addStorageVersion(crd *apiextensionsv1.CustomResourceDefinition) {
	for _, v := range crd.Spec.Versions {
		if v.Storage {
			for _, stored := range crd.Status.StoredVersions {
				if stored == v.Name {
					return
				}
			}
			crd.Status.StoredVersions = append(crd.Status.StoredVersions, v.Name)
			return
		}
	}
}

// Validate is kube's ValidateCustomResourceDefinition, the validation of a
// new CRD, on its internal form, with Concord's refusal of conversion
// webhooks. The store has checked the ObjectMeta already (validateAlone):
// of kube's metadata causes only <plural>.<group> is added.
func (crdStrategy) Validate(obj Object) field.ErrorList {
	crd := obj.(*apiextensionsv1.CustomResourceDefinition)
	internal, err := crdInternal(crd)
	if err != nil {
		return field.ErrorList{field.InternalError(field.NewPath(""), err)}
	}
	// The context only bounds the CEL evaluation of schema defaults, which
	// kube's cost limits bound too; Strategy has none to pass.
	errs := apiextensionsvalidation.ValidateCustomResourceDefinition(context.Background(), internal)
	errs = append(errs, validateCRDConversion(crd)...)
	metadata := apivalidation.ValidateObjectMetaAccessor(crd, false, apivalidation.NameIsDNSSubdomain, field.NewPath("metadata"))
	return exceptListed(errs, metadata)
}

// ValidateUpdate is kube's ValidateCustomResourceDefinitionUpdate on the
// internal forms — the rules ratchet on the stored CRD, and names are
// immutable once Established — with Concord's refusal of conversion
// webhooks. The store's own ObjectMeta causes are not repeated.
func (crdStrategy) ValidateUpdate(obj, old Object) field.ErrorList {
	return validateCRDUpdate(obj, old, func(crd, old *apiextensions.CustomResourceDefinition) field.ErrorList {
		return apiextensionsvalidation.ValidateCustomResourceDefinitionUpdate(context.Background(), crd, old)
	})
}

var _ WarningStrategy = crdStrategy{}

// WarningsOnCreate is kube's (pkg/registry/customresourcedefinition's
// strategy): a warning for each format the schemas use that kube does not
// recognize (`unrecognized format "foo"`), and one for each kind of
// non-scalar items of an x-kubernetes-list-type set. The CRD has passed
// validation; these do not refuse it.
func (crdStrategy) WarningsOnCreate(obj Object) []string {
	internal, err := crdInternal(obj.(*apiextensionsv1.CustomResourceDefinition))
	if err != nil {
		return nil // Validate reported it
	}
	var warnings []string
	for _, format := range unrecognizedCRDFormats(&internal.Spec) {
		warnings = append(warnings, fmt.Sprintf("unrecognized format %q", format))
	}
	return append(warnings, nonScalarListTypeSetWarnings(&internal.Spec)...)
}

// WarningsOnUpdate is kube's: the warnings of WarningsOnCreate that the
// stored CRD did not have already (a format it used is not warned of again).
func (crdStrategy) WarningsOnUpdate(obj, old Object) []string {
	internal, err := crdInternal(obj.(*apiextensionsv1.CustomResourceDefinition))
	if err != nil {
		return nil
	}
	oldInternal, err := crdInternal(old.(*apiextensionsv1.CustomResourceDefinition))
	if err != nil {
		return nil
	}
	oldFormats := sets.New(unrecognizedCRDFormats(&oldInternal.Spec)...)
	var warnings []string
	for _, format := range unrecognizedCRDFormats(&internal.Spec) {
		if !oldFormats.Has(format) {
			warnings = append(warnings, fmt.Sprintf("unrecognized format %q", format))
		}
	}
	oldListWarnings := sets.New(nonScalarListTypeSetWarnings(&oldInternal.Spec)...)
	for _, w := range nonScalarListTypeSetWarnings(&internal.Spec) {
		if !oldListWarnings.Has(w) {
			warnings = append(warnings, w)
		}
	}
	return warnings
}

// unrecognizedCRDFormats is kube's getUnrecognizedFormatsInCRD: the formats
// of every schema (the shared one and each version's) that kube's schema
// validation does not know at the default compatibility version, in the
// order found.
func unrecognizedCRDFormats(crd *apiextensions.CustomResourceDefinitionSpec) []string {
	compatibility := environment.DefaultCompatibilityVersion()
	var formats []string
	if crd.Validation != nil && crd.Validation.OpenAPIV3Schema != nil {
		formats = append(formats, unrecognizedFormats(crd.Validation.OpenAPIV3Schema, compatibility)...)
	}
	for _, v := range crd.Versions {
		if v.Schema != nil && v.Schema.OpenAPIV3Schema != nil {
			formats = append(formats, unrecognizedFormats(v.Schema.OpenAPIV3Schema, compatibility)...)
		}
	}
	return formats
}

// unrecognizedFormats is kube's getUnrecognizedFormatsInSchema.
func unrecognizedFormats(schema *apiextensions.JSONSchemaProps, compatibility *utilversion.Version) []string {
	var formats []string
	apiextensionsvalidation.SchemaHas(schema, func(s *apiextensions.JSONSchemaProps) bool {
		if s.Format != "" {
			formats = append(formats, apiservervalidation.GetUnrecognizedFormats(
				&spec.Schema{SchemaProps: spec.SchemaProps{Format: s.Format, Type: []string{s.Type}}}, compatibility)...)
		}
		return false // every schema
	})
	return formats
}

// nonScalarListTypeSetWarnings is kube's getNonScalarListTypeSetWarnings:
// one warning per item type (object, array) of the list-type sets in the
// schemas, sorted.
func nonScalarListTypeSetWarnings(crd *apiextensions.CustomResourceDefinitionSpec) []string {
	seen := sets.New[string]()
	check := func(s *apiextensions.JSONSchemaProps) bool {
		if s.XListType != nil && *s.XListType == "set" && s.Items != nil && s.Items.Schema != nil {
			switch s.Items.Schema.Type {
			case "object", "array":
				seen.Insert(fmt.Sprintf("x-kubernetes-list-type: set for items of type %q is not supported by server-side apply or CEL validation rules", s.Items.Schema.Type))
			}
		}
		return false
	}
	if crd.Validation != nil && crd.Validation.OpenAPIV3Schema != nil {
		apiextensionsvalidation.SchemaHas(crd.Validation.OpenAPIV3Schema, check)
	}
	for _, v := range crd.Versions {
		if v.Schema != nil && v.Schema.OpenAPIV3Schema != nil {
			apiextensionsvalidation.SchemaHas(v.Schema.OpenAPIV3Schema, check)
		}
	}
	return sets.List(seen)
}

// CRDTerminating reports whether crd's Terminating condition is true: kube's
// discovery then lists only the verbs delete, deletecollection, get, list
// and watch for its resource.
func CRDTerminating(crd *apiextensionsv1.CustomResourceDefinition) bool {
	for _, c := range crd.Status.Conditions {
		if c.Type == apiextensionsv1.Terminating {
			return c.Status == apiextensionsv1.ConditionTrue
		}
	}
	return false
}

// CRDStorageVersion is the version crd's objects are stored in ("" when
// none is marked).
func CRDStorageVersion(crd *apiextensionsv1.CustomResourceDefinition) string {
	for _, v := range crd.Spec.Versions {
		if v.Storage {
			return v.Name
		}
	}
	return ""
}

// CRDDeprecationWarning is the warning kube-apiserver's custom resource
// handler adds to every request to version of crd when that version is
// deprecated (ok): its deprecationWarning, or kube's default
// (defaultDeprecationWarning in customresource_handler.go): "<group>/<version>
// <Kind> is deprecated", then "; use <group>/<newer> <Kind>" naming the most
// preferred served, not deprecated version that kube's version ordering puts
// after it, when there is one.
func CRDDeprecationWarning(crd *apiextensionsv1.CustomResourceDefinition, ver string) (warning string, ok bool) {
	i := slices.IndexFunc(crd.Spec.Versions, func(v apiextensionsv1.CustomResourceDefinitionVersion) bool { return v.Name == ver })
	if i < 0 || !crd.Spec.Versions[i].Deprecated {
		return "", false
	}
	if w := crd.Spec.Versions[i].DeprecationWarning; w != nil {
		return *w, true
	}
	msg := fmt.Sprintf("%s/%s %s is deprecated", crd.Spec.Group, ver, crd.Spec.Names.Kind)
	var newer []string
	for _, v := range crd.Spec.Versions {
		if v.Served && !v.Deprecated && version.CompareKubeAwareVersionStrings(ver, v.Name) < 0 {
			newer = append(newer, v.Name)
		}
	}
	if len(newer) == 0 {
		return msg, true
	}
	sort.Slice(newer, func(i, j int) bool { return version.CompareKubeAwareVersionStrings(newer[i], newer[j]) > 0 })
	return msg + fmt.Sprintf("; use %s/%s %s", crd.Spec.Group, newer[0], crd.Spec.Names.Kind), true
}

// validateCRDConversion refuses spec.conversion.strategy Webhook, which
// kube accepts: Concord does not call webhooks (conversion or admission)
// yet, so it could not convert custom resources between versions whose
// conversion needs one, and would serve them wrong instead. None — the
// versions differ in apiVersion only — is what it serves.
func validateCRDConversion(crd *apiextensionsv1.CustomResourceDefinition) field.ErrorList {
	if c := crd.Spec.Conversion; c != nil && c.Strategy == apiextensionsv1.WebhookConverter {
		return field.ErrorList{field.NotSupported(field.NewPath("spec", "conversion", "strategy"), c.Strategy,
			[]apiextensionsv1.ConversionStrategyType{apiextensionsv1.NoneConverter})}
	}
	return nil
}

// storeUpdateMetadataErrors are the ObjectMeta causes the store reports
// itself for a replacement (prepareUpdate).
func storeUpdateMetadataErrors(obj, old Object) field.ErrorList {
	errs := apivalidation.ValidateObjectMetaAccessor(obj, false, apivalidation.NameIsDNSSubdomain, field.NewPath("metadata"))
	return append(errs, apivalidation.ValidateObjectMetaAccessorUpdate(obj, old, field.NewPath("metadata"))...)
}

// exceptListed is errs without the causes listed already: kube's
// validation functions check ObjectMeta too, as the store does for every
// resource, and each cause is reported once.
func exceptListed(errs, listed field.ErrorList) field.ErrorList {
	seen := map[string]bool{}
	for _, e := range listed {
		seen[e.Error()] = true
	}
	var out field.ErrorList
	for _, e := range errs {
		if !seen[e.Error()] {
			out = append(out, e)
		}
	}
	return out
}

// crdStatusStrategy is the write path of a CRD's status subresource
// (kube's statusStrategy): the spec stays as stored, and so do labels,
// annotations and owner references. kube 1.37 means to keep its ObjectMeta
// too, but its call is a no-op (ResetObjectMetaForStatus(&new, &new),
// kubernetes/kubernetes#137681), so there a status write can change them
// — an owner reference added through status lets the garbage collector
// delete the CRD. Concord keeps them. Finalizers may change: kube's CRD
// finalizer controller removes its customresourcecleanup finalizer with a
// status update, and removing the last one of a CRD being deleted deletes
// it.
type crdStatusStrategy struct{}

var _ UpdateStrategy = crdStatusStrategy{}

// PrepareForUpdate applies kube's v1 defaults to what was sent (as kube's
// decoder does: an empty storedVersions gets the storage version), then
// carries over the stored spec and metadata.
func (crdStatusStrategy) PrepareForUpdate(obj, old Object) {
	crd, oldCRD := obj.(*apiextensionsv1.CustomResourceDefinition), old.(*apiextensionsv1.CustomResourceDefinition)
	crdScheme.Default(crd)
	crd.Spec = *oldCRD.Spec.DeepCopy()
	finalizers := crd.Finalizers
	metav1.ResetObjectMetaForStatus(&crd.ObjectMeta, oldCRD.ObjectMeta.DeepCopy())
	crd.Finalizers = finalizers
}

// ValidateUpdate is kube's ValidateUpdateCustomResourceDefinitionStatus:
// the accepted names are valid names. The store's own ObjectMeta causes
// are not repeated.
func (crdStatusStrategy) ValidateUpdate(obj, old Object) field.ErrorList {
	return validateCRDUpdate(obj, old, func(crd, old *apiextensions.CustomResourceDefinition) field.ErrorList {
		return apiextensionsvalidation.ValidateUpdateCustomResourceDefinitionStatus(context.Background(), crd, old)
	})
}

// CustomResourceCleanupFinalizer holds a deleted CRD until its custom
// objects are deleted (crdcleanup removes it), as kube's.
const CustomResourceCleanupFinalizer = "customresourcecleanup.apiextensions.k8s.io"

var _ DeleteMarker = crdStrategy{}

// MarkForDeletion is kube's CRD delete (customresourcedefinition/etcd.go):
// the first delete adds the cleanup finalizer and the Terminating
// condition; the custom objects are deleted before the CRD goes.
func (crdStrategy) MarkForDeletion(obj Object) {
	crd := obj.(*apiextensionsv1.CustomResourceDefinition)
	if !slices.Contains(crd.Finalizers, CustomResourceCleanupFinalizer) {
		crd.Finalizers = append(crd.Finalizers, CustomResourceCleanupFinalizer)
	}
	SetCRDCondition(crd, apiextensionsv1.CustomResourceDefinitionCondition{
		Type: apiextensionsv1.Terminating, Status: apiextensionsv1.ConditionTrue, Reason: "InstanceDeletionPending",
		Message: "CustomResourceDefinition marked for deletion; CustomResource deletion will begin soon",
	}, time.Now())
}

// SetCRDCondition sets c in crd's status as kube's SetCRDCondition does:
// the transition time changes only when the condition's status does.
func SetCRDCondition(crd *apiextensionsv1.CustomResourceDefinition, c apiextensionsv1.CustomResourceDefinitionCondition, now time.Time) {
	for i := range crd.Status.Conditions {
		old := &crd.Status.Conditions[i]
		if old.Type != c.Type {
			continue
		}
		if old.Status == c.Status && old.Reason == c.Reason && old.Message == c.Message {
			return
		}
		c.LastTransitionTime = old.LastTransitionTime
		if old.Status != c.Status {
			c.LastTransitionTime = metav1.NewTime(now.Truncate(time.Second))
		}
		*old = c
		return
	}
	c.LastTransitionTime = metav1.NewTime(now.Truncate(time.Second))
	crd.Status.Conditions = append(crd.Status.Conditions, c)
}

// validateCRDUpdate runs one of kube's CRD update validations on the
// internal forms of obj and old, and Concord's refusal of conversion
// webhooks, leaving out the ObjectMeta causes the store reports itself.
func validateCRDUpdate(obj, old Object, validate func(crd, old *apiextensions.CustomResourceDefinition) field.ErrorList) field.ErrorList {
	crd, oldCRD := obj.(*apiextensionsv1.CustomResourceDefinition), old.(*apiextensionsv1.CustomResourceDefinition)
	internal, err := crdInternal(crd)
	if err != nil {
		return field.ErrorList{field.InternalError(field.NewPath(""), err)}
	}
	oldInternal, err := crdInternal(oldCRD)
	if err != nil {
		return field.ErrorList{field.InternalError(field.NewPath(""), err)}
	}
	errs := validate(internal, oldInternal)
	errs = append(errs, validateCRDConversion(crd)...)
	return exceptListed(errs, storeUpdateMetadataErrors(crd, oldCRD))
}
