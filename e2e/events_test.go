package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/tools/record"

	"github.com/concord-dev/concord/etcdstore/etcdtest"
)

// eventWait bounds how long a recorded event may take to be visible, as
// the issue asks (client-go's recorders send asynchronously).
const eventWait = 5 * time.Second

// waitEvent polls list until it finds an event that ok accepts, within
// eventWait, and returns how long that took.
func waitEvent[T any](t *testing.T, what string, list func() ([]T, error), ok func(T) bool) (T, time.Duration) {
	t.Helper()
	start := time.Now()
	var last []T
	var err error
	for time.Since(start) < eventWait {
		if last, err = list(); err == nil {
			for _, e := range last {
				if ok(e) {
					return e, time.Since(start)
				}
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	var zero T
	t.Fatalf("%s: not there within %s (last list: %+v, %v)", what, eventWait, last, err)
	return zero, 0
}

// TestEvents: client-go's two event recorders record against the real
// binary, and kubectl describe, get events and events show what they
// recorded.
func TestEvents(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat(kubectlPath); err != nil {
		t.Fatalf("this test drives the real kubectl: %v", err)
	}
	tmp := t.TempDir()
	srv := startConcord(t, "concord", t.TempDir(), "--data-dir", filepath.Join(tmp, "data"))
	k := &kubectlSession{srv: srv, cacheDir: filepath.Join(tmp, "kubectl-cache"), tmp: tmp}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	client, err := kubernetes.NewForConfig(&rest.Config{Host: srv.url, Timeout: requestTimeout})
	if err != nil {
		t.Fatal(err)
	}
	cms := client.CoreV1().ConfigMaps("default")
	app, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "app"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create configmap app: %v", err)
	}
	other, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "other"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create configmap other: %v", err)
	}
	coreEvents := func(selector string) func() ([]corev1.Event, error) {
		return func() ([]corev1.Event, error) {
			l, err := client.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: selector})
			if err != nil {
				return nil, err
			}
			return l.Items, nil
		}
	}

	t.Run("record.EventBroadcaster", func(t *testing.T) {
		broadcaster := record.NewBroadcaster()
		defer broadcaster.Shutdown()
		broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
		recorder := broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "e2e-recorder"})

		recorder.Event(app, corev1.EventTypeNormal, "Tested", "the app was tested")
		recorder.Event(other, corev1.EventTypeWarning, "Ignored", "the other was ignored")
		selector := "involvedObject.name=app,involvedObject.kind=ConfigMap,reason=Tested"
		first, took := waitEvent(t, "the recorded event", coreEvents(selector), func(e corev1.Event) bool { return e.Count == 1 })
		t.Logf("the recorded event was listed after %s", took.Round(time.Millisecond))
		if first.Source.Component != "e2e-recorder" || first.InvolvedObject.UID != app.UID || first.Message != "the app was tested" {
			t.Errorf("recorded event = %+v", first)
		}
		// The same event again: the recorder patches the count, without a
		// resourceVersion.
		recorder.Event(app, corev1.EventTypeNormal, "Tested", "the app was tested")
		again, took := waitEvent(t, "the repeated event", coreEvents(selector), func(e corev1.Event) bool { return e.Count == 2 })
		t.Logf("the repeat was counted after %s", took.Round(time.Millisecond))
		if again.Name != first.Name {
			t.Errorf("the repeat is event %s; want the first one, %s, with count 2", again.Name, first.Name)
		}
	})

	t.Run("events/v1 broadcaster", func(t *testing.T) {
		broadcaster := events.NewBroadcaster(&events.EventSinkImpl{Interface: client.EventsV1()})
		stop := make(chan struct{})
		defer func() {
			close(stop)
			broadcaster.Shutdown()
		}()
		broadcaster.StartRecordingToSink(stop)
		recorder := broadcaster.NewRecorder(scheme.Scheme, "e2e-controller")
		v1Events := func() ([]eventsv1.Event, error) {
			l, err := client.EventsV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "regarding.name=app,reason=Checked"})
			if err != nil {
				return nil, err
			}
			return l.Items, nil
		}
		recorder.Eventf(app, nil, corev1.EventTypeNormal, "Checked", "Check", "checked %s", "app")
		first, took := waitEvent(t, "the events/v1 event", v1Events, func(e eventsv1.Event) bool { return true })
		t.Logf("the events/v1 event was listed after %s", took.Round(time.Millisecond))
		if first.ReportingController != "e2e-controller" || first.Note != "checked app" || first.Series != nil || first.EventTime.IsZero() {
			t.Errorf("recorded events/v1 event = %+v", first)
		}
		recorder.Eventf(app, nil, corev1.EventTypeNormal, "Checked", "Check", "checked %s", "app")
		again, took := waitEvent(t, "the repeated events/v1 event", v1Events, func(e eventsv1.Event) bool { return e.Series != nil && e.Series.Count == 2 })
		t.Logf("the events/v1 repeat became a series after %s", took.Round(time.Millisecond))
		if again.Name != first.Name {
			t.Errorf("the repeat is event %s; want the first one, %s, with series.count 2", again.Name, first.Name)
		}
		// The same object in core/v1.
		core, err := client.CoreV1().Events("default").Get(ctx, first.Name, metav1.GetOptions{})
		if err != nil || core.Message != "checked app" || core.Series == nil || core.Series.Count != 2 || core.ReportingController != "e2e-controller" {
			t.Errorf("core/v1 read of the events/v1 event = %+v, %v", core, err)
		}
	})

	t.Run("bad input", func(t *testing.T) {
		_, err := client.CoreV1().Events("kube-public").Create(ctx, &corev1.Event{
			ObjectMeta: metav1.ObjectMeta{Name: "orphan"}, Reason: "R", Message: "no involved object",
		}, metav1.CreateOptions{})
		var st apierrors.APIStatus
		if !apierrors.IsInvalid(err) || !errorAs(err, &st) || len(st.Status().Details.Causes) == 0 || st.Status().Details.Causes[0].Field != "involvedObject.namespace" {
			t.Errorf("create without involvedObject = %v; want 422 with a cause on involvedObject.namespace", err)
		}
		_, err = client.EventsV1().Events("default").Create(ctx, &eventsv1.Event{
			ObjectMeta: metav1.ObjectMeta{Name: "noisy"}, EventTime: metav1.NowMicro(), ReportingController: "c", ReportingInstance: "i",
			Action: "A", Reason: "R", Type: "Loud", Note: strings.Repeat("n", 1025),
		}, metav1.CreateOptions{})
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "type: Invalid value") || !strings.Contains(err.Error(), "can have at most 1024 characters") {
			t.Errorf("events/v1 create with type Loud and a long note = %v; want 422 on type and message", err)
		}
		for _, name := range []string{"orphan", "noisy"} {
			if _, err := client.CoreV1().Events("default").Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				t.Errorf("get %s after the refused create = %v; want NotFound", name, err)
			}
		}
	})

	t.Run("RESTMapper", func(t *testing.T) {
		dc, err := discovery.NewDiscoveryClientForConfig(&rest.Config{Host: srv.url, Timeout: requestTimeout})
		if err != nil {
			t.Fatal(err)
		}
		mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
		for _, gk := range []schema.GroupKind{{Kind: "Event"}, {Group: "events.k8s.io", Kind: "Event"}} {
			m, err := mapper.RESTMapping(gk)
			if err != nil || m.Resource.Resource != "events" || m.Resource.Group != gk.Group || m.Resource.Version != "v1" || m.Scope.Name() != meta.RESTScopeNameNamespace {
				t.Errorf("RESTMapping(%s) = %+v, %v; want namespaced events in %q v1", gk, m, err, gk.Group)
			}
		}
		// "events" alone is the core group's, as on a real cluster.
		gvr, err := mapper.ResourceFor(schema.GroupVersionResource{Resource: "events"})
		if err != nil || gvr.Group != "" {
			t.Errorf("ResourceFor(events) = %v, %v; want core/v1 events", gvr, err)
		}
	})

	t.Run("kubectl describe configmap", func(t *testing.T) {
		out := k.run(t, "describe", "configmap", "app")
		_, events, found := strings.Cut(out, "\nEvents:")
		if !found {
			t.Fatalf("kubectl describe configmap app has no Events: section:\n%s", out)
		}
		if !strings.Contains(events, "Tested") || !strings.Contains(events, "the app was tested") || !strings.Contains(events, "e2e-recorder") {
			t.Errorf("kubectl describe configmap app events:%s\nwant the recorded Tested event", events)
		}
		t.Logf("kubectl describe configmap app, Events:%s", events)
		if strings.Contains(events, "Ignored") {
			t.Errorf("kubectl describe configmap app lists the other configmap's event:%s", events)
		}
	})

	t.Run("kubectl get events", func(t *testing.T) {
		for _, resource := range []string{"events", "ev", "events.v1.events.k8s.io"} {
			out := k.run(t, "get", resource)
			if got := strings.Join(tableHeader(out), " "); got != "LAST SEEN TYPE REASON OBJECT MESSAGE" {
				t.Errorf("kubectl get %s header %q; want kube's LAST SEEN TYPE REASON OBJECT MESSAGE\n%s", resource, got, out)
			}
			for _, want := range []string{"configmap/app", "Tested", "the app was tested", "configmap/other", "Ignored", "Checked"} {
				if !strings.Contains(out, want) {
					t.Errorf("kubectl get %s has no %q:\n%s", resource, want, out)
				}
			}
			t.Logf("kubectl get %s:\n%s", resource, out)
		}
		out := k.run(t, "get", "events", "--field-selector", "involvedObject.name=app")
		if !strings.Contains(out, "configmap/app") || strings.Contains(out, "configmap/other") {
			t.Errorf("kubectl get events --field-selector involvedObject.name=app:\n%s\nwant app's events only", out)
		}
		out = k.run(t, "get", "events", "-A", "-o", "wide")
		if got := strings.Join(tableHeader(out), " "); got != "NAMESPACE LAST SEEN TYPE REASON OBJECT SUBOBJECT SOURCE MESSAGE FIRST SEEN COUNT NAME" {
			t.Errorf("kubectl get events -A -o wide header %q\n%s", got, out)
		}
		if msg := k.fail(t, "get", "events", "--field-selector", "spec.bogus=1"); !strings.Contains(msg, "field label not supported: spec.bogus") {
			t.Errorf("kubectl get events with an unknown field: %s", msg)
		}
	})

	t.Run("kubectl create and explain with OpenAPI", func(t *testing.T) {
		// kubectl's default --validate=strict checks the body against the
		// OpenAPI document of the group version.
		manifest := k.writeFile(t, "event.yaml", `apiVersion: events.k8s.io/v1
kind: Event
metadata:
  name: manual.1
eventTime: "2026-01-01T00:00:00.000000Z"
reportingController: example.com/kubectl
reportingInstance: kubectl-1
action: Create
reason: Manual
type: Normal
note: created by kubectl
regarding:
  kind: ConfigMap
  namespace: default
  name: other
`, 0o644)
		if out := k.run(t, "create", "-f", manifest); out != "event.events.k8s.io/manual.1 created\n" {
			t.Errorf("kubectl create -f event.yaml printed %q", out)
		}
		if out := k.run(t, "explain", "events.regarding", "--api-version=events.k8s.io/v1"); !strings.Contains(out, "regarding") || !strings.Contains(out, "ObjectReference") {
			t.Errorf("kubectl explain events.regarding --api-version=events.k8s.io/v1:\n%s", out)
		}
		if out := k.run(t, "explain", "events.involvedObject"); !strings.Contains(out, "involvedObject") {
			t.Errorf("kubectl explain events.involvedObject:\n%s", out)
		}
	})

	t.Run("kubectl events", func(t *testing.T) {
		out := k.run(t, "events")
		if got := strings.Join(tableHeader(out), " "); got != "LAST SEEN TYPE REASON OBJECT MESSAGE" {
			t.Errorf("kubectl events header %q\n%s", got, out)
		}
		if !strings.Contains(out, "ConfigMap/app") || !strings.Contains(out, "the app was tested") {
			t.Errorf("kubectl events:\n%s\nwant the app's event", out)
		}
		out = k.run(t, "events", "--for", "configmap/other")
		if !strings.Contains(out, "Ignored") || strings.Contains(out, "Tested") {
			t.Errorf("kubectl events --for configmap/other:\n%s\nwant only the other's event", out)
		}
		out = k.run(t, "events", "--types", "Warning")
		if !strings.Contains(out, "Ignored") || strings.Contains(out, "Tested") {
			t.Errorf("kubectl events --types Warning:\n%s\nwant only the warning", out)
		}
	})
}

