package e2e

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

const protobufType = "application/vnd.kubernetes.protobuf"

// contentTypeRecorder keeps the Content-Type of every request with a body
// and of every answer, by method.
type contentTypeRecorder struct {
	next http.RoundTripper

	mu        sync.Mutex
	requests  map[string]string // method → request Content-Type
	responses map[string]string // method → response Content-Type
}

func (r *contentTypeRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	ct := req.Header.Get("Content-Type")
	resp, err := r.next.RoundTrip(req)
	r.mu.Lock()
	defer r.mu.Unlock()
	if ct != "" {
		r.requests[req.Method] = ct
	}
	if err == nil {
		r.responses[req.Method] = resp.Header.Get("Content-Type")
	}
	return resp, err
}

// TestClientGoClients uses client-go's typed, dynamic and discovery clients
// and a discovery-backed RESTMapper, all with their default configuration,
// against one binary in front of a real etcd.
func TestClientGoClients(t *testing.T) {
	t.Parallel()
	srv := startReplicas(t, 1)[0]
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()

	recorder := &contentTypeRecorder{requests: map[string]string{}, responses: map[string]string{}}
	typedCfg := &rest.Config{Host: srv.url, Timeout: requestTimeout, WrapTransport: func(rt http.RoundTripper) http.RoundTripper {
		recorder.next = rt
		return recorder
	}}
	client, err := kubernetes.NewForConfig(typedCfg)
	if err != nil {
		t.Fatalf("clientset: %v", err)
	}
	cfg := &rest.Config{Host: srv.url, Timeout: requestTimeout}

	t.Run("typed", func(t *testing.T) {
		cms := client.CoreV1().ConfigMaps("default")
		created, err := cms.Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: "typed", Labels: map[string]string{"via": "clientset"}},
			Data:       map[string]string{"mode": "blue"},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("ConfigMaps.Create: %v", err)
		}
		if created.UID == "" || created.ResourceVersion == "" || created.Namespace != "default" || created.CreationTimestamp.IsZero() {
			t.Errorf("ConfigMaps.Create answered uid %q rv %q namespace %q created %v; want all set", created.UID, created.ResourceVersion, created.Namespace, created.CreationTimestamp)
		}
		got, err := cms.Get(ctx, "typed", metav1.GetOptions{})
		if err != nil {
			t.Fatalf("ConfigMaps.Get: %v", err)
		}
		if got.UID != created.UID || got.ResourceVersion != created.ResourceVersion || got.Data["mode"] != "blue" {
			t.Errorf("ConfigMaps.Get = uid %q rv %q data %v; want uid %q rv %q mode blue", got.UID, got.ResourceVersion, got.Data, created.UID, created.ResourceVersion)
		}
		list, err := cms.List(ctx, metav1.ListOptions{LabelSelector: "via=clientset"})
		if err != nil {
			t.Fatalf("ConfigMaps.List: %v", err)
		}
		if len(list.Items) != 1 || list.Items[0].Name != "typed" || list.ResourceVersion == "" {
			t.Errorf("ConfigMaps.List(via=clientset) = %d items at rv %q; want typed only and a resourceVersion", len(list.Items), list.ResourceVersion)
		}

		secrets := client.CoreV1().Secrets("default")
		secret, err := secrets.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: "typed-secret"},
			StringData: map[string]string{"password": "s3cret"},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("Secrets.Create: %v", err)
		}
		// As in kube-apiserver, stringData is merged into data on write and
		// never stored; the type defaults to Opaque.
		if string(secret.Data["password"]) != "s3cret" || len(secret.StringData) != 0 || secret.Type != corev1.SecretTypeOpaque {
			t.Errorf("Secrets.Create answered data %q stringData %v type %q; want data.password s3cret, no stringData, Opaque", secret.Data, secret.StringData, secret.Type)
		}
		gotSecret, err := secrets.Get(ctx, "typed-secret", metav1.GetOptions{})
		if err != nil {
			t.Fatalf("Secrets.Get: %v", err)
		}
		if string(gotSecret.Data["password"]) != "s3cret" || len(gotSecret.StringData) != 0 || gotSecret.Type != corev1.SecretTypeOpaque {
			t.Errorf("Secrets.Get = data %q stringData %v type %q; want data.password s3cret, no stringData, Opaque", gotSecret.Data, gotSecret.StringData, gotSecret.Type)
		}
		secretList, err := secrets.List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatalf("Secrets.List: %v", err)
		}
		if !slices.ContainsFunc(secretList.Items, func(s corev1.Secret) bool { return s.Name == "typed-secret" }) {
			t.Errorf("Secrets.List = %d items; want typed-secret among them", len(secretList.Items))
		}

		namespaces := client.CoreV1().Namespaces()
		ns, err := namespaces.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "typed-ns"}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("Namespaces.Create: %v", err)
		}
		if ns.Namespace != "" || ns.UID == "" || ns.Status.Phase != corev1.NamespaceActive {
			t.Errorf("Namespaces.Create answered namespace %q uid %q phase %q; want cluster-scoped, a uid, Active", ns.Namespace, ns.UID, ns.Status.Phase)
		}
		if got, err := namespaces.Get(ctx, "typed-ns", metav1.GetOptions{}); err != nil || got.UID != ns.UID {
			t.Errorf("Namespaces.Get(typed-ns) = %v; want uid %s", err, ns.UID)
		}
		nsList, err := namespaces.List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatalf("Namespaces.List: %v", err)
		}
		var names []string
		for _, n := range nsList.Items {
			names = append(names, n.Name)
		}
		for _, want := range []string{"default", "kube-system", "kube-public", "kube-node-lease", "typed-ns"} {
			if !slices.Contains(names, want) {
				t.Errorf("Namespaces.List = %q; want %s among them", names, want)
			}
		}
		// A ConfigMap in the new namespace.
		if _, err := client.CoreV1().ConfigMaps("typed-ns").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "inside"}}, metav1.CreateOptions{}); err != nil {
			t.Errorf("ConfigMaps(typed-ns).Create: %v", err)
		}

		recorder.mu.Lock()
		defer recorder.mu.Unlock()
		if ct := recorder.requests[http.MethodPost]; ct != protobufType {
			t.Errorf("the clientset sent POST with Content-Type %q; want %s (client-go's default)", ct, protobufType)
		}
		for _, method := range []string{http.MethodPost, http.MethodGet} {
			if ct := recorder.responses[method]; ct != protobufType {
				t.Errorf("server answered the clientset's %s with Content-Type %q; want %s", method, ct, protobufType)
			}
		}
	})

	t.Run("dynamic", func(t *testing.T) {
		dyn, err := dynamic.NewForConfig(cfg)
		if err != nil {
			t.Fatalf("dynamic client: %v", err)
		}
		gvr := schema.GroupVersionResource{Group: "", Version: "v1", Resource: "configmaps"}
		res := dyn.Resource(gvr).Namespace("default")
		obj := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "v1",
			"kind":       "ConfigMap",
			"metadata":   map[string]any{"name": "dynamic", "labels": map[string]any{"via": "dynamic"}},
			"data":       map[string]any{"mode": "blue"},
		}}
		created, err := res.Create(ctx, obj, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("dynamic Create: %v", err)
		}
		if created.GetUID() == "" || created.GetResourceVersion() == "" || created.GetKind() != "ConfigMap" || created.GetAPIVersion() != "v1" {
			t.Errorf("dynamic Create answered kind %q apiVersion %q uid %q rv %q; want ConfigMap v1 with uid and rv", created.GetKind(), created.GetAPIVersion(), created.GetUID(), created.GetResourceVersion())
		}
		got, err := res.Get(ctx, "dynamic", metav1.GetOptions{})
		if err != nil {
			t.Fatalf("dynamic Get: %v", err)
		}
		if mode, _, _ := unstructured.NestedString(got.Object, "data", "mode"); mode != "blue" || got.GetUID() != created.GetUID() {
			t.Errorf("dynamic Get = uid %q data.mode %q; want uid %q and blue", got.GetUID(), mode, created.GetUID())
		}
		list, err := res.List(ctx, metav1.ListOptions{LabelSelector: "via=dynamic"})
		if err != nil {
			t.Fatalf("dynamic List: %v", err)
		}
		if len(list.Items) != 1 || list.Items[0].GetName() != "dynamic" || list.GetResourceVersion() == "" {
			t.Errorf("dynamic List(via=dynamic) = %d items at rv %q; want dynamic only and a resourceVersion", len(list.Items), list.GetResourceVersion())
		}
		if err := unstructured.SetNestedField(got.Object, "green", "data", "mode"); err != nil {
			t.Fatal(err)
		}
		updated, err := res.Update(ctx, got, metav1.UpdateOptions{})
		if err != nil {
			t.Fatalf("dynamic Update: %v", err)
		}
		if mode, _, _ := unstructured.NestedString(updated.Object, "data", "mode"); mode != "green" || updated.GetResourceVersion() == got.GetResourceVersion() {
			t.Errorf("dynamic Update answered data.mode %q rv %q; want green and a new rv (was %q)", mode, updated.GetResourceVersion(), got.GetResourceVersion())
		}
		// An update from the stale object conflicts.
		if _, err := res.Update(ctx, got, metav1.UpdateOptions{}); !apierrors.IsConflict(err) {
			t.Errorf("dynamic Update from a stale resourceVersion = %v; want Conflict", err)
		}
		if err := res.Delete(ctx, "dynamic", metav1.DeleteOptions{}); err != nil {
			t.Fatalf("dynamic Delete: %v", err)
		}
		if _, err := res.Get(ctx, "dynamic", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("dynamic Get after Delete = %v; want NotFound", err)
		}
	})

	t.Run("discovery", func(t *testing.T) {
		dc, err := discovery.NewDiscoveryClientForConfig(cfg)
		if err != nil {
			t.Fatalf("discovery client: %v", err)
		}
		v, err := dc.ServerVersion()
		if err != nil {
			t.Fatalf("ServerVersion: %v", err)
		}
		if v.Major != "1" || v.Minor == "" || !strings.HasPrefix(v.GitVersion, "v1.") {
			t.Errorf("ServerVersion = %+v; want major 1, a minor, a v1.x gitVersion", v)
		}

		_, lists, err := dc.ServerGroupsAndResources()
		if err != nil {
			t.Fatalf("ServerGroupsAndResources: %v", err)
		}
		type want struct {
			gv, resource, kind string
			namespaced         bool
			verbs              []string
		}
		all := []string{"create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"}
		for _, w := range []want{
			{"v1", "configmaps", "ConfigMap", true, all},
			{"v1", "secrets", "Secret", true, all},
			// kube-apiserver serves no deletecollection of namespaces.
			{"v1", "namespaces", "Namespace", false, []string{"create", "delete", "get", "list", "patch", "update", "watch"}},
			{"coordination.k8s.io/v1", "leases", "Lease", true, all},
		} {
			var found *metav1.APIResource
			for _, l := range lists {
				if l.GroupVersion != w.gv {
					continue
				}
				for i := range l.APIResources {
					if l.APIResources[i].Name == w.resource {
						found = &l.APIResources[i]
					}
				}
			}
			if found == nil {
				t.Errorf("ServerGroupsAndResources: no %s in %s", w.resource, w.gv)
				continue
			}
			verbs := slices.Sorted(slices.Values(found.Verbs))
			if found.Kind != w.kind || found.Namespaced != w.namespaced || !slices.Equal(verbs, w.verbs) {
				t.Errorf("discovery of %s %s: kind %q namespaced %v verbs %q; want %q, %v, %q", w.gv, w.resource, found.Kind, found.Namespaced, verbs, w.kind, w.namespaced, w.verbs)
			}
		}

		mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
		for _, m := range []struct {
			gk   schema.GroupKind
			gvr  schema.GroupVersionResource
			kind string
		}{
			{schema.GroupKind{Kind: "ConfigMap"}, schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, "ConfigMap"},
			{schema.GroupKind{Group: "coordination.k8s.io", Kind: "Lease"}, schema.GroupVersionResource{Group: "coordination.k8s.io", Version: "v1", Resource: "leases"}, "Lease"},
		} {
			mapping, err := mapper.RESTMapping(m.gk)
			if err != nil {
				t.Errorf("RESTMapping(%s): %v", m.gk, err)
				continue
			}
			if mapping.Resource != m.gvr || mapping.Scope.Name() != meta.RESTScopeNameNamespace {
				t.Errorf("RESTMapping(%s) = resource %s scope %s; want %s, namespaced", m.gk, mapping.Resource, mapping.Scope.Name(), m.gvr)
			}
			gvk, err := mapper.KindFor(m.gvr)
			if err != nil || gvk.Kind != m.kind || gvk.Group != m.gvr.Group || gvk.Version != m.gvr.Version {
				t.Errorf("KindFor(%s) = %s, %v; want kind %s", m.gvr, gvk, err, m.kind)
			}
		}
		nsMapping, err := mapper.RESTMapping(schema.GroupKind{Kind: "Namespace"})
		if err != nil || nsMapping.Scope.Name() != meta.RESTScopeNameRoot {
			t.Errorf("RESTMapping(Namespace) = %+v, %v; want a cluster-scoped mapping", nsMapping, err)
		}
	})

	srv.stopCleanly(t)
}

