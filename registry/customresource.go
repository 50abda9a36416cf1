package registry

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	structuraldefaulting "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	structuralpruning "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/pruning"
	apiservervalidation "k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	"k8s.io/apiextensions-apiserver/pkg/registry/customresource/tableconvertor"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/util/jsonpath"
	"k8s.io/kube-openapi/pkg/validation/spec"
)

// CustomResource returns the declaration that serves version of crd's
// custom resources, as kube-apiserver 1.37's apiextensions-apiserver serves
// them (pkg/apiserver/customresource_handler.go, pkg/registry/customresource),
// built with its libraries:
//
//   - names from status.acceptedNames, as kube serves them once its naming
//     controller accepted spec.names (spec.names while none are accepted:
//     Concord has no such controller yet); Namespaced from spec.scope;
//     kube's name rule for custom objects, a DNS subdomain;
//   - objects are *unstructured.Unstructured, written through the same
//     Store as every resource (one guarded Txn per write, 409, 412, 428,
//     dryRun, generateName, finalizers), never replaced without a version
//     (kube's strategy: AllowUnconditionalUpdate false);
//   - keys <prefix>/<group>/<plural>/<namespace>/<name> (StoragePrefix), one
//     key space for every version: objects are stored in the storage
//     version, and a declaration of another version converts them as the
//     None strategy does (apiVersion only) through Storage;
//   - the Strategy is kube's from the version's structural schema
//     (customResourceStrategy): pruning, defaulting on create, update and
//     read, ObjectMeta and embedded resources, list types, the OpenAPI
//     validation with ratcheting, CEL rules with kube's cost budget, the
//     status subresource (StatusStrategy) and the scale paths' checks;
//   - selectableFields and additionalPrinterColumns (kube's table
//     convertor: a Name column, then the CRD's, or Age when it has none).
//
// The HTTP layer learns which fields a request's body had that the schema
// prunes from the Strategy's DecodeRequest (RequestDecoder). Versions
// neither served nor stored, and versions other than the storage version of
// a CRD with a conversion webhook, are an error.
func CustomResource(crd *apiextensionsv1.CustomResourceDefinition, version string) (*Resource, error) {
	d, err := newCustomResourceDefinition(crd)
	if err != nil {
		return nil, err
	}
	res, err := d.resource(version)
	if err != nil {
		return nil, err
	}
	if version != d.storageVersion {
		of, err := d.resource(d.storageVersion)
		if err != nil {
			return nil, err
		}
		res.Storage = &StorageVersion{Of: of, ToStored: res.Strategy.(*customResourceStrategy).toStored, FromStored: res.ReadStored}
	}
	return res, nil
}

// CustomResourceDefinitionOf is the CRD whose version (res.GroupVersion's)
// res serves, if res was built by CustomResource, with kube's v1 defaults
// applied; nil for any other resource. It is shared: read it, never change
// it. The OpenAPI documents are built from it, as kube builds them.
func CustomResourceDefinitionOf(res *Resource) *apiextensionsv1.CustomResourceDefinition {
	if s, ok := res.Strategy.(*customResourceStrategy); ok {
		return s.def.crd
	}
	return nil
}

// RequestDecoder is implemented by the Strategy of a resource whose objects
// need more than JSON decoding when they come in a request: a custom
// resource's are pruned of what their schema does not declare, and
// defaulted, as kube-apiserver's decoder does (CustomResource).
type RequestDecoder interface {
	// DecodeRequest finishes in place obj, just decoded from a request
	// body (a create, a replace, a status write, a patch's result), as
	// kube's decoder does: its ObjectMeta (and embedded resources') pruned
	// of unknown fields, the object pruned by the served version's schema
	// (x-kubernetes-preserve-unknown-fields keeps what it covers), non-
	// nullable nulls dropped, then defaulted. It returns the paths of the
	// fields it pruned, as kube reports them ("metadata.foo", "spec.x",
	// "spec.items[0].y"): for fieldValidation=Strict the HTTP layer answers
	// 400 `strict decoding error: unknown field "spec.x", unknown field
	// "spec.y"`, for Warn it sends one warning `unknown field "spec.x"` per
	// path, and for Ignore nothing. Metadata that does not decode
	// (labels that are not a map of strings) is an error, a 400 as kube's.
	//
	// The store calls it for the objects given to Create, Update and
	// UpdateStatus, unless WriteOptions.Decoded says the caller did (the
	// HTTP layer, for the paths); Patch calls it for the patched object. A
	// second call on the same object prunes and reports nothing, but costs
	// as much as the first.
	DecodeRequest(obj Object) (pruned []string, err error)
}

