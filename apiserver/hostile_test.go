package apiserver_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metainternalversionscheme "k8s.io/apimachinery/pkg/apis/meta/internalversion/scheme"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/conversion"

	"github.com/concord-dev/concord/etcdstore"
	"github.com/concord-dev/concord/registry"
)

// countedSelector is a label selector whose every parse (apimachinery's
// decoding of list options into their internal form, which parses the
// selectors) is counted in countedSelectorParses.
const countedSelector = "parse-count=hostile-test"

var countedSelectorParses atomic.Int64

// init wraps the decoding of list options in a counter, before any test
// runs (the scheme is not safe to change while it is used).
func init() {
	err := metainternalversionscheme.Scheme.AddConversionFunc((*metav1.ListOptions)(nil), (*metainternalversion.ListOptions)(nil),
		func(a, b any, scope conversion.Scope) error {
			in := a.(*metav1.ListOptions)
			if in.LabelSelector == countedSelector {
				countedSelectorParses.Add(1)
			}
			return metainternalversion.Convert_v1_ListOptions_To_internalversion_ListOptions(in, b.(*metainternalversion.ListOptions), scope)
		})
	if err != nil {
		panic(err)
	}
}

// setSelector is a label selector of exactly n bytes (n ≥ 8): one
// requirement, k in (a,a,…), its first value aa when n is odd.
func setSelector(n int) string {
	values := make([]string, (n-6)/2)
	for i := range values {
		values[i] = "a"
	}
	if n%2 == 1 {
		values[0] = "aa"
	}
	return "k in (" + strings.Join(values, ",") + ")"
}

// terms joins n terms made by term.
func terms(n int, term func(i int) string) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = term(i)
	}
	return strings.Join(parts, ",")
}

// TestSelectorLimits: a selector longer than 10 KiB or with more than 100
// requirements is refused with 400 naming the limit, on lists, watches
// and deletecollection; one at the limits is served.
func TestSelectorLimits(t *testing.T) {
	s := startServer(t)
	const ns = "/api/v1/namespaces/default/configmaps"
	labelReqs := func(n int) string { return terms(n, func(i int) string { return fmt.Sprintf("k%d=a", i) }) }
	fieldReqs := func(n int) string {
		return terms(n, func(i int) string { return fmt.Sprintf("metadata.name!=n%d", i) })
	}
	longField := "metadata.name!=" + strings.Repeat("n", 10240-len("metadata.name!=")+1)
	if len(setSelector(10240)) != 10240 || len(setSelector(10241)) != 10241 {
		t.Fatalf("setSelector makes %d and %d bytes; want 10240 and 10241", len(setSelector(10240)), len(setSelector(10241)))
	}
	cases := []struct {
		name, method, query string
		code                int
		message             string
	}{
		{"labelSelector at 10 KiB", http.MethodGet, "labelSelector=" + url.QueryEscape(setSelector(10240)), 200, ""},
		{"labelSelector one byte over", http.MethodGet, "labelSelector=" + url.QueryEscape(setSelector(10241)), 400,
			"the labelSelector is 10241 bytes long; the limit is 10240 bytes"},
		{"labelSelector over, on a watch", http.MethodGet, "watch=1&labelSelector=" + url.QueryEscape(setSelector(10241)), 400,
			"the labelSelector is 10241 bytes long; the limit is 10240 bytes"},
		{"labelSelector over, on deletecollection", http.MethodDelete, "labelSelector=" + url.QueryEscape(setSelector(10241)), 400,
			"the labelSelector is 10241 bytes long; the limit is 10240 bytes"},
		{"fieldSelector over", http.MethodGet, "fieldSelector=" + url.QueryEscape(longField), 400,
			"the fieldSelector is 10241 bytes long; the limit is 10240 bytes"},
		{"100 label requirements", http.MethodGet, "labelSelector=" + url.QueryEscape(labelReqs(100)), 200, ""},
		{"101 label requirements", http.MethodGet, "labelSelector=" + url.QueryEscape(labelReqs(101)), 400,
			"the labelSelector has 101 requirements; the limit is 100"},
		{"101 label requirements, on a watch", http.MethodGet, "watch=true&labelSelector=" + url.QueryEscape(labelReqs(101)), 400,
			"the labelSelector has 101 requirements; the limit is 100"},
		{"100 field requirements", http.MethodGet, "fieldSelector=" + url.QueryEscape(fieldReqs(100)), 200, ""},
		{"101 field requirements", http.MethodGet, "fieldSelector=" + url.QueryEscape(fieldReqs(101)), 400,
			"the fieldSelector has 101 requirements; the limit is 100"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			resp := s.do(t, tc.method, ns+"?"+tc.query, nil)
			if resp.Code != tc.code {
				t.Fatalf("%s = %d %.300s; want %d", tc.method, resp.Code, resp.Body, tc.code)
			}
			if tc.code == http.StatusOK {
				return
			}
			st := resp.status(t)
			if st.Reason != metav1.StatusReasonBadRequest || st.Message != tc.message {
				t.Errorf("Status reason %q message %q; want BadRequest, %q", st.Reason, st.Message, tc.message)
			}
		})
	}
	// Commas unescaped, as the client sent them: 880 KB of URL,
	// within net/http's 1 MiB of headers. The binary's server answers 431
	// beyond 128 KiB (cmd/concord/app); the handler alone refuses the
	// selector.
	bare := httptest.NewServer(s.Handler)
	t.Cleanup(bare.Close)
	resp := (&testServer{URL: bare.URL}).do(t, http.MethodGet, ns+"?labelSelector="+strings.ReplaceAll(url.QueryEscape(setSelector(880_000)), "%2C", ","), nil)
	if st := resp.status(t); resp.Code != http.StatusBadRequest || st.Reason != metav1.StatusReasonBadRequest || st.Message != "the labelSelector is 880000 bytes long; the limit is 10240 bytes" {
		t.Errorf("labelSelector of 880 KB to the handler alone = %d %q %q; want 400 BadRequest naming the limit", resp.Code, st.Reason, st.Message)
	}
	if resp := s.do(t, http.MethodGet, ns+"/x?labelSelector="+url.QueryEscape(setSelector(10241)), nil); resp.Code != http.StatusNotFound {
		t.Errorf("GET of an object with a long labelSelector (not a list: no selector read) = %d; want 404", resp.Code)
	}
}