func errorAs(err error, st *apierrors.APIStatus) bool {
	s, ok := err.(apierrors.APIStatus)
	if ok {
		*st = s
	}
	return ok
}

// TestEventTTL: with --event-ttl=3s an event is gone within 10 s, deleted by
// etcd when its lease expires — also when the replica that wrote it was
// killed — while events written together share one lease.
func TestEventTTL(t *testing.T) {
	t.Parallel()
	etcd := etcdtest.Start(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	short := startConcord(t, "replica (event-ttl 3s)", t.TempDir(), "--etcd-servers", etcd.Endpoint, "--event-ttl", "3s")
	client := func(url string) kubernetes.Interface {
		// No client-side rate limit: the burst below measures the server.
		c, err := kubernetes.NewForConfig(&rest.Config{Host: url, Timeout: requestTimeout, QPS: -1})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	event := func(name string) *corev1.Event {
		return &corev1.Event{
			ObjectMeta:     metav1.ObjectMeta{Name: name},
			InvolvedObject: corev1.ObjectReference{Kind: "ConfigMap", Namespace: "default", Name: "app"},
			Reason:         "Tested", Message: "short-lived", Type: corev1.EventTypeNormal,
		}
	}
	start := time.Now()
	if _, err := client(short.url).CoreV1().Events("default").Create(ctx, event("short"), metav1.CreateOptions{}); err != nil {
		t.Fatalf("create: %v", err)
	}
	resp, err := etcd.Client.Get(ctx, "/registry/events/default/short")
	if err != nil || len(resp.Kvs) != 1 || resp.Kvs[0].Lease == 0 {
		t.Fatalf("etcd key of the event: %v, %v; want one key on a lease", resp, err)
	}
	// The replica that wrote it dies; another one serves on.
	short.kill(t)
	other := startConcord(t, "replica (default event-ttl)", t.TempDir(), "--etcd-servers", etcd.Endpoint)
	events := client(other.url).CoreV1().Events("default")
	for {
		_, err := events.Get(ctx, "short", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			break
		}
		if err != nil {
			t.Fatalf("get: %v", err)
		}
		if time.Since(start) > 10*time.Second {
			t.Fatalf("the event written with --event-ttl=3s still exists after %s", time.Since(start).Round(time.Millisecond))
		}
		time.Sleep(100 * time.Millisecond)
	}
	gone := time.Since(start)
	if gone < 3*time.Second {
		t.Errorf("the event was gone after %s; want it to live its 3s", gone)
	}
	t.Logf("an event written with --event-ttl=3s was gone after %s", gone.Round(100*time.Millisecond))

	// 100 events written back to back (1h TTL) are on one lease.
	startAt := time.Now()
	for i := range 100 {
		if _, err := events.Create(ctx, event(fmt.Sprintf("burst-%d", i)), metav1.CreateOptions{}); err != nil {
			t.Fatalf("create burst-%d: %v", i, err)
		}
	}
	took := time.Since(startAt)
	keys, err := etcd.Client.Get(ctx, "/registry/events/default/burst-", clientv3.WithPrefix())
	if err != nil || len(keys.Kvs) != 100 {
		t.Fatalf("etcd keys of the burst: %d, %v; want 100", len(keys.Kvs), err)
	}
	leases := map[int64]int{}
	for _, kv := range keys.Kvs {
		leases[kv.Lease]++
	}
	if len(leases) != 1 || leases[0] != 0 {
		t.Errorf("100 events are on %d leases (%v); want 1", len(leases), leases)
	}
	ttl, err := etcd.Client.TimeToLive(ctx, clientv3.LeaseID(keys.Kvs[0].Lease))
	if err != nil || ttl.GrantedTTL != 3660 {
		t.Errorf("the burst's lease: %+v, %v; want granted 3660 s (1h and kube's 1 minute reuse window)", ttl, err)
	}
	t.Logf("100 events in %s (%.0f/s) took %d lease(s)", took.Round(time.Millisecond), 100/took.Seconds(), len(leases))
}
