package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/streaming"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// httpBackend speaks the kube API with net/http: JSON with encoding/json,
// or Kubernetes protobuf with client-go's codecs.
type httpBackend struct {
	base string // scheme://host[/path], no trailing slash
	// res is what create, update, get, list and watch work on.
	res resource
	// pb asks for protobuf bodies and answers (--protobuf); protobuf
	// says whether res gets them.
	pb bool
	// client bounds every request by the request timeout; watches use
	// stream, which has no timeout.
	client *http.Client
	stream *http.Client
	closer func()
}

// newHTTPBackend is a backend for a plain-HTTP (or https with the system's
// roots) API at base. Compression is off, as for the etcd targets.
func newHTTPBackend(base string, conns int, timeout time.Duration) *httpBackend {
	tr := &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:          conns,
		MaxIdleConnsPerHost:   conns,
		IdleConnTimeout:       90 * time.Second,
		DisableCompression:    true,
		ResponseHeaderTimeout: timeout,
		ForceAttemptHTTP2:     true,
	}
	return &httpBackend{
		base:   strings.TrimRight(base, "/"),
		res:    configMaps,
		client: &http.Client{Transport: tr, Timeout: timeout},
		stream: &http.Client{Transport: tr},
		closer: tr.CloseIdleConnections,
	}
}

// newKubeconfigBackend reads the current context of the kubeconfig at path
// for the API's host, TLS settings and credentials.
func newKubeconfigBackend(path string, timeout time.Duration) (*httpBackend, error) {
	rc, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", path, err)
	}
	return kubeconfigBackend(rc, timeout)
}

// kubeconfigBackend uses client-go's transport for rc (TLS, client
// certificates, tokens, exec plugins), without compression.
func kubeconfigBackend(rc *rest.Config, timeout time.Duration) (*httpBackend, error) {
	rc = rest.CopyConfig(rc)
	rc.DisableCompression = true
	rt, err := rest.TransportFor(rc)
	if err != nil {
		return nil, fmt.Errorf("transport for %s: %w", rc.Host, err)
	}
	host, _, err := rest.DefaultServerUrlFor(rc)
	if err != nil {
		return nil, fmt.Errorf("server URL %q: %w", rc.Host, err)
	}
	b := &httpBackend{
		base:   strings.TrimRight(host.String(), "/"),
		res:    configMaps,
		client: &http.Client{Transport: rt, Timeout: timeout},
		stream: &http.Client{Transport: rt},
		closer: func() {},
	}
	if tr, ok := rt.(interface{ CloseIdleConnections() }); ok {
		b.closer = tr.CloseIdleConnections
	}
	return b, nil
}

func (b *httpBackend) close() { b.closer() }

// collection is the URL of the resource's objects in namespace ns.
func (b *httpBackend) collection(ns string) string {
	return b.base + b.res.collection(ns)
}

// withResource is a backend for res over the same connections.
func (b *httpBackend) withResource(res resource) *httpBackend {
	c := *b
	c.res = res
	return &c
}

// Media types of the requests.
const (
	mediaJSON     = runtime.ContentTypeJSON
	mediaProtobuf = runtime.ContentTypeProtobuf
	// acceptProtobuf is what client-go's typed clients accept.
	acceptProtobuf = mediaProtobuf + ", " + mediaJSON
)

// Encodings of the workloads' requests and answers, as the report names
// them.
const (
	encodingJSON     = "json"
	encodingProtobuf = "protobuf"
)

// client-go's protobuf codec for the built-in kinds, as its typed clients
// use it: bodies encoded for core/v1, answers decoded into the given type,
// and the serializer of the watch frames (length-prefixed WatchEvents).
var (
	protobufInfo    = serializerFor(mediaProtobuf)
	protobufEncoder = scheme.Codecs.EncoderForVersion(protobufInfo.Serializer, corev1.SchemeGroupVersion)
	protobufDecoder = scheme.Codecs.DecoderToVersion(protobufInfo.Serializer, corev1.SchemeGroupVersion)
)

func serializerFor(media string) runtime.SerializerInfo {
	info, ok := runtime.SerializerInfoForMediaType(scheme.Codecs.SupportedMediaTypes(), media)
	if !ok || info.StreamSerializer == nil {
		panic("client-go's scheme has no streaming serializer for " + media)
	}
	return info
}

// protobuf reports whether the workloads' requests and answers are
// protobuf: when asked for, and for ConfigMaps only, as kube serves no
// protobuf for custom resources.
func (b *httpBackend) protobuf() bool { return b.pb && !b.res.Custom }

func (b *httpBackend) encoding() string {
	if b.protobuf() {
		return encodingProtobuf
	}
	return encodingJSON
}

// accept is the Accept of the workloads' requests.
func (b *httpBackend) accept() string {
	if b.protobuf() {
		return acceptProtobuf
	}
	return mediaJSON
}