// customResourceDefinition is what every version of one CRD shares.
type customResourceDefinition struct {
	crd   *apiextensionsv1.CustomResourceDefinition // defaulted copy
	names apiextensionsv1.CustomResourceDefinitionNames
	// storageVersion is the version objects are stored in.
	storageVersion string
	// schemas are the structural schemas of the versions that have one,
	// defaults pruned, by version; versions holds every version name, the
	// apiVersions stored objects may have.
	schemas map[string]*structuralschema.Structural
	// passes are the passes each schema needs (schemaPasses).
	passes                map[*structuralschema.Structural]schemaPasses
	versions              map[string]bool
	preserveUnknownFields bool
	webhook               bool
	// mergeTypes are what server-side apply merges by, built at the first
	// write (customresource_managedfields.go).
	mergeTypes func() *mergeTypes
}

func newCustomResourceDefinition(in *apiextensionsv1.CustomResourceDefinition) (*customResourceDefinition, error) {
	crd := in.DeepCopy()
	// A CRD read from storage has kube's v1 defaults; one built by hand
	// gets them here (conversion None, listKind, singular, column
	// priorities), as kube's decoder would have set them.
	apiextensionsv1.SetObjectDefaults_CustomResourceDefinition(crd)
	d := &customResourceDefinition{
		crd:                   crd,
		names:                 crd.Status.AcceptedNames,
		schemas:               map[string]*structuralschema.Structural{},
		passes:                map[*structuralschema.Structural]schemaPasses{},
		versions:              map[string]bool{},
		preserveUnknownFields: crd.Spec.PreserveUnknownFields,
		webhook:               crd.Spec.Conversion != nil && crd.Spec.Conversion.Strategy == apiextensionsv1.WebhookConverter,
	}
	d.mergeTypes = sync.OnceValue(d.buildMergeTypes)
	if d.names.Plural == "" {
		d.names = crd.Spec.Names
		if d.names.Singular == "" {
			d.names.Singular = strings.ToLower(d.names.Kind)
		}
		if d.names.ListKind == "" {
			d.names.ListKind = d.names.Kind + "List"
		}
	}
	if d.names.Plural == "" || d.names.Kind == "" || crd.Spec.Group == "" {
		return nil, fmt.Errorf("registry: CustomResourceDefinition %s names no group, plural or kind", crd.Name)
	}
	for _, v := range crd.Spec.Versions {
		d.versions[v.Name] = true
		if v.Storage {
			d.storageVersion = v.Name
		}
		if v.Schema == nil {
			continue
		}
		internal, err := internalValidation(v.Schema)
		if err != nil {
			return nil, fmt.Errorf("registry: CustomResourceDefinition %s version %s: %w", crd.Name, v.Name, err)
		}
		// As kube's handler: the schema is structural (CRD validation
		// made sure) unless preserveUnknownFields, and the defaults in it
		// are pruned by it, so defaulting adds nothing pruning would drop.
		s, err := structuralschema.NewStructural(internal.OpenAPIV3Schema)
		if err != nil && !d.preserveUnknownFields {
			return nil, fmt.Errorf("registry: CustomResourceDefinition %s version %s: the schema is not structural: %w", crd.Name, v.Name, err)
		}
		if !d.preserveUnknownFields {
			s = s.DeepCopy()
			if err := structuraldefaulting.PruneDefaults(s); err != nil {
				return nil, fmt.Errorf("registry: CustomResourceDefinition %s version %s: prune defaults: %w", crd.Name, v.Name, err)
			}
		}
		d.schemas[v.Name] = s
		d.passes[s] = passesOf(s)
	}
	if d.storageVersion == "" {
		return nil, fmt.Errorf("registry: CustomResourceDefinition %s has no storage version", crd.Name)
	}
	return d, nil
}

