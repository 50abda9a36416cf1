package e2e

import (
	"context"
	"fmt"
	"maps"
	"path"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/concord-dev/concord/etcdstore/etcdtest"
)

// TestGarbageCollectionPoliciesAcrossFailover: three replicas, short
// Leases. 200 owner ConfigMaps per policy (Orphan, Background, Foreground),
// each with a ConfigMap and a Secret dependent created right before the
// owner is deleted, every request through a replica other than the
// collector's; the collector's Lease holder is SIGKILLed once mid-run.
// Then, exactly: every Orphan dependent exists without a reference to its
// owner (none was ever deleted), every Background and Foreground dependent
// and every owner is gone, and no Foreground owner was deleted before
// either of its dependents (their deletions' revisions, from a watch of
// etcd itself: every resource shares them).
func TestGarbageCollectionPoliciesAcrossFailover(t *testing.T) {
	t.Parallel()
	const (
		owners = 200
		// Few enough that the owners are still being created and deleted
		// when another replica takes the collector over.
		workers       = 4
		leaseDuration = 3 * time.Second
	)
	policies := []metav1.DeletionPropagation{metav1.DeletePropagationOrphan, metav1.DeletePropagationBackground, metav1.DeletePropagationForeground}
	etcd := etcdtest.Start(t)
	procs := startElectingReplicas(t, etcd.Endpoint, leaseDuration)
	clientOf := func(p *proc) *kubernetes.Clientset { return replicaClient(t, p) }
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()

	leaseClient := clientOf(procs[0])
	lease := func() string { return collectorLeaseHolder(ctx, leaseClient) }
	holderOf := func(identity string) *proc { return procOf(procs, identity) }
	first, holder := waitForCollectorLeader(t, lease, holderOf)
	// Every request goes through the other two: the collector's graph is
	// fed by its watches only, as for writes through other replicas.
	var clients []*kubernetes.Clientset
	for _, p := range procs {
		if p != holder {
			clients = append(clients, clientOf(p))
		}
	}
	leaseClient = clients[0]

	// Every deletion of a test object, by name, at its etcd revision.
	deletedAt := watchDeletions(ctx, t, etcd.Client)

	name := func(kind string, policy metav1.DeletionPropagation, i int) string {
		return fmt.Sprintf("gck-%s-%s-%03d", kind, strings.ToLower(string(policy)), i)
	}
	labels := func(role string, policy metav1.DeletionPropagation) map[string]string {
		return map[string]string{"gck-role": role, "gck-policy": strings.ToLower(string(policy))}
	}
	uids := sync.Map{} // owner name → uid
	run := func(client *kubernetes.Clientset, policy metav1.DeletionPropagation, i int) error {
		cms, secrets := client.CoreV1().ConfigMaps("default"), client.CoreV1().Secrets("default")
		owner, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name("o", policy, i), Labels: labels("owner", policy)}}, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("create owner: %w", err)
		}
		uids.Store(owner.Name, owner.UID)
		block := true
		refs := []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID, BlockOwnerDeletion: &block}}
		if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name("c", policy, i), Labels: labels("dependent", policy), OwnerReferences: refs}}, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create ConfigMap dependent: %w", err)
		}
		if _, err := secrets.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name("s", policy, i), Labels: labels("dependent", policy), OwnerReferences: refs}}, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create Secret dependent: %w", err)
		}
		if err := cms.Delete(ctx, owner.Name, metav1.DeleteOptions{PropagationPolicy: &policy}); err != nil {
			return fmt.Errorf("delete owner: %w", err)
		}
		return nil
	}

	var done atomic.Int64
	killAt := int64(owners * len(policies) / 3)
	killed := make(chan time.Time, 1)
	start := time.Now()
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := w; j < owners*len(policies); j += workers {
				policy, i := policies[j%len(policies)], j/len(policies)
				if err := run(clients[j%len(clients)], policy, i); err != nil {
					t.Errorf("owner %d (%s): %v", i, policy, err)
					return
				}
				if done.Add(1) == killAt {
					holder.kill(t)
					killed <- time.Now()
				}
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	t.Logf("created and deleted %d owners with 2 dependents each in %v; killed %s (%s) after %d", done.Load(), time.Since(start).Round(time.Millisecond), holder.name, first, killAt)
	killedAt := <-killed
	waitFor(t, "another replica taking the collector's Lease", leaseDuration+10*time.Second, func() string {
		if next := lease(); next == "" || next == first || holderOf(next) == nil {
			return "holder " + next
		}
		return ""
	})
	t.Logf("%s took over %v after the kill", holderOf(lease()).name, time.Since(killedAt).Round(time.Millisecond))

	client := clients[0]
	count := func(role string, policy metav1.DeletionPropagation) int {
		selector := fmt.Sprintf("gck-role=%s,gck-policy=%s", role, strings.ToLower(string(policy)))
		cms, err := client.CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return -1
		}
		secrets, err := client.CoreV1().Secrets("default").List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return -1
		}
		return len(cms.Items) + len(secrets.Items)
	}
	settled := waitFor(t, "every owner gone, and every Background and Foreground dependent", 90*time.Second, func() string {
		var left []string
		for _, policy := range policies {
			if n := count("owner", policy); n != 0 {
				left = append(left, fmt.Sprintf("%d %s owners", n, policy))
			}
			if n := count("dependent", policy); policy != metav1.DeletePropagationOrphan && n != 0 {
				left = append(left, fmt.Sprintf("%d %s dependents", n, policy))
			}
		}
		return strings.Join(left, ", ")
	})
	t.Logf("settled %v after the takeover", settled.Round(time.Millisecond))

	deleted := deletedAt()
	getters := map[string]func(string) (metav1.Object, error){
		"c": func(n string) (metav1.Object, error) {
			return client.CoreV1().ConfigMaps("default").Get(ctx, n, metav1.GetOptions{})
		},
		"s": func(n string) (metav1.Object, error) {
			return client.CoreV1().Secrets("default").Get(ctx, n, metav1.GetOptions{})
		},
	}
	for i := range owners {
		// Orphan: both dependents exist, were never deleted, and name no owner.
		owner := name("o", metav1.DeletePropagationOrphan, i)
		uid, _ := uids.Load(owner)
		for kind, get := range getters {
			dep := name(kind, metav1.DeletePropagationOrphan, i)
			obj, err := get(dep)
			if err != nil {
				t.Errorf("%s (orphaned by %s): %v; want it kept", dep, owner, err)
				continue
			}
			if rev, ok := deleted[dep]; ok {
				t.Errorf("%s (orphaned by %s) was deleted at revision %d", dep, owner, rev)
			}
			for _, ref := range obj.GetOwnerReferences() {
				if ref.UID == uid {
					t.Errorf("%s still names its owner %s: %+v", dep, owner, ref)
				}
			}
		}
		// Foreground: the owner was deleted after both dependents.
		owner = name("o", metav1.DeletePropagationForeground, i)
		for kind := range getters {
			dep := name(kind, metav1.DeletePropagationForeground, i)
			if deleted[owner] <= deleted[dep] {
				t.Errorf("%s was deleted at revision %d, before (or without) its blocking dependent %s (at %d)", owner, deleted[owner], dep, deleted[dep])
			}
		}
	}
	if _, err := client.CoreV1().ConfigMaps("default").Get(ctx, name("o", metav1.DeletePropagationOrphan, 0), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("an Orphan owner: %v; want NotFound", err)
	}
}

