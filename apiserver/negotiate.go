package apiserver

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	kjson "sigs.k8s.io/json"

	"github.com/concord-dev/concord/registry"
)

// MaxRequestBodyBytes is kube-apiserver's default limit on a request body.
const MaxRequestBodyBytes = 3 << 20

// mediaTypes are the formats served, in order of preference.
var mediaTypes = []string{runtime.ContentTypeJSON, runtime.ContentTypeYAML, runtime.ContentTypeProtobuf}

func serializerFor(mediaType string) (runtime.SerializerInfo, bool) {
	return runtime.SerializerInfoForMediaType(registry.Codecs.SupportedMediaTypes(), mediaType)
}

// readBody reads at most MaxRequestBodyBytes; a larger body is refused with
// 413 without being read into memory. The body must arrive by the request's
// deadline (setDeadlines bounds the connection's reads by it): a client that
// trickles it is answered 408 and the connection is closed.
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	tooLarge := apierrors.NewRequestEntityTooLargeError(fmt.Sprintf("limit is %d", MaxRequestBodyBytes))
	if r.ContentLength > MaxRequestBodyBytes {
		return nil, tooLarge
	}
	body, err := readAll(http.MaxBytesReader(w, r.Body, MaxRequestBodyBytes), r.ContentLength)
	var maxErr *http.MaxBytesError
	if errors.As(err, &maxErr) {
		return nil, tooLarge
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		// The read deadline stays: the server reads no more of this
		// body, and does not keep the connection.
		w.Header().Set("Connection", "close")
		return nil, &apierrors.StatusError{ErrStatus: metav1.Status{
			Status: metav1.StatusFailure, Code: http.StatusRequestTimeout, Reason: metav1.StatusReasonTimeout,
			Message: "the request body did not arrive before the request's deadline",
		}}
	}
	if err != nil {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("reading the request body: %v", err))
	}
	if r.ContentLength != 0 {
		// The whole body is in: lift the read deadline setDeadlines set, so
		// that it cannot fire on the server's wait for the connection's
		// next request while this handler still runs (which would cancel
		// that connection's context).
		_ = http.NewResponseController(w).SetReadDeadline(time.Time{})
	}
	return body, nil
}

// readAll is io.ReadAll into a buffer of the announced length, so that a
// body of known length is read into one allocation instead of a series of
// growing ones.
func readAll(body io.Reader, contentLength int64) ([]byte, error) {
	if contentLength <= 0 {
		return io.ReadAll(body)
	}
	// One byte more, so that reading to EOF needs no growth.
	buf := bytes.NewBuffer(make([]byte, 0, contentLength+1))
	_, err := buf.ReadFrom(body)
	return buf.Bytes(), err
}

// requestSerializer picks the decoder for the request's Content-Type; an
// empty Content-Type means JSON, as in kube-apiserver.
func requestSerializer(r *http.Request) (runtime.SerializerInfo, error) {
	contentType := r.Header.Get("Content-Type")
	if contentType == "" {
		contentType = runtime.ContentTypeJSON
	}
	mediaType, _, err := mime.ParseMediaType(contentType)
	if err == nil {
		if info, ok := serializerFor(mediaType); ok {
			return info, nil
		}
	}
	return runtime.SerializerInfo{}, apierrors.NewGenericServerResponse(http.StatusUnsupportedMediaType, "", schema.GroupResource{}, "",
		fmt.Sprintf("the body of the request was in an unknown format - accepted media types include: %s", strings.Join(mediaTypes, ", ")), 0, false)
}

