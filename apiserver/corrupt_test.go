package apiserver_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"

	"github.com/concord-dev/concord/cmd/concord/app"
	apptesting "github.com/concord-dev/concord/cmd/concord/app/testing"
	"github.com/concord-dev/concord/etcdstore/etcdtest"
	"github.com/concord-dev/concord/registry"
)

// badValue is what no replica can read: kube-apiserver's protobuf magic
// number, then the start of an envelope, cut short (a second API server
// that stores protobuf, a bad restore, a bit flip).
const badValue = "k8s\x00\x0a\x0d\x0a\x02v1\x12\x07ConfigMap\x12"

// badKey is where the tests put it.
const badKey = "/registry/configmaps/kube-system/foreign"

// storageError is the text that names an undecodable ConfigMap at key,
// written at rev: kube-apiserver's StorageError of a corrupt object.
func storageError(key string, rev int64) string {
	return fmt.Sprintf("StorageError: corrupt object, Code: 7, Key: %s, ResourceVersion: 0, AdditionalErrorMsg: object not decodable revision=%d: "+
		"decode stored ConfigMap: invalid character 'k' looking for beginning of value", key, rev)
}

// putBad writes badValue at the etcd key key and returns its revision.
func putBad(t *testing.T, e *etcdtest.Etcd, key string) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := e.Client.Put(ctx, key, badValue)
	if err != nil {
		t.Fatalf("etcd put %s: %v", key, err)
	}
	return resp.Header.Revision
}

// corruptListStatus is kube-apiserver's answer to a list that meets
// undecodable values: 500 StorageReadError naming each key in a cause.
func corruptListStatus(keys map[string]int64) metav1.Status {
	st := metav1.Status{
		TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status:   metav1.StatusFailure, Code: http.StatusInternalServerError, Reason: metav1.StatusReasonStoreReadError,
		Message: "failed to read one or more configmaps from the storage",
		Details: &metav1.StatusDetails{Name: "list", Kind: "configmaps"},
	}
	for _, key := range sortedKeys(keys) {
		st.Details.Causes = append(st.Details.Causes, metav1.StatusCause{
			Type: metav1.CauseTypeUnexpectedServerResponse, Field: key, Message: storageError(key, keys[key]),
		})
	}
	return st
}

// corruptGetStatus is kube-apiserver's answer to a get, update or delete of
// an undecodable value: 500 InternalError naming the key.
func corruptGetStatus(key string, rev int64) metav1.Status {
	return metav1.Status{
		TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status:   metav1.StatusFailure, Code: http.StatusInternalServerError, Reason: metav1.StatusReasonInternalError,
		Message: "Internal error occurred: " + storageError(key, rev),
		Details: &metav1.StatusDetails{Causes: []metav1.StatusCause{{Message: storageError(key, rev)}}},
	}
}

// corruptWatchStatus is the ERROR event of a watch whose changes include
// an undecodable value: 500 StorageReadError naming the key.
func corruptWatchStatus(key string, rev int64) metav1.Status {
	name := key[strings.LastIndex(key, "/")+1:]
	return metav1.Status{
		TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status:   metav1.StatusFailure, Code: http.StatusInternalServerError, Reason: metav1.StatusReasonStoreReadError,
		Message: storageError(key, rev),
		Details: &metav1.StatusDetails{Name: name, Kind: "configmaps", Causes: []metav1.StatusCause{{
			Type: metav1.CauseTypeUnexpectedServerResponse, Field: key, Message: storageError(key, rev),
		}}},
	}
}

func sortedKeys(m map[string]int64) []string {
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	for i := range keys {
		for j := i + 1; j < len(keys); j++ {
			if keys[j] < keys[i] {
				keys[i], keys[j] = keys[j], keys[i]
			}
		}
	}
	return keys
}

// wantStatusBody decodes resp as a Status and compares it with want.
func wantStatusBody(t *testing.T, what string, resp response, want metav1.Status) {
	t.Helper()
	if resp.Code != int(want.Code) {
		t.Fatalf("%s: %d %s; want %d", what, resp.Code, resp.Body, want.Code)
	}
	if diff := cmp.Diff(resp.status(t), want); diff != "" {
		t.Errorf("%s: Status (-got +want):\n%s", what, diff)
	}
}

