package e2e

// Fault tests: a real 3-member etcd cluster, three concord replicas and
// HAProxy (cluster_test.go), with replicas and etcd members killed,
// stopped and restarted under load. Each test asserts exact outcomes: no
// lost or phantom write, a linearizable history (checked with porcupine),
// an informer cache equal to etcd's state, bounded unavailability.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"maps"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// faultRequestTimeout bounds every request of the fault tests' clients:
// above the replicas' --etcd-request-timeout (2s), so that a replica's own
// 504 arrives first.
const faultRequestTimeout = 5 * time.Second

// newFaultClient is an HTTP client of its own for one test, so that no
// connection outlives the test's processes.
func newFaultClient(t *testing.T) *http.Client {
	tr := &http.Transport{MaxIdleConnsPerHost: 16, IdleConnTimeout: 30 * time.Second}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Timeout: faultRequestTimeout, Transport: tr}
}

// reply is one answer (or transport error) of an HTTP request.
type reply struct {
	code   int
	body   []byte
	header http.Header
	err    error
}

func (r reply) String() string {
	if r.err != nil {
		return r.err.Error()
	}
	return fmt.Sprintf("%d %s", r.code, strings.TrimSpace(string(r.body)))
}

// send sends body (if not nil) as JSON. It never fails the test, so client
// goroutines may use it.
func send(ctx context.Context, c *http.Client, method, url string, body any) reply {
	var reader io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return reply{err: err}
		}
		reader = strings.NewReader(string(b))
	}
	req, err := http.NewRequestWithContext(ctx, method, url, reader)
	if err != nil {
		return reply{err: err}
	}
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.Do(req)
	if err != nil {
		return reply{err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return reply{code: resp.StatusCode, header: resp.Header, err: fmt.Errorf("%s %s: %d, reading the body: %w", method, url, resp.StatusCode, err)}
	}
	return reply{code: resp.StatusCode, body: b, header: resp.Header}
}

// refused reports whether the request never reached a server: the
// connection was refused, so nothing can have been done.
func (r reply) refused() bool { return r.err != nil && errors.Is(r.err, syscall.ECONNREFUSED) }

// fromLB reports whether the answer is one of HAProxy's own error pages
// (502, 503 or 504 in HTML) rather than a replica's.
func (r reply) fromLB() bool {
	return r.err == nil && r.code >= 500 && strings.HasPrefix(r.header.Get("Content-Type"), "text/html")
}

// reason is the reason of a Status answer ("" if it is none).
func (r reply) reason() metav1.StatusReason {
	var st metav1.Status
	if json.Unmarshal(r.body, &st) != nil || st.Kind != "Status" {
		return ""
	}
	return st.Reason
}

func (r reply) configMap() (*corev1.ConfigMap, error) {
	var cm corev1.ConfigMap
	if err := json.Unmarshal(r.body, &cm); err != nil {
		return nil, fmt.Errorf("decode ConfigMap: %w; body: %s", err, r.body)
	}
	return &cm, nil
}

// rvOf parses a resourceVersion.
func rvOf(cm *corev1.ConfigMap) (int64, error) {
	rv, err := strconv.ParseInt(cm.ResourceVersion, 10, 64)
	if err != nil || rv <= 0 {
		return 0, fmt.Errorf("resourceVersion %q of %s is not a positive integer", cm.ResourceVersion, cm.Name)
	}
	return rv, nil
}

// errorList collects the errors of client goroutines.
type errorList struct {
	mu   sync.Mutex
	errs []error
}

func (l *errorList) add(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.errs = append(l.errs, fmt.Errorf(format, args...))
}

func (l *errorList) report(t *testing.T) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, err := range l.errs {
		if i == 20 {
			t.Errorf("... and %d more errors", len(l.errs)-i)
			break
		}
		t.Error(err)
	}
}

// --- 1. No lost updates through the load balancer ---------------------------

const (
	counterClients     = 6
	counterDuration    = 8 * time.Second
	counterMaxAttempts = 3000 // per client
)

