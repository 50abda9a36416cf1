package apiserver_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"

	"github.com/concord-dev/concord/etcdstore"
	"github.com/concord-dev/concord/registry"
)

// gatedStorage holds every read and create of an object whose name begins
// with "held" until release is closed (or the request ends), so a test
// can keep requests in flight; entered receives each held name.
type gatedStorage struct {
	*etcdstore.Store
	entered chan string
	release chan struct{}
}

func (g *gatedStorage) hold(ctx context.Context, ref etcdstore.Ref) error {
	if !strings.HasPrefix(ref.Name, "held") {
		return nil
	}
	g.entered <- ref.Name
	select {
	case <-g.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (g *gatedStorage) Get(ctx context.Context, ref etcdstore.Ref, rev int64) (etcdstore.Object, error) {
	if err := g.hold(ctx, ref); err != nil {
		return etcdstore.Object{}, err
	}
	return g.Store.Get(ctx, ref, rev)
}

func (g *gatedStorage) Create(ctx context.Context, ref etcdstore.Ref, value []byte, guards ...etcdstore.Guard) (int64, error) {
	if err := g.hold(ctx, ref); err != nil {
		return 0, err
	}
	return g.Store.Create(ctx, ref, value, guards...)
}

// waitEntered waits until n held requests are in storage.
func (g *gatedStorage) waitEntered(t *testing.T, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		select {
		case <-g.entered:
		case <-time.After(10 * time.Second):
			t.Fatalf("only %d of %d held requests reached storage", i, n)
		}
	}
}

// checkTooManyRequests asserts kube-apiserver's 429: Retry-After 1 and a
// TooManyRequests Status with retryAfterSeconds 1.
func checkTooManyRequests(t *testing.T, what string, resp response) {
	t.Helper()
	if resp.Code != http.StatusTooManyRequests {
		t.Errorf("%s = %d %s; want 429", what, resp.Code, resp.Body)
		return
	}
	if got := resp.Header.Get("Retry-After"); got != "1" {
		t.Errorf("%s: Retry-After %q; want 1", what, got)
	}
	st := resp.status(t)
	if st.Reason != metav1.StatusReasonTooManyRequests || st.Message != "Too many requests, please try again later." ||
		st.Details == nil || st.Details.RetryAfterSeconds != 1 {
		t.Errorf("%s: Status reason %q message %q details %+v; want TooManyRequests, kube-apiserver's message, retryAfterSeconds 1",
			what, st.Reason, st.Message, st.Details)
	}
}

func inFlightGauge(t *testing.T, s *testServer, kind string) float64 {
	t.Helper()
	return value(t, scrape(t, s), "apiserver_current_inflight_requests", map[string]string{"request_kind": kind})
}

// waitInFlight waits, at most 5 s, until one request of kind is in flight:
// the one the test just sent for who.
func waitInFlight(t *testing.T, s *testServer, kind, who string) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); inFlightGauge(t, s, kind) != 1; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s holds no %s slot 5s after its request was sent", who, kind)
		}
	}
}