// TestRefusedListParsesNoSelector: a list refused with 429 has not parsed
// its selector (the parse costs up to half a second for a selector of the
// 1 MiB the headers allow), and one that is served parses it once.
func TestRefusedListParsesNoSelector(t *testing.T) {
	gate := &gatedStorage{entered: make(chan string, 10), release: make(chan struct{})}
	s := startServerWithOptions(t, serverOptions{
		wrap:        func(st *etcdstore.Store) registry.Storage { gate.Store = st; return gate },
		maxReadOnly: 1,
		storeOpts:   []registry.StoreOption{registry.WithoutReadCache()},
	})
	const ns = "/api/v1/namespaces/default/configmaps"
	list := ns + "?labelSelector=" + url.QueryEscape(countedSelector)

	held := make(chan int, 1)
	go func() { held <- doRaw(http.MethodGet, s.URL+ns+"/held-1", nil) }()
	gate.waitEntered(t, 1)
	before := countedSelectorParses.Load()
	checkTooManyRequests(t, "list over the read-only limit", s.do(t, http.MethodGet, list, nil))
	if n := countedSelectorParses.Load() - before; n != 0 {
		t.Errorf("a list refused with 429 parsed its selector %d times; want 0", n)
	}
	close(gate.release)
	if code := <-held; code != http.StatusNotFound {
		t.Fatalf("the held GET = %d; want 404", code)
	}

	before = countedSelectorParses.Load()
	if resp := s.do(t, http.MethodGet, list, nil); resp.Code != http.StatusOK {
		t.Fatalf("list once the slot is free = %d %s; want 200", resp.Code, resp.Body)
	}
	if n := countedSelectorParses.Load() - before; n != 1 {
		t.Errorf("a served list parsed its selector %d times; want once", n)
	}
}

