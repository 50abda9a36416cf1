package e2e

// A frozen etcd member (SIGSTOP: its sockets stay open and it answers
// nothing, as a partitioned member does) must be routed around: the
// replicas' endpoint monitor takes it out of their etcd clients within a
// second or two, /readyz answers from that monitor at once, and HAProxy
// keeps its servers. The harness is the fault tests' (cluster_test.go).

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

const (
	// frozenFor is how long each member stays frozen, under load.
	frozenFor = 15 * time.Second
	// frozenSettle: from this long after a leader's freeze on, every
	// request must succeed (an election takes about 1s; a write in flight
	// on the frozen leader waits out --etcd-request-timeout). A follower's
	// freeze fails no request at all: a request it does not answer is
	// sent again to another member after 500ms (etcdstore/hedge.go).
	frozenSettle = 3 * time.Second
	// frozenPutWithin: every write, even one sent to the frozen member, is
	// answered within the replicas' --etcd-request-timeout (2s) and a
	// margin.
	frozenPutWithin = 3 * time.Second
	// frozenGetWithin: a read is served from the replica's read cache,
	// which waits up to 3s (registry's cacheWaitTimeout) for a cache whose
	// etcd watch is on the frozen member before it reads etcd, after a
	// revision read that may itself have waited out the etcd request
	// timeout (2s) on the frozen member.
	frozenGetWithin = 6 * time.Second
	// frozenReadyzWithin: /readyz answers from the monitor's last result,
	// well under HAProxy's check timeout (deploy/local: timeout check
	// 500ms), frozen member or not.
	frozenReadyzWithin = 100 * time.Millisecond
	// frozenClientTimeout cuts off a request that hangs, well after the
	// bounds above, so that its time is measured.
	frozenClientTimeout = 10 * time.Second
	// frozenMaxOps bounds each writer and prober per phase.
	frozenMaxOps = 3000
	// frozenPause is the pause between a writer's rounds and between
	// probes.
	frozenPause = 50 * time.Millisecond
	// frozenTakenOutWithin: every replica's monitor takes the frozen
	// member out within this (a probe every 500ms, answered within 1s).
	frozenTakenOutWithin = 2 * time.Second
	// frozenRecoverWithin: after the thaw, every replica uses the member
	// again (its monitor says it is healthy) within this.
	frozenRecoverWithin = 10 * time.Second
)

// frozenOp is one request of a phase and its answer.
type frozenOp struct {
	who   string // a replica's name, or "lb"
	what  string // get, put, readyz
	start time.Duration
	took  time.Duration
	r     reply
}

// lbSample is what HAProxy's stats said at one moment of a phase.
type lbSample struct {
	at     time.Duration
	states map[string]string
}

// TestFrozenEtcdMemberIsRoutedAround freezes a follower, then the leader,
// each for frozenFor, while a writer per replica (and one through
// HAProxy) reads its own ConfigMap and replaces it with the
// resourceVersion read, and /readyz of every replica is probed. Every
// write must be answered within frozenPutWithin, every read within
// frozenGetWithin and every /readyz within frozenReadyzWithin; every
// read, write and /readyz must be 200 (with the leader frozen: from
// frozenSettle after the freeze on); HAProxy must never have all its
// servers down. Every replica must take the member out within
// frozenTakenOutWithin, say so in concord_etcd_endpoint_healthy while it
// is frozen, and use it again after the thaw.
func TestFrozenEtcdMemberIsRoutedAround(t *testing.T) {
	etcd := startEtcdCluster(t)
	replicas := startFaultReplicas(t, etcd, 3)
	lb := startHAProxy(t, replicas)

	targets := map[string]string{"lb": lb.url}
	for _, r := range replicas {
		targets[r.name] = r.url
	}
	for who, base := range targets {
		doConfigMap(t, http.MethodPost, configMapsURL(base), newConfigMap("frozen-"+who, map[string]string{"v": "0"}), http.StatusCreated)
	}

	leader := etcd.leader(t)
	follower := (leader + 1) % len(etcd.members)
	t.Run("follower", func(t *testing.T) { frozenPhase(t, etcd, replicas, lb, targets, follower, 0) })
	t.Run("leader", func(t *testing.T) { frozenPhase(t, etcd, replicas, lb, targets, etcd.leader(t), frozenSettle) })
}

