package apiserver_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const (
	flagsPath = "/api/v1/namespaces/default/configmaps/flags"
	nsPath    = "/api/v1/namespaces/default/configmaps"
	flagsKey  = "/registry/configmaps/default/flags"
	conflict  = `Operation cannot be fulfilled on configmaps "flags": the object has been modified; please apply your changes to the latest version and try again`
)

func configMap(name, rv string, data map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: rv},
		Data:       data,
	}
}

// storedConfigMap reads the object straight from etcd, with its revision.
func (s *testServer) storedConfigMap(t *testing.T, key string) (*corev1.ConfigMap, int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := s.Etcd.Client.Get(ctx, key)
	if err != nil {
		t.Fatalf("etcd get %s: %v", key, err)
	}
	if len(resp.Kvs) == 0 {
		return nil, resp.Header.Revision
	}
	var cm corev1.ConfigMap
	if err := json.Unmarshal(resp.Kvs[0].Value, &cm); err != nil {
		t.Fatalf("stored value of %s is not a ConfigMap: %v", key, err)
	}
	if cm.ResourceVersion != "" {
		t.Errorf("stored value carries resourceVersion %q; it must come from the key's ModRevision", cm.ResourceVersion)
	}
	return &cm, resp.Kvs[0].ModRevision
}

