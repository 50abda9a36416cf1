package apiserver_test

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/concord-dev/concord/etcdstore"
	"github.com/concord-dev/concord/registry"
)

func quoted(rv string) string { return `"` + rv + `"` }

// currentETag is the ETag a GET answers now, or "(gone)".
func (s *testServer) currentETag(t *testing.T) string {
	t.Helper()
	resp := s.do(t, http.MethodGet, flagsPath, nil)
	if resp.Code == http.StatusNotFound {
		return "(gone)"
	}
	return resp.Header.Get("ETag")
}

// TestSeedEdgeCases is Step 9 of the second seed, translated to ConfigMaps:
// PUT bodies carry no resourceVersion, so If-Match is the only precondition.
func TestSeedEdgeCases(t *testing.T) {
	s := startServer(t)
	created := s.create(t, "default", "flags", nil)
	r1 := created.ResourceVersion
	edit := configMap("flags", "", map[string]string{"body": "edited"})

	type row struct {
		name     string
		method   string
		path     string
		ifMatch  string // "" = no header
		code     int
		reason   metav1.StatusReason
		etagNext func() string // the ETag a GET gives afterwards
	}
	var rv []string // resourceVersions the successful writes produced
	latest := func() string {
		if len(rv) == 0 {
			return r1
		}
		return rv[len(rv)-1]
	}
	same := func() string { return quoted(latest()) }
	rows := []row{
		{"PUT without If-Match", http.MethodPut, flagsPath, "", http.StatusPreconditionRequired, registry.StatusReasonPreconditionRequired, same},
		{`PUT If-Match: "r1"`, http.MethodPut, flagsPath, quoted(r1), http.StatusOK, "", nil},
		{`PUT If-Match: "r1" again`, http.MethodPut, flagsPath, quoted(r1), http.StatusPreconditionFailed, registry.StatusReasonPreconditionFailed, same},
		{`PUT If-Match: W/"r2" (weak)`, http.MethodPut, flagsPath, "", http.StatusPreconditionFailed, registry.StatusReasonPreconditionFailed, same},
		{`PUT If-Match: "r1", "r2" (a list)`, http.MethodPut, flagsPath, "", http.StatusOK, "", nil},
		{"PUT If-Match: *", http.MethodPut, flagsPath, "*", http.StatusOK, "", nil},
		{"PUT If-Match: r4 (no quotes)", http.MethodPut, flagsPath, "", http.StatusBadRequest, metav1.StatusReasonBadRequest, same},
		{`PUT If-Match: "r1" on a missing object`, http.MethodPut, nsPath + "/missing", quoted(r1), http.StatusNotFound, metav1.StatusReasonNotFound, same},
		{`DELETE If-Match: "r1" (stale)`, http.MethodDelete, flagsPath, quoted(r1), http.StatusPreconditionFailed, registry.StatusReasonPreconditionFailed, same},
		{`DELETE If-Match: "r4" (current)`, http.MethodDelete, flagsPath, "", http.StatusOK, "", func() string { return "(gone)" }},
	}
	for i, tc := range rows {
		header := tc.ifMatch
		switch i { // rows whose header depends on earlier answers
		case 3:
			header = `W/` + quoted(latest())
		case 4:
			header = quoted(r1) + ", " + quoted(latest())
		case 6:
			header = latest()
		case 9:
			header = quoted(latest())
		}
		before := s.storedKeys(t, "/registry/")
		var headers []string
		if header != "" {
			headers = []string{"If-Match", header}
		}
		var body any
		if tc.method == http.MethodPut {
			e := *edit
			e.Data = map[string]string{"body": "edit " + strconv.Itoa(i)}
			if tc.path != flagsPath {
				e.Name = "missing"
			}
			body = &e
		}
		resp := s.do(t, tc.method, tc.path, body, headers...)
		if resp.Code != tc.code {
			t.Fatalf("%s (If-Match %q): code %d; want %d: %s", tc.name, header, resp.Code, tc.code, resp.Body)
		}
		if tc.reason != "" {
			if st := resp.status(t); st.Reason != tc.reason {
				t.Errorf("%s: reason %q; want %q (%s)", tc.name, st.Reason, tc.reason, st.Message)
			}
		}
		if tc.code == http.StatusOK && tc.method == http.MethodPut {
			var cm corev1.ConfigMap
			resp.decode(t, &cm)
			if resp.Header.Get("ETag") != quoted(cm.ResourceVersion) || cm.ResourceVersion == latest() {
				t.Errorf("%s: ETag %q for resourceVersion %q; want a new version, quoted", tc.name, resp.Header.Get("ETag"), cm.ResourceVersion)
			}
			rv = append(rv, cm.ResourceVersion)
			if stored, _ := s.storedConfigMap(t, flagsKey); stored.Data["body"] != "edit "+strconv.Itoa(i) {
				t.Errorf("%s: stored body %q; want this row's edit", tc.name, stored.Data["body"])
			}
			continue
		}
		if tc.etagNext != nil {
			if got, want := s.currentETag(t), tc.etagNext(); got != want {
				t.Errorf("%s: ETag afterwards %s; want %s", tc.name, got, want)
			}
		}
		if tc.code != http.StatusOK {
			if after := s.storedKeys(t, "/registry/"); len(after) != len(before) || after[flagsKey] != before[flagsKey] {
				t.Errorf("%s: the store changed on a refused request", tc.name)
			}
		}
	}
	if len(rv) != 3 {
		t.Errorf("%d successful PUTs; want 3", len(rv))
	}
}

