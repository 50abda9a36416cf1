package e2e

// Writes whose outcome is unknown (issue 12). When etcd's leader dies in
// the middle of a transaction, the transaction may have been committed
// although the replica got no answer (Unavailable, EOF or its deadline).
// Such a write must be answered 504 Timeout without Retry-After: client-go
// sends again any 5xx that carries Retry-After, and the second copy of an
// applied update meets its own write (409 Conflict, which RetryOnConflict
// answers with one more increment), of an applied delete finds nothing (404)
// and of an applied create finds the object (409 AlreadyExists).
//
// The porcupine test (TestLinearizableUnderFaults) already treats 502, 503,
// 504 and transport errors as unknown outcomes (linOutcome in
// fault_test.go), and sends with a plain HTTP client that never re-sends, so
// it needs no change for this contract.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
)

const (
	ambCounters          = 4
	ambWritersPerCounter = 2
	ambCreateDeleters    = 2
	// ambLoad is how long the writers write while the faults run.
	ambLoad = 40 * time.Second
	// Bounds of each writer's loop, whatever the time.
	ambMaxIncrements = 5000
	ambMaxObjects    = 3000
	// ambReadBackTries: reads of an object whose create had an unknown
	// outcome, 100ms apart, until one says whether it exists.
	ambReadBackTries = 30
	ambHistoryWait   = 30 * time.Second
	// ambUnknownOutcomeText is in the message of the replicas' answer to a
	// write that etcd may or may not have applied.
	ambUnknownOutcomeText = "the outcome of the write is unknown"
	// ambPrefix is where the replicas keep the ConfigMaps of namespace
	// default (--etcd-prefix /registry).
	ambPrefix = "/registry/configmaps/default/"
)

// ambOutcome is the final answer a client got for one write attempt,
// after whatever client-go sent again.
type ambOutcome string

const (
	ambOK       ambOutcome = "ok"
	ambConflict ambOutcome = "409 Conflict"
	ambExists   ambOutcome = "409 AlreadyExists"
	ambNotFound ambOutcome = "404 NotFound"
	// ambRefused: 503 or 429, not done (etcd refused it, or HAProxy had
	// no replica to send it to).
	ambRefused ambOutcome = "refused"
	// ambUnknown: 504, HAProxy's 502, a timeout or a broken connection:
	// it may have been done.
	ambUnknown ambOutcome = "unknown"
	// ambBad: an answer no write of this test should get (a 500, a 400...).
	ambBad ambOutcome = "bad"
)

// ambClassify maps what a client-go call returned to its outcome.
func ambClassify(err error) ambOutcome {
	if err == nil {
		return ambOK
	}
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return ambUnknown // no answer: a timeout or a broken connection
	}
	st := status.Status()
	switch {
	case st.Code == http.StatusConflict && st.Reason == metav1.StatusReasonConflict:
		return ambConflict
	case st.Code == http.StatusConflict && st.Reason == metav1.StatusReasonAlreadyExists:
		return ambExists
	case st.Code == http.StatusNotFound && st.Reason == metav1.StatusReasonNotFound:
		return ambNotFound
	case st.Code == http.StatusServiceUnavailable || st.Code == http.StatusTooManyRequests:
		return ambRefused
	case st.Code == http.StatusGatewayTimeout || st.Code == http.StatusBadGateway:
		return ambUnknown
	}
	return ambBad
}

// ambAttempt is one write a client sent (once, or again by client-go),
// named by an id that the written object carries in data.attempt (update,
// create) or that its key names (delete).
type ambAttempt struct {
	id      string
	op      string // "update", "create" or "delete"
	key     string // the ConfigMap's name
	n       int    // update: the value of data.n it wrote
	outcome ambOutcome
	answer  string // the error the client got ("" for ok)
}

// ambAttemptKey is the context key of an attempt's id, for the transport.
type ambAttemptKey struct{}

// ambRecorder keeps every attempt and every HTTP answer it got.
type ambRecorder struct {
	mu       sync.Mutex
	attempts map[string]*ambAttempt
	tries    map[string][]string // attempt id: each HTTP try's answer, in order
	answers  map[string]int      // how many tries got each answer
	// contract: answers to writes that break the contract of issue 12
	// (a 504 with Retry-After or without reason Timeout, a 500).
	contract []string
	errs     errorList
}