// TestCorruptObjectFailsOnlyTheReadsThatIncludeIt: one undecodable value
// fails the get of its key and every list that would include it, naming
// the key (a partial list could make a controller delete things); gets,
// lists and other objects around it are served as usual, from the read
// cache and from etcd.
func TestCorruptObjectFailsOnlyTheReadsThatIncludeIt(t *testing.T) {
	s := startServer(t)
	s.create(t, "default", "a", nil)
	s.create(t, "kube-system", "good", nil)
	rev := putBad(t, s.Etcd, badKey)
	list := corruptListStatus(map[string]int64{badKey: rev})

	for _, tc := range []struct {
		name, method, path string
		want               metav1.Status // Code 0: 200, with wantNames
		wantNames          []string
	}{
		{"get (JSON passed through)", http.MethodGet, "/api/v1/namespaces/kube-system/configmaps/foreign", corruptGetStatus(badKey, rev), nil},
		{"get (decoded)", http.MethodGet, "/api/v1/namespaces/kube-system/configmaps/foreign?pretty=true", corruptGetStatus(badKey, rev), nil},
		{"list of its namespace (JSON passed through)", http.MethodGet, "/api/v1/namespaces/kube-system/configmaps", list, nil},
		{"list of its namespace (decoded)", http.MethodGet, "/api/v1/namespaces/kube-system/configmaps?labelSelector=x!%3Dy", list, nil},
		{"list of its namespace read from etcd", http.MethodGet, "/api/v1/namespaces/kube-system/configmaps?resourceVersion=" + fmt.Sprint(rev) + "&resourceVersionMatch=Exact", list, nil},
		{"first page of its namespace", http.MethodGet, "/api/v1/namespaces/kube-system/configmaps?limit=1", list, nil},
		{"list of all namespaces", http.MethodGet, "/api/v1/configmaps", list, nil},
		{"list of all namespaces (decoded)", http.MethodGet, "/api/v1/configmaps?pretty=true", list, nil},
		{"watch of its namespace with the initial state", http.MethodGet, "/api/v1/namespaces/kube-system/configmaps?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true", list, nil},
		{"delete of its namespace's collection", http.MethodDelete, "/api/v1/namespaces/kube-system/configmaps", list, nil},
		{"get of another object in its namespace", http.MethodGet, "/api/v1/namespaces/kube-system/configmaps/good", metav1.Status{}, []string{"kube-system/good"}},
		{"get in another namespace", http.MethodGet, "/api/v1/namespaces/default/configmaps/a?pretty=true", metav1.Status{}, []string{"default/a"}},
		{"list of another namespace (JSON passed through)", http.MethodGet, "/api/v1/namespaces/default/configmaps", metav1.Status{}, []string{"default/a"}},
		{"list of another namespace (decoded)", http.MethodGet, "/api/v1/namespaces/default/configmaps?labelSelector=x!%3Dy", metav1.Status{}, []string{"default/a"}},
		{"list of another namespace read from etcd", http.MethodGet, "/api/v1/namespaces/default/configmaps?resourceVersion=" + fmt.Sprint(rev) + "&resourceVersionMatch=Exact", metav1.Status{}, []string{"default/a"}},
		// Its key says it is not in the selection (kube-apiserver fails this list too).
		{"list of one other object in its namespace", http.MethodGet, "/api/v1/namespaces/kube-system/configmaps?fieldSelector=metadata.name%3Dgood", metav1.Status{}, []string{"kube-system/good"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := s.do(t, tc.method, tc.path, nil)
			if tc.want.Code != 0 {
				wantStatusBody(t, tc.method+" "+tc.path, resp, tc.want)
				return
			}
			if resp.Code != http.StatusOK {
				t.Fatalf("%s %s: %d %s; want 200", tc.method, tc.path, resp.Code, resp.Body)
			}
			var got []string
			if strings.Contains(tc.path, "/configmaps/") {
				var cm corev1.ConfigMap
				resp.decode(t, &cm)
				got = []string{cm.Namespace + "/" + cm.Name}
			} else {
				var l corev1.ConfigMapList
				resp.decode(t, &l)
				got = names(l)
			}
			if diff := cmp.Diff(got, tc.wantNames); diff != "" {
				t.Errorf("%s %s (-got +want):\n%s", tc.method, tc.path, diff)
			}
		})
	}
	// Lists in protobuf (client-go's default) fail the same way, as a
	// protobuf Status.
	codec := protobuf.NewSerializer(registry.Scheme, registry.Scheme)
	for _, path := range []string{"/api/v1/namespaces/kube-system/configmaps", "/api/v1/namespaces/kube-system/configmaps?limit=1", "/api/v1/configmaps?labelSelector=x!%3Dy"} {
		resp := s.do(t, http.MethodGet, path, nil, "Accept", "application/vnd.kubernetes.protobuf")
		if resp.Code != http.StatusInternalServerError || resp.Header.Get("Content-Type") != "application/vnd.kubernetes.protobuf" {
			t.Fatalf("protobuf GET %s: %d %s %q; want 500 in protobuf", path, resp.Code, resp.Header.Get("Content-Type"), resp.Body)
		}
		obj, _, err := codec.Decode(resp.Body, nil, &metav1.Status{})
		if err != nil {
			t.Fatalf("protobuf GET %s: %v", path, err)
		}
		if diff := cmp.Diff(*obj.(*metav1.Status), list); diff != "" {
			t.Errorf("protobuf GET %s: Status (-got +want):\n%s", path, diff)
		}
	}
	// The failed delete of the collection deleted nothing.
	if keys := s.storedKeys(t, "/registry/configmaps/kube-system/"); len(keys) != 2 || keys[badKey] != badValue {
		t.Errorf("kube-system's keys after the refused deletecollection: %v; want foreign (as it was) and good", keys)
	}
}