// TestSeedScenario is the "Putting it together" table of the seed document:
// two operators edit the same ConfigMap from the same starting point, and the
// second, stale write is refused instead of erasing the first.
func TestSeedScenario(t *testing.T) {
	s := startServer(t)
	blue := map[string]string{"mode": "blue", "rollout": "10"}

	// POST create → 201 with the etcd revision as resourceVersion.
	resp := s.do(t, http.MethodPost, nsPath, configMap("flags", "", blue))
	if resp.Code != http.StatusCreated {
		t.Fatalf("create: code %d; want 201: %s", resp.Code, resp.Body)
	}
	var created corev1.ConfigMap
	resp.decode(t, &created)
	stored, rev := s.storedConfigMap(t, flagsKey)
	if created.ResourceVersion != strconv.FormatInt(rev, 10) {
		t.Errorf("create: resourceVersion %q; want the key's ModRevision %d", created.ResourceVersion, rev)
	}
	if created.UID == "" || created.CreationTimestamp.IsZero() || created.Namespace != "default" {
		t.Errorf("create: uid %q, creationTimestamp %v, namespace %q; want all set", created.UID, created.CreationTimestamp, created.Namespace)
	}
	if diff := cmp.Diff(stored.Data, blue); diff != "" {
		t.Errorf("create: stored data (-got +want):\n%s", diff)
	}
	if resp.Header.Get("Content-Type") != "application/json" {
		t.Errorf("create: Content-Type %q; want application/json", resp.Header.Get("Content-Type"))
	}
	rv1 := created.ResourceVersion

	// POST create again → 409 AlreadyExists, nothing written.
	resp = s.do(t, http.MethodPost, nsPath, configMap("flags", "", map[string]string{"mode": "red"}))
	st := resp.status(t)
	if resp.Code != http.StatusConflict || st.Reason != metav1.StatusReasonAlreadyExists || st.Message != `configmaps "flags" already exists` {
		t.Errorf("duplicate create: %d %s %q; want 409 AlreadyExists", resp.Code, st.Reason, st.Message)
	}
	if st.Details == nil || st.Details.Name != "flags" || st.Details.Kind != "configmaps" {
		t.Errorf("duplicate create: details %+v; want name flags, kind configmaps", st.Details)
	}
	if _, r := s.storedConfigMap(t, flagsKey); strconv.FormatInt(r, 10) != rv1 {
		t.Errorf("duplicate create changed the stored object: revision %d; want %s", r, rv1)
	}

	// Both operators read version rv1.
	var copyA, copyB corev1.ConfigMap
	s.do(t, http.MethodGet, flagsPath, nil).decode(t, &copyA)
	s.do(t, http.MethodGet, flagsPath, nil).decode(t, &copyB)
	if copyA.ResourceVersion != rv1 || copyB.ResourceVersion != rv1 {
		t.Fatalf("GET: resourceVersions %q and %q; want %q", copyA.ResourceVersion, copyB.ResourceVersion, rv1)
	}

	// PUT by A (rv1) → 200 with a new version.
	copyA.Data["mode"] = "green"
	resp = s.do(t, http.MethodPut, flagsPath, &copyA)
	if resp.Code != http.StatusOK {
		t.Fatalf("PUT by A: code %d; want 200: %s", resp.Code, resp.Body)
	}
	var afterA corev1.ConfigMap
	resp.decode(t, &afterA)
	rv2 := afterA.ResourceVersion
	if rv2 == rv1 {
		t.Errorf("PUT by A: resourceVersion unchanged (%s)", rv2)
	}
	if afterA.UID != created.UID || !afterA.CreationTimestamp.Equal(&created.CreationTimestamp) {
		t.Errorf("PUT by A: uid/creationTimestamp changed: %s %v; want %s %v", afterA.UID, afterA.CreationTimestamp, created.UID, created.CreationTimestamp)
	}

	// PUT by B (stale rv1) → 409 Conflict; A's change survives.
	copyB.Data["rollout"] = "50"
	resp = s.do(t, http.MethodPut, flagsPath, &copyB)
	st = resp.status(t)
	if resp.Code != http.StatusConflict || st.Reason != metav1.StatusReasonConflict || st.Message != conflict {
		t.Errorf("stale PUT by B: %d %s %q; want 409 Conflict %q", resp.Code, st.Reason, st.Message, conflict)
	}
	stored, rev = s.storedConfigMap(t, flagsKey)
	if diff := cmp.Diff(stored.Data, map[string]string{"mode": "green", "rollout": "10"}); diff != "" || strconv.FormatInt(rev, 10) != rv2 {
		t.Errorf("after stale PUT: stored revision %d (want %s), data (-got +want):\n%s", rev, rv2, diff)
	}

	// B re-reads and re-applies its edit → 200; both edits are kept.
	var fresh corev1.ConfigMap
	s.do(t, http.MethodGet, flagsPath, nil).decode(t, &fresh)
	fresh.Data["rollout"] = "50"
	resp = s.do(t, http.MethodPut, flagsPath, &fresh)
	if resp.Code != http.StatusOK {
		t.Fatalf("PUT by B after re-read: code %d; want 200: %s", resp.Code, resp.Body)
	}
	var afterB corev1.ConfigMap
	resp.decode(t, &afterB)
	rv3 := afterB.ResourceVersion
	stored, rev = s.storedConfigMap(t, flagsKey)
	if diff := cmp.Diff(stored.Data, map[string]string{"mode": "green", "rollout": "50"}); diff != "" || strconv.FormatInt(rev, 10) != rv3 {
		t.Errorf("after B's PUT: stored revision %d (want %s), data (-got +want):\n%s", rev, rv3, diff)
	}

	// GET list → 200 with the store revision as the collection version.
	resp = s.do(t, http.MethodGet, nsPath, nil)
	var list corev1.ConfigMapList
	resp.decode(t, &list)
	if resp.Code != http.StatusOK || list.Kind != "ConfigMapList" || list.ResourceVersion != rv3 || len(list.Items) != 1 || list.Items[0].ResourceVersion != rv3 {
		t.Errorf("list: code %d kind %q rv %q items %d; want 200 ConfigMapList rv %s with 1 item", resp.Code, list.Kind, list.ResourceVersion, len(list.Items), rv3)
	}

	// DELETE → 200 Status Success with name, kind and uid.
	resp = s.do(t, http.MethodDelete, flagsPath, nil)
	st = resp.status(t)
	wantDetails := &metav1.StatusDetails{Name: "flags", Kind: "configmaps", UID: created.UID}
	if resp.Code != http.StatusOK || st.Status != metav1.StatusSuccess {
		t.Errorf("delete: %d %q; want 200 Success", resp.Code, st.Status)
	}
	if diff := cmp.Diff(st.Details, wantDetails); diff != "" {
		t.Errorf("delete: details (-got +want):\n%s", diff)
	}
	if stored, _ := s.storedConfigMap(t, flagsKey); stored != nil {
		t.Errorf("after delete: key %s still stored", flagsKey)
	}

	// GET after delete → 404 NotFound.
	resp = s.do(t, http.MethodGet, flagsPath, nil)
	st = resp.status(t)
	if resp.Code != http.StatusNotFound || st.Reason != metav1.StatusReasonNotFound || st.Message != `configmaps "flags" not found` {
		t.Errorf("GET after delete: %d %s %q; want 404 NotFound", resp.Code, st.Reason, st.Message)
	}
}

