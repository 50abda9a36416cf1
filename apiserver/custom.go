package apiserver

import (
	"errors"
	"fmt"
	"mime"
	"net/http"
	"strings"
	"sync"
	"unicode/utf8"

	"k8s.io/apiextensions-apiserver/pkg/crdserverscheme"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer/json"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apiserver/pkg/warning"

	"github.com/concord-dev/concord/registry"
)

// This file is how the HTTP layer treats custom resources differently, as
// kube-apiserver's custom resource handler (apiextensions-apiserver's
// customresource_handler.go) does: their objects have no Go type, so
// bodies are decoded as unstructured JSON or YAML and finished by the
// Strategy (registry.RequestDecoder), and answers are JSON or YAML only.

// isCustom reports whether res is a custom resource: one whose objects are
// unstructured and decoded by its Strategy.
func isCustom(res *registry.Resource) bool {
	_, ok := res.Strategy.(registry.RequestDecoder)
	return ok
}

// customMediaTypes are the formats of custom objects, as kube's handler's
// standard serializers; customAcceptable are the types kube's 406 lists,
// protobuf included (its negotiated serializer has one, for the meta types,
// which its endpoints then skip for the objects).
var (
	customMediaTypes = []string{runtime.ContentTypeJSON, runtime.ContentTypeYAML}
	customAcceptable = []string{runtime.ContentTypeJSON, runtime.ContentTypeYAML, runtime.ContentTypeProtobuf}
)

// customSerializers decode request bodies as kube's handler does: JSON or
// YAML into an *unstructured.Unstructured, strict (unknown and duplicate
// fields reported) unless fieldValidation is Ignore.
var customSerializers = func() map[string][2]*json.Serializer {
	creater, typer := unstructuredCreater{}, crdserverscheme.NewUnstructuredObjectTyper()
	out := map[string][2]*json.Serializer{}
	for _, yaml := range []bool{false, true} {
		mediaType := runtime.ContentTypeJSON
		if yaml {
			mediaType = runtime.ContentTypeYAML
		}
		out[mediaType] = [2]*json.Serializer{
			json.NewSerializerWithOptions(json.DefaultMetaFactory, creater, typer, json.SerializerOptions{Yaml: yaml}),
			json.NewSerializerWithOptions(json.DefaultMetaFactory, creater, typer, json.SerializerOptions{Yaml: yaml, Strict: true}),
		}
	}
	return out
}()

type unstructuredCreater struct{}

func (unstructuredCreater) New(kind schema.GroupVersionKind) (runtime.Object, error) {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(kind)
	return u, nil
}