// sendSized sends a POST of body, announcing its length (or none, chunked,
// when chunked is set).
func sendSized(t *testing.T, s *testServer, path, body string, chunked bool) response {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var reader io.Reader = strings.NewReader(body)
	if chunked {
		reader = io.MultiReader(reader) // hides the length
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.URL+path, reader)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("POST %s: read body: %v", path, err)
	}
	return response{Code: resp.StatusCode, Header: resp.Header, Body: data}
}

// configMapOfSize is a ConfigMap named name whose JSON is exactly n bytes.
func configMapOfSize(t *testing.T, name string, n int) string {
	t.Helper()
	head, tail := `{"metadata":{"name":"`+name+`"},"data":{"a":"`, `"}}`
	pad := n - len(head) - len(tail)
	if pad < 0 {
		t.Fatalf("a ConfigMap named %s takes more than %d bytes", name, n)
	}
	return head + strings.Repeat("x", pad) + tail
}

// TestMaxBytesInFlight: with 600 of 1,000 body bytes held in flight, a
// POST of 500 bytes and a chunked one (which counts the largest body
// allowed) are answered 429 with Retry-After, at once; one of 300 bytes,
// bodiless requests and probes are served. Once the held body is done,
// both are served, the chunked one because it is then alone.
func TestMaxBytesInFlight(t *testing.T) {
	gate := &gatedStorage{entered: make(chan string, 10), release: make(chan struct{})}
	s := startServerWithOptions(t, serverOptions{
		wrap:     func(st *etcdstore.Store) registry.Storage { gate.Store = st; return gate },
		maxBytes: 1000,
	})
	const ns = "/api/v1/namespaces/default/configmaps"
	var held sync.WaitGroup
	heldCode := make(chan int, 1)
	heldBody := []byte(configMapOfSize(t, "held-1", 600))
	held.Go(func() { heldCode <- doRaw(http.MethodPost, s.URL+ns, heldBody) })
	gate.waitEntered(t, 1)

	checkTooManyRequests(t, "POST of 500 bytes with 600 of 1000 in flight", sendSized(t, s, ns, configMapOfSize(t, "big", 500), false))
	checkTooManyRequests(t, "chunked POST with 600 of 1000 in flight", sendSized(t, s, ns, configMapOfSize(t, "chunked", 100), true))
	if resp := sendSized(t, s, ns, configMapOfSize(t, "small", 300), false); resp.Code != http.StatusCreated {
		t.Errorf("POST of 300 bytes with 600 of 1000 in flight = %d %s; want 201", resp.Code, resp.Body)
	}
	for _, path := range []string{ns, ns + "/small", "/readyz", "/livez", "/metrics"} {
		if resp := s.do(t, http.MethodGet, path, nil); resp.Code != http.StatusOK {
			t.Errorf("GET %s with the body bytes at their limit = %d %.200s; want 200", path, resp.Code, resp.Body)
		}
	}
	if got := value(t, scrape(t, s), "apiserver_current_inflight_request_bytes", nil); got != 600 {
		t.Errorf("apiserver_current_inflight_request_bytes = %v; want 600, the held body", got)
	}

	close(gate.release)
	held.Wait()
	if code := <-heldCode; code != http.StatusCreated {
		t.Errorf("the held POST = %d; want 201", code)
	}
	if resp := sendSized(t, s, ns, configMapOfSize(t, "big", 500), false); resp.Code != http.StatusCreated {
		t.Errorf("POST of 500 bytes after the held one = %d %s; want 201", resp.Code, resp.Body)
	}
	if resp := sendSized(t, s, ns, configMapOfSize(t, "chunked", 100), true); resp.Code != http.StatusCreated {
		t.Errorf("chunked POST alone = %d %s; want 201 (a body above the limit is served alone)", resp.Code, resp.Body)
	}
	if got := value(t, scrape(t, s), "apiserver_current_inflight_request_bytes", nil); got != 0 {
		t.Errorf("apiserver_current_inflight_request_bytes at the end = %v; want 0", got)
	}
}