// decodeObject decodes a request body that must be of kind want. A body that
// leaves out apiVersion and kind is taken to be of kind want. Unknown and
// duplicate fields are handled by fieldValidation, as kube-apiserver does:
// Strict refuses them (400), Warn (the default) names them in Warning
// headers, Ignore drops them.
func decodeObject(w http.ResponseWriter, r *http.Request, want schema.GroupVersionKind, fieldValidation string) (runtime.Object, error) {
	info, err := requestSerializer(r)
	if err != nil {
		return nil, err
	}
	s := info.Serializer
	if fieldValidation != metav1.FieldValidationIgnore && info.StrictSerializer != nil {
		s = info.StrictSerializer
	}
	body, err := readBody(w, r)
	if err != nil {
		return nil, err
	}
	if len(body) == 0 {
		return nil, apierrors.NewBadRequest("the request body is empty: send a " + want.Kind)
	}
	obj, got, clean := runtime.Object(nil), (*schema.GroupVersionKind)(nil), false
	if info.MediaType == runtime.ContentTypeJSON {
		obj, got, clean = decodeCleanJSON(body, want)
	}
	if !clean {
		obj, got, err = s.Decode(body, &want, nil)
	}
	if err != nil && runtime.IsStrictDecodingError(err) {
		if fieldValidation == metav1.FieldValidationStrict {
			return nil, apierrors.NewBadRequest(err.Error())
		}
		for _, e := range err.(interface{ Errors() []error }).Errors() {
			w.Header().Add("Warning", "299 - "+strconv.Quote(e.Error()))
		}
		err = nil
	}
	if err != nil {
		if runtime.IsNotRegisteredError(err) && got != nil {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("%s in version %q cannot be handled as a %s: %v", got.Kind, got.GroupVersion(), want.Kind, err))
		}
		return nil, apierrors.NewBadRequest(fmt.Sprintf("the request body is not a valid %s: %v", want.Kind, err))
	}
	if *got != want {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("%s in version %q cannot be handled as a %s: the body must be of kind %s, apiVersion %s",
			got.Kind, got.GroupVersion(), want.Kind, want.Kind, want.GroupVersion()))
	}
	return obj, nil
}

// decodeCleanJSON is the JSON serializer's Decode for a clean body — no
// unknown, duplicate or miscased fields, nothing malformed — in one pass:
// the body is unmarshalled into want's type straight away and its kind and
// apiVersion read from the result, where the serializer first parses the
// whole body once more to find them. ok is false for any other body (and for
// any error), which the serializer then decodes, with its own messages.
func decodeCleanJSON(body []byte, want schema.GroupVersionKind) (_ runtime.Object, _ *schema.GroupVersionKind, ok bool) {
	obj, err := registry.Scheme.New(want)
	if err != nil {
		return nil, nil, false
	}
	// Strict decoding finds what is not clean: an unknown field is also
	// how a miscased "Kind" shows, which the serializer would read as the
	// kind (encoding/json matches keys case-insensitively).
	if strictErrs, err := kjson.UnmarshalStrict(body, obj); err != nil || len(strictErrs) > 0 {
		return nil, nil, false
	}
	// The body's own apiVersion and kind (GroupVersionKind() would drop an
	// apiVersion that does not parse).
	typeMeta, isTyped := obj.GetObjectKind().(*metav1.TypeMeta)
	if !isTyped {
		return nil, nil, false
	}
	gv, err := schema.ParseGroupVersion(typeMeta.APIVersion)
	if err != nil {
		return nil, nil, false
	}
	// The serializer's defaults (gvkWithDefaults): what the body leaves
	// out is want's.
	got := gv.WithKind(typeMeta.Kind)
	if got.Kind == "" {
		got.Kind = want.Kind
	}
	if got.Version == "" && got.Group == "" {
		got.Group, got.Version = want.Group, want.Version
	}
	if got.Version == "" && got.Group == want.Group {
		got.Version = want.Version
	}
	if got != want {
		return nil, nil, false
	}
	return obj, &got, true
}

// decodeDeleteOptions reads optional DeleteOptions from the body of a DELETE.
func decodeDeleteOptions(w http.ResponseWriter, r *http.Request, gv schema.GroupVersion) (*metav1.DeleteOptions, error) {
	info, err := requestSerializer(r)
	if err != nil {
		return nil, err
	}
	s := info.Serializer
	body, err := readBody(w, r)
	if err != nil || len(body) == 0 {
		return &metav1.DeleteOptions{}, err
	}
	want := gv.WithKind("DeleteOptions")
	obj, _, err := s.Decode(body, &want, nil)
	if err != nil {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("the request body is not valid DeleteOptions: %v", err))
	}
	opts, ok := obj.(*metav1.DeleteOptions)
	if !ok {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("the request body must be DeleteOptions, not %T", obj))
	}
	return opts, nil
}

