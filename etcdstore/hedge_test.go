package etcdstore_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/concord-dev/concord/etcdstore"
	"github.com/concord-dev/concord/etcdstore/etcdtest"
)

// threeMembers is one etcd reached through three proxies, as three
// members of the same data, with a monitor and a store using it.
type threeMembers struct {
	etcd    *etcdtest.Etcd
	proxies [3]*etcdtest.Proxy
	client  *clientv3.Client // the store's
	monitor *etcdstore.Monitor
	store   *etcdstore.Store
}

func startThreeMembers(t *testing.T, requestTimeout time.Duration) *threeMembers {
	return startThreeMembersProbed(t, requestTimeout, 0)
}

// startThreeMembersProbed is startThreeMembers with the monitor's probe
// timeout (0: the default).
func startThreeMembersProbed(t *testing.T, requestTimeout, probeTimeout time.Duration) *threeMembers {
	t.Helper()
	e := etcdtest.Start(t)
	m := &threeMembers{etcd: e}
	cfg := clientv3.Config{DialTimeout: 5 * time.Second, Logger: zap.NewNop()}
	for i := range m.proxies {
		m.proxies[i] = etcdtest.StartProxy(t, e.Endpoint)
		cfg.Endpoints = append(cfg.Endpoints, m.proxies[i].URL)
	}
	client, err := clientv3.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	// Every connection of the client up before anything is frozen (it
	// sends only on ready ones), so that a store sending its requests on
	// it would meet the frozen one.
	for i := 0; m.proxies[0].Chunks.Load() < 8 || m.proxies[1].Chunks.Load() < 8 || m.proxies[2].Chunks.Load() < 8; i++ {
		if i == 200 {
			t.Fatal("the client does not use all three proxies")
		}
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		_, err := client.Get(ctx, "/warm-up")
		cancel()
		if err != nil {
			t.Fatalf("etcd through the proxies: %v", err)
		}
	}
	if m.monitor, err = etcdstore.StartMonitor(client, etcdstore.MonitorConfig{Client: cfg, Prefix: "/registry", ProbeTimeout: probeTimeout}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.monitor.Close)
	m.client = client
	m.store = etcdstore.NewWithOptions(client, "/registry", etcdstore.Options{RequestTimeout: requestTimeout, Monitor: m.monitor})
	return m
}

func allHealthy(m *etcdstore.Monitor) bool {
	for _, st := range m.Endpoints() {
		if !st.Healthy {
			return false
		}
	}
	return true
}