// TestNoLostUpdatesThroughTheLoadBalancer has clients increment one
// ConfigMap's counter through HAProxy, each increment a read and a write
// guarded by the resourceVersion read, retried on 409. Every write also
// records its writer's tag, so that the history of the ConfigMap (a watch
// from its creation) shows which write made each value: every value from 1
// to the final one must be written exactly once, by an acknowledged write
// or by a write whose answer was lost, and the final counter must equal
// the acknowledged increments plus the lost-answer writes that landed.
func TestNoLostUpdatesThroughTheLoadBalancer(t *testing.T) {
	etcd := startEtcdCluster(t)
	replicas := startFaultReplicas(t, etcd, 3)
	lb := startHAProxy(t, replicas)
	client := newFaultClient(t)

	created := send(t.Context(), client, http.MethodPost, configMapsURL(lb.url), newConfigMap("counter", map[string]string{"counter": "0", "by": "create"}))
	if created.err != nil || created.code != http.StatusCreated {
		t.Fatalf("create counter through the load balancer: %v", created)
	}
	createdCM, err := created.configMap()
	if err != nil {
		t.Fatal(err)
	}

	var (
		mu        sync.Mutex
		acked     = map[string]int{} // tag of an acknowledged write: the value it wrote
		unknown   = map[string]int{} // tag of a write whose answer was lost: the value it tried
		conflicts int
		retries   int // reads and writes retried after an error or 5xx
		errs      errorList
		wg        sync.WaitGroup
	)
	itemURL := configMapURL(lb.url, "counter")
	deadline := time.Now().Add(counterDuration)
	for c := range counterClients {
		wg.Go(func() {
			for attempt := 0; attempt < counterMaxAttempts && time.Now().Before(deadline); attempt++ {
				got := send(t.Context(), client, http.MethodGet, itemURL, nil)
				if got.err != nil || got.code >= 500 {
					mu.Lock()
					retries++
					mu.Unlock()
					time.Sleep(20 * time.Millisecond)
					continue
				}
				if got.code != http.StatusOK {
					errs.add("client %d: GET counter: %v", c, got)
					return
				}
				cm, err := got.configMap()
				if err != nil {
					errs.add("client %d: GET counter: %v", c, err)
					return
				}
				n, err := strconv.Atoi(cm.Data["counter"])
				if err != nil {
					errs.add("client %d: GET counter: data.counter %q: %v", c, cm.Data["counter"], err)
					return
				}
				tag := fmt.Sprintf("c%d-%d", c, attempt)
				cm.Data = map[string]string{"counter": strconv.Itoa(n + 1), "by": tag}
				put := send(t.Context(), client, http.MethodPut, itemURL, cm)
				mu.Lock()
				switch {
				case put.err == nil && put.code == http.StatusOK:
					acked[tag] = n + 1
				case put.err == nil && put.code == http.StatusConflict && put.reason() == metav1.StatusReasonConflict:
					conflicts++
				case put.err != nil || put.code >= 500:
					// It may have been written: the history says.
					unknown[tag] = n + 1
					retries++
				default:
					errs.add("client %d: PUT counter %d from resourceVersion %s: %v", c, n+1, cm.ResourceVersion, put)
					mu.Unlock()
					return
				}
				mu.Unlock()
				if put.code == http.StatusConflict {
					time.Sleep(time.Duration(rand.IntN(3)) * time.Millisecond)
				}
			}
		})
	}
	wg.Wait()
	errs.report(t)
	if t.Failed() {
		t.FailNow()
	}

	final := doConfigMap(t, http.MethodGet, configMapURL(replicas[0].url, "counter"), nil, http.StatusOK)
	finalN, err := strconv.Atoi(final.Data["counter"])
	if err != nil {
		t.Fatalf("final data.counter %q: %v", final.Data["counter"], err)
	}
	history := counterHistory(t, replicas[1].url, createdCM.ResourceVersion, final.ResourceVersion)

	// The history is 1, 2, ..., final, each value written by one tag.
	landed := 0 // writes with a lost answer that were made
	seen := map[string]bool{}
	for i, h := range history {
		if h.counter != i+1 {
			t.Errorf("write %d of the history (resourceVersion %s, by %s) wrote counter %d; want %d", i+1, h.rv, h.by, h.counter, i+1)
		}
		if seen[h.by] {
			t.Errorf("tag %s wrote twice (second: counter %d at resourceVersion %s)", h.by, h.counter, h.rv)
		}
		seen[h.by] = true
		if v, ok := acked[h.by]; ok {
			if v != h.counter {
				t.Errorf("acknowledged write %s wrote %d; the history says %d", h.by, v, h.counter)
			}
			continue
		}
		if v, ok := unknown[h.by]; ok && v == h.counter {
			landed++
			continue
		}
		t.Errorf("write %s of counter %d at resourceVersion %s: no client made it (or not with this value)", h.by, h.counter, h.rv)
	}
	for tag, v := range acked {
		if !seen[tag] {
			t.Errorf("acknowledged write %s of counter %d is not in the history: a lost update", tag, v)
		}
	}
	if len(history) != finalN {
		t.Errorf("the history has %d writes; the final counter is %d", len(history), finalN)
	}
	if want := len(acked) + landed; finalN != want {
		t.Errorf("final counter = %d; want %d (%d acknowledged increments + %d of %d writes whose answer was lost)", finalN, want, len(acked), landed, len(unknown))
	}
	t.Logf("final counter %d: %d acknowledged increments, %d conflicts, %d writes with a lost answer (%d landed), %d retries after errors",
		finalN, len(acked), conflicts, len(unknown), landed, retries)
}

type counterWrite struct {
	counter int
	by      string
	rv      string
}

// counterHistory watches ConfigMap counter from resourceVersion from and
// returns its writes up to resourceVersion to. A server may end a watch at
// any time; as client-go does, it then watches again from the last
// resourceVersion it got.
func counterHistory(t *testing.T, base, from, to string) []counterWrite {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var out []counterWrite
	for watches := 1; watches <= 20; watches++ {
		writes, done, err := watchCounter(ctx, base, from, to)
		out = append(out, writes...)
		if err != nil {
			t.Fatalf("watch %d of counter from resourceVersion %s: %v", watches, from, err)
		}
		if done {
			return out
		}
		last := from
		if len(writes) > 0 {
			last = writes[len(writes)-1].rv
		}
		t.Logf("watch %d of counter from resourceVersion %s ended after %d events; watching again from %s", watches, from, len(writes), last)
		from = last
	}
	t.Fatalf("watch counter: not at resourceVersion %s after 20 watches (%d events)", to, len(out))
	return nil
}

// watchCounter runs one watch of ConfigMap counter from resourceVersion
// from, until the event at resourceVersion to (done) or the end of the
// stream.
func watchCounter(ctx context.Context, base, from, to string) (_ []counterWrite, done bool, _ error) {
	u := configMapsURL(base) + "?watch=true&resourceVersion=" + from + "&fieldSelector=" + url.QueryEscape("metadata.name=counter")
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, false, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, false, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return nil, false, fmt.Errorf("%d %s", resp.StatusCode, b)
	}
	var out []counterWrite
	dec := json.NewDecoder(bufio.NewReader(resp.Body))
	for len(out) < 1_000_000 {
		var ev struct {
			Type   string           `json:"type"`
			Object corev1.ConfigMap `json:"object"`
		}
		if err := dec.Decode(&ev); err == io.EOF {
			return out, false, nil
		} else if err != nil {
			return out, false, fmt.Errorf("after %d events: %w", len(out), err)
		}
		if ev.Type != "MODIFIED" {
			return out, false, fmt.Errorf("event %s; want MODIFIED only: %+v", ev.Type, ev.Object)
		}
		n, err := strconv.Atoi(ev.Object.Data["counter"])
		if err != nil {
			return out, false, fmt.Errorf("data.counter %q: %w", ev.Object.Data["counter"], err)
		}
		out = append(out, counterWrite{counter: n, by: ev.Object.Data["by"], rv: ev.Object.ResourceVersion})
		if ev.Object.ResourceVersion == to {
			return out, true, nil
		}
	}
	return out, false, errors.New("too many events")
}

// --- 2. Linearizability under faults -----------------------------------------

const (
	linClients     = 5
	linMaxOps      = 1500 // per client
	linCheckTime   = 60 * time.Second
	linUnknownWait = 200 * time.Millisecond // a client's pause after an unknown outcome
)

var linKeys = []string{"lin-a", "lin-b", "lin-c"}

// Operations and their outcomes in the history.
const (
	opCreate = "create"
	opGet    = "get"
	opUpdate = "update"
	opDelete = "delete"

	resOK       = "ok"
	resExists   = "exists"
	resNotFound = "not found"
	resConflict = "conflict"
	// resUnknown: the request timed out, its connection broke, or it got a
	// 5xx: it may or may not have taken effect, at any time after it was
	// sent.
	resUnknown = "unknown"
)

// kvInput is an operation on one ConfigMap: its data.v (Value) for create
// and update, the resourceVersion an update is conditional on (RV).
type kvInput struct {
	Op    string
	Key   string
	Value string
	RV    int64
}

// kvOutput is its outcome, with the data.v and resourceVersion answered.
type kvOutput struct {
	Result string
	Value  string
	RV     int64
}

