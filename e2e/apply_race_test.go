package e2e

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// Bounds of the apply races: rounds per case, appliers per round, and the
// time for one round (all its applies, then its events).
const (
	applyRaceRounds   = 3
	applyRaceManagers = 8
	applyRaceRound    = 20 * time.Second
)

// applyResult is what one racing applier got back.
type applyResult struct {
	manager string
	value   string
	cm      *corev1.ConfigMap
	err     error
}

// raceApplies runs applyRaceManagers applies of ConfigMap name at once
// (released together), manager i applying data(i) as "m<i>" without force
// through clients[i % len(clients)], and returns every result.
func raceApplies(ctx context.Context, clients []kubernetes.Interface, name string, data func(i int) map[string]string) []applyResult {
	results := make([]applyResult, applyRaceManagers)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range applyRaceManagers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			manager := fmt.Sprintf("m%d", i)
			d := data(i)
			<-start
			cm, err := clients[i%len(clients)].CoreV1().ConfigMaps("default").Apply(ctx, corev1ac.ConfigMap(name, "default").WithData(d), metav1.ApplyOptions{FieldManager: manager})
			results[i] = applyResult{manager: manager, value: d["key"], cm: cm, err: err}
		}()
	}
	close(start)
	wg.Wait()
	return results
}

// watchWrites watches ConfigMap name from resourceVersion rv and returns
// the first n events, or fewer after wait; it then waits briefly for more,
// so that a surplus write shows up.
func watchWrites(t *testing.T, ctx context.Context, client kubernetes.Interface, name, rv string) func(n int, wait time.Duration) []watch.Event {
	t.Helper()
	w, err := client.CoreV1().ConfigMaps("default").Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name, ResourceVersion: rv})
	if err != nil {
		t.Fatalf("watch configmap %s from %s: %v", name, rv, err)
	}
	return func(n int, wait time.Duration) []watch.Event {
		defer w.Stop()
		var events []watch.Event
		deadline := time.After(wait)
		var extra <-chan time.Time
		for {
			if len(events) == n && extra == nil {
				extra = time.After(300 * time.Millisecond)
			}
			select {
			case ev, ok := <-w.ResultChan():
				if !ok {
					t.Errorf("watch of %s ended after %d events", name, len(events))
					return events
				}
				if ev.Type == watch.Bookmark {
					continue
				}
				events = append(events, ev)
			case <-extra:
				return events
			case <-deadline:
				return events
			}
		}
	}
}

// currentRV is the resourceVersion of a list of ConfigMaps: where the
// watch of a round starts.
func currentRV(t *testing.T, ctx context.Context, client kubernetes.Interface) string {
	t.Helper()
	list, err := client.CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return list.ResourceVersion
}

// eventRVs are the resourceVersions of the events' objects, and checks
// that the first is ADDED and the rest MODIFIED.
func eventRVs(t *testing.T, what string, events []watch.Event) []string {
	t.Helper()
	var rvs []string
	for i, ev := range events {
		cm, ok := ev.Object.(*corev1.ConfigMap)
		if !ok {
			t.Errorf("%s: event %d is %s %T; want a ConfigMap", what, i, ev.Type, ev.Object)
			continue
		}
		want := watch.Modified
		if i == 0 {
			want = watch.Added
		}
		if ev.Type != want {
			t.Errorf("%s: event %d is %s; want %s", what, i, ev.Type, want)
		}
		rvs = append(rvs, cm.ResourceVersion)
	}
	return rvs
}

func newApplyRaceClient(t *testing.T, url string) kubernetes.Interface {
	t.Helper()
	client, err := kubernetes.NewForConfig(&rest.Config{Host: url, QPS: -1, Timeout: requestTimeout}) // no client-side rate limit
	if err != nil {
		t.Fatal(err)
	}
	return client
}

// TestApplyRaceDisjointKeys: 8 managers apply their own data key of one
// ConfigMap at once (the first of them creates it). Kube retries a write
// that lost the race internally, so every apply succeeds: the object holds
// the 8 keys and 8 Apply entries, each owning its key; the watch sees
// exactly 8 writes, one per apply, each adding one key to the previous
// (none lost or overwritten).
func TestApplyRaceDisjointKeys(t *testing.T) {
	t.Parallel()
	srv := startConcord(t, "concord", t.TempDir())
	raceDisjointRounds(t, []kubernetes.Interface{newApplyRaceClient(t, srv.url)}, applyRaceRounds)
}