// isProtobuf reports whether a Content-Type is kube's protobuf (for a
// watch, with ;stream=watch).
func isProtobuf(contentType string) bool {
	media, _, _ := strings.Cut(contentType, ";")
	return strings.TrimSpace(media) == mediaProtobuf
}

var bufPool = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// do sends one JSON request and reads the whole answer into a pooled
// buffer, which the caller returns with bufPool.Put. A code outside 2xx is
// an error: errConflict, errExists or errNotFound where it says so.
func (b *httpBackend) do(ctx context.Context, method, u string, body []byte) (*bytes.Buffer, error) {
	return b.doType(ctx, method, u, mediaJSON, mediaJSON, body)
}

// doType is do with the body's Content-Type and the Accept. An answer in
// 2xx to a request that accepts protobuf must be protobuf: a JSON one
// would measure JSON.
func (b *httpBackend) doType(ctx context.Context, method, u, contentType, accept string, body []byte) (*bytes.Buffer, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", accept)
	if body != nil {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := b.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	buf := bufPool.Get().(*bytes.Buffer)
	buf.Reset()
	if _, err := buf.ReadFrom(resp.Body); err != nil {
		bufPool.Put(buf)
		return nil, fmt.Errorf("%s %s: read the answer: %w", method, u, err)
	}
	answered := resp.Header.Get("Content-Type")
	if resp.StatusCode/100 == 2 {
		if accept == acceptProtobuf && !isProtobuf(answered) {
			bufPool.Put(buf)
			return nil, fmt.Errorf("%s %s: asked for protobuf, answered %q", method, u, answered)
		}
		return buf, nil
	}
	defer bufPool.Put(buf)
	st := answerStatus(answered, buf.Bytes())
	switch {
	case resp.StatusCode == http.StatusConflict && st.Reason == metav1.StatusReasonAlreadyExists:
		return nil, errExists
	case resp.StatusCode == http.StatusConflict:
		return nil, errConflict
	case resp.StatusCode == http.StatusNotFound:
		return nil, errNotFound
	}
	return nil, &statusError{code: resp.StatusCode, msg: fmt.Sprintf("%s %s: %s: %s", method, u, resp.Status, st.Message)}
}

// answerStatus is the Status of an answer outside 2xx, JSON or protobuf
// as its Content-Type says. One that is no Status gives the start of its
// text as the message.
func answerStatus(contentType string, body []byte) metav1.Status {
	var st metav1.Status
	var err error
	if isProtobuf(contentType) {
		err = runtime.DecodeInto(protobufDecoder, body, &st)
	} else {
		err = json.Unmarshal(body, &st)
	}
	if err != nil || st.Message == "" {
		st.Message = strings.TrimSpace(string(body[:min(len(body), 200)]))
	}
	return st
}

// statusError is an answer outside 2xx that is none of errConflict,
// errExists and errNotFound.
type statusError struct {
	code int
	msg  string
}

func (e *statusError) Error() string { return e.msg }

func (b *httpBackend) ensureNamespace(ctx context.Context, ns string) (bool, error) {
	body, _ := json.Marshal(map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]string{"name": ns}})
	buf, err := b.do(ctx, http.MethodPost, b.base+"/api/v1/namespaces", body)
	switch {
	case err == nil:
		bufPool.Put(buf)
		return true, nil
	case errors.Is(err, errExists):
		return false, nil
	}
	return false, fmt.Errorf("create namespace %s: %w", ns, err)
}