// internalValidation is a v1 schema in apiextensions' internal form, which
// kube's schema libraries read.
func internalValidation(in *apiextensionsv1.CustomResourceValidation) (*apiextensions.CustomResourceValidation, error) {
	out := &apiextensions.CustomResourceValidation{}
	if err := apiextensionsv1.Convert_v1_CustomResourceValidation_To_apiextensions_CustomResourceValidation(in, out, nil); err != nil {
		return nil, fmt.Errorf("convert the schema to the internal version: %w", err)
	}
	return out, nil
}

func (d *customResourceDefinition) gvk(version string) schema.GroupVersionKind {
	return schema.GroupVersionKind{Group: d.crd.Spec.Group, Version: version, Kind: d.names.Kind}
}

// resource is the declaration of version, without Storage.
func (d *customResourceDefinition) resource(version string) (*Resource, error) {
	i := slices.IndexFunc(d.crd.Spec.Versions, func(v apiextensionsv1.CustomResourceDefinitionVersion) bool { return v.Name == version })
	if i < 0 {
		return nil, fmt.Errorf("registry: CustomResourceDefinition %s has no version %q", d.crd.Name, version)
	}
	v := d.crd.Spec.Versions[i]
	if !v.Served && !v.Storage {
		return nil, fmt.Errorf("registry: version %q of CustomResourceDefinition %s is neither served nor stored", version, d.crd.Name)
	}
	if d.webhook && version != d.storageVersion {
		return nil, fmt.Errorf("registry: version %q of CustomResourceDefinition %s needs its conversion webhook, which Concord does not call", version, d.crd.Name)
	}
	strategy, err := d.strategy(v)
	if err != nil {
		return nil, err
	}
	gvk, listGVK := d.gvk(version), d.gvk(version)
	listGVK.Kind = d.names.ListKind
	res := &Resource{
		GroupVersion:  gvk.GroupVersion(),
		Kind:          gvk.Kind,
		ListKind:      d.names.ListKind,
		Plural:        d.names.Plural,
		StoragePrefix: d.crd.Spec.Group + "/" + d.names.Plural,
		Singular:      d.names.Singular,
		ShortNames:    d.names.ShortNames,
		Categories:    d.names.Categories,
		Namespaced:    d.crd.Spec.Scope == apiextensionsv1.NamespaceScoped,
		// kube's customResourceValidator checks names as DNS subdomains
		// (its generic path-segment check then adds nothing).
		NameValidation: apivalidation.NameIsDNSSubdomain,
		New: func() Object {
			u := &unstructured.Unstructured{}
			u.SetGroupVersionKind(gvk)
			return u
		},
		NewList: func() runtime.Object {
			l := &unstructured.UnstructuredList{}
			l.SetGroupVersionKind(listGVK)
			return l
		},
		Strategy: strategy,
		// kube's update validation ratchets on the stored object: a
		// replace is judged against it only.
		ValidateCreatesOnly: true,
		ReadStored:          strategy.readStored,
		SelectableFields:    strategy.selectableFieldNames(),
		FieldSet:            strategy.fieldSet,
		TableColumnsOnly:    true,
	}
	if strategy.status {
		res.StatusStrategy = customResourceStatusStrategy{strategy}
		// kube's strategies' reset fields.
		res.ResetFields = []string{"status"}
		res.StatusResetFields = []string{"metadata", "spec"}
	}
	if err := d.table(res, v); err != nil {
		return nil, err
	}
	return res, nil
}