// TestCorruptObjectLeavesOtherWatchesAlone: with an undecodable value in
// the watch history, 300 HTTP/2 watches of another namespace open at once
// (on the old code each waited for a fan-out that died on the value, then
// fell back to an etcd watch of its own) and keep receiving their changes;
// a watch whose changes include an undecodable value receives an ERROR
// event naming its key, and ends.
func TestCorruptObjectLeavesOtherWatchesAlone(t *testing.T) {
	s := startServer(t)
	s.create(t, "default", "a", nil)
	putBad(t, s.Etcd, badKey)
	_, list := s.list(t, nsPath, nil)

	srv := httptest.NewUnstartedServer(s.Handler)
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	client := srv.Client()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	open := func(path string) (<-chan watchEvent, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+path, nil)
		if err != nil {
			return nil, err
		}
		resp, err := client.Do(req)
		if err != nil {
			return nil, err
		}
		if resp.StatusCode != http.StatusOK || resp.ProtoMajor != 2 {
			resp.Body.Close()
			return nil, fmt.Errorf("%s: %d over %s; want 200 over HTTP/2", path, resp.StatusCode, resp.Proto)
		}
		return watchLines(resp.Body, 100), nil
	}

	const watchers = 300
	streams := make([]<-chan watchEvent, watchers)
	errs := make([]error, watchers)
	start := time.Now()
	var wg sync.WaitGroup
	for i := range streams {
		wg.Go(func() {
			streams[i], errs[i] = open(nsPath + "?watch=1&resourceVersion=" + list.ResourceVersion)
		})
	}
	wg.Wait()
	took := time.Since(start)
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if took > 4*time.Second {
		t.Errorf("%d watches of default took %v to open; want them open at once (within 4s)", watchers, took)
	}
	system, err := open("/api/v1/namespaces/kube-system/configmaps?watch=1&resourceVersion=" + list.ResourceVersion)
	if err != nil {
		t.Fatal(err)
	}

	// expectAll: every watch of default receives ADDED default/name.
	expectAll := func(name string) {
		t.Helper()
		deadline := time.After(20 * time.Second)
		for i, events := range streams {
			select {
			case ev, ok := <-events:
				if !ok || ev.Type != "ADDED" || ev.Object.Namespace+"/"+ev.Object.Name != "default/"+name {
					t.Fatalf("watch %d of default: %v %s; want ADDED default/%s", i, ok, ev, name)
				}
			case <-deadline:
				t.Fatalf("watch %d of default: no ADDED default/%s within 20s", i, name)
			}
		}
	}
	s.create(t, "default", "b", nil)
	expectAll("b")

	// A new undecodable value in kube-system ends kube-system's watch with
	// an ERROR naming it, and nothing else.
	key := "/registry/configmaps/kube-system/foreign-2"
	rev := putBad(t, s.Etcd, key)
	select {
	case ev, ok := <-system:
		if !ok || ev.Type != "ERROR" {
			t.Fatalf("watch of kube-system: %v %s; want an ERROR event", ok, ev)
		}
		if diff := cmp.Diff(ev.Status, corruptWatchStatus(key, rev)); diff != "" {
			t.Errorf("watch of kube-system: ERROR Status (-got +want):\n%s", diff)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("watch of kube-system: no ERROR event within 20s of an undecodable value")
	}
	select {
	case ev, ok := <-system:
		if ok {
			t.Errorf("watch of kube-system: %s after the ERROR; want the stream to end", ev)
		}
	case <-time.After(20 * time.Second):
		t.Error("watch of kube-system: still open 20s after its ERROR event; want it ended")
	}
	s.create(t, "default", "c", nil)
	expectAll("c")
}