// kvState is one ConfigMap in the model. RV is the resourceVersion of the
// write that made it, 0 while that write's outcome was unknown and no read
// has seen its resourceVersion; every write gets a resourceVersion greater
// than MaxRV, the greatest one seen of the ConfigMap so far (etcd's
// revision only grows).
type kvState struct {
	Present bool
	Value   string
	RV      int64
	MaxRV   int64
}

// kvStep is the sequential specification: the states a ConfigMap can be in
// after the operation in gave out, from s (none: out is impossible). An
// operation with an unknown outcome may or may not have happened.
func kvStep(s kvState, in kvInput, out kvOutput) []any {
	// rvMayBe: the ConfigMap exists and its resourceVersion may be rv.
	rvMayBe := func(rv int64) bool {
		return s.Present && (s.RV == rv || (s.RV == 0 && rv > s.MaxRV))
	}
	switch in.Op {
	case opGet:
		switch out.Result {
		case resUnknown:
			return []any{s}
		case resNotFound:
			if !s.Present {
				return []any{s}
			}
		case resOK:
			if s.Value == out.Value && rvMayBe(out.RV) {
				return []any{kvState{Present: true, Value: s.Value, RV: out.RV, MaxRV: max(s.MaxRV, out.RV)}}
			}
		}
	case opCreate:
		switch out.Result {
		case resUnknown:
			if s.Present {
				return []any{s}
			}
			return []any{s, kvState{Present: true, Value: in.Value, MaxRV: s.MaxRV}}
		case resExists:
			if s.Present {
				return []any{s}
			}
		case resOK:
			if !s.Present && out.RV > s.MaxRV {
				return []any{kvState{Present: true, Value: in.Value, RV: out.RV, MaxRV: out.RV}}
			}
		}
	case opUpdate:
		switch out.Result {
		case resUnknown:
			if rvMayBe(in.RV) {
				return []any{s, kvState{Present: true, Value: in.Value, MaxRV: max(s.MaxRV, in.RV)}}
			}
			return []any{s}
		case resConflict:
			if s.Present && s.RV != in.RV {
				return []any{s}
			}
		case resNotFound:
			if !s.Present {
				return []any{s}
			}
		case resOK:
			if rvMayBe(in.RV) && out.RV > max(s.MaxRV, in.RV) {
				return []any{kvState{Present: true, Value: in.Value, RV: out.RV, MaxRV: out.RV}}
			}
		}
	case opDelete:
		switch out.Result {
		case resUnknown:
			if s.Present {
				return []any{s, kvState{MaxRV: s.MaxRV}}
			}
			return []any{s}
		case resOK:
			if s.Present {
				return []any{kvState{MaxRV: s.MaxRV}}
			}
		case resNotFound:
			if !s.Present {
				return []any{s}
			}
		}
	}
	return nil
}

// kvModel checks each ConfigMap on its own (a history is linearizable if
// each key's is).
var kvModel = (&porcupine.NondeterministicModel{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		for _, op := range history {
			k := op.Input.(kvInput).Key
			byKey[k] = append(byKey[k], op)
		}
		var out [][]porcupine.Operation
		for _, k := range slices.Sorted(maps.Keys(byKey)) {
			out = append(out, byKey[k])
		}
		return out
	},
	Init: func() []any { return []any{kvState{}} },
	Step: func(state, input, output any) []any {
		return kvStep(state.(kvState), input.(kvInput), output.(kvOutput))
	},
	Hash: func(state any) uint64 {
		s := state.(kvState)
		h := fnv.New64a()
		fmt.Fprintf(h, "%t/%s/%d/%d", s.Present, s.Value, s.RV, s.MaxRV)
		return h.Sum64()
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(kvInput), output.(kvOutput)
		var call string
		switch in.Op {
		case opCreate:
			call = fmt.Sprintf("create(%s, %s)", in.Key, in.Value)
		case opUpdate:
			call = fmt.Sprintf("update(%s, %s, rv %d)", in.Key, in.Value, in.RV)
		default:
			call = fmt.Sprintf("%s(%s)", in.Op, in.Key)
		}
		if out.Result == resOK && (in.Op == opGet || out.RV != 0) {
			return fmt.Sprintf("%s -> %s rv %d", call, cmpOrStr(out.Value, in.Value), out.RV)
		}
		return call + " -> " + out.Result
	},
	DescribeState: func(state any) string {
		s := state.(kvState)
		if !s.Present {
			return fmt.Sprintf("absent (max rv %d)", s.MaxRV)
		}
		if s.RV == 0 {
			return fmt.Sprintf("%s, rv unknown > %d", s.Value, s.MaxRV)
		}
		return fmt.Sprintf("%s, rv %d", s.Value, s.RV)
	},
}).ToModel()

func cmpOrStr(s, alt string) string {
	if s != "" {
		return s
	}
	return alt
}

// linRecorder keeps the history of the clients' operations.
type linRecorder struct {
	start time.Time

	mu       sync.Mutex
	ops      []porcupine.Operation
	pending  []int // indexes of operations with an unknown outcome
	counts   map[string]int
	clientID atomic.Int64
	bad      []string // answers that no operation should get
}

func (r *linRecorder) now() int64 { return time.Since(r.start).Nanoseconds() }

func (r *linRecorder) record(client int, in kvInput, call int64, out kvOutput, ret int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.counts[in.Op+" "+out.Result]++
	if in.Op == opGet && out.Result == resUnknown {
		return // a read that did not answer constrains nothing
	}
	if out.Result == resUnknown {
		r.pending = append(r.pending, len(r.ops))
	}
	r.ops = append(r.ops, porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret})
}

// history is the recorded history. An operation with an unknown outcome
// may take effect at any time after its call, so it returns "at infinity":
// after everything else (porcupine then may linearize it anywhere after
// its call, or after the last operation, where it changes nothing seen).
func (r *linRecorder) history() []porcupine.Operation {
	r.mu.Lock()
	defer r.mu.Unlock()
	end := r.now() + 1
	ops := slices.Clone(r.ops)
	for _, i := range r.pending {
		ops[i].Return = end
	}
	return ops
}