// openWatch starts a watch and returns its status code once the headers
// are in; the watch ends with the test.
func openWatch(t *testing.T, u string) int {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("watch %s: %v", u, err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp.StatusCode
}

// TestMaxInFlight: with 2 read-only and 1 mutating request held in
// storage, a burst of further requests of each kind is answered 429 at
// once, while watches, health probes and /metrics are still served; the
// two kinds are counted apart; once the held requests end, requests are
// served again.
func TestMaxInFlight(t *testing.T) {
	gate := &gatedStorage{entered: make(chan string, 100), release: make(chan struct{})}
	s := startServerWithOptions(t, serverOptions{
		wrap:        func(st *etcdstore.Store) registry.Storage { gate.Store = st; return gate },
		maxReadOnly: 2,
		maxMutating: 1,
		// Gets must reach the gate, not the cache.
		storeOpts: []registry.StoreOption{registry.WithoutReadCache()},
	})
	// A namespace named "watch" must not make its requests watches, which
	// the limits do not count.
	s.namespace(t, "watch")
	const ns = "/api/v1/namespaces/default/configmaps"

	var held sync.WaitGroup
	heldCodes := make(chan int, 3)
	for _, name := range []string{"held-1", "held-2"} {
		held.Go(func() { heldCodes <- doRaw(http.MethodGet, s.URL+ns+"/"+name, nil) })
	}
	gate.waitEntered(t, 2)

	var burst sync.WaitGroup
	resps := make(chan response, 20)
	for range 20 {
		burst.Go(func() { resps <- s.do(t, http.MethodGet, ns, nil) })
	}
	burst.Wait()
	close(resps)
	for resp := range resps {
		checkTooManyRequests(t, "GET over the read-only limit", resp)
	}
	for _, path := range []string{"/api", "/apis", "/openapi/v2", ns + "/other", "/api/v1/namespaces/watch/configmaps"} {
		checkTooManyRequests(t, "GET "+path+" over the read-only limit", s.do(t, http.MethodGet, path, nil))
	}
	for _, path := range []string{"/healthz", "/readyz", "/livez"} {
		if resp := s.do(t, http.MethodGet, path, nil); resp.Code != http.StatusOK {
			t.Errorf("GET %s while the API is at its limit = %d %s; want 200 (probes are not limited)", path, resp.Code, resp.Body)
		}
	}
	if got := inFlightGauge(t, s, "readOnly"); got != 2 {
		t.Errorf("apiserver_current_inflight_requests{readOnly} = %v; want 2", got)
	}
	for _, path := range []string{ns + "?watch=1", ns + "?watch=true&resourceVersion=0", "/api/v1/watch/namespaces/default/configmaps", ns + "/x?watch=yes"} {
		if code := openWatch(t, s.URL+path); code != http.StatusOK {
			t.Errorf("watch %s at the read-only limit = %d; want 200 (watches are not counted)", path, code)
		}
	}

	// Mutating requests have their own limit.
	cm := func(name string) map[string]any { return map[string]any{"metadata": map[string]any{"name": name}} }
	if resp := s.do(t, http.MethodPost, ns, cm("free")); resp.Code != http.StatusCreated {
		t.Fatalf("POST with the read-only requests at their limit = %d %s; want 201", resp.Code, resp.Body)
	}
	held.Go(func() {
		heldCodes <- doRaw(http.MethodPost, s.URL+ns, []byte(`{"metadata":{"name":"held-w"}}`))
	})
	gate.waitEntered(t, 1)
	checkTooManyRequests(t, "POST over the mutating limit", s.do(t, http.MethodPost, ns, cm("other")))
	checkTooManyRequests(t, "POST in namespace watch over the mutating limit", s.do(t, http.MethodPost, "/api/v1/namespaces/watch/configmaps", cm("other")))
	checkTooManyRequests(t, "PUT over the mutating limit", s.do(t, http.MethodPut, ns+"/free", cm("free")))
	checkTooManyRequests(t, "PATCH over the mutating limit", s.do(t, http.MethodPatch, ns+"/free", `{"data":{"a":"b"}}`, "Content-Type", "application/merge-patch+json"))
	checkTooManyRequests(t, "DELETE over the mutating limit", s.do(t, http.MethodDelete, ns+"/free", nil))
	checkTooManyRequests(t, "DELETE collection over the mutating limit", s.do(t, http.MethodDelete, ns, nil))
	if got := inFlightGauge(t, s, "mutating"); got != 1 {
		t.Errorf("apiserver_current_inflight_requests{mutating} = %v; want 1", got)
	}
	families := scrape(t, s)
	rejected := map[string]string{"verb": "GET", "dry_run": "", "group": "", "version": "", "resource": "", "subresource": "", "scope": "", "component": "apiserver", "code": "429"}
	if got := value(t, families, "apiserver_request_total", rejected); got < 20 {
		t.Errorf(`apiserver_request_total{verb="GET",code="429"} = %v; want at least the 20 of the burst`, got)
	}

	close(gate.release)
	held.Wait()
	close(heldCodes)
	for code := range heldCodes {
		if code != http.StatusNotFound && code != http.StatusCreated {
			t.Errorf("a held request ended with %d; want 404 (GET) or 201 (POST)", code)
		}
	}
	if resp := s.do(t, http.MethodGet, ns, nil); resp.Code != http.StatusOK {
		t.Errorf("GET after the burst = %d %s; want 200", resp.Code, resp.Body)
	}
	if resp := s.do(t, http.MethodPost, ns, cm("after")); resp.Code != http.StatusCreated {
		t.Errorf("POST after the burst = %d %s; want 201", resp.Code, resp.Body)
	}
	for _, kind := range []string{"readOnly", "mutating"} {
		if got := inFlightGauge(t, s, kind); got != 0 {
			t.Errorf("apiserver_current_inflight_requests{%s} after the burst = %v; want 0", kind, got)
		}
	}
}

// rawRequest opens a connection to the server and sends head (the request
// line and headers, without the blank line that ends them).
func rawRequest(t *testing.T, serverURL, head string) net.Conn {
	t.Helper()
	u, err := url.Parse(serverURL)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if _, err := io.WriteString(conn, head+"\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	return conn
}

// TestSlowBodyIsCutAtTheRequestDeadline: a client that sends its headers
// and then trickles its body holds its in-flight slot only until the
// request's deadline; then it is answered 408 and disconnected.
func TestSlowBodyIsCutAtTheRequestDeadline(t *testing.T) {
	s := startServerWithOptions(t, serverOptions{maxMutating: 1, requestTimeout: time.Second})
	const ns = "/api/v1/namespaces/default/configmaps"
	start := time.Now()
	conn := rawRequest(t, s.URL, "POST "+ns+" HTTP/1.1\r\nHost: concord\r\nContent-Type: application/json\r\nContent-Length: 200")
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for _, c := range []byte(`{"metadata":{"name":"slow"},"data":{"a":"` + strings.Repeat("b", 150) + `"}}`) {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			if _, err := conn.Write([]byte{c}); err != nil {
				return
			}
		}
	}()
	// Once its headers are read the slow body holds the slot (a fixed
	// wait could end before a loaded machine read them).
	waitInFlight(t, s, "mutating", "the slow body")
	checkTooManyRequests(t, "POST while a slow body holds the mutating slot", s.do(t, http.MethodPost, ns, `{"metadata":{"name":"x"}}`))

	if err := conn.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("read the answer to the slow body: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	took := time.Since(start)
	if resp.StatusCode != http.StatusRequestTimeout || !resp.Close {
		t.Errorf("slow body answered %d (close %v) %s; want 408 and the connection closed", resp.StatusCode, resp.Close, body)
	}
	if r := (response{Code: resp.StatusCode, Body: body}).status(t); r.Reason != metav1.StatusReasonTimeout {
		t.Errorf("slow body: reason %q; want Timeout", r.Reason)
	}
	if took < 900*time.Millisecond || took > 5*time.Second {
		t.Errorf("slow body cut after %s; want about the request timeout (1s)", took)
	}
	if _, err := conn.Read(make([]byte, 1)); err == nil {
		t.Error("the connection of the slow body is still open")
	}
	if resp := s.do(t, http.MethodPost, ns, `{"metadata":{"name":"x"}}`); resp.Code != http.StatusCreated {
		t.Errorf("POST after the slow body was cut = %d %s; want 201", resp.Code, resp.Body)
	}
	if keys := s.storedKeys(t, "/registry/configmaps/default/slow"); len(keys) != 0 {
		t.Errorf("the slow body was stored: %v", keys)
	}
}

// TestSlowReaderIsCutAfterTheRequestDeadline: a client that asks for a
// large list and does not read it holds its in-flight slot only until
// shortly after the request's deadline.
func TestSlowReaderIsCutAfterTheRequestDeadline(t *testing.T) {
	s := startServerWithOptions(t, serverOptions{maxReadOnly: 1, requestTimeout: time.Second})
	const ns = "/api/v1/namespaces/default/configmaps"
	big := strings.Repeat("x", 900_000)
	for i := range 12 {
		body := map[string]any{"metadata": map[string]any{"name": fmt.Sprintf("big-%d", i)}, "data": map[string]string{"v": big}}
		if resp := s.do(t, http.MethodPost, ns, body); resp.Code != http.StatusCreated {
			t.Fatalf("create big-%d: %d %s", i, resp.Code, resp.Body)
		}
	}
	start := time.Now()
	conn := rawRequest(t, s.URL, "GET "+ns+" HTTP/1.1\r\nHost: concord\r\nAccept: application/json")
	// Once its request is read the reader holds the slot (a fixed wait
	// could end before a loaded machine read it).
	waitInFlight(t, s, "readOnly", "the reader that does not read")
	checkTooManyRequests(t, "GET while a reader that does not read holds the read-only slot", s.do(t, http.MethodGet, "/api/v1/namespaces", nil))
	for {
		resp := s.do(t, http.MethodGet, "/api/v1/namespaces", nil)
		if resp.Code == http.StatusOK {
			break
		}
		if resp.Code != http.StatusTooManyRequests {
			t.Fatalf("GET = %d %s; want 429 until the slow reader is cut, then 200", resp.Code, resp.Body)
		}
		if time.Since(start) > 15*time.Second {
			t.Fatal("the reader that does not read still holds its slot after 15s")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if took := time.Since(start); took < time.Second || took > 10*time.Second {
		t.Errorf("slot released after %s; want between the request timeout (1s) and it plus the write grace (5s) and some slack", took)
	}
	// The slow reader's connection is closed, its response cut short.
	if err := conn.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	n, err := io.Copy(io.Discard, conn)
	if err != nil || n >= 12*900_000 {
		t.Errorf("the slow reader got %d bytes (%v); want the connection closed before the whole list", n, err)
	}
}

// slowStorage makes every read and create take delay, so that concurrent
// requests overlap.
type slowStorage struct {
	*etcdstore.Store
	delay time.Duration
}

func (s slowStorage) Get(ctx context.Context, ref etcdstore.Ref, rev int64) (etcdstore.Object, error) {
	time.Sleep(s.delay)
	return s.Store.Get(ctx, ref, rev)
}

func (s slowStorage) Create(ctx context.Context, ref etcdstore.Ref, value []byte, guards ...etcdstore.Guard) (int64, error) {
	time.Sleep(s.delay)
	return s.Store.Create(ctx, ref, value, guards...)
}

// tooMany counts the 429 answers client-go receives.
type tooMany struct {
	n    atomic.Int64
	next http.RoundTripper
}

func (c *tooMany) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := c.next.RoundTrip(req)
	if err == nil && resp.StatusCode == http.StatusTooManyRequests {
		c.n.Add(1)
	}
	return resp, err
}

// TestClientGoBacksOffOn429: client-go's typed client, against a server
// whose limits concurrent use exceeds, waits out Retry-After and retries
// until every request succeeds.
func TestClientGoBacksOffOn429(t *testing.T) {
	s := startServerWithOptions(t, serverOptions{
		wrap:        func(st *etcdstore.Store) registry.Storage { return slowStorage{st, 100 * time.Millisecond} },
		maxReadOnly: 2,
		maxMutating: 2,
		// Gets must be slow, so read from the slow storage, not the cache.
		storeOpts: []registry.StoreOption{registry.WithoutReadCache()},
	})
	counter := &tooMany{}
	client, err := kubernetes.NewForConfig(&rest.Config{
		Host:        s.URL,
		RateLimiter: flowcontrol.NewFakeAlwaysRateLimiter(), // no client-side throttling
		WrapTransport: func(rt http.RoundTripper) http.RoundTripper {
			counter.next = rt
			return counter
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cms := client.CoreV1().ConfigMaps("default")
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := range 8 {
		wg.Go(func() {
			name := fmt.Sprintf("cm-%d", i)
			if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
				errs <- fmt.Errorf("create %s: %w", name, err)
				return
			}
			if _, err := cms.Get(ctx, name, metav1.GetOptions{}); err != nil {
				errs <- fmt.Errorf("get %s: %w", name, err)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if counter.n.Load() == 0 {
		t.Error("client-go never got a 429: the test did not exceed the limits")
	}
	t.Logf("client-go retried %d answers 429", counter.n.Load())
}

// listLimits records the page sizes the registry asks of storage.
type listLimits struct {
	*etcdstore.Store
	mu     sync.Mutex
	limits []int64
}

func (l *listLimits) List(ctx context.Context, resource, namespace string, opts etcdstore.ListOptions) (etcdstore.ListResult, error) {
	l.mu.Lock()
	l.limits = append(l.limits, opts.Limit)
	l.mu.Unlock()
	return l.Store.List(ctx, resource, namespace, opts)
}

// TestInputBounds: names, label keys and values, annotations and list
// pages are bounded.
func TestInputBounds(t *testing.T) {
	rec := &listLimits{}
	s := startServerWithOptions(t, serverOptions{
		wrap: func(st *etcdstore.Store) registry.Storage { rec.Store = st; return rec },
		// The page sizes asked of etcd are checked: no first page from the cache.
		storeOpts: []registry.StoreOption{registry.WithoutReadCache()},
	})
	const ns = "/api/v1/namespaces/default/configmaps"
	for _, tc := range []struct {
		what string
		meta map[string]any
	}{
		{"a 254-character name", map[string]any{"name": strings.Repeat("a", 254)}},
		{"a 64-character label value", map[string]any{"name": "a", "labels": map[string]string{"k": strings.Repeat("v", 64)}}},
		{"a 64-character label name", map[string]any{"name": "a", "labels": map[string]string{strings.Repeat("k", 64): "v"}}},
		{"a 254-character label prefix", map[string]any{"name": "a", "labels": map[string]string{strings.Repeat("p", 254) + "/k": "v"}}},
		{"annotations over 256 KiB", map[string]any{"name": "a", "annotations": map[string]string{"k": strings.Repeat("v", 256<<10)}}},
	} {
		resp := s.do(t, http.MethodPost, ns, map[string]any{"metadata": tc.meta})
		if resp.Code != http.StatusUnprocessableEntity {
			t.Errorf("POST with %s = %d %s; want 422", tc.what, resp.Code, resp.Body)
		}
	}
	for _, tc := range []struct {
		limit string
		want  int64
	}{{"50000", 10000}, {"10000", 10000}, {"7", 7}, {"-5", 0}} {
		rec.mu.Lock()
		rec.limits = nil
		rec.mu.Unlock()
		if resp := s.do(t, http.MethodGet, ns+"?limit="+tc.limit, nil); resp.Code != http.StatusOK {
			t.Errorf("GET ?limit=%s = %d %s; want 200", tc.limit, resp.Code, resp.Body)
		}
		rec.mu.Lock()
		if len(rec.limits) == 0 || rec.limits[0] != tc.want {
			t.Errorf("GET ?limit=%s asked storage for pages of %v; want %d", tc.limit, rec.limits, tc.want)
		}
		rec.mu.Unlock()
	}
}
