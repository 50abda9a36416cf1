package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/concord-dev/concord/etcdstore/etcdtest"
)

// replica is a concord process in front of a shared etcd, run in a working
// directory of its own so that the test can see what it writes there.
type replica struct {
	*proc
	workDir string
}

// startReplicas starts a real etcd in-process and n concord binaries on it.
func startReplicas(t *testing.T, n int) []replica {
	t.Helper()
	return startReplicasOn(t, etcdtest.Start(t), n)
}

// startReplicasOn starts n concord binaries on a running etcd.
func startReplicasOn(t *testing.T, etcd *etcdtest.Etcd, n int) []replica {
	t.Helper()
	replicas := make([]replica, n)
	for i := range replicas {
		dir := t.TempDir()
		name := fmt.Sprintf("replica %c", 'A'+i)
		replicas[i] = replica{proc: startConcord(t, name, dir, "--etcd-servers", etcd.Endpoint), workDir: dir}
		if m := loopbackURL.FindStringSubmatch(replicas[i].url); m == nil {
			t.Fatalf("%s: ready line url = %q; want http://127.0.0.1:<port>", name, replicas[i].url)
		}
	}
	return replicas
}

const optimisticLockMsg = `Operation cannot be fulfilled on configmaps "flags": the object has been modified; please apply your changes to the latest version and try again`

func TestReplicasShareExternalEtcd(t *testing.T) {
	t.Parallel()
	etcd := etcdtest.Start(t)
	replicas := startReplicasOn(t, etcd, 2)
	a, b := replicas[0], replicas[1]

	created := doConfigMap(t, http.MethodPost, configMapsURL(a.url),
		newConfigMap("flags", map[string]string{"mode": "blue", "rollout": "10"}), http.StatusCreated)
	rv1 := created.ResourceVersion
	if rv1 == "" || created.UID == "" {
		t.Fatalf("POST through A: resourceVersion %q, uid %q; want both set", rv1, created.UID)
	}

	// A linearizable read: B sees A's write at once.
	readByB := doConfigMap(t, http.MethodGet, configMapURL(b.url, "flags"), nil, http.StatusOK)
	if diff := cmp.Diff(created, readByB); diff != "" {
		t.Fatalf("GET through B after POST through A (-created +read):\n%s", diff)
	}

	// Operator A: mode green, from rv1, through A.
	readByA := doConfigMap(t, http.MethodGet, configMapURL(a.url, "flags"), nil, http.StatusOK)
	readByA.Data["mode"] = "green"
	updated := doConfigMap(t, http.MethodPut, configMapURL(a.url, "flags"), readByA, http.StatusOK)
	rv2 := updated.ResourceVersion
	if rv2 == "" || rv2 == rv1 {
		t.Fatalf("PUT through A: resourceVersion %q; want a new one (was %q)", rv2, rv1)
	}

	// Operator B: rollout 50, from the stale rv1, through B.
	readByB.Data["rollout"] = "50"
	code, body := do(t, http.MethodPut, configMapURL(b.url, "flags"), readByB)
	if code != http.StatusConflict {
		t.Fatalf("PUT through B with stale resourceVersion %s: code %d; want %d; body: %s", rv1, code, http.StatusConflict, body)
	}
	st, err := decodeStatus(body)
	if err != nil {
		t.Fatal(err)
	}
	wantStatus := &metav1.Status{
		TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status:   metav1.StatusFailure,
		Message:  optimisticLockMsg,
		Reason:   metav1.StatusReasonConflict,
		Details:  &metav1.StatusDetails{Name: "flags", Kind: "configmaps"},
		Code:     http.StatusConflict,
	}
	if diff := cmp.Diff(wantStatus, st); diff != "" {
		t.Errorf("PUT through B with stale resourceVersion: Status (-want +got):\n%s", diff)
	}

	// Operator A's write stands, and operator B's did not land anywhere.
	wantData := map[string]string{"mode": "green", "rollout": "10"}
	for _, r := range replicas {
		got := doConfigMap(t, http.MethodGet, configMapURL(r.url, "flags"), nil, http.StatusOK)
		if diff := cmp.Diff(wantData, got.Data); diff != "" {
			t.Errorf("GET through %s: data (-want +got):\n%s", r.name, diff)
		}
		if got.ResourceVersion != rv2 {
			t.Errorf("GET through %s: resourceVersion = %q; want %q", r.name, got.ResourceVersion, rv2)
		}
		if got.UID != created.UID {
			t.Errorf("GET through %s: uid = %q; want %q", r.name, got.UID, created.UID)
		}
	}

	code, body = do(t, http.MethodGet, configMapsURL(b.url), nil)
	if code != http.StatusOK {
		t.Fatalf("list through B: code %d; want %d; body: %s", code, http.StatusOK, body)
	}
	var list corev1.ConfigMapList
	if err := json.Unmarshal(body, &list); err != nil {
		t.Fatalf("list through B: decode: %v; body: %s", err, body)
	}
	// The list is read at etcd's revision then: at or after the last write
	// to flags, and no later than etcd's revision after the list (the
	// replicas' controllers write ServiceAccounts meanwhile).
	after, err := etcd.Client.Get(context.Background(), "/", clientv3.WithKeysOnly(), clientv3.WithLimit(1))
	if err != nil {
		t.Fatalf("etcd revision after the list: %v", err)
	}
	listRV, err := strconv.ParseInt(list.ResourceVersion, 10, 64)
	if err != nil {
		t.Fatalf("list through B: metadata.resourceVersion %q: %v", list.ResourceVersion, err)
	}
	if written, _ := strconv.ParseInt(rv2, 10, 64); listRV < written || listRV > after.Header.Revision {
		t.Errorf("list through B: metadata.resourceVersion = %d; want between the last write %d and etcd's revision after the list %d",
			listRV, written, after.Header.Revision)
	}
	if len(list.Items) != 1 || list.Items[0].Name != "flags" || list.Items[0].ResourceVersion != rv2 {
		t.Errorf("list through B: items = %+v; want flags at resourceVersion %s only", list.Items, rv2)
	}

	for _, r := range replicas {
		r.stopCleanly(t)
		requireEmptyDir(t, r.name+"'s working directory", r.workDir)
	}
}