// table sets res's columns and cells from kube's table convertor for
// custom resources: Name, then the version's additionalPrinterColumns (Age
// when it declares none), each cell found by its JSONPath.
func (d *customResourceDefinition) table(res *Resource, v apiextensionsv1.CustomResourceDefinitionVersion) error {
	columns := v.AdditionalPrinterColumns
	if len(columns) == 0 {
		columns = []apiextensionsv1.CustomResourceColumnDefinition{{
			Name: "Age", Type: "date", JSONPath: ".metadata.creationTimestamp",
			Description: metav1.ObjectMeta{}.SwaggerDoc()["creationTimestamp"],
		}}
	}
	// A column whose JSONPath does not parse ends the columns there: kube
	// logs the error and serves what the convertor has, as this does.
	convertor, _ := tableconvertor.New(columns)
	headers, err := convertor.ConvertToTable(context.Background(), &unstructured.UnstructuredList{}, nil)
	if err != nil {
		return fmt.Errorf("registry: CustomResourceDefinition %s version %s: table columns: %w", d.crd.Name, v.Name, err)
	}
	res.TableColumns = headers.ColumnDefinitions
	// The convertor's JSONPath parsers keep state while they search.
	var mu sync.Mutex
	res.TableCells = func(obj Object) []any {
		mu.Lock()
		defer mu.Unlock()
		table, err := convertor.ConvertToTable(context.Background(), obj, nil)
		if err != nil || len(table.Rows) != 1 {
			return make([]any, len(res.TableColumns)) // kube answers the error; a row of nulls here
		}
		return table.Rows[0].Cells
	}
	return nil
}

// customResourceStrategy is kube's customResourceStrategy for one version
// (pkg/registry/customresource/strategy.go and validator.go), with the
// decoding kube does in its codecs (customresource_handler.go's
// unstructuredSchemaCoercer and unstructuredDefaulter).
type customResourceStrategy struct {
	def        *customResourceDefinition
	version    string
	kind       schema.GroupVersionKind
	namespaced bool
	// structural is the version's schema (nil without one): pruning,
	// defaulting, list types, embedded resources, CEL.
	structural *structuralschema.Structural
	// validator is the OpenAPI validation of the whole object, and
	// statusValidator that of .status, for status writes; openapi and
	// statusOpenAPI accept what they would (openAPIChecker).
	validator, statusValidator apiservervalidation.SchemaValidator
	openapi, statusOpenAPI     *openAPIChecker
	// cel holds the compiled x-kubernetes-validations rules (nil: none).
	cel *cel.Validator
	// status: the version has a status subresource; scale its scale one.
	status bool
	scale  *apiextensions.CustomResourceSubresourceScale
	// selectable are the version's selectableFields; mu guards their
	// JSONPath parsers, which keep state while they search.
	selectable []selectableField
	mu         sync.Mutex
}

type selectableField struct {
	name string
	path *jsonpath.JSONPath
	err  error
}

var (
	_ Strategy       = (*customResourceStrategy)(nil)
	_ RequestDecoder = (*customResourceStrategy)(nil)
)

func (d *customResourceDefinition) strategy(v apiextensionsv1.CustomResourceDefinitionVersion) (*customResourceStrategy, error) {
	s := &customResourceStrategy{
		def:        d,
		version:    v.Name,
		kind:       d.gvk(v.Name),
		namespaced: d.crd.Spec.Scope == apiextensionsv1.NamespaceScoped,
		structural: d.schemas[v.Name],
	}
	var props *apiextensions.JSONSchemaProps
	if v.Schema != nil {
		internal, err := internalValidation(v.Schema)
		if err != nil {
			return nil, fmt.Errorf("registry: CustomResourceDefinition %s version %s: %w", d.crd.Name, v.Name, err)
		}
		props = internal.OpenAPIV3Schema
	}
	validator, openapi, err := apiservervalidation.NewSchemaValidator(props)
	if err != nil {
		return nil, fmt.Errorf("registry: CustomResourceDefinition %s version %s: %w", d.crd.Name, v.Name, err)
	}
	s.validator, s.openapi = validator, newOpenAPIChecker(openapi)
	if sub := v.Subresources; sub != nil {
		if sub.Status != nil {
			s.status = true
			// For the status subresource, only the status schema.
			if props != nil && props.Properties != nil {
				if statusProps, ok := props.Properties["status"]; ok {
					var statusOpenAPI *spec.Schema
					if s.statusValidator, statusOpenAPI, err = apiservervalidation.NewSchemaValidator(&statusProps); err != nil {
						return nil, fmt.Errorf("registry: CustomResourceDefinition %s version %s: %w", d.crd.Name, v.Name, err)
					}
					s.statusOpenAPI = newOpenAPIChecker(statusOpenAPI)
				}
			}
		}
		if sub.Scale != nil {
			s.scale = &apiextensions.CustomResourceSubresourceScale{}
			if err := apiextensionsv1.Convert_v1_CustomResourceSubresourceScale_To_apiextensions_CustomResourceSubresourceScale(sub.Scale, s.scale, nil); err != nil {
				return nil, fmt.Errorf("registry: CustomResourceDefinition %s version %s: %w", d.crd.Name, v.Name, err)
			}
		}
	}
	if s.structural != nil {
		// CEL programs are compiled here, once, with kube's per-call limit.
		s.cel = cel.NewValidator(s.structural, true, celPerCallLimit)
	}
	for _, sf := range v.SelectableFields {
		f := selectableField{name: strings.TrimPrefix(sf.JSONPath, ".")}
		f.path = jsonpath.New("selectableField")
		f.path.AllowMissingKeys(true)
		f.err = f.path.Parse("{" + sf.JSONPath + "}")
		s.selectable = append(s.selectable, f)
	}
	return s, nil
}

