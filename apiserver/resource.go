package apiserver

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/validation/path"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metainternalversionscheme "k8s.io/apimachinery/pkg/apis/meta/internalversion/scheme"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/concord-dev/concord/apiserver/authentication/serviceaccount"
	"github.com/concord-dev/concord/registry"
)

// resourceHandler serves one request to a resource's collection or item
// path (routeResource): namespace and name are the path's.
type resourceHandler struct {
	store           *registry.Store
	metrics         *metrics
	namespace, name string
	// tokens answers TokenRequests; nil: the token subresource is 404.
	tokens *serviceaccount.Issuer
}

func (h *resourceHandler) collection(w http.ResponseWriter, r *http.Request) {
	namespace, allNamespaces := h.namespace, false
	if h.store.Resource.Namespaced && namespace == "" {
		allNamespaces = true
	}
	describeResource(r, h.store.Resource, collectionVerb(r.Method), namespace, "")
	if err := checkPathSegments(namespace); err != nil {
		writeError(w, r, err)
		return
	}
	if err := h.checkAccept(r); err != nil {
		writeError(w, r, err)
		return
	}
	switch r.Method {
	case http.MethodGet:
		h.list(w, r, namespace)
	case http.MethodPost:
		if allNamespaces {
			h.methodNotAllowed(w, r, "create")
			return
		}
		h.create(w, r, namespace)
	case http.MethodDelete:
		if !slices.Contains(h.store.Resource.Verbs(), "deletecollection") {
			h.methodNotAllowed(w, r, "deletecollection")
			return
		}
		h.deleteCollection(w, r, namespace)
	default:
		h.methodNotAllowed(w, r, verb(r.Method))
	}
}

func (h *resourceHandler) item(w http.ResponseWriter, r *http.Request) {
	namespace, name := h.namespace, h.name
	describeResource(r, h.store.Resource, r.Method, namespace, name)
	if err := checkPathSegments(namespace, name); err != nil {
		writeError(w, r, err)
		return
	}
	if err := h.checkAccept(r); err != nil {
		writeError(w, r, err)
		return
	}
	switch r.Method {
	case http.MethodGet:
		h.get(w, r, namespace, name)
	case http.MethodPut:
		h.update(w, r, namespace, name)
	case http.MethodPatch:
		h.patch(w, r, namespace, name)
	case http.MethodDelete:
		h.delete(w, r, namespace, name)
	default:
		h.methodNotAllowed(w, r, verb(r.Method))
	}
}

// writeWritten answers a write with the object written. A JSON client gets
// the bytes just stored, with the resourceVersion inserted, rather than a
// second encoding of the same object. A dry run stored nothing: its answer
// carries the stored resourceVersion but not the stored bytes, so it is
// always encoded. A client that asks for metadata alone gets it.
func (h *resourceHandler) writeWritten(w http.ResponseWriter, r *http.Request, code int, obj registry.Object, dryRun bool) {
	if target := responseTransform(r); target.partial() {
		writePartial(w, r, target, code, obj)
		return
	}
	if info, err := responseSerializer(r); err == nil && !dryRun && info.MediaType == runtime.ContentTypeJSON && !wantsPretty(r) {
		if raw, ok := h.store.WrittenJSON(obj); ok {
			writeJSON(w, r, code, raw)
			return
		}
	}
	h.writeObject(w, r, code, obj)
}

// writeObject encodes obj in the format the client accepts of those the
// resource is served in (JSON and YAML only for a custom resource).
func (h *resourceHandler) writeObject(w http.ResponseWriter, r *http.Request, code int, obj runtime.Object) {
	writeObjectOf(w, r, h.store.Resource, code, obj)
}

// checkAccept refuses (406) before anything is done a request whose client
// accepts no format the resource is served in.
func (h *resourceHandler) checkAccept(r *http.Request) error {
	if !isCustom(h.store.Resource) {
		return nil
	}
	return checkCustomAccept(r)
}

// writeOptions reads a write's query options (dryRun, fieldManager,
// fieldValidation; kind names the options type in errors) and turns If-Match
// (strong comparison) and If-None-Match (weak comparison; "*" means
// create-only) into the registry's conditions. A malformed header is 400.
func writeOptions(r *http.Request, kind string) (registry.WriteOptions, error) {
	return checkedWriteOptions(r, kind, nil)
}

