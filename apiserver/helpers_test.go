package apiserver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/concord-dev/concord/apiserver"
	"github.com/concord-dev/concord/cmd/concord/app"
	apptesting "github.com/concord-dev/concord/cmd/concord/app/testing"
	"github.com/concord-dev/concord/etcdstore"
	"github.com/concord-dev/concord/etcdstore/etcdtest"
	"github.com/concord-dev/concord/registry"
	namespacecontroller "github.com/concord-dev/concord/registry/controller/namespace"
)

// testServer is a Concord server (cmd/concord/app) on loopback over a
// real embedded etcd.
type testServer struct {
	URL    string
	Etcd   *etcdtest.Etcd
	Stores []*registry.Store
	// Catalog serves Stores, and what a test adds.
	Catalog *registry.Catalog
	Handler *apiserver.Handler
}

func startServer(t testing.TB) *testServer {
	t.Helper()
	return startServerWith(t, registry.DefaultWatchConfig())
}

// startServerWith starts a server whose watch fan-out uses cfg.
func startServerWith(t testing.TB, cfg registry.WatchConfig) *testServer {
	t.Helper()
	return startServerOn(t, cfg, func(s *etcdstore.Store) registry.Storage { return s })
}

// startServerOn starts a server over the storage wrap makes of the real
// etcd store, so a test can step into the write path.
func startServerOn(t testing.TB, cfg registry.WatchConfig, wrap func(*etcdstore.Store) registry.Storage, corsOrigins ...*regexp.Regexp) *testServer {
	t.Helper()
	return startServerWithOptions(t, serverOptions{watch: cfg, wrap: wrap, cors: corsOrigins})
}

// serverOptions configure startServerWithOptions; the zero value is
// startServer's server.
type serverOptions struct {
	watch registry.WatchConfig
	wrap  func(*etcdstore.Store) registry.Storage
	cors  []*regexp.Regexp
	// etcdRequestTimeout bounds each etcd request (0: the binary's
	// default).
	etcdRequestTimeout time.Duration
	// shutdown, when closed, fails /readyz.
	shutdown <-chan struct{}
	// crdsSynced, until closed, fails /readyz.
	crdsSynced <-chan struct{}
	// hooks are start-up steps /readyz waits for.
	hooks []apiserver.PostStartHook
	// logOut receives the server's JSON log (nil: discarded).
	logOut io.Writer
	// maxReadOnly and maxMutating are the in-flight limits (0: none);
	// requestTimeout is --request-timeout (0: the default).
	maxReadOnly, maxMutating int
	requestTimeout           time.Duration
	// maxBytes bounds the request bodies in flight (0: no bound).
	maxBytes int64
	// storeOpts configure the stores (registry.WithoutReadCache for a
	// test that injects faults into storage.Get).
	storeOpts []registry.StoreOption
	// crds runs the controllers of CRDs (app.Controllers.CRDs): their
	// custom resources served, names and conditions, clean-up.
	crds bool
	// namespaces runs the namespace controller (a deleted namespace's
	// content deleted, then the namespace), under its Lease.
	namespaces bool
}