// raceDisjointRounds is TestApplyRaceDisjointKeys's rounds, through
// clients (the watch and reads through the first).
func raceDisjointRounds(t *testing.T, clients []kubernetes.Interface, rounds int) {
	t.Helper()
	client := clients[0]
	for round := range rounds {
		name := fmt.Sprintf("disjoint-%d", round)
		ctx, cancel := context.WithTimeout(t.Context(), applyRaceRound)
		events := watchWrites(t, ctx, client, name, currentRV(t, ctx, client))
		results := raceApplies(ctx, clients, name, func(i int) map[string]string { return map[string]string{fmt.Sprintf("k%d", i): fmt.Sprintf("v%d", i)} })
		var rvs []string
		for _, r := range results {
			if r.err != nil {
				t.Errorf("round %d: apply by %s: %v; want success (disjoint fields never conflict)", round, r.manager, r.err)
				continue
			}
			rvs = append(rvs, r.cm.ResourceVersion)
		}
		got, err := client.CoreV1().ConfigMaps("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			cancel()
			t.Fatalf("round %d: get: %v", round, err)
		}
		want := map[string]string{}
		for i := range applyRaceManagers {
			want[fmt.Sprintf("k%d", i)] = fmt.Sprintf("v%d", i)
			wantApplyEntry(t, fmt.Sprintf("round %d", round), got.ManagedFields, fmt.Sprintf("m%d", i), fmt.Sprintf("k%d", i))
		}
		if !maps.Equal(got.Data, want) {
			t.Errorf("round %d: data %v; want %v", round, got.Data, want)
		}
		if n := len(applyManagers(got.ManagedFields)); n != applyRaceManagers {
			t.Errorf("round %d: %d Apply entries; want %d: %s", round, n, applyRaceManagers, describeManaged(got.ManagedFields))
		}

		evs := events(applyRaceManagers, applyRaceRound/2)
		what := fmt.Sprintf("round %d: watch", round)
		evRVs := eventRVs(t, what, evs)
		for i, ev := range evs {
			if cm, ok := ev.Object.(*corev1.ConfigMap); ok && len(cm.Data) != i+1 {
				t.Errorf("%s: event %d holds %d keys (%v); want %d (each write adds one key)", what, i, len(cm.Data), cm.Data, i+1)
			}
		}
		sort.Strings(rvs)
		sort.Strings(evRVs)
		if !slices.Equal(evRVs, rvs) {
			t.Errorf("%s: events at resourceVersions %q; want exactly the %d applies' %q", what, evRVs, len(rvs), rvs)
		}
		cancel()
	}
}

// TestApplyRaceSameKey: 8 managers apply the same data key of a ConfigMap
// that does not exist yet at once, without force. Apply serializes them:
// the first written owns the key; an applier of another value then gets a
// 409 whose causes name the key and only managers that hold it, and one
// applying the owner's value becomes a co-owner and succeeds. So with 8
// different values exactly one succeeds; with two values (4 managers
// each) exactly the 4 of one value succeed and the other 4 fail. Nothing
// is overwritten: the object holds the winning value, Apply entries of
// the winners only, and the watch sees one write per success.
func TestApplyRaceSameKey(t *testing.T) {
	t.Parallel()
	srv := startConcord(t, "concord", t.TempDir())
	raceSameKeyCases(t, []kubernetes.Interface{newApplyRaceClient(t, srv.url)}, applyRaceRounds)
}

// TestApplyRaceAcrossReplicas: the races of TestApplyRaceDisjointKeys and
// TestApplyRaceSameKey (one round each) with the managers split between
// two replicas over one etcd: the same guarantees hold.
func TestApplyRaceAcrossReplicas(t *testing.T) {
	t.Parallel()
	replicas := startReplicas(t, 2)
	clients := []kubernetes.Interface{newApplyRaceClient(t, replicas[0].url), newApplyRaceClient(t, replicas[1].url)}
	t.Run("disjoint", func(t *testing.T) { raceDisjointRounds(t, clients, 1) })
	raceSameKeyCases(t, clients, 1)
}