// checkedWriteOptions is writeOptions, answering errs (the options' own
// checks) among the 422's causes.
func checkedWriteOptions(r *http.Request, kind string, errs field.ErrorList) (registry.WriteOptions, error) {
	var conds registry.WriteOptions
	q := r.URL.Query()
	conds.FieldManager = managerOrUserAgent(q.Get("fieldManager"), r.UserAgent())
	for _, v := range q["dryRun"] {
		if v != metav1.DryRunAll {
			errs = append(errs, field.NotSupported(field.NewPath("dryRun"), v, []string{metav1.DryRunAll}))
		}
	}
	conds.DryRun = len(q["dryRun"]) > 0
	if fm := q.Get("fieldManager"); len(fm) > 128 {
		errs = append(errs, field.TooLong(field.NewPath("fieldManager"), fm, 128))
	} else if strings.IndexFunc(fm, func(c rune) bool { return c < 0x20 || c > 0x7e }) >= 0 {
		errs = append(errs, field.Invalid(field.NewPath("fieldManager"), fm, "must consist of printable characters"))
	}
	switch fv := q.Get("fieldValidation"); fv {
	case "", metav1.FieldValidationIgnore, metav1.FieldValidationWarn, metav1.FieldValidationStrict:
		conds.StrictFields = fv == metav1.FieldValidationStrict
	default:
		errs = append(errs, field.NotSupported(field.NewPath("fieldValidation"), fv,
			[]string{metav1.FieldValidationIgnore, metav1.FieldValidationWarn, metav1.FieldValidationStrict}))
	}
	if len(errs) > 0 {
		return conds, apierrors.NewInvalid(schema.GroupKind{Group: metav1.GroupName, Kind: kind}, "", errs)
	}
	ifMatch, ok, err := headerTags(r, "If-Match")
	if err != nil {
		return conds, apierrors.NewBadRequest(err.Error())
	}
	if ok {
		conds.IfMatch = ifMatch.strongMatch
	}
	ifNoneMatch, ok, err := headerTags(r, "If-None-Match")
	if err != nil {
		return conds, apierrors.NewBadRequest(err.Error())
	}
	if ok {
		conds.IfNoneMatch = ifNoneMatch.weakMatch
		conds.CreateOnly = ifNoneMatch.any && r.Method == http.MethodPut
	}
	return conds, nil
}

// managerOrUserAgent is kube's name of a write's manager: the fieldManager
// given, else the User-Agent up to its first "/", printable characters
// only, at most 128 bytes ("kubectl", "Go-http-client").
func managerOrUserAgent(manager, userAgent string) string {
	if manager != "" {
		return manager
	}
	var b strings.Builder
	for _, c := range strings.Split(userAgent, "/")[0] {
		if !unicode.IsPrint(c) {
			continue
		}
		if b.Len()+utf8.RuneLen(c) > 128 {
			break
		}
		b.WriteRune(c)
	}
	return b.String()
}

// listOptions decodes the options of a list, watch or deletecollection:
// the one parse of its selectors, in the handler, behind the in-flight
// limits, and only once they are known to be within their limits
// (checkSelectorSizes, checkSelectorRequirements).
func listOptions(r *http.Request) (*metainternalversion.ListOptions, error) {
	if err := checkSelectorSizes(r.URL.RawQuery); err != nil {
		return nil, err
	}
	var opts metainternalversion.ListOptions
	if err := metainternalversionscheme.ParameterCodec.DecodeParameters(r.URL.Query(), metav1.SchemeGroupVersion, &opts); err != nil {
		return nil, apierrors.NewBadRequest(err.Error())
	}
	if err := checkSelectorRequirements(&opts); err != nil {
		return nil, err
	}
	return &opts, nil
}

// decode reads the body of a create, replace or status write; opts learn
// that a custom object came decoded (registry.WriteOptions.Decoded).
func (h *resourceHandler) decode(w http.ResponseWriter, r *http.Request, opts *registry.WriteOptions) (registry.Object, error) {
	if isCustom(h.store.Resource) {
		opts.Decoded = true
		return decodeCustom(w, r, h.store.Resource, r.URL.Query().Get("fieldValidation"))
	}
	obj, err := decodeObject(w, r, h.store.Resource.GroupVersionKind(), r.URL.Query().Get("fieldValidation"))
	if err != nil {
		return nil, err
	}
	typed, ok := obj.(registry.Object)
	if !ok {
		return nil, fmt.Errorf("decoded %T is not a registry.Object", obj)
	}
	return typed, nil
}

func (h *resourceHandler) methodNotAllowed(w http.ResponseWriter, r *http.Request, verb string) {
	writeError(w, r, apierrors.NewMethodNotSupported(h.store.Resource.GroupResource(), verb))
}

// collectionVerb is kube-apiserver's verb of a request to a collection:
// LIST (WATCH once the options say so), POST, DELETECOLLECTION.
func collectionVerb(method string) string {
	switch method {
	case http.MethodGet:
		return "LIST"
	case http.MethodDelete:
		return "DELETECOLLECTION"
	}
	return method
}

func verb(method string) string {
	return strings.ToLower(method)
}

// checkPathSegments refuses names that are not valid path segments ("..",
// "."; "/" never reaches here), as kube-apiserver does.
func checkPathSegments(segments ...string) error {
	for _, s := range segments {
		if s == "" {
			continue
		}
		if errs := path.IsValidPathSegmentName(s); len(errs) > 0 {
			return apierrors.NewBadRequest(fmt.Sprintf("invalid resource name %q: %s", s, strings.Join(errs, ", ")))
		}
	}
	return nil
}