// DecodeRequest implements RequestDecoder.
func (s *customResourceStrategy) DecodeRequest(obj Object) ([]string, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return nil, fmt.Errorf("registry: %T is not an unstructured %s", obj, s.kind.Kind)
	}
	if u.GetAPIVersion() == "" && u.GetKind() == "" {
		u.SetGroupVersionKind(s.kind) // kube's decoder takes them from the URL
	}
	pruned, err := s.def.coerce(u, s.version, coercion{trackUnknown: true})
	if err != nil {
		return nil, apierrors.NewBadRequest(err.Error())
	}
	s.def.applyDefaults(u.Object, s.structural)
	return pruned, nil
}

// coercion says how coerce treats an object: from storage kube drops
// metadata fields of the wrong type and gives generation 1 to objects
// without one; from a request it reports what it prunes.
type coercion struct {
	dropInvalidMetadata, repairGeneration, trackUnknown bool
}

// coerce is kube's unstructuredSchemaCoercer.apply with the schema of
// version: ObjectMeta round-tripped through its Go type (unknown fields
// dropped), the object pruned by the schema, non-nullable nulls dropped and
// embedded resources coerced; apiVersion, kind and metadata restored.
func (d *customResourceDefinition) coerce(u *unstructured.Unstructured, version string, c coercion) (unknown []string, _ error) {
	kind, foundKind, err := unstructured.NestedString(u.Object, "kind")
	if err != nil {
		return nil, err
	}
	apiVersion, foundAPIVersion, err := unstructured.NestedString(u.Object, "apiVersion")
	if err != nil {
		return nil, err
	}
	objectMeta, foundObjectMeta, metaUnknown, err := objectMetaOf(u.Object, c)
	if err != nil {
		return nil, err
	}
	unknown = append(unknown, metaUnknown...)
	s := d.schemas[version]
	if !d.preserveUnknownFields {
		unknown = append(unknown, structuralpruning.PruneWithOptions(u.Object, s, true, structuralschema.UnknownFieldPathOptions{TrackUnknownFieldPaths: c.trackUnknown})...)
		pruneNulls(u.Object, s)
	}
	embeddedUnknown, err := d.coerceEmbedded(u.Object, s, c)
	if err != nil {
		return nil, err
	}
	unknown = append(unknown, embeddedUnknown...)
	if c.repairGeneration && objectMeta != nil && objectMeta.Generation == 0 {
		objectMeta.Generation = 1 // very old objects have none
	}
	if foundKind {
		u.SetKind(kind)
	}
	if foundAPIVersion {
		u.SetAPIVersion(apiVersion)
	}
	if foundObjectMeta {
		if err := setObjectMeta(u.Object, objectMeta); err != nil {
			return nil, err
		}
	}
	return unknown, nil
}

// customResourceStrategy's Strategy methods, each kube's.

