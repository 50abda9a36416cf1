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

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// httpBackend speaks the kube JSON API with net/http and encoding/json.
type httpBackend struct {
	base string // scheme://host[/path], no trailing slash
	// res is what create, update, get, list and watch work on.
	res resource
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

var bufPool = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// do sends one request and reads the whole answer into a pooled buffer,
// which the caller returns with bufPool.Put. A code outside 2xx is an
// error: errConflict, errExists or errNotFound where it says so.
func (b *httpBackend) do(ctx context.Context, method, u string, body []byte) (*bytes.Buffer, error) {
	return b.doType(ctx, method, u, "application/json", body)
}

// doType is do with the body's Content-Type.
func (b *httpBackend) doType(ctx context.Context, method, u, contentType string, body []byte) (*bytes.Buffer, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
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
	if resp.StatusCode/100 == 2 {
		return buf, nil
	}
	defer bufPool.Put(buf)
	var st struct {
		Reason  string `json:"reason"`
		Message string `json:"message"`
	}
	_ = json.Unmarshal(buf.Bytes(), &st)
	switch {
	case resp.StatusCode == http.StatusConflict && st.Reason == "AlreadyExists":
		return nil, errExists
	case resp.StatusCode == http.StatusConflict:
		return nil, errConflict
	case resp.StatusCode == http.StatusNotFound:
		return nil, errNotFound
	}
	msg := st.Message
	if msg == "" {
		msg = strings.TrimSpace(string(buf.Bytes()[:min(buf.Len(), 200)]))
	}
	return nil, &statusError{code: resp.StatusCode, msg: fmt.Sprintf("%s %s: %s: %s", method, u, resp.Status, msg)}
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

// write sends a create (POST) or replace (PUT) and returns the
// resourceVersion of the answer.
func (b *httpBackend) write(ctx context.Context, method, u string, obj *apiObject) (int64, error) {
	body, err := json.Marshal(obj)
	if err != nil {
		return 0, err
	}
	buf, err := b.do(ctx, method, u, body)
	if err != nil {
		return 0, err
	}
	defer bufPool.Put(buf)
	var out apiObject
	if err := json.Unmarshal(buf.Bytes(), &out); err != nil {
		return 0, fmt.Errorf("%s %s: decode the %s: %w", method, u, b.res.Kind, err)
	}
	return parseRV(out.Metadata.ResourceVersion)
}

func (b *httpBackend) create(ctx context.Context, ns, name string, data map[string]string) (int64, error) {
	return b.write(ctx, http.MethodPost, b.collection(ns), b.res.object(ns, name, "", data))
}

func (b *httpBackend) update(ctx context.Context, ns, name string, data map[string]string, rv int64) (int64, error) {
	obj := b.res.object(ns, name, strconv.FormatInt(rv, 10), data)
	return b.write(ctx, http.MethodPut, b.collection(ns)+"/"+url.PathEscape(name), obj)
}

// apply sends the object with data as a server-side apply (PATCH,
// application/apply-patch+yaml, of which JSON is a part) by fieldManager
// manager, and returns the resourceVersion of the answer. It creates the
// object if there is none.
func (b *httpBackend) apply(ctx context.Context, ns, name, manager string, data map[string]string) (int64, error) {
	body, err := json.Marshal(b.res.object(ns, name, "", data))
	if err != nil {
		return 0, err
	}
	u := b.collection(ns) + "/" + url.PathEscape(name) + "?fieldManager=" + url.QueryEscape(manager)
	buf, err := b.doType(ctx, http.MethodPatch, u, "application/apply-patch+yaml", body)
	if err != nil {
		return 0, err
	}
	defer bufPool.Put(buf)
	var out apiObject
	if err := json.Unmarshal(buf.Bytes(), &out); err != nil {
		return 0, fmt.Errorf("PATCH %s: decode the %s: %w", u, b.res.Kind, err)
	}
	return parseRV(out.Metadata.ResourceVersion)
}

func (b *httpBackend) get(ctx context.Context, ns, name string) (map[string]string, int64, error) {
	u := b.collection(ns) + "/" + url.PathEscape(name)
	buf, err := b.do(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, 0, err
	}
	defer bufPool.Put(buf)
	var out apiObject
	if err := json.Unmarshal(buf.Bytes(), &out); err != nil {
		return nil, 0, fmt.Errorf("GET %s: decode the %s: %w", u, b.res.Kind, err)
	}
	rv, err := parseRV(out.Metadata.ResourceVersion)
	return out.data(), rv, err
}

func (b *httpBackend) list(ctx context.Context, ns string, check bool) (int, int64, error) {
	u := b.collection(ns)
	buf, err := b.do(ctx, http.MethodGet, u, nil)
	if err != nil {
		return 0, 0, err
	}
	defer bufPool.Put(buf)
	if !check {
		return -1, 0, nil
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
	if out.Metadata.Continue != "" {
		return 0, 0, fmt.Errorf("GET %s: the server cut the list after %d items (continue token set)", u, len(out.Items))
	}
	rv, err := parseRV(out.Metadata.ResourceVersion)
	return len(out.Items), rv, err
}

func (b *httpBackend) watch(ctx context.Context, ns string, rv int64, handle func(watchEvent)) (*watchStream, error) {
	u := b.collection(ns) + "?watch=1&resourceVersion=" + strconv.FormatInt(rv, 10)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := b.stream.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		resp.Body.Close()
		return nil, fmt.Errorf("watch %s: %s: %s", u, resp.Status, bytes.TrimSpace(body))
	}
	ws := &watchStream{Done: make(chan struct{})}
	go func() {
		defer close(ws.Done)
		defer resp.Body.Close()
		stop := context.AfterFunc(ctx, func() { resp.Body.Close() })
		defer stop()
		r := bufio.NewReaderSize(resp.Body, 16<<10)
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
					ws.Err = fmt.Errorf("watch %s: undecodable event: %w", u, jerr)
					return
				}
				we := watchEvent{Type: ev.Type, Data: ev.Object.data(), Received: now}
				if ev.Type == "ERROR" {
					ws.Err = fmt.Errorf("watch %s: ERROR event: %s", u, bytes.TrimSpace(line))
					return
				}
				we.RV, _ = parseRV(ev.Object.Metadata.ResourceVersion)
				handle(we)
			}
			if err != nil {
				if ctx.Err() == nil {
					ws.Err = fmt.Errorf("watch %s: the stream ended: %w", u, err)
				}
				return
			}
		}
	}()
	return ws, nil
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
