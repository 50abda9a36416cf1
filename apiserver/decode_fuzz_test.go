package apiserver

import (
	"bytes"
	"context"
	"errors"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/concord-dev/concord/apiserver/filters"
	"github.com/concord-dev/concord/etcdstore"
	"github.com/concord-dev/concord/registry"
)

// The fuzz targets of the request decoders. Each seeds itself with
// realistic requests; what go test -fuzz found beyond them is kept in
// testdata/fuzz/<target>, and every go test runs it all as regular tests.
// make fuzz runs each target briefly.

// fuzzContentTypes are the Content-Types a fuzzed body is sent with.
var fuzzContentTypes = []string{
	runtime.ContentTypeJSON,
	runtime.ContentTypeYAML,
	runtime.ContentTypeProtobuf,
	"",
	"application/json; charset=utf-8",
	"text/plain",
}

func fuzzContentType(i uint8) string { return fuzzContentTypes[int(i)%len(fuzzContentTypes)] }

// fuzzRequest is a request with body sent as contentType, as the server
// hands it to a handler (a request context with its info and logger).
func fuzzRequest(method, target, contentType string, body []byte) *http.Request {
	r := httptest.NewRequest(method, target, bytes.NewReader(body))
	if contentType != "" {
		r.Header.Set("Content-Type", contentType)
	}
	ctx := context.WithValue(r.Context(), requestInfoKey{}, &requestInfo{verb: method})
	return r.WithContext(ctx)
}

// checkClientError fails unless err is a Status error with a 4xx code:
// nothing a client sends may be answered as a server error.
func checkClientError(t *testing.T, what string, err error) {
	t.Helper()
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		t.Fatalf("%s: error %v (%T) is not a Status error; the server would answer 500", what, err, err)
	}
	if code := status.Status().Code; code < 400 || code >= 500 {
		t.Fatalf("%s: Status code %d (%v); want 4xx", what, code, err)
	}
}

// encodeSeed encodes obj in mediaType for a seed.
func encodeSeed(f *testing.F, mediaType string, obj runtime.Object) []byte {
	f.Helper()
	info, ok := serializerFor(mediaType)
	if !ok {
		f.Fatalf("no serializer for %s", mediaType)
	}
	kinds, _, err := registry.Scheme.ObjectKinds(obj)
	if err != nil {
		f.Fatal(err)
	}
	obj.GetObjectKind().SetGroupVersionKind(kinds[0])
	var buf bytes.Buffer
	if err := info.Serializer.Encode(obj, &buf); err != nil {
		f.Fatal(err)
	}
	return buf.Bytes()
}