// TestMalformedJSONPatchIsRefusedWithoutEtcd: a JSON patch whose
// operations are malformed whatever they are applied to is answered 422
// at once, naming the operation and what is wrong, while etcd answers
// nothing and nothing asks it; of an object and of a custom resource's
// scale.
func TestMalformedJSONPatchIsRefusedWithoutEtcd(t *testing.T) {
	storage := &frozenStorage{}
	s := startServerWithOptions(t, serverOptions{crds: true, requestTimeout: 10 * time.Second, wrap: func(st *etcdstore.Store) registry.Storage {
		storage.Store = st
		return storage
	}})
	s.namespace(t, "ns")
	s.createCRD(t, gadgetsCRD)
	if resp := s.do(t, http.MethodPost, gadgets, gadget("a", map[string]any{"replicas": 1})); resp.Code != http.StatusCreated {
		t.Fatalf("create a gadget: %d %s", resp.Code, resp.Body)
	}
	existing := s.create(t, "default", "existing", nil)
	const cm = "/api/v1/namespaces/default/configmaps/existing"
	const known = `"add", "remove", "replace", "move", "copy", "test"`
	cases := []struct{ name, path, patch, message string }{
		{"replace without a path", cm, `[{"op":"replace"}]`, `operation 1: replace: "path" is missing`},
		{"replace without a path, of a scale", gadgets + "/a/scale", `[{"op":"replace"}]`, `operation 1: replace: "path" is missing`},
		{"move without a from, second", cm, `[{"op":"test","path":"/data","value":null},{"op":"move","path":"/data/x"}]`, `operation 2: move: "from" is missing`},
		{"add without a value", cm, `[{"op":"add","path":"/data/x"}]`, `operation 1: add: "value" is missing`},
		{"test without a value", cm, `[{"op":"test","path":"/data/x"}]`, `operation 1: test: "value" is missing`},
		{"unknown op", cm, `[{"op":"frobnicate","path":"/data"}]`, `operation 1: "op" is "frobnicate"; it must be one of ` + known},
		{"no op", cm, `[{"path":"/data","value":1}]`, `operation 1: "op" is missing or not a string; it must be one of ` + known},
		{"path not a string", cm, `[{"op":"replace","path":5,"value":1}]`, `operation 1: replace: "path" is not a string`},
		{"path not a pointer", cm, `[{"op":"remove","path":"data/x"}]`, `operation 1: remove: "path" "data/x" is not a JSON pointer: it must be empty or begin with "/"`},
		{"bad escape in from", cm, `[{"op":"copy","from":"/data/~2","path":"/data/y"}]`, `operation 1: copy: "from" "/data/~2" is not a JSON pointer: "~" must be followed by 0 or 1`},
	}
	storage.frozen.Store(true)
	defer storage.frozen.Store(false)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := storage.calls.Load()
			start := time.Now()
			resp := s.do(t, http.MethodPatch, tc.path, tc.patch, "Content-Type", "application/json-patch+json")
			took := time.Since(start)
			if resp.Code != http.StatusUnprocessableEntity {
				t.Fatalf("PATCH with etcd frozen: %d after %s %s; want 422", resp.Code, took, resp.Body)
			}
			st := resp.status(t)
			if want := "the JSON patch is malformed: " + tc.message; st.Reason != metav1.StatusReasonInvalid || st.Message != want {
				t.Errorf("Status reason %q message %q; want Invalid, %q", st.Reason, st.Message, want)
			}
			if n := storage.calls.Load() - before; n != 0 {
				t.Errorf("%d etcd requests for a malformed patch; want none", n)
			}
			if took > 2*time.Second {
				t.Errorf("answered after %s; want at once", took)
			}
		})
	}
	storage.frozen.Store(false)
	resp := s.do(t, http.MethodPatch, cm, `[{"op":"add","path":"/metadata/labels","value":{"k":"v"}},{"op":"copy","from":"/metadata/labels/k","path":"/metadata/labels/example.com~1k"}]`,
		"Content-Type", "application/json-patch+json")
	var got corev1.ConfigMap
	resp.decode(t, &got)
	if resp.Code != http.StatusOK || got.Labels["k"] != "v" || got.Labels["example.com/k"] != "v" || got.ResourceVersion == existing.ResourceVersion {
		t.Errorf("a well-formed patch = %d %s; want 200, labels k and example.com/k", resp.Code, resp.Body)
	}
}