// TestConcurrentStalePutsExactlyOneWins: eight clients hold the same version
// and PUT at once. etcd's transaction admits exactly one; the others get 409
// and the store moves by exactly one revision.
func TestConcurrentStalePutsExactlyOneWins(t *testing.T) {
	s := startServer(t)
	resp := s.do(t, http.MethodPost, nsPath, configMap("flags", "", map[string]string{"writer": "none"}))
	if resp.Code != http.StatusCreated {
		t.Fatalf("create: %d %s", resp.Code, resp.Body)
	}
	var created corev1.ConfigMap
	resp.decode(t, &created)

	const clients = 8
	codes := make([]int, clients)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body, _ := json.Marshal(configMap("flags", created.ResourceVersion, map[string]string{"writer": strconv.Itoa(i)}))
			<-start
			codes[i] = doRaw(http.MethodPut, s.URL+flagsPath, body)
		}()
	}
	close(start)
	wg.Wait()

	winners := 0
	for i, code := range codes {
		switch code {
		case http.StatusOK:
			winners++
		case http.StatusConflict:
		default:
			t.Errorf("client %d: code %d; want 200 or 409", i, code)
		}
	}
	if winners != 1 {
		t.Errorf("%d PUTs succeeded (codes %v); want exactly 1", winners, codes)
	}
	stored, rev := s.storedConfigMap(t, flagsKey)
	createdRev, _ := strconv.ParseInt(created.ResourceVersion, 10, 64)
	if rev != createdRev+1 {
		t.Errorf("store revision %d after the race; want exactly one write after %d", rev, createdRev)
	}
	if w := stored.Data["writer"]; w == "none" || codes[mustAtoi(t, w)] != http.StatusOK {
		t.Errorf("stored writer %q is not the client that got 200 (codes %v)", w, codes)
	}
}

// TestReadModifyWriteRetryLosesNothing: 4 clients × 25 increments, each a
// GET, an edit and a conditional PUT retried on 409. Every increment lands.
func TestReadModifyWriteRetryLosesNothing(t *testing.T) {
	s := startServer(t)
	if resp := s.do(t, http.MethodPost, nsPath, configMap("flags", "", map[string]string{"counter": "0"})); resp.Code != http.StatusCreated {
		t.Fatalf("create: %d %s", resp.Code, resp.Body)
	}
	const clients, increments, maxAttempts = 4, 25, 400
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	errs := make(chan error, clients)
	conflicts := make([]int, clients)
	for c := range clients {
		go func() {
			errs <- incrementLoop(ctx, s.URL+flagsPath, increments, maxAttempts, &conflicts[c])
		}()
	}
	for range clients {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	stored, _ := s.storedConfigMap(t, flagsKey)
	if got := stored.Data["counter"]; got != strconv.Itoa(clients*increments) {
		t.Errorf("counter = %s; want %d (conflicts retried per client: %v)", got, clients*increments, conflicts)
	}
	t.Logf("conflicts retried per client: %v", conflicts)
}