// TestRequestsPassAFrozenMember: with one of three members frozen (its
// connections open, nothing answered) and not yet taken out by the
// monitor, a get, list, count, update and delete sent three times in a row
// — so that one goes to the frozen member first — each answer within about
// the hedge delay (500ms), correctly; the old store waited for the whole
// etcd request timeout (10s here). A create is sent once, never again
// (hedge.go), so it answers in time only once a request found the member
// silent: the create case reads three times first, as traffic does, and
// waits until the monitor took the member out.
func TestRequestsPassAFrozenMember(t *testing.T) {
	const requestTimeout = 10 * time.Second
	ns := func(name string) etcdstore.Ref {
		return etcdstore.Ref{Resource: "configmaps", Namespace: "default", Name: name}
	}
	type members struct {
		*threeMembers
		revs map[string]int64
	}
	for _, tc := range []struct {
		op string
		do func(ctx context.Context, m members, n int) error
	}{
		{"get", func(ctx context.Context, m members, _ int) error {
			o, err := m.store.Get(ctx, ns("read"), 0)
			if err == nil && (string(o.Value) != "read" || o.Revision != m.revs["read"]) {
				err = fmt.Errorf("got %q at %d; want %q at %d", o.Value, o.Revision, "read", m.revs["read"])
			}
			return err
		}},
		{"list", func(ctx context.Context, m members, _ int) error {
			l, err := m.store.List(ctx, "configmaps", "default", etcdstore.ListOptions{})
			if err == nil && len(l.Objects) != 7 {
				err = fmt.Errorf("listed %d objects; want 7", len(l.Objects))
			}
			return err
		}},
		{"count", func(ctx context.Context, m members, _ int) error {
			n, err := m.store.Count(ctx, "configmaps")
			if err == nil && n != 7 {
				err = fmt.Errorf("counted %d; want 7", n)
			}
			return err
		}},
		{"update", func(ctx context.Context, m members, n int) error {
			name := fmt.Sprintf("update-%d", n)
			rev, err := m.store.Update(ctx, ns(name), []byte("updated"), m.revs[name])
			if err != nil {
				return err
			}
			return stored(ctx, m.etcd, "/registry/configmaps/default/"+name, "updated", rev)
		}},
		{"delete", func(ctx context.Context, m members, n int) error {
			name := fmt.Sprintf("delete-%d", n)
			if _, err := m.store.Delete(ctx, ns(name), m.revs[name]); err != nil {
				return err
			}
			return stored(ctx, m.etcd, "/registry/configmaps/default/"+name, "", 0)
		}},
		{"create", func(ctx context.Context, m members, n int) error {
			for i := 0; n == 0 && i < 3; i++ {
				if _, err := m.store.Get(ctx, ns("read"), 0); err != nil {
					return fmt.Errorf("the reads before the creates: %w", err)
				}
			}
			// The copy a read left on the frozen member ends, and takes it
			// out, just after the read's answer.
			for deadline := time.Now().Add(5 * time.Second); n == 0 && allHealthy(m.monitor); time.Sleep(5 * time.Millisecond) {
				if time.Now().After(deadline) {
					return fmt.Errorf("the reads before the creates did not find the frozen member: %+v", m.monitor.Endpoints())
				}
			}
			name := fmt.Sprintf("create-%d", n)
			rev, err := m.store.Create(ctx, ns(name), []byte(name))
			if err != nil {
				return err
			}
			return stored(ctx, m.etcd, "/registry/configmaps/default/"+name, name, rev)
		}},
	} {
		t.Run(tc.op, func(t *testing.T) {
			m := members{startThreeMembers(t, requestTimeout), map[string]int64{}}
			ctx := testContext(t)
			for _, name := range []string{"read", "update-0", "update-1", "update-2", "delete-0", "delete-1", "delete-2"} {
				rev, err := m.store.Create(ctx, ns(name), []byte(name))
				if err != nil {
					t.Fatalf("create %s: %v", name, err)
				}
				m.revs[name] = rev
			}
			m.proxies[0].Freeze()
			var slowest time.Duration
			for n := range 3 {
				start := time.Now()
				err := tc.do(ctx, m, n)
				took := time.Since(start)
				slowest = max(slowest, took)
				if err != nil {
					t.Errorf("%s #%d with a member frozen (%s): %v", tc.op, n, took.Round(time.Millisecond), err)
				}
			}
			t.Logf("slowest %s with a member frozen: %s", tc.op, slowest.Round(time.Millisecond))
			if slowest >= requestTimeout/4 {
				t.Errorf("slowest %s with a member frozen took %s; want about the %s hedge delay, well under the %s etcd request timeout", tc.op, slowest.Round(time.Millisecond), etcdstore.DefaultHedgeDelay, requestTimeout)
			}
		})
	}
}

// stored checks key's value and ModRevision in etcd; value "" means gone.
func stored(ctx context.Context, e *etcdtest.Etcd, key, value string, rev int64) error {
	resp, err := e.Client.Get(ctx, key)
	switch {
	case err != nil:
		return err
	case value == "" && len(resp.Kvs) != 0:
		return fmt.Errorf("%s still stored: %q", key, resp.Kvs[0].Value)
	case value == "":
		return nil
	case len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != value || resp.Kvs[0].ModRevision != rev:
		return fmt.Errorf("%s stored as %v; want %q at %d", key, resp.Kvs, value, rev)
	}
	return nil
}