// startServerWithOptions starts a server as the binary does
// (cmd/concord/app), over a real embedded etcd of its own, serving plain
// HTTP on loopback to everyone (anonymous, AlwaysAllow), until the test
// ends. /readyz's checks besides ping and etcd are the test's own (shutdown,
// crdsSynced, hooks); the server's start-up is done when it returns.
func startServerWithOptions(t testing.TB, opts serverOptions) *testServer {
	t.Helper()
	if opts.logOut == nil {
		opts.logOut = io.Discard
	}
	e := etcdtest.Start(t)
	cfg := apptesting.PlainConfig(t, e.Endpoint)
	for _, o := range opts.cors {
		cfg.CORSAllowedOrigins = append(cfg.CORSAllowedOrigins, o.String())
	}
	if opts.etcdRequestTimeout > 0 {
		cfg.EtcdRequestTimeout = opts.etcdRequestTimeout
	}
	if opts.requestTimeout > 0 {
		cfg.RequestTimeout = opts.requestTimeout
	}
	cfg.MaxRequestsInFlight, cfg.MaxMutatingRequestsInFlight, cfg.MaxRequestBytesInFlight = opts.maxReadOnly, opts.maxMutating, opts.maxBytes
	appOpts := []app.Option{
		app.WithLogger(slog.New(slog.NewJSONHandler(opts.logOut, &slog.HandlerOptions{Level: slog.LevelDebug}))),
		app.WithControllers(app.Controllers{CRDs: opts.crds, Namespaces: opts.namespaces}),
		app.WithStoreOptions(opts.storeOpts...),
		app.WithHandlerConfig(func(c *apiserver.Config) {
			c.ShutdownInitiated, c.CRDsSynced, c.PostStartHooks = opts.shutdown, opts.crdsSynced, opts.hooks
		}),
	}
	if opts.watch != (registry.WatchConfig{}) {
		appOpts = append(appOpts, app.WithWatchConfig(opts.watch))
	}
	if opts.wrap != nil {
		appOpts = append(appOpts, app.WithStorage(opts.wrap))
	}
	srv := apptesting.Run(t, cfg, appOpts...)
	return &testServer{URL: srv.URL(), Etcd: e, Stores: srv.Stores(), Catalog: srv.Catalog(), Handler: srv.Handler()}
}

// runNamespaceController runs the namespace controller over the catalog
// until the test ends.
func runNamespaceController(t testing.TB, catalog *registry.Catalog, opts serverOptions) {
	t.Helper()
	namespaces, ok := catalog.Lookup("", "v1", registry.Namespaces.Plural)
	if !ok {
		t.Fatal("the catalog serves no Namespaces")
	}
	log := slog.New(slog.NewJSONHandler(opts.logOut, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		namespacecontroller.New(namespaces, catalog, log).Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
}

// namespace creates namespaces, so objects can be created in them.
func (s *testServer) namespace(t testing.TB, names ...string) {
	t.Helper()
	for _, name := range names {
		body := map[string]any{"metadata": map[string]string{"name": name}}
		if resp := s.do(t, http.MethodPost, "/api/v1/namespaces", body); resp.Code != http.StatusCreated {
			t.Fatalf("create namespace %s: %d %s", name, resp.Code, resp.Body)
		}
	}
}

// response is what a test needs of an HTTP answer.
type response struct {
	Code   int
	Header http.Header
	Body   []byte
}

// do sends one request; body may be nil, a string, []byte or a value that is
// encoded as JSON.
func (s *testServer) do(t testing.TB, method, path string, body any, header ...string) response {
	t.Helper()
	var reader io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		reader = bytes.NewBufferString(b)
	case []byte:
		reader = bytes.NewReader(b)
	default:
		data, err := json.Marshal(b)
		if err != nil {
			t.Fatalf("encode body: %v", err)
		}
		reader = bytes.NewReader(data)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, s.URL+path, reader)
	if err != nil {
		t.Fatalf("new request: %v", err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, path, err)
	}
	return response{Code: resp.StatusCode, Header: resp.Header, Body: data}
}

// status decodes the body as a Status and fails the test if it is not one.
func (r response) status(t testing.TB) metav1.Status {
	t.Helper()
	var st metav1.Status
	if err := json.Unmarshal(r.Body, &st); err != nil || st.Kind != "Status" || st.APIVersion != "v1" {
		t.Fatalf("body is not a v1 Status (%v): %s", err, r.Body)
	}
	// A Failure carries the HTTP code; kube-apiserver's delete Success does not.
	if st.Status == metav1.StatusFailure && st.Code != int32(r.Code) {
		t.Errorf("Status.code = %d; want the HTTP code %d", st.Code, r.Code)
	}
	return st
}

// decode decodes the body as JSON into v.
func (r response) decode(t testing.TB, v any) {
	t.Helper()
	if err := json.Unmarshal(r.Body, v); err != nil {
		t.Fatalf("decode %T: %v: %s", v, err, r.Body)
	}
}

// storedKeys returns the raw etcd keys under prefix, to assert what was
// (not) written.
func (s *testServer) storedKeys(t *testing.T, prefix string) map[string]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := s.Etcd.Client.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatalf("etcd get %s: %v", prefix, err)
	}
	out := map[string]string{}
	for _, kv := range resp.Kvs {
		out[string(kv.Key)] = string(kv.Value)
	}
	return out
}