// deleteNamespace deletes ns and waits until it is gone: the server
// deletes its contents first (kube's namespace controller), and a run
// started meanwhile could not write into it.
func (b *httpBackend) deleteNamespace(ctx context.Context, ns string) error {
	u := b.base + "/api/v1/namespaces/" + url.PathEscape(ns)
	buf, err := b.do(ctx, http.MethodDelete, u, nil)
	if errors.Is(err, errNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	bufPool.Put(buf)
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for {
		buf, err := b.do(ctx, http.MethodGet, u, nil)
		if errors.Is(err, errNotFound) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("wait for namespace %s to be deleted: %w", ns, err)
		}
		bufPool.Put(buf)
		select {
		case <-ctx.Done():
			return fmt.Errorf("namespace %s is still there 2m after its deletion: %w", ns, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// encode is the body of the object, and its Content-Type; rv is "" for a
// create.
func (b *httpBackend) encode(ns, name, rv string, data map[string]string) ([]byte, string, error) {
	if b.protobuf() {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, ResourceVersion: rv}, Data: data}
		body, err := runtime.Encode(protobufEncoder, cm)
		return body, mediaProtobuf, err
	}
	body, err := json.Marshal(b.res.object(ns, name, rv, data))
	return body, mediaJSON, err
}

// decode reads an answer that is one object: its data and resourceVersion.
func (b *httpBackend) decode(answer []byte) (map[string]string, int64, error) {
	if b.protobuf() {
		var cm corev1.ConfigMap
		if err := runtime.DecodeInto(protobufDecoder, answer, &cm); err != nil {
			return nil, 0, fmt.Errorf("decode the %s: %w", b.res.Kind, err)
		}
		rv, err := parseRV(cm.ResourceVersion)
		return cm.Data, rv, err
	}
	var out apiObject
	if err := json.Unmarshal(answer, &out); err != nil {
		return nil, 0, fmt.Errorf("decode the %s: %w", b.res.Kind, err)
	}
	rv, err := parseRV(out.Metadata.ResourceVersion)
	return out.data(), rv, err
}

// write sends a create (POST) or replace (PUT) and returns the
// resourceVersion of the answer.
func (b *httpBackend) write(ctx context.Context, method, u, ns, name, rv string, data map[string]string) (int64, error) {
	body, contentType, err := b.encode(ns, name, rv, data)
	if err != nil {
		return 0, err
	}
	buf, err := b.doType(ctx, method, u, contentType, b.accept(), body)
	if err != nil {
		return 0, err
	}
	defer bufPool.Put(buf)
	_, newRV, err := b.decode(buf.Bytes())
	if err != nil {
		return 0, fmt.Errorf("%s %s: %w", method, u, err)
	}
	return newRV, nil
}

func (b *httpBackend) create(ctx context.Context, ns, name string, data map[string]string) (int64, error) {
	return b.write(ctx, http.MethodPost, b.collection(ns), ns, name, "", data)
}

func (b *httpBackend) update(ctx context.Context, ns, name string, data map[string]string, rv int64) (int64, error) {
	return b.write(ctx, http.MethodPut, b.collection(ns)+"/"+url.PathEscape(name), ns, name, strconv.FormatInt(rv, 10), data)
}

// apply sends the object with data as a server-side apply (PATCH,
// application/apply-patch+yaml, of which JSON is a part) by fieldManager
// manager, and returns the resourceVersion of the answer. It creates the
// object if there is none. With --protobuf the patch stays JSON, as
// client-go's does (kube has no protobuf apply patch), and the answer is
// protobuf.
func (b *httpBackend) apply(ctx context.Context, ns, name, manager string, data map[string]string) (int64, error) {
	body, err := json.Marshal(b.res.object(ns, name, "", data))
	if err != nil {
		return 0, err
	}
	u := b.collection(ns) + "/" + url.PathEscape(name) + "?fieldManager=" + url.QueryEscape(manager)
	buf, err := b.doType(ctx, http.MethodPatch, u, "application/apply-patch+yaml", b.accept(), body)
	if err != nil {
		return 0, err
	}
	defer bufPool.Put(buf)
	_, rv, err := b.decode(buf.Bytes())
	if err != nil {
		return 0, fmt.Errorf("PATCH %s: %w", u, err)
	}
	return rv, nil
}

func (b *httpBackend) get(ctx context.Context, ns, name string) (map[string]string, int64, error) {
	u := b.collection(ns) + "/" + url.PathEscape(name)
	buf, err := b.doType(ctx, http.MethodGet, u, "", b.accept(), nil)
	if err != nil {
		return nil, 0, err
	}
	defer bufPool.Put(buf)
	data, rv, err := b.decode(buf.Bytes())
	if err != nil {
		return nil, 0, fmt.Errorf("GET %s: %w", u, err)
	}
	return data, rv, nil
}

func (b *httpBackend) list(ctx context.Context, ns string, check bool) (int, int64, error) {
	u := b.collection(ns)
	buf, err := b.doType(ctx, http.MethodGet, u, "", b.accept(), nil)
	if err != nil {
		return 0, 0, err
	}
	defer bufPool.Put(buf)
	if !check {
		return -1, 0, nil
	}
	if b.protobuf() {
		var out corev1.ConfigMapList
		if err := runtime.DecodeInto(protobufDecoder, buf.Bytes(), &out); err != nil {
			return 0, 0, fmt.Errorf("GET %s: decode the list: %w", u, err)
		}
		return listResult(u, len(out.Items), out.ResourceVersion, out.Continue)
	}
	var out struct {
		Metadata struct {
			ResourceVersion string `json:"resourceVersion"`
			Continue        string `json:"continue"`
		} `json:"metadata"`
		Items []struct {
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
		} `json:"items"`
	}
	if err := json.Unmarshal(buf.Bytes(), &out); err != nil {
		return 0, 0, fmt.Errorf("GET %s: decode the list: %w", u, err)
	}
	return listResult(u, len(out.Items), out.Metadata.ResourceVersion, out.Metadata.Continue)
}

// listResult is what list returns for a decoded list at u: an error if the
// server cut it (a continue token).
func listResult(u string, items int, rv, cont string) (int, int64, error) {
	if cont != "" {
		return 0, 0, fmt.Errorf("GET %s: the server cut the list after %d items (continue token set)", u, items)
	}
	n, err := parseRV(rv)
	return items, n, err
}

func (b *httpBackend) watch(ctx context.Context, ns string, rv int64, handle func(watchEvent)) (*watchStream, error) {
	u := b.collection(ns) + "?watch=1&resourceVersion=" + strconv.FormatInt(rv, 10)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", b.accept())
	resp, err := b.stream.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		resp.Body.Close()
		return nil, fmt.Errorf("watch %s: %s: %s", u, resp.Status, answerStatus(resp.Header.Get("Content-Type"), body).Message)
	}
	read := jsonEvents
	if b.protobuf() {
		if ct := resp.Header.Get("Content-Type"); !isProtobuf(ct) {
			resp.Body.Close()
			return nil, fmt.Errorf("watch %s: asked for protobuf, answered %q", u, ct)
		}
		read = protobufEvents
	}
	ws := &watchStream{Done: make(chan struct{})}
	go func() {
		defer close(ws.Done)
		defer resp.Body.Close()
		stop := context.AfterFunc(ctx, func() { resp.Body.Close() })
		defer stop()
		// The stream's end is no error when ctx ended it.
		if err := read(resp.Body, handle); ctx.Err() == nil {
			ws.Err = fmt.Errorf("watch %s: %w", u, err)
		}
	}()
	return ws, nil
}

// jsonEvents passes the events of a JSON watch stream to handle until the
// stream ends or holds an ERROR event, and says why it stopped.
func jsonEvents(body io.ReadCloser, handle func(watchEvent)) error {
	r := bufio.NewReaderSize(body, 16<<10)
	for {
		// Events are one JSON document a line.
		line, err := r.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			rest, err2 := r.ReadBytes('\n')
			line, err = append(append([]byte(nil), line...), rest...), err2
		}
		now := time.Now()
		if len(bytes.TrimSpace(line)) > 0 {
			var ev struct {
				Type   string    `json:"type"`
				Object apiObject `json:"object"`
			}
			if jerr := json.Unmarshal(line, &ev); jerr != nil {
				return fmt.Errorf("undecodable event: %w", jerr)
			}
			if ev.Type == "ERROR" {
				return fmt.Errorf("ERROR event: %s", bytes.TrimSpace(line))
			}
			we := watchEvent{Type: ev.Type, Data: ev.Object.data(), Received: now}
			we.RV, _ = parseRV(ev.Object.Metadata.ResourceVersion)
			handle(we)
		}
		if err != nil {
			return fmt.Errorf("the stream ended: %w", err)
		}
	}
}