// frozenPhase freezes member i under load for frozenFor, checks what the
// clients saw (every request 200 from settle after the freeze on), thaws
// it and waits until every replica uses it again.
func frozenPhase(t *testing.T, etcd *etcdCluster, replicas []*faultReplica, lb *haproxy, targets map[string]string, i int, settle time.Duration) {
	member := etcd.members[i]
	ctx, cancel := context.WithTimeout(t.Context(), frozenFor+frozenClientTimeout)
	defer cancel()
	tr := &http.Transport{MaxIdleConnsPerHost: 4}
	defer tr.CloseIdleConnections()
	client := &http.Client{Timeout: frozenClientTimeout, Transport: tr}

	var (
		mu      sync.Mutex
		ops     []frozenOp
		samples []lbSample
		wg      sync.WaitGroup
	)
	etcd.freeze(t, i)
	frozen := time.Now()
	t.Logf("froze %s (%s)", member.name, member.clientURL)
	record := func(who, what string, start time.Time, r reply) {
		mu.Lock()
		defer mu.Unlock()
		ops = append(ops, frozenOp{who: who, what: what, start: start.Sub(frozen), took: time.Since(start), r: r})
	}
	running := func(n int) bool { return n < frozenMaxOps && time.Since(frozen) < frozenFor && ctx.Err() == nil }

	for who, base := range targets {
		url := configMapURL(base, "frozen-"+who)
		wg.Go(func() {
			for n := 0; running(n); n++ {
				start := time.Now()
				got := send(ctx, client, http.MethodGet, url, nil)
				record(who, "get", start, got)
				if got.err == nil && got.code == http.StatusOK {
					cm, err := got.configMap()
					if err != nil {
						record(who, "get", start, reply{err: err})
					} else {
						cm.Data = map[string]string{"v": fmt.Sprint(n)}
						start = time.Now()
						record(who, "put", start, send(ctx, client, http.MethodPut, url, cm))
					}
				}
				time.Sleep(frozenPause)
			}
		})
	}
	for _, r := range replicas {
		wg.Go(func() {
			for n := 0; running(n); n++ {
				start := time.Now()
				code, body := probe(ctx, r.url+"/readyz")
				record(r.name, "readyz", start, reply{code: code, body: []byte(body)})
				time.Sleep(frozenPause)
			}
		})
	}
	wg.Go(func() {
		for n := 0; running(n); n++ {
			states, err := lb.serverStates(ctx)
			if err == nil {
				mu.Lock()
				samples = append(samples, lbSample{at: time.Since(frozen), states: states})
				mu.Unlock()
			}
			time.Sleep(frozenPause)
		}
	})
	wg.Wait()

	// While the member is still frozen, every replica's monitor says so,
	// and took it out within frozenTakenOutWithin.
	for _, r := range replicas {
		after, ok := takenOut(r, member.clientURL, frozen)
		switch {
		case !ok:
			t.Errorf("%s: no log line says %s was taken out", r.name, member.name)
		case after > frozenTakenOutWithin:
			t.Errorf("%s took %s out %s after the freeze; want within %s", r.name, member.name, after.Round(time.Millisecond), frozenTakenOutWithin)
		default:
			t.Logf("%s took %s out %s after the freeze", r.name, member.name, after.Round(time.Millisecond))
		}
		healthy := endpointHealth(t, r)
		for _, ep := range etcd.endpoints {
			if want := ep != member.clientURL; healthy[ep] != want {
				t.Errorf("%s after %s frozen: concord_etcd_endpoint_healthy{endpoint=%q} = %v; want %v (all: %v)", r.name, member.name, ep, healthy[ep], want, healthy)
			}
		}
	}
	checkFrozenOps(t, ops, settle)
	checkLBSamples(t, samples)

	etcd.thaw(t, i)
	thawed := time.Now()
	etcd.waitHealthy(t, i)
	for _, r := range replicas {
		waitFor(t, r.name+" uses "+member.name+" again", frozenRecoverWithin, func() string {
			healthy := endpointHealth(t, r)
			for _, ep := range etcd.endpoints {
				if !healthy[ep] {
					return fmt.Sprintf("concord_etcd_endpoint_healthy: %v", healthy)
				}
			}
			return ""
		})
		r.waitReady(t)
	}
	t.Logf("%s thawed; every replica uses it again after %s", member.name, time.Since(thawed).Round(time.Millisecond))
}