// TestCorruptObjectInWatchHistory: a watch from before an undecodable value
// was written — replayed from the fan-out's history, or from etcd when older
// than it — receives an ERROR naming the key if its selection could hold the
// object (its namespace, all namespaces), and its changes as usual if not
// (another namespace, another name).
func TestCorruptObjectInWatchHistory(t *testing.T) {
	for _, history := range []struct {
		name string
		cfg  registry.WatchConfig
	}{
		{"from the fan-out's history", registry.DefaultWatchConfig()},
		{"from etcd", smallHistory()},
	} {
		t.Run(history.name, func(t *testing.T) {
			s := startServerWith(t, history.cfg)
			good := s.create(t, "kube-system", "good", nil)
			before := good.ResourceVersion
			// Start the fan-out, so that a small history has moved on.
			s.watch(t, nsPath, url.Values{"watch": {"1"}, "resourceVersion": {before}}).expect(t)
			rev := putBad(t, s.Etcd, badKey)
			for i := range 3 {
				s.create(t, "default", fmt.Sprintf("cm-%d", i), nil)
			}
			from := url.Values{"watch": {"1"}, "resourceVersion": {before}}
			for _, tc := range []struct {
				name, path string
				query      url.Values
			}{
				{"its namespace", "/api/v1/namespaces/kube-system/configmaps", from},
				{"all namespaces", "/api/v1/configmaps", from},
				{"its name", "/api/v1/namespaces/kube-system/configmaps", url.Values{"watch": {"1"}, "resourceVersion": {before}, "fieldSelector": {"metadata.name=foreign"}}},
			} {
				t.Run(tc.name, func(t *testing.T) {
					w := s.watch(t, tc.path, tc.query)
					ev, ok := w.next(t, 10*time.Second)
					if !ok || ev.Type != "ERROR" {
						t.Fatalf("%v %s; want an ERROR event", ok, ev)
					}
					if diff := cmp.Diff(ev.Status, corruptWatchStatus(badKey, rev)); diff != "" {
						t.Errorf("ERROR Status (-got +want):\n%s", diff)
					}
					if ev, ok := w.next(t, 10*time.Second); ok {
						t.Errorf("%s after the ERROR; want the stream to end", ev)
					}
				})
			}
			t.Run("another namespace", func(t *testing.T) {
				w := s.watch(t, nsPath, from)
				w.expect(t, "ADDED default/cm-0", "ADDED default/cm-1", "ADDED default/cm-2")
				s.create(t, "default", "later", nil)
				w.expect(t, "ADDED default/later")
			})
			t.Run("another name in its namespace", func(t *testing.T) {
				w := s.watch(t, "/api/v1/namespaces/kube-system/configmaps", url.Values{"watch": {"1"}, "resourceVersion": {before}, "fieldSelector": {"metadata.name=good"}})
				good.Data = map[string]string{"k": "changed"}
				s.put(t, good)
				w.expect(t, "MODIFIED kube-system/good")
			})
		})
	}
}