func newAmbRecorder() *ambRecorder {
	return &ambRecorder{attempts: map[string]*ambAttempt{}, tries: map[string][]string{}, answers: map[string]int{}}
}

// record keeps an attempt's final answer and returns its outcome.
func (r *ambRecorder) record(a ambAttempt, err error) ambOutcome {
	a.outcome = ambClassify(err)
	if err != nil {
		a.answer = err.Error()
	}
	if a.outcome == ambBad {
		r.errs.add("%s %s (attempt %s): %v; want an answer a write may get", a.op, a.key, a.id, err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, dup := r.attempts[a.id]; dup {
		r.errs.add("attempt id %s used twice", a.id)
	}
	r.attempts[a.id] = &a
	return a.outcome
}

// wrap records each HTTP try of a request whose context names an attempt.
func (r *ambRecorder) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		id, _ := req.Context().Value(ambAttemptKey{}).(string)
		resp, err := rt.RoundTrip(req)
		if id == "" {
			return resp, err
		}
		if err != nil {
			r.addTry(id, req.Method, "error: "+err.Error(), "")
			return resp, err
		}
		answer := strconv.Itoa(resp.StatusCode)
		var violation string
		if resp.StatusCode >= 500 {
			body, readErr := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
			resp.Body.Close()
			resp.Body = io.NopCloser(bytes.NewReader(body))
			if readErr != nil {
				r.addTry(id, req.Method, "error: "+answer+", reading the body: "+readErr.Error(), "")
				return resp, nil
			}
			// A Status in JSON or in protobuf (client-go asks for both).
			st, isStatus := decodeAnyStatus(body)
			retryAfter := resp.Header.Get("Retry-After")
			switch {
			case isStatus && strings.Contains(st.Message, ambUnknownOutcomeText):
				answer += " " + string(st.Reason) + " (outcome unknown)"
			case isStatus:
				answer += " " + string(st.Reason)
			default:
				answer += " (" + resp.Header.Get("Content-Type") + ")"
			}
			if retryAfter != "" {
				answer += " Retry-After: " + retryAfter
			}
			// A plain 504 Timeout with Retry-After stays right for a write
			// that never sent its transaction (its read timed out): whether
			// a write answered so landed is for etcd's history to say.
			switch {
			case isStatus && strings.Contains(st.Message, ambUnknownOutcomeText) && (resp.StatusCode != http.StatusGatewayTimeout || st.Reason != metav1.StatusReasonTimeout || retryAfter != ""):
				violation = "a write whose outcome is unknown must be 504 Timeout without Retry-After (client-go sends again any 5xx with Retry-After)"
			case resp.StatusCode == http.StatusInternalServerError:
				violation = "a write whose outcome is unknown must be 504 Timeout"
			}
			if violation != "" {
				text := strings.TrimSpace(string(body))
				if isStatus {
					text = st.Message
				}
				violation = fmt.Sprintf("%s %s (attempt %s): %s: %q; %s", req.Method, req.URL.Path, id, answer, text, violation)
			}
		}
		r.addTry(id, req.Method, answer, violation)
		return resp, nil
	})
}

// decodeAnyStatus decodes a Status in any encoding client-go accepts.
func decodeAnyStatus(body []byte) (*metav1.Status, bool) {
	obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(body, nil, nil)
	if err != nil {
		return nil, false
	}
	st, ok := obj.(*metav1.Status)
	return st, ok
}

// addTry keeps one try's answer ("error: ..." when there was none).
func (r *ambRecorder) addTry(id, method, answer, violation string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.tries[id] = append(r.tries[id], answer)
	if strings.HasPrefix(answer, "error: ") {
		r.answers[method+" error"]++
	} else {
		r.answers[method+" "+answer]++
	}
	if violation != "" {
		r.contract = append(r.contract, violation)
	}
}

func withAttempt(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, ambAttemptKey{}, id)
}