// checkFrozenOps asserts the bounds of the test's doc on every request,
// and a 200 on every one sent from settle after the freeze on, and logs
// what the clients saw.
func checkFrozenOps(t *testing.T, ops []frozenOp, settle time.Duration) {
	t.Helper()
	sort.Slice(ops, func(a, b int) bool { return ops[a].start < ops[b].start })
	type key struct {
		what    string
		settled bool
		code    string
	}
	answerWithin := map[string]time.Duration{"get": frozenGetWithin, "put": frozenPutWithin, "readyz": frozenReadyzWithin}
	counts := map[key]int{}
	maxTook := map[string]time.Duration{}
	var failures, unusual []string
	fail := func(op frozenOp, format string, args ...any) {
		failures = append(failures, fmt.Sprintf("%s %s sent %s after the freeze: %s (%s)", op.who, op.what,
			op.start.Round(time.Millisecond), fmt.Sprintf(format, args...), op.r))
	}
	for _, op := range ops {
		settled := op.start >= settle
		code := fmt.Sprint(op.r.code)
		if op.r.err != nil {
			code = "error"
		}
		counts[key{op.what, settled, code}]++
		if settled {
			maxTook[op.what+" settled"] = max(maxTook[op.what+" settled"], op.took)
		}
		maxTook[op.what] = max(maxTook[op.what], op.took)
		if within := answerWithin[op.what]; op.took > within {
			fail(op, "answered after %s; want within %s", op.took.Round(time.Millisecond), within)
		}
		if op.r.err != nil || op.r.code != http.StatusOK || op.took > time.Second {
			unusual = append(unusual, fmt.Sprintf("%s %s at %s: %s in %s", op.who, op.what,
				op.start.Round(time.Millisecond), code, op.took.Round(time.Millisecond)))
		}
		if !settled {
			continue
		}
		if op.r.err != nil || op.r.code != http.StatusOK {
			fail(op, "not 200 although %s had passed", settle)
		}
	}
	var summary []string
	for k, n := range counts {
		when := "before"
		if k.settled {
			when = "after"
		}
		summary = append(summary, fmt.Sprintf("%s %s settling: %s ×%d", k.what, when, k.code, n))
	}
	slices.Sort(summary)
	t.Logf("%d requests:\n  %s\nslowest: %v\nnot 200 or slower than 1s:\n  %s",
		len(ops), strings.Join(summary, "\n  "), maxTook, strings.Join(unusual, "\n  "))
	for n, f := range failures {
		if n == 20 {
			t.Errorf("... and %d more", len(failures)-n)
			break
		}
		t.Error(f)
	}
}

// checkLBSamples asserts that HAProxy always had a server up, and logs
// when a server was not up.
func checkLBSamples(t *testing.T, samples []lbSample) {
	t.Helper()
	if len(samples) == 0 {
		t.Errorf("no HAProxy stats were read")
		return
	}
	var notUp []string
	for _, s := range samples {
		up := 0
		for name, state := range s.states {
			if strings.HasPrefix(state, "UP") {
				up++
			} else {
				notUp = append(notUp, fmt.Sprintf("%s %s at %s", name, state, s.at.Round(time.Millisecond)))
			}
		}
		if up == 0 {
			t.Errorf("HAProxy had no server up %s after the freeze: %v", s.at.Round(time.Millisecond), s.states)
		}
	}
	t.Logf("%d HAProxy samples; servers not up: %v", len(samples), notUp)
}

// endpointHealth scrapes the replica's concord_etcd_endpoint_healthy
// gauges: endpoint → healthy.
func endpointHealth(t *testing.T, r *faultReplica) map[string]bool {
	t.Helper()
	code, body := probe(t.Context(), r.url+"/metrics")
	if code != http.StatusOK {
		t.Fatalf("%s: GET /metrics: %d %s", r.name, code, body)
	}
	healthy := map[string]bool{}
	for line := range strings.SplitSeq(body, "\n") {
		rest, ok := strings.CutPrefix(line, `concord_etcd_endpoint_healthy{endpoint="`)
		if !ok {
			continue
		}
		ep, value, ok := strings.Cut(rest, `"} `)
		if ok {
			healthy[ep] = value == "1"
		}
	}
	return healthy
}

// takenOut finds the replica's log line saying that its monitor took
// endpoint out, logged after since, and returns how long after since.
func takenOut(r *faultReplica, endpoint string, since time.Time) (time.Duration, bool) {
	for line := range strings.SplitSeq(r.p.log(), "\n") {
		var l struct {
			Time     time.Time `json:"time"`
			Msg      string    `json:"msg"`
			Endpoint string    `json:"endpoint"`
		}
		if json.Unmarshal([]byte(line), &l) != nil || l.Endpoint != endpoint || !strings.HasPrefix(l.Msg, "etcd member did not answer") || l.Time.Before(since) {
			continue
		}
		return l.Time.Sub(since), true
	}
	return 0, false
}