// responseSerializer negotiates the Accept header for the objects
// themselves. Media ranges that ask for a conversion (as=Table,
// as=PartialObjectMetadata: responseTransform) are skipped, so kubectl's
// "Table, else JSON" lands on JSON where no Table is served; nothing
// acceptable is 406.
func responseSerializer(r *http.Request) (runtime.SerializerInfo, error) {
	for _, mediaType := range acceptedMediaTypes(r) {
		if info, ok := serializerFor(mediaType); ok {
			return info, nil
		}
	}
	return runtime.SerializerInfo{}, apierrors.NewGenericServerResponse(http.StatusNotAcceptable, "", schema.GroupResource{}, "",
		fmt.Sprintf("only the following media types are accepted: %s", strings.Join(mediaTypes, ", ")), 0, false)
}

// acceptedMediaTypes are the media types of the request's Accept header, the
// most preferred first (q, then order); */* and application/* read as JSON.
// Ranges that ask for a conversion (as=: responseTransform) and q=0 are
// left out.
func acceptedMediaTypes(r *http.Request) []string {
	accept := r.Header.Get("Accept")
	if strings.TrimSpace(accept) == "" {
		accept = "*/*"
	}
	type candidate struct {
		mediaType string
		q         float64
	}
	var candidates []candidate
	for _, part := range strings.Split(accept, ",") {
		mediaType, params, err := mime.ParseMediaType(strings.TrimSpace(part))
		if err != nil || params["as"] != "" {
			continue
		}
		q := 1.0
		if v, ok := params["q"]; ok {
			if q, err = strconv.ParseFloat(v, 64); err != nil {
				continue
			}
		}
		if q > 0 {
			candidates = append(candidates, candidate{mediaType, q})
		}
	}
	sort.SliceStable(candidates, func(i, j int) bool { return candidates[i].q > candidates[j].q })
	out := make([]string, len(candidates))
	for i, c := range candidates {
		switch c.mediaType {
		case "*/*", "application/*":
			c.mediaType = runtime.ContentTypeJSON
		}
		out[i] = c.mediaType
	}
	return out
}

// transformTarget is what a client asks a read to be answered as in place of
// the objects themselves (kube-apiserver's media type "Convert"): a
// meta.k8s.io/v1 Table, PartialObjectMetadata or PartialObjectMetadataList,
// in mediaType. The zero value asks for the objects.
type transformTarget struct {
	kind, mediaType string
}

// partial reports whether the target is an object's or a list's metadata
// alone.
func (t transformTarget) partial() bool {
	return t.kind == partialObjectMetadata || t.kind == partialObjectMetadataList
}

// contentType is the answer's Content-Type, as the Table's is.
func (t transformTarget) contentType() string {
	return t.mediaType + ";as=" + t.kind + ";v=v1;g=" + metav1.GroupName
}

const (
	partialObjectMetadata     = "PartialObjectMetadata"
	partialObjectMetadataList = "PartialObjectMetadataList"
)

// responseTransform reads the Accept header's media ranges in order, as
// wantsTable always did: the first one Concord serves decides. A plain one
// (application/json, */*) asks for the objects; one with as=, g=meta.k8s.io
// and v=v1 asks for a Table (JSON only) or for metadata alone (JSON, YAML or
// protobuf, for built-in and custom resources alike, as kube-apiserver
// allows). Ranges Concord serves in no way (v1beta1, an unknown kind) are
// passed over, so a client's fallback applies.
func responseTransform(r *http.Request) transformTarget {
	for _, part := range strings.Split(r.Header.Get("Accept"), ",") {
		mediaType, params, err := mime.ParseMediaType(strings.TrimSpace(part))
		if err != nil {
			continue
		}
		_, served := serializerFor(mediaType)
		as := params["as"]
		if as == "" {
			if served || mediaType == "*/*" || mediaType == "application/*" {
				return transformTarget{}
			}
			continue
		}
		if params["g"] != metav1.GroupName || params["v"] != "v1" {
			continue
		}
		switch {
		case as == "Table" && mediaType == runtime.ContentTypeJSON,
			(as == partialObjectMetadata || as == partialObjectMetadataList) && served:
			return transformTarget{kind: as, mediaType: mediaType}
		}
	}
	return transformTarget{}
}