// Leader election settings and bounds.
const (
	leaseName         = "demo-lock"
	leaseNamespace    = "kube-system"
	leaseDuration     = 4 * time.Second
	renewDeadline     = 2 * time.Second
	retryPeriod       = 500 * time.Millisecond
	firstLeaderWait   = 15 * time.Second
	takeoverWait      = leaseDuration + 6*time.Second
	leaderTestTimeout = 40 * time.Second
)

// leaderTracker follows every candidate's callbacks and notes any moment
// at which two candidates thought they led.
type leaderTracker struct {
	start time.Time

	mu         sync.Mutex
	leaders    map[string]bool
	stopped    map[string]bool // OnStoppedLeading ran
	history    []string
	violations []string
}

func (lt *leaderTracker) note(format string, args ...any) {
	lt.history = append(lt.history, fmt.Sprintf("%6.2fs ", time.Since(lt.start).Seconds())+fmt.Sprintf(format, args...))
}

func (lt *leaderTracker) started(id string) {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	if lt.stopped[id] {
		// OnStartedLeading runs in a goroutine of its own and may come
		// after OnStoppedLeading.
		lt.note("%s started leading after it stopped (ignored)", id)
		return
	}
	lt.leaders[id] = true
	lt.note("%s started leading", id)
	if len(lt.leaders) > 1 {
		lt.violations = append(lt.violations, lt.history[len(lt.history)-1]+fmt.Sprintf(" while leaders were %v", lt.current()))
	}
}