// ambCounterWriter increments ConfigMap name's data.n the way client-go's
// users do, with retry.RetryOnConflict around get → n+1 → Update, until
// stop is closed. Each Update is an attempt of its own, with its own id.
func ambCounterWriter(ctx context.Context, cms typedcorev1.ConfigMapInterface, rec *ambRecorder, w int, name string, stop <-chan struct{}) {
	for k := 0; k < ambMaxIncrements; k++ {
		select {
		case <-stop:
			return
		default:
		}
		try := 0
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			cm, err := cms.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			n, err := strconv.Atoi(cm.Data["n"])
			if err != nil {
				rec.errs.add("writer %d: %s data.n = %q: %v", w, name, cm.Data["n"], err)
				return err
			}
			try++
			id := fmt.Sprintf("w%d-%d-%d", w, k, try)
			cm.Data = map[string]string{"n": strconv.Itoa(n + 1), "attempt": id}
			_, err = cms.Update(withAttempt(ctx, id), cm, metav1.UpdateOptions{})
			rec.record(ambAttempt{id: id, op: "update", key: name, n: n + 1}, err)
			return err
		})
		if err != nil {
			// An unknown outcome, a failed read or conflicts all the way:
			// the next increment.
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// ambCreateDeleter creates ConfigMaps of names of its own, one attempt
// each, and deletes each one it knows exists with one attempt whose
// preconditions are the uid and resourceVersion it read, until stop is
// closed. It is the only writer of its names, so a deletion in etcd's
// history is its delete attempt.
func ambCreateDeleter(ctx context.Context, cms typedcorev1.ConfigMapInterface, rec *ambRecorder, w int, stop <-chan struct{}) {
	for k := 0; k < ambMaxObjects; k++ {
		select {
		case <-stop:
			return
		default:
		}
		name := fmt.Sprintf("cd-%d-%d", w, k)
		id := name + "-create"
		created, err := cms.Create(withAttempt(ctx, id), &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Data:       map[string]string{"attempt": id},
		}, metav1.CreateOptions{})
		var uid types.UID
		var rv string
		switch rec.record(ambAttempt{id: id, op: "create", key: name}, err) {
		case ambOK:
			uid, rv = created.UID, created.ResourceVersion
		case ambUnknown, ambRefused, ambExists:
			// Whether it exists decides whether there is anything to delete.
			cm, ok := ambReadBack(ctx, cms, name)
			if !ok {
				continue
			}
			uid, rv = cm.UID, cm.ResourceVersion
		default:
			continue
		}
		id = name + "-delete"
		err = cms.Delete(withAttempt(ctx, id), name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid, ResourceVersion: &rv}})
		rec.record(ambAttempt{id: id, op: "delete", key: name}, err)
	}
}

// ambReadBack reads name until an answer says whether it exists.
func ambReadBack(ctx context.Context, cms typedcorev1.ConfigMapInterface, name string) (*corev1.ConfigMap, bool) {
	for range ambReadBackTries {
		cm, err := cms.Get(ctx, name, metav1.GetOptions{})
		switch {
		case err == nil:
			return cm, true
		case apierrors.IsNotFound(err):
			return nil, false
		}
		time.Sleep(100 * time.Millisecond)
	}
	return nil, false
}

// ambWrite is one event of etcd's history of a key: a put of a ConfigMap
// (with its data.attempt and data.n) or a delete.
type ambWrite struct {
	rev     int64
	deleted bool
	attempt string
	n       string
}

// ambHistory reads etcd's history of the keys under prefix from revision
// from to revision to with a watch of its own (the replicas do not compact;
// the test does not either), and returns each key's writes in order. It
// ends once a progress notification says the watch has passed to.
func ambHistory(t *testing.T, etcd *etcdCluster, prefix string, from, to int64) map[string][]ambWrite {
	t.Helper()
	ctx, cancel := context.WithTimeout(clientv3.WithRequireLeader(t.Context()), ambHistoryWait)
	defer cancel()
	wch := etcd.client.Watch(ctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(from))
	progress := time.NewTicker(200 * time.Millisecond)
	defer progress.Stop()
	out := map[string][]ambWrite{}
	events := 0
	for {
		select {
		case resp, ok := <-wch:
			if !ok {
				t.Fatalf("etcd watch of %s from revision %d: closed after %d events: %v", prefix, from, events, ctx.Err())
			}
			if err := resp.Err(); err != nil {
				t.Fatalf("etcd watch of %s from revision %d: %v (after %d events)", prefix, from, err, events)
			}
			for _, ev := range resp.Events {
				if ev.Kv.ModRevision > to {
					continue
				}
				events++
				name := strings.TrimPrefix(string(ev.Kv.Key), prefix)
				w := ambWrite{rev: ev.Kv.ModRevision, deleted: ev.Type == clientv3.EventTypeDelete}
				if !w.deleted {
					var cm corev1.ConfigMap
					if err := json.Unmarshal(ev.Kv.Value, &cm); err != nil {
						t.Fatalf("etcd history: %s at revision %d: %v; value %q", ev.Kv.Key, ev.Kv.ModRevision, err, ev.Kv.Value)
					}
					w.attempt, w.n = cm.Data["attempt"], cm.Data["n"]
				}
				out[name] = append(out[name], w)
			}
			if resp.IsProgressNotify() && resp.Header.Revision >= to {
				return out
			}
		case <-progress.C:
			// Sent only once the watch has caught up; until then ignored.
			if err := etcd.client.RequestProgress(ctx); err != nil {
				t.Logf("etcd watch: progress request: %v", err)
			}
		case <-ctx.Done():
			t.Fatalf("etcd watch of %s from revision %d: not at revision %d within %s (%d events)", prefix, from, to, ambHistoryWait, events)
		}
	}
}