// TestUpdateSentAgainAppliesOnce: an update whose first copy waits on a
// frozen member is sent again and applies; after the thaw the first copy
// reaches etcd too, and its compare fails: a watch from before sees each
// update once, and nothing more.
func TestUpdateSentAgainAppliesOnce(t *testing.T) {
	m := startThreeMembers(t, 10*time.Second)
	ctx := testContext(t)
	ref := etcdstore.Ref{Resource: "configmaps", Namespace: "default", Name: "once"}
	key := "/registry/configmaps/default/once"
	rev, err := m.store.Create(ctx, ref, []byte("v0"))
	if err != nil {
		t.Fatal(err)
	}
	// The key and, after it, a marker that ends the events to look at.
	watch := m.etcd.Client.Watch(ctx, key, clientv3.WithPrefix(), clientv3.WithRev(rev+1))
	m.proxies[0].Freeze()
	// Updates in a row go round the three members: within three, one goes
	// to the frozen one first and is sent again.
	var want []string
	resent := false
	for n := 1; n <= 3 && !resent; n++ {
		start := time.Now()
		value := fmt.Sprintf("v%d", n)
		next, err := m.store.Update(ctx, ref, []byte(value), rev)
		if err != nil {
			t.Fatalf("update %d with a member frozen: %v", n, err)
		}
		resent, rev = time.Since(start) >= etcdstore.DefaultHedgeDelay, next
		want = append(want, fmt.Sprintf("PUT %s at %d", value, rev))
	}
	if !resent {
		t.Fatal("no update went to the frozen member first")
	}
	m.proxies[0].Thaw()
	// A probe answered on the thawed member's connection, after what the
	// proxy held there: the first copy.
	deadline := time.Now().Add(15 * time.Second)
	for !allHealthy(m.monitor) {
		if time.Now().After(deadline) {
			t.Fatalf("the thawed member does not answer: %+v", m.monitor.Endpoints())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := m.etcd.Client.Put(ctx, key+"~marker", ""); err != nil {
		t.Fatal(err)
	}
	var got []string
	for done := false; !done; {
		resp, ok := <-watch
		if !ok || resp.Err() != nil {
			t.Fatalf("watch ended: %v", resp.Err())
		}
		for _, ev := range resp.Events {
			if string(ev.Kv.Key) != key {
				done = true
				break
			}
			got = append(got, fmt.Sprintf("%s %s at %d", ev.Type, ev.Kv.Value, ev.Kv.ModRevision))
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("events of the key: %q; want each update once: %q", got, want)
	}
	if err := stored(ctx, m.etcd, key, fmt.Sprintf("v%d", len(want)), rev); err != nil {
		t.Error(err)
	}
}

// TestUpdateConflictSentAgainIsUnknown: an update of a stale revision
// whose first copy waits on a frozen member is sent again, and that copy's
// compare fails. That proves nothing while the first copy may still apply
// (it could be why the compare failed), so the answer is an unknown
// outcome, never a conflict; the updates that went to a live member first
// answer the conflict.
func TestUpdateConflictSentAgainIsUnknown(t *testing.T) {
	const requestTimeout = 3 * time.Second
	m := startThreeMembers(t, requestTimeout)
	ctx := testContext(t)
	ref := etcdstore.Ref{Resource: "configmaps", Namespace: "default", Name: "stale"}
	stale, err := m.store.Create(ctx, ref, []byte("v0"))
	if err != nil {
		t.Fatal(err)
	}
	rev, err := m.store.Update(ctx, ref, []byte("v1"), stale)
	if err != nil {
		t.Fatal(err)
	}
	m.proxies[0].Freeze()
	unknown := 0
	for n := 1; n <= 3 && unknown == 0; n++ {
		_, err := m.store.Update(ctx, ref, []byte("stale"), stale)
		switch {
		case errors.Is(err, etcdstore.ErrUnknownOutcome) && !errors.Is(err, etcdstore.ErrConflict):
			unknown++
		case !errors.Is(err, etcdstore.ErrConflict) || errors.Is(err, etcdstore.ErrUnknownOutcome):
			t.Errorf("stale update %d = %v; want ErrConflict, or ErrUnknownOutcome alone when sent to the frozen member first", n, err)
		}
	}
	if unknown != 1 {
		t.Errorf("no stale update went to the frozen member first")
	}
	if err := stored(ctx, m.etcd, "/registry/configmaps/default/stale", "v1", rev); err != nil {
		t.Error(err)
	}
}

// TestOvertakenMemberIsTakenOut: a member whose request was answered by
// another member after it had waited past the hedge delay is taken out of
// the client's endpoints at once, without waiting for a probe to fail
// (the probes wait 30s here).
func TestOvertakenMemberIsTakenOut(t *testing.T) {
	m := startThreeMembersProbed(t, 10*time.Second, 30*time.Second)
	ctx := testContext(t)
	m.proxies[0].Freeze()
	resent := false
	for n := 0; n < 3 && !resent; n++ {
		start := time.Now()
		if _, err := m.store.Count(ctx, "configmaps"); err != nil {
			t.Fatalf("count %d with a member frozen: %v", n, err)
		}
		resent = time.Since(start) >= etcdstore.DefaultHedgeDelay
	}
	if !resent {
		t.Fatal("no count went to the frozen member first")
	}
	// The copy on the frozen member ends (cancelled) just after the
	// answer: poll for the monitor's verdict.
	want := []string{m.proxies[1].URL, m.proxies[2].URL}
	deadline := time.Now().Add(5 * time.Second)
	for !slices.Equal(m.client.Endpoints(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("client endpoints %v; want %v once a request was answered elsewhere (monitor: %+v)", m.client.Endpoints(), want, m.monitor.Endpoints())
		}
		time.Sleep(10 * time.Millisecond)
	}
	st := m.monitor.Endpoints()[0]
	if st.Healthy || st.Err == nil || !strings.Contains(st.Err.Error(), "another member answered it") {
		t.Errorf("monitor on the frozen member: healthy %v, error %v; want taken out for a request another member answered", st.Healthy, st.Err)
	}
}