func (lt *leaderTracker) stoppedLeading(id string) {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	lt.stopped[id] = true
	if lt.leaders[id] {
		delete(lt.leaders, id)
		lt.note("%s stopped leading", id)
	} else {
		lt.note("%s stopped without leading", id)
	}
}

// current is the sorted ids of the leaders; lt.mu must be held.
func (lt *leaderTracker) current() []string {
	var ids []string
	for id := range lt.leaders {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

func (lt *leaderTracker) leadersNow() []string {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	return lt.current()
}

func (lt *leaderTracker) String() string {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	return strings.Join(lt.history, "\n")
}

func (lt *leaderTracker) checkNoOverlap(t *testing.T) {
	t.Helper()
	lt.mu.Lock()
	defer lt.mu.Unlock()
	for _, v := range lt.violations {
		t.Errorf("two leaders at once: %s", v)
	}
	lt.violations = nil
}

// candidate is one leader-election participant, talking to one replica.
type candidate struct {
	id      string
	replica replica
	cancel  context.CancelFunc
	done    chan struct{}
}

// waitLeader waits at most d for exactly one leader, which must be want
// (or any candidate if want is ""), and returns it and how long it took.
func (lt *leaderTracker) waitLeader(t *testing.T, ctx context.Context, want string, d time.Duration) (string, time.Duration) {
	t.Helper()
	begin := time.Now()
	deadline := begin.Add(d)
	for {
		now := lt.leadersNow()
		if len(now) == 1 && (want == "" || now[0] == want) {
			return now[0], time.Since(begin)
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			t.Fatalf("leaders after %s = %q; want exactly %q\nhistory:\n%s", time.Since(begin).Round(time.Millisecond), now, cmpOr(want, "one"), lt)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func cmpOr(s, alt string) string {
	if s == "" {
		return alt
	}
	return s
}

func newClientset(t *testing.T, url string) *kubernetes.Clientset {
	t.Helper()
	c, err := kubernetes.NewForConfig(&rest.Config{Host: url, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatalf("clientset for %s: %v", url, err)
	}
	return c
}

// TestLeaderElectionAcrossReplicas runs client-go's leader election with a
// LeaseLock, each candidate talking to a different replica: exactly one
// leads at a time, a candidate that stops leading (without releasing) is
// succeeded after the lease expires, and so is one whose replica crashes.
func TestLeaderElectionAcrossReplicas(t *testing.T) {
	t.Parallel()
	replicas := startReplicas(t, 2)
	ctx, cancel := context.WithTimeout(t.Context(), leaderTestTimeout)
	defer cancel()

	lt := &leaderTracker{start: time.Now(), leaders: map[string]bool{}, stopped: map[string]bool{}}
	var candidates []*candidate
	defer func() {
		for _, c := range candidates {
			c.cancel()
		}
		for _, c := range candidates {
			select {
			case <-c.done:
			case <-time.After(killTimeout):
				t.Errorf("candidate %s still running %s after its context was cancelled", c.id, killTimeout)
			}
		}
		t.Logf("leader election history:\n%s", lt)
	}()

	startCandidate := func(id string, r replica) *candidate {
		t.Helper()
		lock := &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Name: leaseName, Namespace: leaseNamespace},
			Client:     newClientset(t, r.url).CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: id},
		}
		le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
			Lock:            lock,
			LeaseDuration:   leaseDuration,
			RenewDeadline:   renewDeadline,
			RetryPeriod:     retryPeriod,
			ReleaseOnCancel: false,
			Name:            id,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(context.Context) { lt.started(id) },
				OnStoppedLeading: func() { lt.stoppedLeading(id) },
			},
		})
		if err != nil {
			t.Fatalf("NewLeaderElector(%s): %v", id, err)
		}
		cctx, ccancel := context.WithCancel(ctx)
		c := &candidate{id: id, replica: r, cancel: ccancel, done: make(chan struct{})}
		go func() {
			defer close(c.done)
			le.Run(cctx)
		}()
		candidates = append(candidates, c)
		lt.mu.Lock()
		lt.note("%s started, talking to %s", id, r.name)
		lt.mu.Unlock()
		return c
	}
	// lease reads the Lease through r.
	lease := func(r replica) *coordinationv1.Lease {
		t.Helper()
		l, err := newClientset(t, r.url).CoordinationV1().Leases(leaseNamespace).Get(ctx, leaseName, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("get Lease %s/%s through %s: %v", leaseNamespace, leaseName, r.name, err)
		}
		return l
	}
	holder := func(l *coordinationv1.Lease) string {
		if l.Spec.HolderIdentity == nil {
			return ""
		}
		return *l.Spec.HolderIdentity
	}
	transitions := func(l *coordinationv1.Lease) int32 {
		if l.Spec.LeaseTransitions == nil {
			return 0
		}
		return *l.Spec.LeaseTransitions
	}
	byID := func(id string) *candidate {
		for _, c := range candidates {
			if c.id == id {
				return c
			}
		}
		t.Fatalf("no candidate %s", id)
		return nil
	}

	// Phase 1: two candidates on two replicas; exactly one leads.
	startCandidate("candidate-A", replicas[0])
	startCandidate("candidate-B", replicas[1])
	first, took := lt.waitLeader(t, ctx, "", firstLeaderWait)
	t.Logf("first leader %s after %s", first, took.Round(time.Millisecond))
	// Several retry periods later it is still the only one.
	time.Sleep(4 * retryPeriod)
	if now := lt.leadersNow(); !slices.Equal(now, []string{first}) {
		t.Fatalf("leaders %s after the first was elected = %q; want [%s]\nhistory:\n%s", 4*retryPeriod, now, first, lt)
	}
	lt.checkNoOverlap(t)
	leader := byID(first)
	other := candidates[0]
	if other == leader {
		other = candidates[1]
	}
	l := lease(other.replica)
	if holder(l) != first {
		t.Errorf("Lease holderIdentity = %q; want the leader %s", holder(l), first)
	}
	if l.Spec.LeaseDurationSeconds == nil || *l.Spec.LeaseDurationSeconds != int32(leaseDuration/time.Second) {
		t.Errorf("Lease leaseDurationSeconds = %v; want %d", l.Spec.LeaseDurationSeconds, int32(leaseDuration/time.Second))
	}
	transitions1 := transitions(l)

	// Phase 2: the leader stops (without releasing the lease); the other
	// takes over once the lease has expired.
	t.Run("leader-stops", func(t *testing.T) {
		stopAt := time.Now()
		leader.cancel()
		select {
		case <-leader.done:
		case <-time.After(killTimeout):
			t.Fatalf("%s still running %s after its context was cancelled", leader.id, killTimeout)
		}
		next, _ := lt.waitLeader(t, ctx, other.id, takeoverWait)
		took := time.Since(stopAt)
		t.Logf("%s took over %s after %s stopped", next, took.Round(time.Millisecond), leader.id)
		if took > takeoverWait {
			t.Errorf("takeover after the leader stopped took %s; want ≤ %s", took, takeoverWait)
		}
		lt.checkNoOverlap(t)
		l := lease(other.replica)
		if holder(l) != other.id {
			t.Errorf("Lease holderIdentity after the takeover = %q; want %s", holder(l), other.id)
		}
		if got := transitions(l); got != transitions1+1 {
			t.Errorf("Lease leaseTransitions after the takeover = %d; want %d", got, transitions1+1)
		}
	})
	if t.Failed() {
		return
	}

	// Phase 3: a new candidate on the first leader's replica; then the
	// replica of the current leader is killed with SIGKILL. Its candidate
	// can no longer renew and stops leading; the new one takes over.
	t.Run("leader-replica-crashes", func(t *testing.T) {
		crashed := other
		survivor := leader.replica
		fresh := startCandidate("candidate-C", survivor)
		// Let it see the current holder first.
		time.Sleep(2 * retryPeriod)
		if now := lt.leadersNow(); !slices.Equal(now, []string{crashed.id}) {
			t.Fatalf("leaders before the crash = %q; want [%s]\nhistory:\n%s", now, crashed.id, lt)
		}
		before := transitions(lease(survivor))

		killAt := time.Now()
		if err := crashed.replica.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatalf("SIGKILL %s: %v", crashed.replica.name, err)
		}
		crashed.replica.waitExit(t, killTimeout)
		lt.mu.Lock()
		lt.note("%s killed (SIGKILL)", crashed.replica.name)
		lt.mu.Unlock()

		next, _ := lt.waitLeader(t, ctx, fresh.id, takeoverWait)
		took := time.Since(killAt)
		t.Logf("%s took over %s after %s was killed", next, took.Round(time.Millisecond), crashed.replica.name)
		if took > takeoverWait {
			t.Errorf("takeover after the leader's replica was killed took %s; want ≤ %s", took, takeoverWait)
		}
		select {
		case <-crashed.done:
		case <-time.After(killTimeout):
			t.Errorf("%s still runs %s after its replica died; want it to have given up leading", crashed.id, killTimeout)
		}
		lt.checkNoOverlap(t)
		l := lease(survivor)
		if holder(l) != fresh.id {
			t.Errorf("Lease holderIdentity after the crash takeover = %q; want %s", holder(l), fresh.id)
		}
		if got := transitions(l); got != before+1 {
			t.Errorf("Lease leaseTransitions after the crash takeover = %d; want %d", got, before+1)
		}
	})
	lt.checkNoOverlap(t)
}
