package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/concord-dev/concord/etcdstore/etcdtest"
)

// TestGarbageCollectorFailover: three replicas, short Leases. An owner
// with many dependents is deleted (Background); the replica holding the
// collector's Lease is SIGKILLed while the cascade runs; another takes the
// Lease over within the lease duration and finishes it. An unrelated
// ConfigMap and a dependent re-owned by a live owner before the delete
// survive.
func TestGarbageCollectorFailover(t *testing.T) {
	t.Parallel()
	const (
		dependents    = 1000
		leaseDuration = 3 * time.Second
	)
	etcd := etcdtest.Start(t)
	procs := startElectingReplicas(t, etcd.Endpoint, leaseDuration)
	clientOf := func(p *proc) *kubernetes.Clientset { return replicaClient(t, p) }
	client := clientOf(procs[0])
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	cms := client.CoreV1().ConfigMaps("default")
	create := func(name string, labels map[string]string, owners ...*corev1.ConfigMap) *corev1.ConfigMap {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
		for _, o := range owners {
			cm.OwnerReferences = append(cm.OwnerReferences, metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: o.Name, UID: o.UID})
		}
		out, err := cms.Create(ctx, cm, metav1.CreateOptions{})
		if err != nil {
			t.Errorf("create %s: %v", name, err)
			return nil
		}
		return out
	}
	owner := create("owner", nil)
	alive := create("alive", nil)
	create("unrelated", nil)
	readopted := create("readopted", nil, owner)
	if t.Failed() {
		t.FailNow()
	}
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < dependents; i += 8 {
				create(fmt.Sprintf("dep%04d", i), map[string]string{"gc-e2e": "dep"}, owner)
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	readopted.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: alive.Name, UID: alive.UID}}
	if _, err := cms.Update(ctx, readopted, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("re-own readopted: %v", err)
	}

	lease := func() string { return collectorLeaseHolder(ctx, client) }
	holderOf := func(identity string) *proc { return procOf(procs, identity) }
	first, holder := waitForCollectorLeader(t, lease, holderOf)
	// From now on, talk to a replica that survives.
	for _, p := range procs {
		if p != holder {
			client = clientOf(p)
			cms = client.CoreV1().ConfigMaps("default")
			break
		}
	}
	remaining := func() int {
		list, err := cms.List(ctx, metav1.ListOptions{LabelSelector: "gc-e2e=dep"})
		if err != nil {
			return -1
		}
		return len(list.Items)
	}

	background := metav1.DeletePropagationBackground
	if err := cms.Delete(ctx, "owner", metav1.DeleteOptions{PropagationPolicy: &background}); err != nil {
		t.Fatalf("delete owner: %v", err)
	}
	// Kill the holder once the cascade has started, before it ends.
	var atKill int
	waitFor(t, "the cascade to start", 30*time.Second, func() string {
		if atKill = remaining(); atKill < dependents {
			return ""
		}
		return fmt.Sprintf("%d dependents left", atKill)
	})
	holder.kill(t)
	killed := time.Now()
	left := remaining()
	t.Logf("killed %s (%s) with %d of %d dependents left", holder.name, first, left, dependents)
	if left == 0 {
		t.Log("the cascade had ended before the kill landed; the takeover is still checked")
	}

	var next string
	waitFor(t, "another replica taking the collector's Lease", leaseDuration+10*time.Second, func() string {
		if next = lease(); next == "" || next == first || holderOf(next) == nil {
			return "holder " + next
		}
		return ""
	})
	t.Logf("%s took over %v after the kill", holderOf(next).name, time.Since(killed).Round(time.Millisecond))
	waitFor(t, "the cascade to complete", 60*time.Second, func() string {
		if n := remaining(); n != 0 {
			return fmt.Sprintf("%d dependents left", n)
		}
		return ""
	})
	for _, name := range []string{"unrelated", "readopted", "alive"} {
		if _, err := cms.Get(ctx, name, metav1.GetOptions{}); err != nil {
			t.Errorf("%s: %v; want it kept", name, err)
		}
	}
	if _, err := cms.Get(ctx, "owner", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("owner: %v; want NotFound", err)
	}
}

// collectorLeaseHolder is the identity holding the garbage collector's
// Lease ("" when none does or the Lease cannot be read).
func collectorLeaseHolder(ctx context.Context, client kubernetes.Interface) string {
	l, err := client.CoordinationV1().Leases("kube-system").Get(ctx, "concord-garbage-collector", metav1.GetOptions{})
	if err != nil || l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// procOf is the running replica whose log names identity, or nil.
func procOf(procs []*proc, identity string) *proc {
	for _, p := range procs {
		if p.running() && identity != "" && strings.Contains(p.log(), identity) {
			return p
		}
	}
	return nil
}

// waitForCollectorLeader waits until a running replica holds the
// collector's Lease, and returns its identity and that replica.
func waitForCollectorLeader(t *testing.T, lease func() string, holderOf func(string) *proc) (string, *proc) {
	t.Helper()
	var holder *proc
	waitFor(t, "a replica holding the collector's Lease", 30*time.Second, func() string {
		if holder = holderOf(lease()); holder == nil {
			return "no holder yet"
		}
		return ""
	})
	return lease(), holder
}

// startElectingReplicas starts three replicas on one etcd whose
// controllers' Leases last leaseDuration, so that a takeover after a kill
// comes within seconds.
func startElectingReplicas(t *testing.T, etcdEndpoint string, leaseDuration time.Duration) []*proc {
	t.Helper()
	var procs []*proc
	for i := range 3 {
		procs = append(procs, startConcord(t, fmt.Sprintf("replica %c", 'A'+i), t.TempDir(), "--etcd-servers", etcdEndpoint,
			"--leader-elect-lease-duration", leaseDuration.String(), "--leader-elect-renew-deadline", "2s", "--leader-elect-retry-period", "500ms"))
	}
	return procs
}

// replicaClient is a client-go clientset of replica p, unthrottled.
func replicaClient(t *testing.T, p *proc) *kubernetes.Clientset {
	t.Helper()
	client, err := kubernetes.NewForConfig(&rest.Config{Host: p.url, Timeout: requestTimeout, QPS: -1})
	if err != nil {
		t.Fatal(err)
	}
	return client
}