// TestCorruptObjectLoggedOnceAndCounted: the server logs an undecodable
// value once, naming its key, however often it is read, and counts it in
// /metrics.
func TestCorruptObjectLoggedOnceAndCounted(t *testing.T) {
	logs := &syncBuffer{}
	s := startServerWithOptions(t, serverOptions{logOut: logs})
	s.create(t, "default", "a", nil)
	if got := corruptCount(t, s); got != 0 {
		t.Fatalf("concord_storage_corrupt_objects_total before any: %v; want 0", got)
	}
	before := s.revision(t)
	putBad(t, s.Etcd, badKey)
	for range 3 {
		for _, path := range []string{
			"/api/v1/namespaces/kube-system/configmaps/foreign", "/api/v1/namespaces/kube-system/configmaps/foreign?pretty=true",
			"/api/v1/namespaces/kube-system/configmaps", "/api/v1/configmaps?pretty=true",
		} {
			if resp := s.do(t, http.MethodGet, path, nil); resp.Code != http.StatusInternalServerError {
				t.Fatalf("GET %s: %d; want 500", path, resp.Code)
			}
		}
		w := s.watch(t, "/api/v1/configmaps", url.Values{"watch": {"1"}, "resourceVersion": {fmt.Sprint(before)}})
		if ev, ok := w.next(t, 10*time.Second); !ok || ev.Type != "ERROR" {
			t.Fatalf("watch from before the value: %v %s; want ERROR", ok, ev)
		}
	}
	second := "/registry/configmaps/default/foreign"
	putBad(t, s.Etcd, second)
	if resp := s.do(t, http.MethodGet, "/api/v1/namespaces/default/configmaps/foreign", nil); resp.Code != http.StatusInternalServerError {
		t.Fatalf("GET of the second: %d; want 500", resp.Code)
	}

	logged := map[string]int{}
	var lines []map[string]any
	for _, line := range logs.lines(t) {
		if line["msg"] == "stored object cannot be read" {
			lines = append(lines, line)
			key, _ := line["key"].(string)
			logged[key]++
		}
	}
	if diff := cmp.Diff(logged, map[string]int{badKey: 1, second: 1}); diff != "" {
		t.Errorf("log lines per key (-got +want):\n%s\nlines: %v", diff, lines)
	}
	for _, line := range lines {
		if line["level"] != "ERROR" || line["resource"] != "configmaps" || line["revision"] == nil ||
			!strings.Contains(fmt.Sprint(line["err"]), "invalid character 'k' looking for beginning of value") {
			t.Errorf("log line %v; want level ERROR, resource configmaps, its revision and the decode error", line)
		}
	}
	if got := corruptCount(t, s); got != 2 {
		t.Errorf("concord_storage_corrupt_objects_total = %v; want 2", got)
	}
}

// corruptCount reads concord_storage_corrupt_objects_total of ConfigMaps
// from /metrics.
func corruptCount(t *testing.T, s *testServer) float64 {
	t.Helper()
	resp := s.do(t, http.MethodGet, "/metrics", nil)
	const series = `concord_storage_corrupt_objects_total{group="",resource="configmaps"} `
	for _, line := range strings.Split(string(resp.Body), "\n") {
		if v, ok := strings.CutPrefix(line, series); ok {
			var n float64
			if _, err := fmt.Sscan(v, &n); err != nil {
				t.Fatalf("metric line %q: %v", line, err)
			}
			return n
		}
	}
	t.Fatalf("/metrics has no %s series:\n%s", strings.TrimSpace(series), resp.Body)
	return 0
}