// TestConditionalGet is Step 8 of the second seed: If-None-Match uses the
// weak comparison; a match is 304 with the ETag and no body.
func TestConditionalGet(t *testing.T) {
	s := startServer(t)
	big := configMap("flags", "", map[string]string{"body": strings.Repeat("runbook line\n", 4000)})
	if resp := s.do(t, http.MethodPost, nsPath, big); resp.Code != http.StatusCreated {
		t.Fatalf("create: %d", resp.Code)
	}
	first := s.do(t, http.MethodGet, flagsPath, nil)
	tag := first.Header.Get("ETag")
	if first.Code != http.StatusOK || len(first.Body) < 56000 || tag == "" {
		t.Fatalf("first GET: %d, %d bytes, ETag %q", first.Code, len(first.Body), tag)
	}
	tests := []struct {
		name, value string
		code        int
	}{
		{"same ETag", tag, http.StatusNotModified},
		{"weak form", "W/" + tag, http.StatusNotModified},
		{"list with it", `"99", ` + tag, http.StatusNotModified},
		{"star", "*", http.StatusNotModified},
		{"an old ETag", `"1"`, http.StatusOK},
	}
	for _, tc := range tests {
		resp := s.do(t, http.MethodGet, flagsPath, nil, "If-None-Match", tc.value)
		if resp.Code != tc.code {
			t.Errorf("If-None-Match %s: %d; want %d", tc.name, resp.Code, tc.code)
		}
		if resp.Header.Get("ETag") != tag {
			t.Errorf("If-None-Match %s: ETag %q; want %q", tc.name, resp.Header.Get("ETag"), tag)
		}
		if tc.code == http.StatusNotModified && len(resp.Body) != 0 {
			t.Errorf("If-None-Match %s: 304 with %d body bytes; want none", tc.name, len(resp.Body))
		}
		if tc.code == http.StatusOK && len(resp.Body) != len(first.Body) {
			t.Errorf("If-None-Match %s: %d body bytes; want the full %d", tc.name, len(resp.Body), len(first.Body))
		}
	}
	small := configMap("flags", "", map[string]string{"body": "short"})
	if resp := s.do(t, http.MethodPut, flagsPath, small, "If-Match", tag); resp.Code != http.StatusOK {
		t.Fatalf("edit: %d %s", resp.Code, resp.Body)
	}
	resp := s.do(t, http.MethodGet, flagsPath, nil, "If-None-Match", tag)
	if resp.Code != http.StatusOK || resp.Header.Get("ETag") == tag || len(resp.Body) >= len(first.Body) {
		t.Errorf("same ETag after an edit: %d, ETag %q, %d bytes; want 200 with the new ETag and body", resp.Code, resp.Header.Get("ETag"), len(resp.Body))
	}
	for _, bad := range []string{"4", `"4" "5"`, `W/`} {
		resp := s.do(t, http.MethodGet, flagsPath, nil, "If-None-Match", bad)
		if st := resp.status(t); resp.Code != http.StatusBadRequest || st.Reason != metav1.StatusReasonBadRequest {
			t.Errorf("If-None-Match %q: %d %s; want 400 BadRequest", bad, resp.Code, st.Reason)
		}
	}
	if resp := s.do(t, http.MethodGet, nsPath+"/missing", nil, "If-None-Match", "*"); resp.Code != http.StatusNotFound {
		t.Errorf("If-None-Match * on a missing object: %d; want 404", resp.Code)
	}
	if list := s.do(t, http.MethodGet, nsPath, nil); list.Header.Get("ETag") != "" {
		t.Errorf("a list carries ETag %q; want none (it is not a single object)", list.Header.Get("ETag"))
	}
}