// FuzzDecodeObject: a ConfigMap body in any of the served formats, or
// anything else, decodes to a ConfigMap or is refused with a 4xx Status;
// nothing panics.
func FuzzDecodeObject(f *testing.F) {
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "flags", Namespace: "default", Labels: map[string]string{"app": "demo"}, ResourceVersion: "12"},
		Data:       map[string]string{"mode": "blue"},
		BinaryData: map[string][]byte{"blob": {0, 1, 2}},
	}
	const (
		jsonCT, yamlCT, protoCT uint8 = 0, 1, 2
		strict, warn, ignore    uint8 = 0, 1, 2
	)
	for _, seed := range []struct {
		body        []byte
		contentType uint8
	}{
		{encodeSeed(f, runtime.ContentTypeJSON, cm.DeepCopy()), jsonCT},
		{encodeSeed(f, runtime.ContentTypeYAML, cm.DeepCopy()), yamlCT},
		{encodeSeed(f, runtime.ContentTypeProtobuf, cm.DeepCopy()), protoCT},
		{encodeSeed(f, runtime.ContentTypeProtobuf, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s"}}), protoCT},
		{[]byte(`{"metadata":{"name":"no-kind"},"data":{"a":"b"}}`), jsonCT},
		{[]byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x"},"unknown":1,"data":{"a":"b","a":"c"}}`), jsonCT},
		{[]byte(`{"apiVersion":"v1","kind":"Secret","metadata":{"name":"x"}}`), jsonCT},
		{[]byte(`{"apiVersion":"v2","kind":"ConfigMap"}`), jsonCT},
		{[]byte(`[1,2,3]`), jsonCT},
		{[]byte(`{"metadata":{"name":1e999}}`), jsonCT},
		{[]byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: y\ndata:\n  k: &a v\n  j: *a\n"), yamlCT},
		{[]byte("a: [[[[[[[[[[[[]]]]]]]]]]]]"), yamlCT},
		{[]byte("k8s\x00\x0a\x04junk"), protoCT},
		{[]byte("mode=blue"), 5},
		{nil, jsonCT},
	} {
		for _, fv := range []uint8{strict, warn, ignore} {
			f.Add(seed.body, seed.contentType, fv)
		}
	}
	want := registry.ConfigMaps.GroupVersionKind()
	f.Fuzz(func(t *testing.T, body []byte, contentType, fieldValidation uint8) {
		fv := []string{metav1.FieldValidationStrict, metav1.FieldValidationWarn, metav1.FieldValidationIgnore, ""}[int(fieldValidation)%4]
		r := fuzzRequest(http.MethodPost, "/api/v1/namespaces/default/configmaps?fieldValidation="+fv, fuzzContentType(contentType), body)
		obj, err := decodeObject(httptest.NewRecorder(), r, want, fv)
		if err != nil {
			checkClientError(t, "decodeObject", err)
			return
		}
		got, ok := obj.(*corev1.ConfigMap)
		if !ok {
			t.Fatalf("decodeObject returned %T; want *v1.ConfigMap", obj)
		}
		// What was accepted is an object the server can write back.
		info, _ := serializerFor(runtime.ContentTypeJSON)
		if err := info.Serializer.Encode(got, &bytes.Buffer{}); err != nil {
			t.Fatalf("encode the decoded ConfigMap: %v", err)
		}
	})
}

// FuzzDecodeJSONMatchesSerializer: what decodeCleanJSON, the one-pass
// decode of clean JSON bodies, takes, apimachinery's JSON serializer (strict
// or not) decodes to the same ConfigMap without any error.
func FuzzDecodeJSONMatchesSerializer(f *testing.F) {
	for _, seed := range []string{
		`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x","labels":{"a":"b"}},"data":{"k":"v"},"binaryData":{"b":"AAE="}}`,
		`{"metadata":{"name":"no-kind"},"data":{"a":"b"}}`,
		`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x"},"unknown":1,"data":{"a":"b","a":"c"}}`,
		`{"apiVersion":"v1","kind":"Secret","metadata":{"name":"x"}}`,
		`{"apiVersion":"v2","kind":"ConfigMap"}`,
		`{"apiVersion":"a/b/c","kind":"ConfigMap"}`,
		`{"apiVersion":"/v1","kind":"ConfigMap"}`,
		`{"apiVersion":"","kind":""}`,
		`{"kind":"ConfigMap","Kind":"Secret"}`,
		`{"metadata":{"name":1e999}}`,
		`{"metadata":{"Name":"case"}}`,
		`null`, `[1,2,3]`, `"s"`, `{}`, `{"data":null}`, `{"metadata":{`,
	} {
		f.Add([]byte(seed), true)
		f.Add([]byte(seed), false)
	}
	want := registry.ConfigMaps.GroupVersionKind()
	info, _ := serializerFor(runtime.ContentTypeJSON)
	f.Fuzz(func(t *testing.T, body []byte, strict bool) {
		got, gotGVK, clean := decodeCleanJSON(body, want)
		if !clean {
			return // the serializer decodes it
		}
		s := info.Serializer
		if strict {
			s = info.StrictSerializer
		}
		obj, gvk, err := s.Decode(body, &want, nil)
		if err != nil || *gvk != want || *gotGVK != want {
			t.Fatalf("body %q (strict %v): decodeCleanJSON took it as %v; the serializer: %v, %v", body, strict, gotGVK, gvk, err)
		}
		if !apiequality.Semantic.DeepEqual(obj, got) {
			t.Fatalf("body %q: decoded objects differ:\nserializer %#v\ndecodeCleanJSON %#v", body, obj, got)
		}
	})
}

// FuzzDecodeDeleteOptions: a DELETE body is DeleteOptions, empty, or
// refused with a 4xx Status.
func FuzzDecodeDeleteOptions(f *testing.F) {
	uid := "00000000-0000-4000-8000-000000000000"
	opts := &metav1.DeleteOptions{
		Preconditions:     metav1.NewUIDPreconditions(uid),
		PropagationPolicy: func() *metav1.DeletionPropagation { p := metav1.DeletePropagationForeground; return &p }(),
		DryRun:            []string{metav1.DryRunAll},
	}
	for _, seed := range []struct {
		body        []byte
		contentType uint8
	}{
		{[]byte(`{"kind":"DeleteOptions","apiVersion":"v1","preconditions":{"uid":"` + uid + `"}}`), 0},
		{[]byte(`{"propagationPolicy":"Background","gracePeriodSeconds":0}`), 0},
		{[]byte(`{"kind":"DeleteOptions","apiVersion":"meta.k8s.io/v1","dryRun":["All"]}`), 0},
		{[]byte(`{"kind":"ConfigMap","apiVersion":"v1"}`), 0},
		{[]byte("kind: DeleteOptions\napiVersion: v1\npreconditions:\n  resourceVersion: \"7\"\n"), 1},
		{encodeSeed(f, runtime.ContentTypeProtobuf, opts), 2},
		{[]byte(`{"preconditions":`), 0},
		{nil, 0},
		{nil, 5},
	} {
		f.Add(seed.body, seed.contentType)
	}
	f.Fuzz(func(t *testing.T, body []byte, contentType uint8) {
		r := fuzzRequest(http.MethodDelete, "/api/v1/namespaces/default/configmaps/x", fuzzContentType(contentType), body)
		opts, err := decodeDeleteOptions(httptest.NewRecorder(), r, registry.ConfigMaps.GroupVersion)
		if err != nil {
			checkClientError(t, "decodeDeleteOptions", err)
			return
		}
		if opts == nil {
			t.Fatal("decodeDeleteOptions returned neither options nor an error")
		}
	})
}

// listRecorder is storage for a ConfigMap store that holds nothing and
// checks what the registry asks of it. Only List is implemented.
type listRecorder struct {
	registry.Storage
	t *testing.T
}

func (l listRecorder) List(_ context.Context, resource, namespace string, opts etcdstore.ListOptions) (etcdstore.ListResult, error) {
	if opts.Limit < 0 || opts.Limit > 10000 {
		l.t.Fatalf("storage asked for a page of %d objects; want at most 10000", opts.Limit)
	}
	if strings.HasPrefix(opts.Start, "/") || strings.Contains("/"+opts.Start+"/", "/../") {
		l.t.Fatalf("storage asked to start at %q, outside the list's prefix", opts.Start)
	}
	if opts.Revision > 0 && opts.Revision <= 5 {
		return etcdstore.ListResult{}, etcdstore.ErrCompacted
	}
	return etcdstore.ListResult{Revision: 100}, nil
}

// FuzzParseListOptions: query strings through the list options decoder,
// the watch test of the server's filters, the registry's list (its
// validation, continue tokens, resourceVersion and limit handling) over
// storage that checks what it is asked, and the write options: never a
// panic, only 4xx Status errors (and the 504 "too large resource version"
// of a resourceVersion from the future).
func FuzzParseListOptions(f *testing.F) {
	for _, seed := range []string{
		"",
		"limit=500",
		"limit=50000&resourceVersion=0",
		"limit=-1",
		"watch=1&resourceVersion=10&allowWatchBookmarks=true&timeoutSeconds=300",
		"watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan",
		"watch=yes",
		"watch",
		"watch=0&watch=1",
		"watch=False",
		"labelSelector=app%3Ddemo%2Ctier+in+%28a%2Cb%29%2C%21legacy",
		"labelSelector=a%3D%3D%3Db",
		"fieldSelector=metadata.name%3Dx%2Cmetadata.namespace%21%3Ddefault",
		"fieldSelector=data.k%3Dv",
		"resourceVersion=12&resourceVersionMatch=Exact&limit=2",
		"resourceVersion=4&resourceVersionMatch=Exact",
		"resourceVersion=200",
		"resourceVersion=abc",
		"continue=eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6MTIsInN0YXJ0IjoiZGVmYXVsdC9iXHUwMDAwIn0&limit=2",
		"continue=eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6MTIsInN0YXJ0IjoiLi4vc2VjcmV0cy9hIn0",
		"continue=%%%",
		"dryRun=All&fieldManager=kubectl&fieldValidation=Strict",
		"dryRun=Partial&fieldValidation=Loose",
		"timeoutSeconds=99999999999999999999",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, query string) {
		r := &http.Request{
			Method: http.MethodGet,
			URL:    &url.URL{Path: "/api/v1/namespaces/default/configmaps", RawQuery: query},
			Header: http.Header{},
		}
		r = r.WithContext(context.WithValue(context.Background(), requestInfoKey{}, &requestInfo{}))
		if _, err := writeOptions(r, "DeleteOptions"); err != nil {
			checkClientError(t, "writeOptions", err)
		}
		opts, err := listOptions(r)
		if err != nil {
			checkClientError(t, "listOptions", err)
			return
		}
		// The server's filters (request timeout, in-flight limits) and
		// the handler must agree on what a watch is.
		if filters.IsWatch(r) != opts.Watch {
			t.Fatalf("query %q: IsWatch = %v, but the handler reads watch = %v", query, filters.IsWatch(r), opts.Watch)
		}
		store := registry.NewStore(listRecorder{t: t}, registry.ConfigMaps, registry.DefaultWatchConfig(), registry.WithoutReadCache())
		if _, err := store.List(context.Background(), "default", opts); err != nil {
			if apierrors.IsTimeout(err) && strings.Contains(err.Error(), "Too large resource version") {
				return
			}
			checkClientError(t, "List", err)
		}
	})
}