// corruptPolicy: alice and bob read and delete ConfigMaps in default and
// kube-system; bob may also delete the unreadable ones there.
const corruptPolicy = `
rules:
- users: [alice, bob]
  verbs: [get, list, watch, create, delete, deletecollection]
  resources: [configmaps]
  namespaces: [default, kube-system]
- users: [bob]
  verbs: [unsafe-delete-ignore-read-errors]
  resources: [configmaps]
  namespaces: [kube-system]
`

// startPolicyServer is the API behind TLS with the test tokens, client
// certificates of a test CA and policy (--authorization-mode=Policy).
func startPolicyServer(t *testing.T, policy string) (*authServer, *etcdtest.Etcd) {
	t.Helper()
	ca := newTestCA(t, "test client CA")
	e := etcdtest.Start(t)
	cfg := apptesting.Config(t, e.Endpoint)
	cfg.Security.TokenAuthFile = writeTokenFile(t, testTokens)
	cfg.Security.ClientCAFile = writeTestFile(t, "client-ca.crt", string(ca.pem()))
	cfg.Security.AuthorizationMode = app.AuthorizationPolicy
	cfg.Security.AuthorizationPolicyFile = writeTestFile(t, "policy.yaml", policy)
	s := startTLSServer(t, cfg)
	s.ca = ca
	return s, e
}