// TestAmbiguousWritesUnderFaults (issue 12) runs client-go writers through
// HAProxy against 3 replicas and 3 etcd members that fsync, while replicas
// are SIGKILLed, followers SIGSTOPped and leaders SIGKILLed: writers that
// increment counters with RetryOnConflict, and writers that create
// ConfigMaps and delete them with preconditions. Every write attempt
// carries an id that etcd's history shows if it landed. In the end, for
// etcd's history:
//
//   - every acknowledged write landed;
//   - no attempt answered 409 Conflict, 409 AlreadyExists, 404 NotFound or
//     503 (refused) landed: those answers say nothing was written;
//   - every counter equals its acknowledged increments plus the
//     increments with an unknown outcome that landed;
//   - no write was answered 504 with Retry-After (client-go would send it
//     again) or 500.
func TestAmbiguousWritesUnderFaults(t *testing.T) {
	etcd := startEtcdClusterWith(t, etcdClusterOptions{Fsync: true})
	replicas := startFaultReplicas(t, etcd, 3)
	lb := startHAProxy(t, replicas)
	rec := newAmbRecorder()
	tr := &http.Transport{MaxIdleConnsPerHost: 32, IdleConnTimeout: 30 * time.Second}
	t.Cleanup(tr.CloseIdleConnections)
	clientset, err := kubernetes.NewForConfig(&rest.Config{
		Host:      lb.url,
		Transport: rec.wrap(tr),
		Timeout:   faultRequestTimeout,
		QPS:       -1, // no client-side rate limit: as much load as the writers make
	})
	if err != nil {
		t.Fatalf("clientset: %v", err)
	}
	cms := clientset.CoreV1().ConfigMaps("default")
	ctx := t.Context()

	start, err := etcd.client.Get(ctx, ambPrefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatalf("etcd get (for the revision the history starts after): %v", err)
	}
	counters := make([]string, ambCounters)
	for i := range counters {
		counters[i] = fmt.Sprintf("counter-%d", i)
		if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: counters[i]}, Data: map[string]string{"n": "0", "attempt": "init-" + counters[i]}}, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create %s: %v", counters[i], err)
		}
	}

	stop := make(chan struct{})
	var stopOnce sync.Once
	stopWriters := func() { stopOnce.Do(func() { close(stop) }) }
	var wg sync.WaitGroup
	defer wg.Wait()
	defer stopWriters()
	for w := range ambCounters * ambWritersPerCounter {
		wg.Go(func() { ambCounterWriter(ctx, cms, rec, w, counters[w%ambCounters], stop) })
	}
	for w := range ambCreateDeleters {
		wg.Go(func() { ambCreateDeleter(ctx, cms, rec, w, stop) })
	}

	// The faults, one at a time, each undone before the next, until the
	// load's time is up.
	began := time.Now()
	logf := func(format string, args ...any) {
		t.Logf("%6.2fs: %s", time.Since(began).Seconds(), fmt.Sprintf(format, args...))
	}
	killLeader := func() {
		i := etcd.leader(t)
		logf("SIGKILL etcd leader %s", etcd.members[i].name)
		etcd.kill(t, i)
		time.Sleep(time.Second)
		etcd.restart(t, i)
		logf("%s healthy again", etcd.members[i].name)
	}
	killReplica := func(r *faultReplica) func() {
		return func() {
			logf("SIGKILL %s", r.name)
			r.kill(t)
			time.Sleep(300 * time.Millisecond)
			r.restart(t)
			lb.waitServer(t, r.name, "UP")
			logf("%s back in the balancer", r.name)
		}
	}
	freezeFollower := func() {
		i := (etcd.leader(t) + 1) % len(etcd.members)
		logf("SIGSTOP etcd follower %s", etcd.members[i].name)
		etcd.freeze(t, i)
		time.Sleep(3 * time.Second)
		etcd.thaw(t, i)
		etcd.waitHealthy(t, i)
		logf("%s thawed and healthy", etcd.members[i].name)
	}
	schedule := []func(){
		killLeader, killReplica(replicas[0]), killLeader, freezeFollower,
		killLeader, killReplica(replicas[1]), killLeader, freezeFollower,
		killLeader, killReplica(replicas[2]), killLeader,
	}
	faults := 0
	time.Sleep(2 * time.Second)
	for _, fault := range schedule {
		if time.Since(began) > ambLoad-4*time.Second {
			break
		}
		fault()
		faults++
		time.Sleep(1500 * time.Millisecond)
	}
	if left := ambLoad - time.Since(began); left > 0 {
		time.Sleep(left)
	}
	stopWriters()
	wg.Wait()
	logf("writers stopped after %d faults", faults)
	rec.errs.report(t)

	// Every process is back: the history is read from a whole cluster.
	for i := range etcd.members {
		etcd.waitHealthy(t, i)
	}
	end, err := etcd.client.Get(ctx, ambPrefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatalf("etcd get of %s: %v", ambPrefix, err)
	}
	history := ambHistory(t, etcd, ambPrefix, start.Header.Revision+1, end.Header.Revision)
	finalState := map[string]string{} // name: data.n in etcd at the end
	for _, kv := range end.Kvs {
		var cm corev1.ConfigMap
		if err := json.Unmarshal(kv.Value, &cm); err != nil {
			t.Fatalf("etcd: %s: %v", kv.Key, err)
		}
		finalState[strings.TrimPrefix(string(kv.Key), ambPrefix)] = cm.Data["n"]
	}

	rec.mu.Lock()
	defer rec.mu.Unlock()
	landed := map[string]bool{}
	events := 0
	for name, writes := range history {
		events += len(writes)
		for i, w := range writes {
			created := strings.HasPrefix(name, "cd-")
			switch {
			case created && (i > 1 || w.deleted != (i == 1)):
				t.Errorf("etcd history of %s: %+v; want one create, then at most one delete", name, writes)
			case w.deleted && created:
				landed[name+"-delete"] = true
			case w.deleted:
				t.Errorf("etcd history: %s deleted at revision %d; no writer deletes it", name, w.rev)
			case landed[w.attempt]:
				t.Errorf("etcd history: attempt %s landed twice (again at revision %d of %s)", w.attempt, w.rev, name)
			default:
				landed[w.attempt] = true
			}
		}
	}

	// Each counter: 0, 1, 2, ... each value written by one attempt that
	// wrote it, and the last one is etcd's.
	for _, name := range counters {
		writes := history[name]
		if len(writes) == 0 || writes[0].attempt != "init-"+name {
			t.Errorf("etcd history of %s: %v; want it to start with its creation", name, writes)
			continue
		}
		acked, unknownLanded := 0, 0
		for i, w := range writes[1:] {
			a := rec.attempts[w.attempt]
			switch {
			case a == nil:
				t.Errorf("etcd history: %s at revision %d written by attempt %q, which no writer made", name, w.rev, w.attempt)
			case a.key != name || w.n != strconv.Itoa(a.n):
				t.Errorf("etcd history: %s at revision %d has n=%s by attempt %s; that attempt wrote n=%d to %s", name, w.rev, w.n, w.attempt, a.n, a.key)
			case a.outcome == ambOK:
				acked++
			case a.outcome == ambUnknown:
				unknownLanded++
			}
			if w.n != strconv.Itoa(i+1) {
				t.Errorf("etcd history: write %d of %s (revision %d, attempt %s) has n=%s; want %d: an increment was lost", i+1, name, w.rev, w.attempt, w.n, i+1)
			}
		}
		final := writes[len(writes)-1].n
		if finalState[name] != final {
			t.Errorf("etcd: %s has n=%s at revision %d; its history ends at n=%s", name, finalState[name], end.Header.Revision, final)
		}
		if want := strconv.Itoa(acked + unknownLanded); final != want {
			t.Errorf("%s: n = %s; want %s (%d acknowledged increments + %d with an unknown outcome that landed)", name, final, want, acked, unknownLanded)
		}
	}

	// Every attempt against what etcd says it did.
	type tally struct{ attempts, landed int }
	counts := map[string]map[ambOutcome]*tally{"update": {}, "create": {}, "delete": {}}
	resent := 0           // attempts that client-go sent more than once
	var unknowns []string // the first few attempts with an unknown outcome
	var resends []string  // the first few attempts sent more than once
	var wrong []string
	for _, id := range slices.Sorted(maps.Keys(rec.attempts)) {
		a := rec.attempts[id]
		c := counts[a.op][a.outcome]
		if c == nil {
			c = &tally{}
			counts[a.op][a.outcome] = c
		}
		c.attempts++
		if landed[id] {
			c.landed++
		}
		tries := strings.Join(rec.tries[id], ", ")
		if len(rec.tries[id]) > 1 {
			if resent < 10 {
				resends = append(resends, fmt.Sprintf("%s %s landed=%t (tries: %s)", a.op, id, landed[id], tries))
			}
			resent++
		}
		if a.outcome == ambUnknown && len(unknowns) < 10 {
			unknowns = append(unknowns, fmt.Sprintf("%s %s landed=%t (tries: %s)", a.op, id, landed[id], tries))
		}
		switch {
		case a.outcome == ambOK && !landed[id]:
			wrong = append(wrong, fmt.Sprintf("%s %s (attempt %s) acknowledged, not in etcd's history: a lost write (tries: %s)", a.op, a.key, id, tries))
		case a.outcome == ambConflict || a.outcome == ambNotFound || a.outcome == ambExists || a.outcome == ambRefused:
			switch {
			case landed[id]:
				wrong = append(wrong, fmt.Sprintf("%s %s (attempt %s) answered %q, and it landed: an applied write answered as not done (tries: %s)", a.op, a.key, id, a.answer, tries))
			case a.op == "delete" && a.outcome != ambRefused:
				wrong = append(wrong, fmt.Sprintf("delete %s (attempt %s) answered %q; the object, unchanged since read, is still there (tries: %s)", a.key, id, a.answer, tries))
			case a.op == "create" && a.outcome == ambExists, a.outcome == ambNotFound:
				wrong = append(wrong, fmt.Sprintf("%s %s (attempt %s) answered %q; nothing else writes that object (tries: %s)", a.op, a.key, id, a.answer, tries))
			}
		}
	}
	for i, w := range wrong {
		if i == 30 {
			t.Errorf("... and %d more", len(wrong)-i)
			break
		}
		t.Error(w)
	}
	for i, c := range rec.contract {
		if i == 30 {
			t.Errorf("... and %d more answers against the contract", len(rec.contract)-i)
			break
		}
		t.Errorf("answer against the contract: %s", c)
	}

	for _, op := range []string{"update", "create", "delete"} {
		var parts []string
		for _, o := range []ambOutcome{ambOK, ambConflict, ambExists, ambNotFound, ambRefused, ambUnknown, ambBad} {
			if c := counts[op][o]; c != nil {
				parts = append(parts, fmt.Sprintf("%s %d (%d landed)", o, c.attempts, c.landed))
			}
		}
		t.Logf("%s attempts: %s", op, strings.Join(parts, ", "))
		if counts[op][ambOK] == nil {
			t.Errorf("no %s succeeded: the load did not run", op)
		}
	}
	var answers []string
	for _, a := range slices.Sorted(maps.Keys(rec.answers)) {
		answers = append(answers, fmt.Sprintf("%s: %d", a, rec.answers[a]))
	}
	t.Logf("HTTP answers to the writes' tries: %s", strings.Join(answers, ", "))
	if len(unknowns) > 0 {
		t.Logf("attempts with an unknown outcome: %s", strings.Join(unknowns, "; "))
	}
	if len(resends) > 0 {
		t.Logf("attempts client-go sent again: %s", strings.Join(resends, "; "))
	}
	finals := make([]string, len(counters))
	for i, name := range counters {
		finals[i] = name + "=" + finalState[name]
	}
	t.Logf("counters %s; %d attempts sent more than once by client-go; %d events in etcd's history", strings.Join(finals, " "), resent, events)
}