// decodeCustom decodes the body of a write to a custom resource (a create,
// a replace, a status write) as kube-apiserver does:
//
//   - JSON (also without a Content-Type) or YAML; any other Content-Type is
//     415, protobuf too (custom objects have no protobuf form; kube 1.37
//     offers it and its handler then fails on the body);
//   - the body must name its kind ("Object 'Kind' is missing", 400) and be
//     of the served version: another apiVersion, unserved or not of the
//     group, is 400 "the API version in the data (…) does not match the
//     expected API version (…)"; another kind of the group is refused by
//     validation (422, kind: must be Widget);
//   - the Strategy's DecodeRequest prunes what the schema does not declare
//     and defaults the object; with fieldValidation=Strict the pruned and
//     the duplicate fields are 400 `Widget in version "v1" cannot be handled
//     as a Widget: strict decoding error: unknown field "spec.x", …`, with
//     Warn (the default) each is a Warning header, with Ignore nothing.
func decodeCustom(w http.ResponseWriter, r *http.Request, res *registry.Resource, fieldValidation string) (registry.Object, error) {
	decoder, ok := res.Strategy.(registry.RequestDecoder)
	if !ok {
		return nil, fmt.Errorf("apiserver: %s has no request decoder", res.GroupResource())
	}
	contentType := r.Header.Get("Content-Type")
	if contentType == "" {
		contentType = runtime.ContentTypeJSON
	}
	mediaType, _, err := mime.ParseMediaType(contentType)
	serializers, known := customSerializers[mediaType]
	if err != nil || !known {
		return nil, statusError(http.StatusUnsupportedMediaType, metav1.StatusReasonUnsupportedMediaType,
			"the body of the request was in an unknown format - accepted media types include: "+strings.Join(customMediaTypes, ", "))
	}
	body, err := readBody(w, r)
	if err != nil {
		return nil, err
	}
	serializer := serializers[1]
	if fieldValidation == metav1.FieldValidationIgnore {
		serializer = serializers[0]
	}
	want := res.GroupVersionKind()
	obj, got, err := serializer.Decode(body, &want, &unstructured.Unstructured{})
	var strictErrs []error
	if err != nil {
		strictErr, isStrict := runtime.AsStrictDecodingError(err)
		if !isStrict || obj == nil {
			return nil, decodeError(want, got, body, err)
		}
		strictErrs = strictErr.Errors()
	}
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return nil, fmt.Errorf("apiserver: decoded %T is not unstructured", obj)
	}
	// kube's schema coercion runs for an object of the resource's kind:
	// pruning (whose paths are the unknown fields) and defaulting.
	if got.GroupVersion() == want.GroupVersion() && got.Kind == want.Kind {
		pruned, err := decoder.DecodeRequest(u)
		if err != nil {
			return nil, decodeError(want, got, body, err)
		}
		if fieldValidation != metav1.FieldValidationIgnore {
			for _, path := range pruned {
				strictErrs = append(strictErrs, fmt.Errorf(`unknown field "%s"`, path))
			}
		}
	}
	if len(strictErrs) > 0 {
		if fieldValidation == metav1.FieldValidationStrict {
			return nil, decodeError(want, got, body, runtime.NewStrictDecodingError(strictErrs))
		}
		for _, e := range strictErrs {
			addWarning(w, e.Error())
		}
	}
	if got.GroupVersion() != want.GroupVersion() {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("the API version in the data (%s) does not match the expected API version (%v)", got.GroupVersion(), want.GroupVersion()))
	}
	return u, nil
}

// decodeError is kube's transformDecodeError: a body that does not decode
// is 400, naming what it is (got) when its kind is known.
func decodeError(want schema.GroupVersionKind, got *schema.GroupVersionKind, body []byte, err error) error {
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		err = errors.New(status.Status().Message)
	}
	if got != nil && got.Kind != "" {
		return apierrors.NewBadRequest(fmt.Sprintf("%s in version %q cannot be handled as a %s: %v", got.Kind, got.Version, want.Kind, err))
	}
	return apierrors.NewBadRequest(fmt.Sprintf("the object provided is unrecognized (must be of type %s): %v (%s)", want.Kind, err, summarizeData(body, 30)))
}

// summarizeData is kube's: the start of a body, as it is when it looks
// like JSON, else in hex.
func summarizeData(data []byte, maxLength int) string {
	switch {
	case len(data) == 0:
		return "<empty>"
	case data[0] == '{':
		if len(data) > maxLength {
			return string(data[:maxLength]) + " ..."
		}
		return string(data)
	default:
		if len(data) > maxLength {
			return fmt.Sprintf("%x ...", data[:maxLength])
		}
		return fmt.Sprintf("%x", data)
	}
}

// statusError is a Status error with no details, as kube's negotiation
// answers.
func statusError(code int, reason metav1.StatusReason, message string) error {
	return &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: int32(code), Reason: reason, Message: message}}
}

// addWarning sends text as a Warning header (code 299, agent "-"), as
// kube-apiserver sends field validation warnings: kube's header
// (utilnet.NewWarningHeader: the text quoted, only '"' and '\\' escaped), none
// for a text it refuses (control characters, invalid UTF-8).
func addWarning(w http.ResponseWriter, text string) {
	if header, err := utilnet.NewWarningHeader(299, "", text); err == nil {
		w.Header().Add("Warning", header)
	}
}