// linClient runs operations on random keys, with unique values, until stop
// is closed. target gives the base URL of each request.
func linClient(ctx context.Context, rec *linRecorder, client *http.Client, id int, target func() string, stop <-chan struct{}) {
	rng := rand.New(rand.NewPCG(uint64(id), uint64(time.Now().UnixNano())))
	visual := id
	lastRV := map[string]int64{} // per key: the resourceVersion this client last saw
	for seq := 0; seq < linMaxOps; seq++ {
		select {
		case <-stop:
			return
		default:
		}
		key := linKeys[rng.IntN(len(linKeys))]
		in := kvInput{Key: key}
		switch p := rng.IntN(100); {
		case p < 35:
			in.Op = opGet
		case p < 65:
			if lastRV[key] == 0 {
				in.Op = opGet // nothing to be conditional on yet
				break
			}
			in.Op, in.RV = opUpdate, lastRV[key]
		case p < 85:
			in.Op = opCreate
		default:
			in.Op = opDelete
		}
		if in.Op == opCreate || in.Op == opUpdate {
			in.Value = fmt.Sprintf("c%d-%d", id, seq)
		}
		base := target()
		call := rec.now()
		r := linDo(ctx, client, base, in)
		ret := rec.now()
		if r.refused() {
			// Nothing was sent: nothing happened.
			time.Sleep(50 * time.Millisecond)
			continue
		}
		out := linOutcome(rec, in, r)
		rec.record(visual, in, call, out, ret)
		switch {
		case out.Result == resUnknown:
			// The operation stays open: go on as another client.
			visual = linClients + int(rec.clientID.Add(1))
			delete(lastRV, key)
			time.Sleep(linUnknownWait)
		case out.Result == resOK && in.Op != opDelete:
			lastRV[key] = out.RV
		case out.Result == resNotFound || in.Op == opDelete:
			delete(lastRV, key)
		}
		time.Sleep(time.Duration(rng.IntN(5)) * time.Millisecond)
	}
}

func linDo(ctx context.Context, client *http.Client, base string, in kvInput) reply {
	switch in.Op {
	case opGet:
		return send(ctx, client, http.MethodGet, configMapURL(base, in.Key), nil)
	case opCreate:
		return send(ctx, client, http.MethodPost, configMapsURL(base), newConfigMap(in.Key, map[string]string{"v": in.Value}))
	case opUpdate:
		cm := newConfigMap(in.Key, map[string]string{"v": in.Value})
		cm.ResourceVersion = strconv.FormatInt(in.RV, 10)
		return send(ctx, client, http.MethodPut, configMapURL(base, in.Key), cm)
	default:
		return send(ctx, client, http.MethodDelete, configMapURL(base, in.Key), nil)
	}
}

// linOutcome maps an answer to the operation's outcome. Answers that are
// not a possible outcome of the operation (a 500, a 400...) are kept as
// bad, and their outcome is unknown.
func linOutcome(rec *linRecorder, in kvInput, r reply) kvOutput {
	if r.err != nil || r.code == http.StatusBadGateway || r.code == http.StatusServiceUnavailable || r.code == http.StatusGatewayTimeout {
		return kvOutput{Result: resUnknown}
	}
	bad := func() kvOutput {
		rec.mu.Lock()
		rec.bad = append(rec.bad, fmt.Sprintf("%s %s: %v", in.Op, in.Key, r))
		rec.mu.Unlock()
		return kvOutput{Result: resUnknown}
	}
	okCode := map[string]int{opGet: http.StatusOK, opCreate: http.StatusCreated, opUpdate: http.StatusOK, opDelete: http.StatusOK}[in.Op]
	switch {
	case r.code == okCode && in.Op == opDelete:
		return kvOutput{Result: resOK}
	case r.code == okCode:
		cm, err := r.configMap()
		if err != nil {
			return bad()
		}
		rv, err := rvOf(cm)
		if err != nil {
			return bad()
		}
		if in.Op != opGet && cm.Data["v"] != in.Value {
			return bad()
		}
		return kvOutput{Result: resOK, Value: cm.Data["v"], RV: rv}
	case r.code == http.StatusNotFound && r.reason() == metav1.StatusReasonNotFound && in.Op != opCreate:
		return kvOutput{Result: resNotFound}
	case r.code == http.StatusConflict && r.reason() == metav1.StatusReasonAlreadyExists && in.Op == opCreate:
		return kvOutput{Result: resExists}
	case r.code == http.StatusConflict && r.reason() == metav1.StatusReasonConflict && in.Op == opUpdate:
		return kvOutput{Result: resConflict}
	}
	return bad()
}

// TestLinearizableCheckerCatchesViolations checks the model on small
// hand-made histories: it must accept what etcd may do and reject a stale
// read, a lost update, a resourceVersion that goes back, and a changed
// resourceVersion without a write.
func TestLinearizableCheckerCatchesViolations(t *testing.T) {
	type step struct {
		client    int
		in        kvInput
		out       kvOutput
		call, ret int64
	}
	const inf = 1000
	create := func(v string) kvInput { return kvInput{Op: opCreate, Key: "k", Value: v} }
	update := func(v string, rv int64) kvInput { return kvInput{Op: opUpdate, Key: "k", Value: v, RV: rv} }
	get := kvInput{Op: opGet, Key: "k"}
	del := kvInput{Op: opDelete, Key: "k"}
	ok := func(v string, rv int64) kvOutput { return kvOutput{Result: resOK, Value: v, RV: rv} }
	is := func(result string) kvOutput { return kvOutput{Result: result} }
	for _, tc := range []struct {
		name    string
		history []step
		want    porcupine.CheckResult
	}{
		{"sequential", []step{
			{0, create("v1"), ok("v1", 5), 0, 1},
			{0, create("v9"), is(resExists), 2, 3},
			{0, get, ok("v1", 5), 4, 5},
			{0, update("v2", 5), ok("v2", 7), 6, 7},
			{0, update("v3", 5), is(resConflict), 8, 9},
			{0, del, ok("", 0), 10, 11},
			{0, update("v4", 7), is(resNotFound), 12, 13},
			{0, get, is(resNotFound), 14, 15},
			{0, create("v5"), ok("v5", 9), 16, 17},
		}, porcupine.Ok},
		{"concurrent updates, one wins", []step{
			{0, create("v1"), ok("v1", 5), 0, 1},
			{1, update("v2", 5), ok("v2", 7), 2, 6},
			{2, update("v3", 5), is(resConflict), 3, 5},
			{0, get, ok("v2", 7), 7, 8},
		}, porcupine.Ok},
		{"stale read", []step{
			{0, create("v1"), ok("v1", 5), 0, 1},
			{0, update("v2", 5), ok("v2", 7), 2, 3},
			{1, get, ok("v1", 5), 4, 5},
		}, porcupine.Illegal},
		{"lost update", []step{
			{0, create("v1"), ok("v1", 5), 0, 1},
			{1, update("v2", 5), ok("v2", 7), 2, 5},
			{2, update("v3", 5), ok("v3", 8), 3, 6},
		}, porcupine.Illegal},
		{"resourceVersion goes back", []step{
			{0, create("v1"), ok("v1", 5), 0, 1},
			{0, del, ok("", 0), 2, 3},
			{0, create("v2"), ok("v2", 4), 4, 5},
		}, porcupine.Illegal},
		{"unknown create seen later", []step{
			{0, create("v1"), is(resUnknown), 0, inf},
			{1, get, is(resNotFound), 1, 2},
			{1, get, ok("v1", 9), 3, 4},
			{1, update("v2", 9), ok("v2", 11), 5, 6},
		}, porcupine.Ok},
		{"unknown update never seen", []step{
			{0, create("v1"), ok("v1", 5), 0, 1},
			{0, update("v2", 5), is(resUnknown), 2, inf},
			{1, get, ok("v1", 5), 3, 4},
		}, porcupine.Ok},
		{"resourceVersion changes without a write", []step{
			{0, create("v1"), is(resUnknown), 0, inf},
			{1, get, ok("v1", 9), 3, 4},
			{1, get, ok("v1", 10), 5, 6},
		}, porcupine.Illegal},
		{"unknown delete, then a conflict from the deleted version", []step{
			{0, create("v1"), ok("v1", 5), 0, 1},
			{0, del, is(resUnknown), 2, inf},
			{1, update("v2", 5), is(resNotFound), 3, 4},
			{1, get, ok("v1", 5), 5, 6},
		}, porcupine.Illegal},
	} {
		var ops []porcupine.Operation
		for _, s := range tc.history {
			ops = append(ops, porcupine.Operation{ClientId: s.client, Input: s.in, Output: s.out, Call: s.call, Return: s.ret})
		}
		if got := porcupine.CheckOperationsTimeout(kvModel, ops, 10*time.Second); got != tc.want {
			t.Errorf("%s: %s; want %s", tc.name, got, tc.want)
		}
	}
}