func TestIfMatchAndBodyResourceVersionBothHold(t *testing.T) {
	s := startServer(t)
	c := s.create(t, "default", "flags", nil)
	c.Data = map[string]string{"k": "v2"}
	stale := c.ResourceVersion
	c = s.put(t, c)
	tests := []struct {
		name     string
		bodyRV   string
		ifMatch  string
		code     int
		reason   metav1.StatusReason
		moveRVTo bool
	}{
		{"If-Match current, body stale", stale, quoted(c.ResourceVersion), http.StatusConflict, metav1.StatusReasonConflict, false},
		{"If-Match stale, body current", c.ResourceVersion, quoted(stale), http.StatusPreconditionFailed, registry.StatusReasonPreconditionFailed, false},
		{"If-Match and body current", c.ResourceVersion, quoted(c.ResourceVersion), http.StatusOK, "", true},
	}
	for _, tc := range tests {
		body := configMap("flags", tc.bodyRV, map[string]string{"k": tc.name})
		resp := s.do(t, http.MethodPut, flagsPath, body, "If-Match", tc.ifMatch)
		if resp.Code != tc.code {
			t.Errorf("%s: %d; want %d: %s", tc.name, resp.Code, tc.code, resp.Body)
			continue
		}
		if tc.reason != "" {
			if st := resp.status(t); st.Reason != tc.reason {
				t.Errorf("%s: reason %s; want %s", tc.name, st.Reason, tc.reason)
			}
		}
		stored, _ := s.storedConfigMap(t, flagsKey)
		if wrote := stored.Data["k"] == tc.name; wrote != tc.moveRVTo {
			t.Errorf("%s: written %v; want %v", tc.name, wrote, tc.moveRVTo)
		}
	}
}

func TestCreateOnlyPut(t *testing.T) {
	s := startServer(t)
	body := configMap("flags", "", map[string]string{"k": "first"})
	resp := s.do(t, http.MethodPut, flagsPath, body, "If-None-Match", "*")
	var created corev1.ConfigMap
	resp.decode(t, &created)
	if resp.Code != http.StatusCreated || created.UID == "" || resp.Header.Get("ETag") != quoted(created.ResourceVersion) {
		t.Fatalf("create-only PUT of a missing object: %d uid %q ETag %q; want 201 with uid and ETag", resp.Code, created.UID, resp.Header.Get("ETag"))
	}
	again := configMap("flags", "", map[string]string{"k": "second"})
	resp = s.do(t, http.MethodPut, flagsPath, again, "If-None-Match", "*")
	if st := resp.status(t); resp.Code != http.StatusPreconditionFailed || st.Reason != registry.StatusReasonPreconditionFailed {
		t.Errorf("create-only PUT of an existing object: %d %s; want 412 PreconditionFailed", resp.Code, st.Reason)
	}
	if stored, _ := s.storedConfigMap(t, flagsKey); stored.Data["k"] != "first" {
		t.Errorf("stored %q after the refused create-only PUT; want first", stored.Data["k"])
	}
	withRV := configMap("other", "5", nil)
	if resp := s.do(t, http.MethodPut, nsPath+"/other", withRV, "If-None-Match", "*"); resp.Code != http.StatusBadRequest {
		t.Errorf("create-only PUT carrying a resourceVersion: %d; want 400", resp.Code)
	}
	// Without If-None-Match a PUT never creates.
	if resp := s.do(t, http.MethodPut, nsPath+"/third", configMap("third", "", nil), "If-Match", "*"); resp.Code != http.StatusNotFound {
		t.Errorf("PUT If-Match * of a missing object: %d; want 404", resp.Code)
	}
}