// PrepareForCreate drops obj's status when the status subresource owns it,
// and sets generation 1. (obj was decoded as kube's decoder does: see
// WriteOptions.Decoded.)
func (s *customResourceStrategy) PrepareForCreate(obj Object) {
	u := obj.(*unstructured.Unstructured)
	if s.status {
		delete(u.Object, "status") // create cannot set status
	}
	u.SetGeneration(1)
}

// PrepareForUpdate keeps the stored status when the status subresource
// owns it, and counts a new generation when anything but metadata changed.
func (s *customResourceStrategy) PrepareForUpdate(obj, old Object) {
	u, o := obj.(*unstructured.Unstructured), old.(*unstructured.Unstructured)
	if s.status {
		_, hasNew := u.Object["status"]
		oldStatus, hasOld := o.Object["status"]
		switch {
		case hasOld:
			u.Object["status"] = runtime.DeepCopyJSONValue(oldStatus)
		case hasNew:
			delete(u.Object, "status")
		}
	}
	if !equalExceptMetadata(u.Object, o.Object) {
		u.SetGeneration(o.GetGeneration() + 1)
	}
}

// Validate is kube's customResourceStrategy.Validate, but for ObjectMeta,
// which the store checks (with NameValidation, kube's DNS subdomain rule).
func (s *customResourceStrategy) Validate(obj Object) field.ErrorList {
	u := obj.(*unstructured.Unstructured)
	ctx := context.TODO()
	if errs := s.validateTypeMeta(u); len(errs) > 0 {
		return errs
	}
	var errs field.ErrorList
	metadata, metaErrs := getObjectMeta(u)
	errs = append(errs, metaErrs...)
	if !s.openapi.accepts(u.UnstructuredContent()) {
		errs = append(errs, apiservervalidation.ValidateCustomResource(nil, u.UnstructuredContent(), s.validator)...)
	}
	errs = append(errs, s.validateScaleSpec(u)...)
	errs = append(errs, s.validateScaleStatus(u)...)
	errs = append(errs, s.def.validateEmbedded(ctx, u.Object, s.structural)...)
	errs = append(errs, s.def.validateListSetsAndMaps(s.structural, u.Object)...)
	if s.cel != nil {
		// kube's blocking check sees its own ObjectMeta errors too.
		blocking := errs
		if metadata != nil {
			blocking = append(apivalidation.ValidateObjectMeta(metadata, s.namespaced, apivalidation.NameIsDNSSubdomain, field.NewPath("metadata")), errs...)
		}
		if has, err := hasBlockingErr(blocking); has {
			errs = append(errs, err)
		} else {
			celErrs, _ := s.cel.Validate(ctx, nil, s.structural, u.Object, nil, celRuntimeCostBudget)
			errs = append(errs, celErrs...)
		}
	}
	return errs
}

// ValidateUpdate is kube's customResourceStrategy.ValidateUpdate: the
// OpenAPI and CEL validation ratchet on old (an unchanged invalid value
// stays allowed), and list types are checked only if old's were valid.
func (s *customResourceStrategy) ValidateUpdate(obj, old Object) field.ErrorList {
	return s.validateUpdateContext(context.TODO(), obj, old)
}

// validateUpdateContext is ValidateUpdate, adding kube's warnings to ctx
// (the CEL rules' ratcheting warnings: a rule an unchanged value fails).
func (s *customResourceStrategy) validateUpdateContext(ctx context.Context, obj, old Object) field.ErrorList {
	u, o := obj.(*unstructured.Unstructured), old.(*unstructured.Unstructured)
	correlated := newCorrelatedObject(u.Object, o.Object, s.structural)
	if errs := s.validateTypeMeta(u); len(errs) > 0 {
		return errs
	}
	var errs field.ErrorList
	errs = append(errs, validateObjectMetaUpdate(ctx, u, o, s.namespaced)...)
	errs = append(errs, validateSchemaUpdate(nil, u.UnstructuredContent(), o.UnstructuredContent(), s.validator, s.openapi, apiservervalidation.WithRatcheting(correlated))...)
	errs = append(errs, s.validateScaleSpec(u)...)
	errs = append(errs, s.validateScaleStatus(u)...)
	errs = append(errs, s.def.validateEmbedded(ctx, u.Object, s.structural)...)
	if oldErrs := s.def.validateListSetsAndMaps(s.structural, o.Object); len(oldErrs) == 0 {
		errs = append(errs, s.def.validateListSetsAndMaps(s.structural, u.Object)...)
	}
	if s.cel != nil {
		if has, err := hasBlockingErr(errs); has {
			errs = append(errs, err)
		} else {
			celErrs, _ := s.cel.Validate(ctx, nil, s.structural, u.Object, o.Object, celRuntimeCostBudget, cel.WithRatcheting(correlated))
			errs = append(errs, celErrs...)
		}
	}
	return errs
}