// TestLinearizableUnderFaults records a history of concurrent creates,
// reads, conditional updates and deletes of three ConfigMaps, through
// HAProxy and directly to the replicas, while a replica is SIGKILLed and
// started again, then etcd's leader is stopped and started again, then
// etcd's history is compacted; and checks with porcupine that the history
// is linearizable.
func TestLinearizableUnderFaults(t *testing.T) {
	etcd := startEtcdCluster(t)
	replicas := startFaultReplicas(t, etcd, 3)
	lb := startHAProxy(t, replicas)
	client := newFaultClient(t)

	rec := &linRecorder{start: time.Now(), counts: map[string]int{}}
	stop := make(chan struct{})
	var stopOnce sync.Once
	stopClients := func() { stopOnce.Do(func() { close(stop) }) }
	var wg sync.WaitGroup
	defer wg.Wait()
	defer stopClients()
	var direct atomic.Int64
	for c := range linClients {
		target := func() string { return lb.url }
		if c == linClients-1 {
			// One client goes to each replica in turn, past the balancer.
			target = func() string { return replicas[int(direct.Add(1))%len(replicas)].url }
		}
		wg.Go(func() { linClient(t.Context(), rec, client, c, target, stop) })
	}

	phase := func(what string) {
		t.Logf("%6.2fs: %s", time.Since(rec.start).Seconds(), what)
	}
	time.Sleep(2 * time.Second)
	phase("(a) SIGKILL " + replicas[0].name)
	replicas[0].kill(t)
	time.Sleep(500 * time.Millisecond)
	replicas[0].restart(t)
	phase("(a) " + replicas[0].name + " ready again")
	time.Sleep(2 * time.Second)

	leader := etcd.leader(t)
	phase("(b) stop etcd leader " + etcd.members[leader].name)
	etcd.stop(t, leader)
	time.Sleep(1500 * time.Millisecond)
	etcd.restart(t, leader)
	phase("(b) " + etcd.members[leader].name + " healthy again")
	time.Sleep(2 * time.Second)

	rev := etcd.compact(t)
	phase(fmt.Sprintf("(c) compacted etcd at revision %d", rev))
	time.Sleep(2 * time.Second)
	stopClients()
	wg.Wait()
	phase("clients stopped")

	history := rec.history()
	t.Logf("%d operations in the history, %d with an unknown outcome; outcomes: %v", len(history), len(rec.pending), rec.counts)
	for _, b := range rec.bad {
		t.Errorf("answer that no operation should get: %s", b)
	}
	for _, op := range []string{opCreate, opGet, opUpdate, opDelete} {
		if rec.counts[op+" "+resOK] == 0 {
			t.Errorf("no %s succeeded; outcomes: %v", op, rec.counts)
		}
	}

	start := time.Now()
	result, info := porcupine.CheckOperationsVerbose(kvModel, history, linCheckTime)
	t.Logf("porcupine: %s in %s", result, time.Since(start).Round(time.Millisecond))
	if result != porcupine.Ok {
		// Kept after the test (t.TempDir would delete it), for a browser.
		dir, err := os.MkdirTemp("", "concord-linearizability-")
		if err != nil {
			t.Fatalf("porcupine: %s; and no directory for the visualization: %v", result, err)
		}
		path := filepath.Join(dir, "history.html")
		if err := porcupine.VisualizePath(kvModel, info, path); err != nil {
			t.Fatalf("porcupine: %s; visualization: %v", result, err)
		}
		t.Fatalf("porcupine: the history is %s (want %s); open %s", result, porcupine.Ok, path)
	}
}

// --- 3. An informer through the load balancer survives replica kills ---------

const (
	informerKeys      = 8
	informerSyncWait  = 30 * time.Second
	informerEqualWait = 30 * time.Second
)