// watchDeletions watches etcd itself, from now on, for the deletions of the
// objects named gck-*; the function it returns waits until the watch has
// caught up with etcd and returns each one's revision by name.
func watchDeletions(ctx context.Context, t *testing.T, client *clientv3.Client) func() map[string]int64 {
	t.Helper()
	const sentinel = "/registry/gck-sentinel"
	wctx, stop := context.WithCancel(ctx)
	t.Cleanup(stop)
	now, err := client.Get(ctx, sentinel)
	if err != nil {
		t.Fatalf("etcd: %v", err)
	}
	events := client.Watch(wctx, "/registry/", clientv3.WithPrefix(), clientv3.WithFilterPut(), clientv3.WithRev(now.Header.Revision+1))
	var mu sync.Mutex
	deleted := map[string]int64{}
	caughtUp := make(chan struct{})
	go func() {
		for resp := range events {
			for _, ev := range resp.Events {
				name := path.Base(string(ev.Kv.Key))
				if name == path.Base(sentinel) {
					close(caughtUp)
					continue
				}
				if strings.HasPrefix(name, "gck-") {
					mu.Lock()
					deleted[name] = ev.Kv.ModRevision
					mu.Unlock()
				}
			}
		}
	}()
	return func() map[string]int64 {
		if _, err := client.Put(ctx, sentinel, "x"); err != nil {
			t.Fatalf("etcd: %v", err)
		}
		if _, err := client.Delete(ctx, sentinel); err != nil {
			t.Fatalf("etcd: %v", err)
		}
		select {
		case <-caughtUp:
		case <-time.After(30 * time.Second):
			t.Fatal("the watch of etcd did not deliver the sentinel's deletion within 30s")
		}
		mu.Lock()
		defer mu.Unlock()
		return maps.Clone(deleted)
	}
}