// protobufEvents is jsonEvents for a protobuf watch stream of ConfigMaps:
// length-prefixed metav1.WatchEvents, read as client-go's watch decoder
// reads them. An event is received once its frame is read, before its
// object is decoded, as a JSON event before its line is.
func protobufEvents(body io.ReadCloser, handle func(watchEvent)) error {
	frames := streaming.NewDecoder(protobufInfo.StreamSerializer.Framer.NewFrameReader(body), protobufInfo.StreamSerializer.Serializer)
	for {
		var ev metav1.WatchEvent
		if _, _, err := frames.Decode(nil, &ev); err != nil {
			return fmt.Errorf("the stream ended: %w", err)
		}
		now := time.Now()
		if ev.Type == "ERROR" {
			var st metav1.Status
			if err := runtime.DecodeInto(protobufDecoder, ev.Object.Raw, &st); err != nil {
				return fmt.Errorf("ERROR event, undecodable: %w", err)
			}
			return fmt.Errorf("ERROR event: %d %s: %s", st.Code, st.Reason, st.Message)
		}
		var cm corev1.ConfigMap
		if err := runtime.DecodeInto(protobufDecoder, ev.Object.Raw, &cm); err != nil {
			return fmt.Errorf("undecodable %s event: %w", ev.Type, err)
		}
		we := watchEvent{Type: ev.Type, Data: cm.Data, Received: now}
		we.RV, _ = parseRV(cm.ResourceVersion)
		handle(we)
	}
}

func (b *httpBackend) deleteAll(ctx context.Context, ns string, names []string, progress func(int)) error {
	return parallel(ctx, len(names), 16, progress, func(ctx context.Context, i int) error {
		buf, err := b.do(ctx, http.MethodDelete, b.collection(ns)+"/"+url.PathEscape(names[i]), nil)
		if err == nil {
			bufPool.Put(buf)
		}
		if errors.Is(err, errNotFound) {
			return nil
		}
		return err
	})
}

func parseRV(s string) (int64, error) {
	rv, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("resourceVersion %q is not a number: %w", s, err)
	}
	return rv, nil
}
