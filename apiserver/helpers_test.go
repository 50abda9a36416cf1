package apiserver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/concord-dev/concord/apiserver"
	"github.com/concord-dev/concord/etcdstore"
	"github.com/concord-dev/concord/etcdstore/etcdtest"
	"github.com/concord-dev/concord/registry"
	"github.com/concord-dev/concord/registry/controller/crdcleanup"
	"github.com/concord-dev/concord/registry/controller/crdstatus"
	namespacecontroller "github.com/concord-dev/concord/registry/controller/namespace"
	"github.com/concord-dev/concord/registry/crdserving"
)

// testServer is Concord's handler on a real loopback HTTP server over a
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
	// etcdRequestTimeout bounds each etcd request (0: no bound).
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
	// crds runs what run.go runs beside the API for CRDs: crdserving (the
	// catalog serves the established CRDs' custom resources), crdstatus
	// (names and conditions) and crdcleanup (a deleted CRD's objects).
	crds bool
	// namespaces runs the namespace controller (a deleted namespace's
	// content deleted, then the namespace), as run.go does.
	namespaces bool
}

// startServerWithOptions starts a server as run does: the etcd endpoint
// monitor as the etcd health check, store, monitor and API metrics in one
// registry that /metrics serves.
func startServerWithOptions(t testing.TB, opts serverOptions) *testServer {
	t.Helper()
	if opts.watch == (registry.WatchConfig{}) {
		opts.watch = registry.DefaultWatchConfig()
	}
	if opts.wrap == nil {
		opts.wrap = func(s *etcdstore.Store) registry.Storage { return s }
	}
	if opts.logOut == nil {
		opts.logOut = io.Discard
	}
	e := etcdtest.Start(t)
	reg := prometheus.NewRegistry()
	groups := map[string]string{}
	for _, res := range registry.Resources {
		if res.Storage == nil { // the key space is the stored version's
			groups[res.Plural] = res.GroupVersion.Group
		}
	}
	storeMetrics, err := etcdstore.NewMetrics(reg, groups)
	if err != nil {
		t.Fatalf("store metrics: %v", err)
	}
	store := etcdstore.NewWithOptions(e.Client, "/registry", etcdstore.Options{RequestTimeout: opts.etcdRequestTimeout, Metrics: storeMetrics})
	monitor, err := etcdstore.StartMonitor(e.Client, etcdstore.MonitorConfig{
		Client:     clientv3.Config{Endpoints: []string{e.Endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()},
		Prefix:     "/registry",
		Registerer: reg,
		// As run: readiness tolerates an etcd silent for less than the
		// request timeout.
		ReadyWithin: opts.etcdRequestTimeout,
	})
	if err != nil {
		t.Fatalf("etcd endpoint monitor: %v", err)
	}
	t.Cleanup(monitor.Close)
	storage := opts.wrap(store)
	stores := registry.NewStores(storage, opts.watch, opts.storeOpts...)
	catalog := registry.NewCatalog(stores)
	if opts.crds {
		runCRDControllers(t, catalog, storage, opts)
	}
	if opts.namespaces {
		runNamespaceController(t, catalog, opts)
	}
	handler := apiserver.New(apiserver.Config{
		Catalog:            catalog,
		Logger:             slog.New(slog.NewJSONHandler(opts.logOut, &slog.HandlerOptions{Level: slog.LevelDebug})),
		CORSAllowedOrigins: opts.cors,
		StorageCheck:       monitor.Check,
		ShutdownInitiated:  opts.shutdown,
		CRDsSynced:         opts.crdsSynced,
		PostStartHooks:     opts.hooks,
		Metrics:            reg,

		MaxRequestsInFlight:         opts.maxReadOnly,
		MaxMutatingRequestsInFlight: opts.maxMutating,
		MaxRequestBytesInFlight:     opts.maxBytes,
		RequestTimeout:              opts.requestTimeout,
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := registry.EnsureSystemNamespaces(ctx, stores); err != nil {
		t.Fatalf("system namespaces: %v", err)
	}
	srv := httptest.NewServer(handler)
	t.Cleanup(func() {
		for _, s := range catalog.Stores() {
			s.StopWatches()
		}
		srv.Close()
	})
	return &testServer{URL: srv.URL, Etcd: e, Stores: stores, Catalog: catalog, Handler: handler}
}

// runCRDControllers runs crdserving, crdstatus and crdcleanup over the
// catalog's CustomResourceDefinitions as run.go does, until the test ends.
func runCRDControllers(t testing.TB, catalog *registry.Catalog, storage registry.Storage, opts serverOptions) {
	t.Helper()
	gv := registry.CustomResourceDefinitions.GroupVersion
	crds, ok := catalog.Lookup(gv.Group, gv.Version, registry.CustomResourceDefinitions.Plural)
	if !ok {
		t.Fatal("the catalog serves no CustomResourceDefinitions")
	}
	newStore := func(storage registry.Storage, res *registry.Resource) *registry.Store {
		return registry.NewStore(storage, res, opts.watch, opts.storeOpts...)
	}
	log := slog.New(slog.NewJSONHandler(opts.logOut, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, run := range []func(context.Context){
		crdserving.New(crds, catalog, storage, newStore, log).Run,
		crdstatus.New(crds, log).Run,
		crdcleanup.New(crds, storage, newStore, log).Run,
	} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			run(ctx)
		}()
	}
	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})
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