func TestDeletePreconditions(t *testing.T) {
	s := startServer(t)
	c := s.create(t, "default", "flags", nil)
	tests := []struct {
		name   string
		header []string
		body   any
		code   int
	}{
		{"weak If-Match", []string{"If-Match", "W/" + quoted(c.ResourceVersion)}, nil, http.StatusPreconditionFailed},
		{"stale If-Match", []string{"If-Match", `"1"`}, nil, http.StatusPreconditionFailed},
		{"malformed If-Match", []string{"If-Match", c.ResourceVersion}, nil, http.StatusBadRequest},
		{"If-None-Match *", []string{"If-None-Match", "*"}, nil, http.StatusPreconditionFailed},
		{"current If-Match, stale body precondition", []string{"If-Match", quoted(c.ResourceVersion)},
			map[string]any{"kind": "DeleteOptions", "apiVersion": "v1", "preconditions": map[string]string{"resourceVersion": "1"}}, http.StatusConflict},
		{"If-Match in a list", []string{"If-Match", `"1", ` + quoted(c.ResourceVersion)}, nil, http.StatusOK},
		{"If-Match on a missing object", []string{"If-Match", "*"}, nil, http.StatusNotFound},
	}
	for _, tc := range tests {
		resp := s.do(t, http.MethodDelete, flagsPath, tc.body, tc.header...)
		if resp.Code != tc.code {
			t.Errorf("DELETE with %s: %d; want %d: %s", tc.name, resp.Code, tc.code, resp.Body)
		}
		stored, _ := s.storedConfigMap(t, flagsKey)
		if gone := stored == nil; gone != (tc.code == http.StatusOK || tc.code == http.StatusNotFound) {
			t.Errorf("DELETE with %s: object gone = %v after %d", tc.name, gone, resp.Code)
		}
	}
}

// barrierStorage holds the first n etcd updates until all n have arrived,
// so n writers are forced to race with the same expected revision.
type barrierStorage struct {
	*etcdstore.Store
	n       int
	mu      sync.Mutex
	arrived int
	all     chan struct{}
}

func (b *barrierStorage) Update(ctx context.Context, ref etcdstore.Ref, value []byte, revision int64, guards ...etcdstore.Guard) (int64, error) {
	b.mu.Lock()
	b.arrived++
	held := b.arrived <= b.n
	if b.arrived == b.n {
		close(b.all)
	}
	b.mu.Unlock()
	if held {
		select {
		case <-b.all:
		case <-time.After(20 * time.Second):
		}
	}
	return b.Store.Update(ctx, ref, value, revision, guards...)
}

// TestIfMatchRaceIsDecidedByEtcd: eight PUTs carry the same If-Match and
// all pass the check before any writes; etcd's transaction admits exactly
// one, and the others answer 412 with nothing written.
func TestIfMatchRaceIsDecidedByEtcd(t *testing.T) {
	const writers = 8
	barrier := &barrierStorage{n: writers, all: make(chan struct{})}
	s := startServerOn(t, registry.DefaultWatchConfig(), func(st *etcdstore.Store) registry.Storage {
		barrier.Store = st
		return barrier
	})
	c := s.create(t, "default", "flags", nil)
	tag := quoted(c.ResourceVersion)
	codes := make([]int, writers)
	var wg sync.WaitGroup
	for i := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := `{"metadata":{"name":"flags"},"data":{"writer":"` + strconv.Itoa(i) + `"}}`
			req, err := http.NewRequest(http.MethodPut, s.URL+flagsPath, stringsReader(body))
			if err != nil {
				codes[i] = -1
				return
			}
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("If-Match", tag)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				codes[i] = -1
				return
			}
			resp.Body.Close()
			codes[i] = resp.StatusCode
		}()
	}
	wg.Wait()
	select {
	case <-barrier.all:
	default:
		t.Fatalf("only %d writers reached etcd together; want %d", barrier.arrived, writers)
	}
	won := 0
	for i, code := range codes {
		switch code {
		case http.StatusOK:
			won++
		case http.StatusPreconditionFailed:
		default:
			t.Errorf("writer %d: %d; want 200 or 412", i, code)
		}
	}
	if won != 1 {
		t.Errorf("%d writers got 200 (codes %v); want exactly 1", won, codes)
	}
	stored, rev := s.storedConfigMap(t, flagsKey)
	if rev != int64(mustAtoi(t, c.ResourceVersion))+1 || codes[mustAtoi(t, stored.Data["writer"])] != http.StatusOK {
		t.Errorf("store at revision %d with writer %q; want one write after %s, by the writer that got 200 (codes %v)", rev, stored.Data["writer"], c.ResourceVersion, codes)
	}
}