// validateTypeMeta is kube's: apiVersion and kind must be this version's.
func (s *customResourceStrategy) validateTypeMeta(u *unstructured.Unstructured) field.ErrorList {
	var errs field.ErrorList
	if u.GetKind() != s.kind.Kind {
		errs = append(errs, field.Invalid(field.NewPath("kind"), u.GetKind(), fmt.Sprintf("must be %v", s.kind.Kind)))
	}
	if want := s.kind.Group + "/" + s.kind.Version; u.GetAPIVersion() != want {
		errs = append(errs, field.Invalid(field.NewPath("apiVersion"), u.GetAPIVersion(), fmt.Sprintf("must be %v", want)))
	}
	return errs
}

// readStored reads a stored object as kube's storage codec does: of any
// version of the CRD, coerced and defaulted with that version's schema
// (malformed metadata dropped, a missing generation repaired), then
// converted as the None strategy does — apiVersion only — to this version
// and coerced with its schema.
func (s *customResourceStrategy) readStored(obj Object) (Object, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return nil, fmt.Errorf("%T is not an unstructured %s", obj, s.kind.Kind)
	}
	gvk := u.GroupVersionKind()
	if gvk.Group != s.kind.Group || gvk.Kind != s.kind.Kind || !s.def.versions[gvk.Version] {
		return nil, fmt.Errorf("the value is a %s, not a version of %s", gvk, s.kind.GroupKind())
	}
	if gvk.Version != s.version && s.def.webhook {
		return nil, fmt.Errorf("the value is a %s: converting it to %s needs the CRD's conversion webhook", gvk, s.version)
	}
	if _, err := s.def.coerce(u, gvk.Version, coercion{dropInvalidMetadata: true, repairGeneration: true}); err != nil {
		return nil, err
	}
	s.def.applyDefaults(u.Object, s.def.schemas[gvk.Version])
	if gvk.Version != s.version {
		u.SetGroupVersionKind(s.kind)
		if _, err := s.def.coerce(u, s.version, coercion{}); err != nil {
			return nil, err
		}
	}
	return u, nil
}

// toStored is obj converted to the storage version as kube's None
// strategy converts it (apiVersion only), then coerced with that version's
// schema; obj itself is unchanged.
func (s *customResourceStrategy) toStored(obj Object) (Object, error) {
	u := obj.(*unstructured.Unstructured).DeepCopy()
	u.SetGroupVersionKind(s.def.gvk(s.def.storageVersion))
	if _, err := s.def.coerce(u, s.def.storageVersion, coercion{}); err != nil {
		return nil, err
	}
	return u, nil
}

// selectableFieldNames are the fields a fieldSelector may name: kube's
// metadata.name (and metadata.namespace when namespaced), then the
// version's selectableFields.
func (s *customResourceStrategy) selectableFieldNames() []string {
	names := []string{"metadata.name"}
	if s.namespaced {
		names = append(names, "metadata.namespace")
	}
	for _, f := range s.selectable {
		names = append(names, f.name)
	}
	return names
}