// TestCorruptObjectDelete: an undecodable value is deleted with kube's
// delete option ignoreStoreReadErrorWithClusterBreakingPotential, by a user
// who may also do unsafe-delete-ignore-read-errors on it; a plain delete is
// 500 naming the key, the option on a readable object or with options it
// cannot honour is 422, and without the extra verb 403, all as in
// kube-apiserver.
func TestCorruptObjectDelete(t *testing.T) {
	s, e := startPolicyServer(t, corruptPolicy)
	const item = "/api/v1/namespaces/kube-system/configmaps/"
	if resp := s.do(t, "bob-token", http.MethodPost, "/api/v1/namespaces/kube-system/configmaps", `{"metadata":{"name":"good"}}`); resp.Code != http.StatusCreated {
		t.Fatalf("create good: %d %s", resp.Code, resp.Body)
	}
	rev := putBad(t, e, badKey)
	byQuery := "/registry/configmaps/kube-system/foreign-2"
	putBad(t, e, byQuery)
	const unsafe = `{"kind":"DeleteOptions","apiVersion":"v1","ignoreStoreReadErrorWithClusterBreakingPotential":true}`
	invalidOptions := func(why string) metav1.Status {
		msg := "ignoreStoreReadErrorWithClusterBreakingPotential: Invalid value: true: " + why
		return metav1.Status{
			TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
			Status:   metav1.StatusFailure, Code: http.StatusUnprocessableEntity, Reason: metav1.StatusReasonInvalid,
			Message: `DeleteOptions.meta.k8s.io "" is invalid: ` + msg,
			Details: &metav1.StatusDetails{Group: "meta.k8s.io", Kind: "DeleteOptions", Causes: []metav1.StatusCause{{
				Type: metav1.CauseTypeFieldValueInvalid, Message: "Invalid value: true: " + why, Field: "ignoreStoreReadErrorWithClusterBreakingPotential",
			}}},
		}
	}
	success := func(name string) metav1.Status {
		return metav1.Status{
			TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
			Status:   metav1.StatusSuccess, Code: http.StatusOK,
			Details: &metav1.StatusDetails{Name: name, Kind: "ConfigMap"},
		}
	}
	for _, tc := range []struct {
		name, token, method, path, body string
		want                            metav1.Status
		// stored: whether each key is in etcd afterwards
		stored map[string]bool
	}{
		{"plain delete", "bob-token", http.MethodDelete, item + "foreign", "", corruptGetStatus(badKey, rev), map[string]bool{badKey: true}},
		{"without unsafe-delete-ignore-read-errors", "alice-token", http.MethodDelete, item + "foreign", unsafe, metav1.Status{
			TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
			Status:   metav1.StatusFailure, Code: http.StatusForbidden, Reason: metav1.StatusReasonForbidden,
			Message: `configmaps "foreign" is forbidden: not permitted to do "unsafe-delete-ignore-read-errors", reason: `,
			Details: &metav1.StatusDetails{Name: "foreign", Kind: "configmaps"},
		}, map[string]bool{badKey: true}},
		{"with gracePeriodSeconds", "bob-token", http.MethodDelete, item + "foreign",
			`{"kind":"DeleteOptions","apiVersion":"v1","ignoreStoreReadErrorWithClusterBreakingPotential":true,"gracePeriodSeconds":0}`,
			invalidOptions("cannot be set together with .gracePeriodSeconds"), map[string]bool{badKey: true}},
		{"with preconditions", "bob-token", http.MethodDelete, item + "foreign",
			`{"kind":"DeleteOptions","apiVersion":"v1","ignoreStoreReadErrorWithClusterBreakingPotential":true,"preconditions":{"uid":"x"}}`,
			invalidOptions("cannot be set together with .preconditions"), map[string]bool{badKey: true}},
		{"of a collection", "bob-token", http.MethodDelete, "/api/v1/namespaces/kube-system/configmaps", unsafe,
			invalidOptions("is not allowed with DELETECOLLECTION, try again after removing the option"), map[string]bool{badKey: true, "/registry/configmaps/kube-system/good": true}},
		{"of a readable object", "bob-token", http.MethodDelete, item + "good", unsafe, metav1.Status{
			TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
			Status:   metav1.StatusFailure, Code: http.StatusUnprocessableEntity, Reason: metav1.StatusReasonInvalid,
			Message: `configmaps "good" is invalid: ignoreStoreReadErrorWithClusterBreakingPotential: Invalid value: true: it is exclusively used to delete corrupt object(s), try again by removing this option`,
			Details: &metav1.StatusDetails{Name: "good", Kind: "configmaps", Causes: []metav1.StatusCause{{
				Type: metav1.CauseTypeFieldValueInvalid, Field: "ignoreStoreReadErrorWithClusterBreakingPotential",
				Message: "Invalid value: true: it is exclusively used to delete corrupt object(s), try again by removing this option",
			}}},
		}, map[string]bool{"/registry/configmaps/kube-system/good": true}},
		{"dry run", "bob-token", http.MethodDelete, item + "foreign?dryRun=All", unsafe, success("foreign"), map[string]bool{badKey: true}},
		{"with the option in the body", "bob-token", http.MethodDelete, item + "foreign", unsafe, success("foreign"), map[string]bool{badKey: false}},
		{"again", "bob-token", http.MethodDelete, item + "foreign", unsafe, metav1.Status{
			TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
			Status:   metav1.StatusFailure, Code: http.StatusNotFound, Reason: metav1.StatusReasonNotFound,
			Message: `configmaps "foreign" not found`,
			Details: &metav1.StatusDetails{Name: "foreign", Kind: "configmaps"},
		}, map[string]bool{badKey: false}},
		{"with the option in the query", "bob-token", http.MethodDelete, item + "foreign-2?ignoreStoreReadErrorWithClusterBreakingPotential=true", "", success("foreign-2"), map[string]bool{byQuery: false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := s.doWith(t, s.client(nil), tc.method, tc.path, tc.body, "Authorization", bearer(tc.token))
			wantStatusBody(t, tc.method+" "+tc.path, resp, tc.want)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			for key, want := range tc.stored {
				got, err := e.Client.Get(ctx, key)
				if err != nil {
					t.Fatal(err)
				}
				if (len(got.Kvs) == 1) != want {
					t.Errorf("etcd has %s: %v; want %v", key, len(got.Kvs) == 1, want)
				}
			}
		})
	}
	// The namespace reads as usual again.
	resp := s.do(t, "bob-token", http.MethodGet, "/api/v1/namespaces/kube-system/configmaps", "")
	var l corev1.ConfigMapList
	if resp.Code == http.StatusOK {
		resp.decode(t, &l)
	}
	if resp.Code != http.StatusOK || len(l.Items) != 1 || l.Items[0].Name != "good" {
		t.Errorf("list of kube-system after the deletes: %d %s; want 200 with good alone", resp.Code, resp.Body)
	}
}