// raceSameKeyCases runs rounds of TestApplyRaceSameKey's two cases through
// clients.
func raceSameKeyCases(t *testing.T, clients []kubernetes.Interface, rounds int) {
	t.Helper()
	cases := []struct {
		name  string
		value func(i int) string
	}{
		{"distinct", func(i int) string { return fmt.Sprintf("v%d", i) }},
		{"two-values", func(i int) string { return []string{"even", "odd"}[i%2] }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for round := range rounds {
				raceSameKeyRound(t, clients, fmt.Sprintf("same-%s-%d", tc.name, round), tc.value)
			}
		})
	}
}

func raceSameKeyRound(t *testing.T, clients []kubernetes.Interface, name string, value func(i int) string) {
	t.Helper()
	client := clients[0]
	ctx, cancel := context.WithTimeout(t.Context(), applyRaceRound)
	defer cancel()
	events := watchWrites(t, ctx, client, name, currentRV(t, ctx, client))
	results := raceApplies(ctx, clients, name, func(i int) map[string]string { return map[string]string{"key": value(i)} })

	winners := map[string]bool{} // managers that succeeded
	winning := ""                // their value
	var rvs []string
	for _, r := range results {
		if r.err != nil {
			continue
		}
		winners[r.manager] = true
		if winning != "" && r.value != winning {
			t.Errorf("%s: %s applied key=%s and succeeded, as did a manager applying key=%s; want only one value to succeed", name, r.manager, r.value, winning)
		}
		winning = r.value
		if r.cm.Data["key"] != r.value {
			t.Errorf("%s: %s's apply of key=%s answered data %v", name, r.manager, r.value, r.cm.Data)
		}
		rvs = append(rvs, r.cm.ResourceVersion)
	}
	if len(winners) == 0 {
		for _, r := range results {
			t.Errorf("%s: apply by %s of key=%s: %v", name, r.manager, r.value, r.err)
		}
		t.Fatalf("%s: no apply succeeded; want the first one written to", name)
	}
	var wantWinners []string
	for i := range applyRaceManagers {
		if value(i) == winning {
			wantWinners = append(wantWinners, fmt.Sprintf("m%d", i))
		}
	}
	gotWinners := slices.Sorted(maps.Keys(winners))
	if !slices.Equal(gotWinners, wantWinners) {
		t.Errorf("%s: %q succeeded; want exactly the managers that applied %s: %q", name, gotWinners, winning, wantWinners)
	}
	for _, r := range results {
		if r.err == nil {
			continue
		}
		what := fmt.Sprintf("%s: apply by %s of key=%s", name, r.manager, r.value)
		if r.value == winning {
			t.Errorf("%s: %v; want success (the owner's value makes it a co-owner)", what, r.err)
			continue
		}
		causes := conflictCauses(t, what, r.err)
		for _, c := range causes {
			owner, ok := strings.CutPrefix(c.Message, "conflict with ")
			if c.Field != ".data.key" || !ok || !winners[strings.Trim(owner, `"`)] {
				t.Errorf("%s: cause %+v; want field .data.key and a manager that applied %s (%q)", what, c, winning, gotWinners)
			}
		}
	}

	got, err := client.CoreV1().ConfigMaps("default").Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("%s: get: %v", name, err)
	}
	if !maps.Equal(got.Data, map[string]string{"key": winning}) {
		t.Errorf("%s: data %v; want map[key:%s] (the winners' value)", name, got.Data, winning)
	}
	if m := applyManagers(got.ManagedFields); !slices.Equal(m, gotWinners) {
		t.Errorf("%s: Apply entries of %q; want the winners' %q: %s", name, m, gotWinners, describeManaged(got.ManagedFields))
	}
	for _, m := range gotWinners {
		wantApplyEntry(t, name, got.ManagedFields, m, "key")
	}
	// Only the creator's apply changed the object; kube gives the
	// co-owners' entries no time.
	timed := 0
	for _, e := range got.ManagedFields {
		if e.Time != nil {
			timed++
		}
	}
	if timed != 1 {
		t.Errorf("%s: %d managedFields entries with a time; want 1 (the creator's): %s", name, timed, describeManaged(got.ManagedFields))
	}

	// One write per success: the create and each co-owner's entry.
	evRVs := eventRVs(t, name+": watch", events(len(rvs), applyRaceRound/2))
	sort.Strings(rvs)
	sort.Strings(evRVs)
	if !slices.Equal(evRVs, rvs) {
		t.Errorf("%s: events at resourceVersions %q; want exactly the %d successes' %q", name, evRVs, len(rvs), rvs)
	}
}