// fieldSet is kube's customResourceStrategy.selectableFields: each
// selectable field's value printed with fmt.Sprint, "" when missing. An
// object whose value cannot be read (a path that is a list) has none of the
// custom fields, so no selector of them matches it; kube fails the list.
func (s *customResourceStrategy) fieldSet(obj Object) fields.Set {
	set := fields.Set{"metadata.name": obj.GetName()}
	if s.namespaced {
		set["metadata.namespace"] = obj.GetNamespace()
	}
	if len(s.selectable) == 0 {
		return set
	}
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return set
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, f := range s.selectable {
		if f.err != nil {
			continue
		}
		results, err := f.path.FindResults(u.Object)
		if err != nil {
			continue
		}
		var value any
		if len(results) > 0 && len(results[0]) > 0 {
			if len(results) > 1 || len(results[0]) > 1 {
				continue
			}
			value = results[0][0].Interface()
		}
		if value != nil {
			set[f.name] = fmt.Sprint(value)
		} else {
			set[f.name] = ""
		}
	}
	return set
}

// customResourceStatusStrategy is kube's statusStrategy: a status write
// takes the stored object and replaces its status only; the OpenAPI
// validation is of the status, ratcheting on the stored one.
type customResourceStatusStrategy struct {
	s *customResourceStrategy
}

var _ UpdateStrategy = customResourceStatusStrategy{}

// PrepareForUpdate keeps everything of old but obj's status (and
// managedFields, which track the status write's fields).
func (st customResourceStatusStrategy) PrepareForUpdate(obj, old Object) {
	u, o := obj.(*unstructured.Unstructured), old.(*unstructured.Unstructured)
	status, ok := u.Object["status"]
	managedFields := u.GetManagedFields()
	*u = *o.DeepCopy()
	u.SetManagedFields(managedFields)
	if ok {
		u.Object["status"] = status
	} else {
		delete(u.Object, "status")
	}
}

// ValidateUpdate is kube's statusStrategy.ValidateUpdate.
func (st customResourceStatusStrategy) ValidateUpdate(obj, old Object) field.ErrorList {
	return st.validateUpdateContext(context.TODO(), obj, old)
}

// validateUpdateContext is ValidateUpdate, adding kube's warnings to ctx.
func (st customResourceStatusStrategy) validateUpdateContext(ctx context.Context, obj, old Object) field.ErrorList {
	s := st.s
	u, o := obj.(*unstructured.Unstructured), old.(*unstructured.Unstructured)
	correlated := newCorrelatedObject(u.Object, o.Object, s.structural)
	var errs field.ErrorList
	if typeErrs := s.validateTypeMeta(u); len(typeErrs) > 0 {
		errs = typeErrs
	} else {
		errs = append(errs, validateObjectMetaUpdate(ctx, u, o, s.namespaced)...)
		if status, ok := u.Object["status"]; ok {
			var opts []apiservervalidation.ValidationOption
			if s.structural != nil {
				opts = append(opts, apiservervalidation.WithRatcheting(correlated.Key("status")))
			}
			errs = append(errs, validateSchemaUpdate(field.NewPath("status"), status, o.Object["status"], s.statusValidator, s.statusOpenAPI, opts...)...)
		}
		errs = append(errs, s.validateScaleStatus(u)...)
	}
	if newErrs := s.def.validateListSetsAndMaps(s.structural, u.Object); len(newErrs) > 0 {
		if oldErrs := s.def.validateListSetsAndMaps(s.structural, o.Object); len(oldErrs) == 0 {
			errs = append(errs, newErrs...)
		}
	}
	if s.cel != nil {
		if has, err := hasBlockingErr(errs); has {
			errs = append(errs, err)
		} else {
			celErrs, _ := s.cel.Validate(ctx, nil, s.structural, u.Object, o.Object, celRuntimeCostBudget, cel.WithRatcheting(correlated))
			errs = append(errs, celErrs...)
		}
	}
	return errs
}

// hasBlockingErr is kube's: OpenAPI type, maxLength, maxItems, required
// and enum failures keep the CEL rules from running, and say so in a cause
// of their own.
func hasBlockingErr(errs field.ErrorList) (bool, *field.Error) {
	for _, err := range errs {
		switch err.Type {
		case field.ErrorTypeNotSupported, field.ErrorTypeRequired, field.ErrorTypeTooLong, field.ErrorTypeTooMany, field.ErrorTypeTypeInvalid:
			return true, field.Invalid(nil, nil, "some validation rules were not checked because the object was invalid; correct the existing errors to complete validation")
		}
	}
	return false, nil
}