// withWarnings gives a request to res the warning recorder its answer on w
// carries, for the writes (the store warns of what it accepts) and for the
// requests to a deprecated version of a custom resource, which kube's
// custom resource handler warns of first, for every request of that
// version it serves, subresources included: the version's
// deprecationWarning, or kube's default message
// (registry.CRDDeprecationWarning). Other reads have nothing to warn of
// and go without one.
func withWarnings(w http.ResponseWriter, r *http.Request, res *registry.Resource) *http.Request {
	var deprecation string
	if crd := registry.CustomResourceDefinitionOf(res); crd != nil {
		deprecation, _ = registry.CRDDeprecationWarning(crd, res.GroupVersion.Version)
	}
	if deprecation == "" && (r.Method == http.MethodGet || r.Method == http.MethodHead) {
		return r
	}
	rec := &warningRecorder{w: w}
	rec.AddWarning("", deprecation)
	return r.WithContext(warning.WithWarningRecorder(r.Context(), rec))
}

// warningRecorder is kube-apiserver's warning recorder
// (k8s.io/apiserver/pkg/endpoints/filters/warning.go) for one request,
// which the registry and kube's libraries reach through the request's
// context (k8s.io/apiserver/pkg/warning.AddWarning): each warning is a
// Warning header at once, so an error answered later carries it too; a
// repeated text is sent once; past 4096 characters of warnings in all, each
// is cut to 256.
type warningRecorder struct {
	w          http.ResponseWriter
	mu         sync.Mutex
	recorded   map[string]bool
	ordered    [][2]string // agent, text
	written    int
	truncating bool
}

const (
	warningsTruncateAt   = 4 * 1024
	warningTruncatedSize = 256
)

func (rec *warningRecorder) AddWarning(agent, text string) {
	if text == "" {
		return
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if (rec.written >= warningsTruncateAt && rec.truncating) || rec.recorded[text] {
		return
	}
	if rec.recorded == nil {
		rec.recorded = map[string]bool{}
	}
	rec.recorded[text] = true
	rec.ordered = append(rec.ordered, [2]string{agent, text})
	if !rec.truncating && rec.written+utf8.RuneCountInString(text) > warningsTruncateAt {
		// Over the limit: every warning so far is sent again, cut.
		rec.truncating, rec.written = true, 0
		rec.w.Header().Del("Warning")
		for _, w := range rec.ordered {
			rec.add(w[0], w[1])
		}
		return
	}
	rec.add(agent, text)
}

func (rec *warningRecorder) add(agent, text string) {
	if rec.truncating && utf8.RuneCountInString(text) > warningTruncatedSize {
		text = string([]rune(text)[:warningTruncatedSize])
	}
	if header, err := utilnet.NewWarningHeader(299, agent, text); err == nil {
		rec.written += utf8.RuneCountInString(text)
		rec.w.Header().Add("Warning", header)
	}
}

// customResponseSerializer negotiates the Accept header of a request to a
// custom resource: JSON or YAML, as kube's handler, which skips protobuf
// for custom objects (also for their scale subresource) — a client that
// accepts protobuf and JSON gets JSON, one that accepts only protobuf 406
// with kube's message.
func customResponseSerializer(r *http.Request) (runtime.SerializerInfo, error) {
	for _, mediaType := range acceptedMediaTypes(r) {
		if mediaType != runtime.ContentTypeJSON && mediaType != runtime.ContentTypeYAML {
			continue
		}
		if info, ok := serializerFor(mediaType); ok {
			return info, nil
		}
	}
	return runtime.SerializerInfo{}, statusError(http.StatusNotAcceptable, metav1.StatusReasonNotAcceptable,
		"only the following media types are accepted: "+strings.Join(customAcceptable, ", "))
}

// checkCustomAccept answers, before a request to a custom resource does
// anything, whether the client accepts an answer it can have: kube
// negotiates first, so a write whose answer would be 406 writes nothing.
func checkCustomAccept(r *http.Request) error {
	if responseTransform(r).kind != "" {
		return nil
	}
	_, err := customResponseSerializer(r)
	return err
}