// Lost-update stress: replicas, workers per replica, increments per worker.
const (
	lostUpdateReplicas   = 2
	workersPerReplica    = 2
	incrementsPerWorker  = 25
	maxAttemptsPerWorker = 200
	lostUpdateDeadline   = 60 * time.Second
)

func TestLostUpdatesAcrossReplicas(t *testing.T) {
	t.Parallel()
	replicas := startReplicas(t, lostUpdateReplicas)
	doConfigMap(t, http.MethodPost, configMapsURL(replicas[0].url),
		newConfigMap("counter", map[string]string{"counter": "0"}), http.StatusCreated)

	ctx, cancel := context.WithTimeout(t.Context(), lostUpdateDeadline)
	defer cancel()
	var (
		wg        sync.WaitGroup
		mu        sync.Mutex
		errs      []error
		written   []int // every counter value a 200 PUT wrote
		conflicts int
	)
	for w := range lostUpdateReplicas * workersPerReplica {
		r := replicas[w%lostUpdateReplicas]
		wg.Go(func() {
			url := configMapURL(r.url, "counter")
			attempts, done := 0, 0
			for done < incrementsPerWorker {
				if attempts == maxAttemptsPerWorker {
					mu.Lock()
					errs = append(errs, fmt.Errorf("worker %d (%s): %d increments after %d attempts; want %d", w, r.name, done, attempts, incrementsPerWorker))
					mu.Unlock()
					return
				}
				attempts++
				value, err := increment(ctx, url)
				if errors.Is(err, errConflict) {
					mu.Lock()
					conflicts++
					mu.Unlock()
					// Back off a little, as client-go's RetryOnConflict does.
					time.Sleep(time.Duration(rand.IntN(5)) * time.Millisecond)
					continue
				}
				if err != nil {
					mu.Lock()
					errs = append(errs, fmt.Errorf("worker %d (%s), attempt %d: %w", w, r.name, attempts, err))
					mu.Unlock()
					return
				}
				done++
				mu.Lock()
				written = append(written, value)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		t.Error(err)
	}

	want := lostUpdateReplicas * workersPerReplica * incrementsPerWorker
	final := doConfigMap(t, http.MethodGet, configMapURL(replicas[1].url, "counter"), nil, http.StatusOK)
	if got := final.Data["counter"]; got != strconv.Itoa(want) {
		t.Errorf("final data.counter = %q; want %q (%d successful PUTs, %d conflicts)", got, strconv.Itoa(want), len(written), conflicts)
	}
	// Each successful PUT must have written a value no other PUT wrote.
	slices.Sort(written)
	var twice []int
	for i := 1; i < len(written); i++ {
		if written[i] == written[i-1] {
			twice = append(twice, written[i])
		}
	}
	if len(twice) > 0 {
		t.Errorf("counter values written by more than one successful PUT (each is a lost update): %v", twice)
	}
	t.Logf("%d successful PUTs, %d conflicts", len(written), conflicts)

	for _, r := range replicas {
		r.stopCleanly(t)
	}
}

var errConflict = errors.New("409 Conflict")

// increment reads the counter at url and writes it back plus one, guarded by
// the resourceVersion it read. It returns the value written, or errConflict
// when another write came first.
func increment(ctx context.Context, url string) (int, error) {
	code, body, err := request(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	if code != http.StatusOK {
		return 0, fmt.Errorf("GET %s: code %d; want %d; body: %s", url, code, http.StatusOK, body)
	}
	var cm corev1.ConfigMap
	if err := json.Unmarshal(body, &cm); err != nil {
		return 0, fmt.Errorf("GET %s: decode: %w; body: %s", url, err, body)
	}
	n, err := strconv.Atoi(cm.Data["counter"])
	if err != nil {
		return 0, fmt.Errorf("GET %s: data.counter: %w", url, err)
	}
	cm.Data["counter"] = strconv.Itoa(n + 1)
	code, body, err = request(ctx, http.MethodPut, url, &cm)
	if err != nil {
		return 0, err
	}
	switch code {
	case http.StatusOK:
		return n + 1, nil
	case http.StatusConflict:
		st, err := decodeStatus(body)
		if err != nil {
			return 0, fmt.Errorf("PUT %s: %w", url, err)
		}
		if st.Reason != metav1.StatusReasonConflict {
			return 0, fmt.Errorf("PUT %s: 409 with reason %q; want %q", url, st.Reason, metav1.StatusReasonConflict)
		}
		return 0, errConflict
	}
	return 0, fmt.Errorf("PUT %s: code %d; want %d or %d; body: %s", url, code, http.StatusOK, http.StatusConflict, body)
}