// TestInformerThroughTheLoadBalancerSurvivesReplicaKill runs a client-go
// shared informer, with its defaults, through HAProxy, while a writer
// creates, updates and deletes ConfigMaps and each replica in turn is
// SIGKILLed and started again (so the one the informer's watch is on is
// killed at least once). In the end the informer's cache must hold exactly
// what a fresh list says etcd holds.
func TestInformerThroughTheLoadBalancerSurvivesReplicaKill(t *testing.T) {
	etcd := startEtcdCluster(t)
	replicas := startFaultReplicas(t, etcd, 3)
	lb := startHAProxy(t, replicas)
	client := newFaultClient(t)

	var watchesMu sync.Mutex
	var watches []time.Time // when the informer opened each watch
	clientset, err := kubernetes.NewForConfig(&rest.Config{Host: lb.url, WrapTransport: func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(req *http.Request) (*http.Response, error) {
			if req.URL.Query().Get("watch") == "true" || req.URL.Query().Get("watch") == "1" {
				watchesMu.Lock()
				watches = append(watches, time.Now())
				watchesMu.Unlock()
			}
			return rt.RoundTrip(req)
		})
	}})
	if err != nil {
		t.Fatalf("clientset: %v", err)
	}
	factory := informers.NewSharedInformerFactory(clientset, 0)
	cmInformer := factory.Core().V1().ConfigMaps()
	informer, lister := cmInformer.Informer(), cmInformer.Lister()
	stopInformer := make(chan struct{})
	defer factory.Shutdown()
	defer close(stopInformer)
	factory.Start(stopInformer)
	syncCtx, cancelSync := context.WithTimeout(t.Context(), informerSyncWait)
	synced := cache.WaitForCacheSync(syncCtx.Done(), informer.HasSynced)
	cancelSync()
	if !synced {
		t.Fatalf("informer not synced within %s", informerSyncWait)
	}

	// The writer: on a random key, create it if absent, else update it
	// (conditionally) or delete it. Outcomes do not matter here: the
	// comparison is with what etcd holds in the end.
	stopWriter := make(chan struct{})
	var writerDone sync.WaitGroup
	var writes atomic.Int64
	writerDone.Go(func() {
		for i := 0; i < 20000; i++ {
			select {
			case <-stopWriter:
				return
			default:
			}
			name := fmt.Sprintf("inf-%d", rand.IntN(informerKeys))
			got := send(t.Context(), client, http.MethodGet, configMapURL(lb.url, name), nil)
			var w reply
			switch {
			case got.err != nil || got.code >= 500:
				time.Sleep(50 * time.Millisecond)
				continue
			case got.code == http.StatusNotFound:
				w = send(t.Context(), client, http.MethodPost, configMapsURL(lb.url), newConfigMap(name, map[string]string{"n": strconv.Itoa(i)}))
			default:
				cm, err := got.configMap()
				if err != nil {
					continue
				}
				if rand.IntN(4) == 0 {
					w = send(t.Context(), client, http.MethodDelete, configMapURL(lb.url, name), nil)
				} else {
					cm.Data = map[string]string{"n": strconv.Itoa(i)}
					w = send(t.Context(), client, http.MethodPut, configMapURL(lb.url, name), cm)
				}
			}
			if w.err == nil && w.code < 300 {
				writes.Add(1)
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
	defer writerDone.Wait()
	var stopWriterOnce sync.Once
	defer stopWriterOnce.Do(func() { close(stopWriter) })

	var firstKill time.Time
	for _, r := range replicas {
		time.Sleep(1500 * time.Millisecond)
		before := writes.Load()
		if firstKill.IsZero() {
			firstKill = time.Now()
		}
		r.kill(t)
		time.Sleep(300 * time.Millisecond)
		r.restart(t)
		lb.waitServer(t, r.name, "UP")
		t.Logf("%s killed and started again; %d writes meanwhile", r.name, writes.Load()-before)
	}
	time.Sleep(1500 * time.Millisecond)
	stopWriterOnce.Do(func() { close(stopWriter) })
	writerDone.Wait()
	t.Logf("%d successful writes in all", writes.Load())

	// What etcd holds: a fresh list through the load balancer.
	var want map[string]cmState
	waitFor(t, "a list through the load balancer", 10*time.Second, func() string {
		got := send(t.Context(), client, http.MethodGet, lb.url+"/api/v1/configmaps", nil)
		if got.err != nil || got.code != http.StatusOK {
			return got.String()
		}
		var list corev1.ConfigMapList
		if err := json.Unmarshal(got.body, &list); err != nil {
			return err.Error()
		}
		want = map[string]cmState{}
		for _, cm := range list.Items {
			want[cm.Namespace+"/"+cm.Name] = cmState{RV: cm.ResourceVersion, Data: cm.Data}
		}
		return ""
	})
	if len(want) == 0 {
		t.Fatalf("the fresh list is empty: the writer wrote nothing that stayed")
	}
	var diff string
	took := waitFor(t, "the informer's cache equal to the fresh list", informerEqualWait, func() string {
		objs, err := lister.List(labels.Everything())
		if err != nil {
			return err.Error()
		}
		got := map[string]cmState{}
		for _, cm := range objs {
			got[cm.Namespace+"/"+cm.Name] = cmState{RV: cm.ResourceVersion, Data: cm.Data}
		}
		diff = cmp.Diff(want, got)
		if diff != "" {
			return "(-list +informer):\n" + diff
		}
		return ""
	})
	watchesMu.Lock()
	defer watchesMu.Unlock()
	rewatches := 0
	for _, w := range watches {
		if w.After(firstKill) {
			rewatches++
		}
	}
	t.Logf("informer equal to the list (%d ConfigMaps) %s after the writes stopped; %d watches opened, %d after the first kill",
		len(want), took.Round(time.Millisecond), len(watches), rewatches)
	if rewatches == 0 {
		t.Errorf("the informer opened no watch after the first kill: its watch was never cut (watches at %v)", watches)
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// --- 4. Quorum loss and recovery ---------------------------------------------

const (
	quorumNotReadyWithin = 5 * time.Second
	// quorumAnswerWithin: --etcd-request-timeout (2s) + 2s.
	quorumAnswerWithin = 4 * time.Second
	quorumReadyWithin  = 15 * time.Second
)

// TestQuorumLossAndRecovery stops two of the three etcd members. Every
// replica must then report not ready (the etcd check failing) and answer
// reads and writes with a 503 or 504 Status with Retry-After (a write of
// unknown outcome: 504 without one) within the
// etcd request timeout and a bit; /livez stays ok. Once the members are
// back, every replica must become ready and serve again, without being
// restarted.
func TestQuorumLossAndRecovery(t *testing.T) {
	etcd := startEtcdCluster(t)
	replicas := startFaultReplicas(t, etcd, 3)
	client := newFaultClient(t)
	ctx := t.Context()

	doConfigMap(t, http.MethodPost, configMapsURL(replicas[0].url), newConfigMap("quorum", map[string]string{"v": "before"}), http.StatusCreated)
	pids := map[string]int{}
	for _, r := range replicas {
		pids[r.name] = r.p.cmd.Process.Pid
	}

	leader := etcd.leader(t)
	stopped := []int{leader, (leader + 1) % 3}
	for _, i := range stopped {
		etcd.stop(t, i)
	}
	lost := time.Now()
	t.Logf("stopped %s (the leader) and %s", etcd.members[stopped[0]].name, etcd.members[stopped[1]].name)

	// Each replica's /readyz, polled from the quorum loss on: when it first
	// answered something else than 200.
	notReady := make([]time.Duration, len(replicas))
	var probes sync.WaitGroup
	for i, r := range replicas {
		probes.Go(func() {
			for time.Since(lost) < quorumNotReadyWithin+5*time.Second {
				if code, _ := probe(ctx, r.url+"/readyz"); code != 0 && code != http.StatusOK {
					notReady[i] = time.Since(lost)
					return
				}
				time.Sleep(healthPoll)
			}
		})
	}
	probes.Wait()
	for i, r := range replicas {
		if notReady[i] == 0 || notReady[i] > quorumNotReadyWithin {
			t.Errorf("%s: /readyz answered not ok %s after the quorum loss (0: never); want within %s", r.name, notReady[i].Round(time.Millisecond), quorumNotReadyWithin)
		}
		code, body := probe(ctx, r.url+"/readyz?verbose")
		if code == http.StatusOK || !strings.Contains(body, "[-]etcd failed") {
			t.Errorf("%s: GET /readyz?verbose after quorum loss: %d %q; want not 200, with [-]etcd failed", r.name, code, body)
		}
		if code, body := probe(ctx, r.url+"/livez"); code != http.StatusOK {
			t.Errorf("%s: GET /livez after quorum loss: %d %q; want 200 (alive, only etcd is gone)", r.name, code, body)
		}
	}
	t.Logf("/readyz not ok after the quorum loss: %v", notReady)

	// A read and a write on every replica, all at once.
	var answers sync.WaitGroup
	var answersMu sync.Mutex
	for _, r := range replicas {
		for _, req := range []struct {
			method, url string
			body        any
		}{
			{http.MethodGet, configMapURL(r.url, "quorum"), nil},
			{http.MethodPost, configMapsURL(r.url), newConfigMap("during-"+r.name, map[string]string{"v": "x"})},
		} {
			answers.Go(func() {
				start := time.Now()
				got := send(ctx, client, req.method, req.url, req.body)
				took := time.Since(start)
				answersMu.Lock()
				defer answersMu.Unlock()
				switch {
				case got.err != nil:
					t.Errorf("%s: %s %s without quorum: %v", r.name, req.method, req.url, got.err)
				case got.code != http.StatusServiceUnavailable && got.code != http.StatusGatewayTimeout:
					t.Errorf("%s: %s %s without quorum: %v; want 503 or 504", r.name, req.method, req.url, got)
				case strings.Contains(string(got.body), "the outcome of the write is unknown"):
					// A write proposed before the member noticed the lost
					// quorum may yet be applied: its outcome is unknown,
					// and a Retry-After would make client-go re-send it.
					// (One whose read timed out first sent nothing: it has
					// a Retry-After, below.)
					if req.method == http.MethodGet || got.code != http.StatusGatewayTimeout || got.header.Get("Retry-After") != "" {
						t.Errorf("%s: %s %s without quorum: %v; want the unknown outcome's 504 without Retry-After, for a write", r.name, req.method, req.url, got)
					}
				case got.header.Get("Retry-After") == "":
					t.Errorf("%s: %s %s without quorum: %v with no Retry-After header", r.name, req.method, req.url, got)
				default:
					var st metav1.Status
					if err := json.Unmarshal(got.body, &st); err != nil || st.Kind != "Status" || int(st.Code) != got.code {
						t.Errorf("%s: %s %s without quorum: body %s; want a Status with code %d", r.name, req.method, req.url, got.body, got.code)
					}
				}
				if took > quorumAnswerWithin {
					t.Errorf("%s: %s %s without quorum answered after %s; want within %s", r.name, req.method, req.url, took.Round(time.Millisecond), quorumAnswerWithin)
				}
				t.Logf("%s: %s without quorum: %d in %s", r.name, req.method, got.code, took.Round(time.Millisecond))
			})
		}
	}
	answers.Wait()

	for _, i := range stopped {
		etcd.start(t, i)
	}
	back := time.Now()
	for _, r := range replicas {
		waitFor(t, r.name+" /readyz ok after the quorum is back", quorumReadyWithin-time.Since(back), wantOK(ctx, r.url+"/readyz"))
	}
	t.Logf("every replica ready %s after the members were started again", time.Since(back).Round(time.Millisecond))

	for _, r := range replicas {
		cm := doConfigMap(t, http.MethodGet, configMapURL(r.url, "quorum"), nil, http.StatusOK)
		cm.Data["v"] = "after-" + r.name
		doConfigMap(t, http.MethodPut, configMapURL(r.url, "quorum"), cm, http.StatusOK)
		doConfigMap(t, http.MethodPost, configMapsURL(r.url), newConfigMap("after-"+r.name, map[string]string{"v": "y"}), http.StatusCreated)
		if !r.p.running() || r.p.cmd.Process.Pid != pids[r.name] {
			t.Errorf("%s was restarted or exited (pid %d, was %d)", r.name, r.p.cmd.Process.Pid, pids[r.name])
		}
	}
	final := doConfigMap(t, http.MethodGet, configMapURL(replicas[0].url, "quorum"), nil, http.StatusOK)
	if want := "after-" + replicas[len(replicas)-1].name; final.Data["v"] != want {
		t.Errorf("final data.v = %q; want %q", final.Data["v"], want)
	}
}

// --- 5. Rolling restart under load -------------------------------------------

const (
	rollingClients       = 4
	rollingUpdatesPerCM  = 3
	rollingMaxAttempts   = 50 // per request
	rollingRetryInterval = 100 * time.Millisecond
)

// rollingClient creates ConfigMaps and updates each a few times, through
// the load balancer, retrying what may be retried.
type rollingClient struct {
	id     int
	client *http.Client
	base   string

	acked   map[string]string // name: data.v of its last acknowledged write
	retried int               // requests sent again
	failed  []string          // requests that failed and were not retried
}

// retryable: a request that got this may be sent again.
func retryable(r reply) bool {
	return r.err != nil || r.fromLB() || (r.code == http.StatusServiceUnavailable && r.header.Get("Retry-After") != "")
}

// create creates name with data.v = v; a retry that finds it created with
// v counts as done.
func (c *rollingClient) create(ctx context.Context, name, v string) bool {
	for attempt := 0; attempt < rollingMaxAttempts; attempt++ {
		r := send(ctx, c.client, http.MethodPost, configMapsURL(c.base), newConfigMap(name, map[string]string{"v": v}))
		switch {
		case r.err == nil && r.code == http.StatusCreated:
			c.acked[name] = v
			return true
		case attempt > 0 && r.err == nil && r.code == http.StatusConflict && r.reason() == metav1.StatusReasonAlreadyExists:
			// An earlier attempt made it, or someone else did.
			cm, ok := c.read(ctx, name)
			if ok && cm.Data["v"] == v {
				c.acked[name] = v
				return true
			}
			c.failed = append(c.failed, fmt.Sprintf("create %s: retried into AlreadyExists, but it holds %v", name, cm))
			return false
		case retryable(r):
			c.retried++
			time.Sleep(rollingRetryInterval)
		default:
			c.failed = append(c.failed, fmt.Sprintf("create %s: %v", name, r))
			return false
		}
	}
	c.failed = append(c.failed, fmt.Sprintf("create %s: no success in %d attempts", name, rollingMaxAttempts))
	return false
}

// read GETs name, retrying what may be retried.
func (c *rollingClient) read(ctx context.Context, name string) (*corev1.ConfigMap, bool) {
	for attempt := 0; attempt < rollingMaxAttempts; attempt++ {
		r := send(ctx, c.client, http.MethodGet, configMapURL(c.base, name), nil)
		switch {
		case r.err == nil && r.code == http.StatusOK:
			cm, err := r.configMap()
			if err != nil {
				c.failed = append(c.failed, fmt.Sprintf("get %s: %v", name, err))
				return nil, false
			}
			return cm, true
		case retryable(r):
			c.retried++
			time.Sleep(rollingRetryInterval)
		default:
			c.failed = append(c.failed, fmt.Sprintf("get %s: %v", name, r))
			return nil, false
		}
	}
	c.failed = append(c.failed, fmt.Sprintf("get %s: no success in %d attempts", name, rollingMaxAttempts))
	return nil, false
}

// update sets data.v = v, reading the ConfigMap again before every
// attempt; one that finds v written counts as done.
func (c *rollingClient) update(ctx context.Context, name, v string) bool {
	for attempt := 0; attempt < rollingMaxAttempts; attempt++ {
		cm, ok := c.read(ctx, name)
		if !ok {
			return false
		}
		if cm.Data["v"] == v {
			c.acked[name] = v // the previous attempt made it
			return true
		}
		cm.Data = map[string]string{"v": v}
		r := send(ctx, c.client, http.MethodPut, configMapURL(c.base, name), cm)
		switch {
		case r.err == nil && r.code == http.StatusOK:
			c.acked[name] = v
			return true
		case retryable(r):
			c.retried++
			time.Sleep(rollingRetryInterval)
		default:
			c.failed = append(c.failed, fmt.Sprintf("update %s to %s: %v", name, v, r))
			return false
		}
	}
	c.failed = append(c.failed, fmt.Sprintf("update %s: no success in %d attempts", name, rollingMaxAttempts))
	return false
}

// TestRollingRestartUnderLoad restarts the replicas one at a time with
// SIGTERM, each on its port again, while clients create and update
// ConfigMaps through HAProxy. No request may fail other than in a way the
// client retries (a connection error, a 503 with Retry-After, HAProxy's
// 502 or 503), every replica must exit 0, and every acknowledged write
// must be in etcd in the end.
func TestRollingRestartUnderLoad(t *testing.T) {
	etcd := startEtcdCluster(t)
	replicas := startFaultReplicas(t, etcd, 3)
	lb := startHAProxy(t, replicas)
	httpc := newFaultClient(t)

	stop := make(chan struct{})
	var stopOnce sync.Once
	stopClients := func() { stopOnce.Do(func() { close(stop) }) }
	clients := make([]*rollingClient, rollingClients)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer stopClients()
	for i := range clients {
		c := &rollingClient{id: i, client: httpc, base: lb.url, acked: map[string]string{}}
		clients[i] = c
		wg.Go(func() {
			ctx := context.WithoutCancel(t.Context())
			for j := 0; j < 1000; j++ {
				select {
				case <-stop:
					return
				default:
				}
				name := fmt.Sprintf("roll-%d-%d", c.id, j)
				if !c.create(ctx, name, "0") {
					continue
				}
				for k := 1; k <= rollingUpdatesPerCM; k++ {
					if !c.update(ctx, name, strconv.Itoa(k)) {
						break
					}
				}
			}
		})
	}

	start := time.Now()
	time.Sleep(time.Second)
	for _, r := range replicas {
		t0 := time.Now()
		if code := r.terminate(t); code != 0 {
			t.Errorf("%s: exit code after SIGTERM = %d; want 0", r.name, code)
		}
		if !contains(r.p.logMessages(), "stopped") {
			t.Errorf("%s: log messages after SIGTERM = %q; want one to be \"stopped\"", r.name, r.p.logMessages())
		}
		stoppedIn := time.Since(t0)
		r.restart(t)
		lb.waitServer(t, r.name, "UP")
		t.Logf("%6.2fs: %s stopped in %s, back in the balancer %s after SIGTERM", time.Since(start).Seconds(), r.name,
			stoppedIn.Round(time.Millisecond), time.Since(t0).Round(time.Millisecond))
		time.Sleep(500 * time.Millisecond)
	}
	time.Sleep(time.Second)
	stopClients()
	wg.Wait()

	// What etcd holds, through a replica directly.
	got := doConfigMapList(t, configMapsURL(replicas[0].url))
	stored := map[string]string{}
	for _, cm := range got.Items {
		if strings.HasPrefix(cm.Name, "roll-") {
			stored[cm.Name] = cm.Data["v"]
		}
	}
	acked, retried := map[string]string{}, 0
	for _, c := range clients {
		maps.Copy(acked, c.acked)
		retried += c.retried
		for _, f := range c.failed {
			t.Errorf("client %d: a request failed and was not retried: %s", c.id, f)
		}
	}
	var missing []string
	for name, v := range acked {
		if s, ok := stored[name]; !ok || s != v {
			missing = append(missing, fmt.Sprintf("%s: acknowledged v=%s, stored %q (present: %t)", name, v, s, ok))
		}
	}
	sort.Strings(missing)
	for _, m := range missing {
		t.Errorf("acknowledged write not in etcd: %s", m)
	}
	if len(acked) < rollingClients {
		t.Errorf("only %d ConfigMaps written in all; the load did not run", len(acked))
	}
	t.Logf("%d ConfigMaps acknowledged (%d stored), %d requests retried", len(acked), len(stored), retried)
}

func doConfigMapList(t *testing.T, url string) *corev1.ConfigMapList {
	t.Helper()
	code, body := do(t, http.MethodGet, url, nil)
	if code != http.StatusOK {
		t.Fatalf("GET %s: %d %s", url, code, body)
	}
	var list corev1.ConfigMapList
	if err := json.Unmarshal(body, &list); err != nil {
		t.Fatalf("GET %s: decode: %v", url, err)
	}
	return &list
}
