package registry

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/concord-dev/concord/etcdstore"
	"github.com/concord-dev/concord/etcdstore/etcdtest"
)

// fullEvent sets every field of a core/v1 Event.
func fullEvent() *corev1.Event {
	t0 := metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	return &corev1.Event{
		TypeMeta:            metav1.TypeMeta{APIVersion: "v1", Kind: "Event"},
		ObjectMeta:          metav1.ObjectMeta{Name: "cm.1", Namespace: "team", Labels: map[string]string{"a": "b"}, UID: "u1"},
		InvolvedObject:      corev1.ObjectReference{Kind: "ConfigMap", Namespace: "team", Name: "cm", UID: "u2", APIVersion: "v1", ResourceVersion: "7", FieldPath: "data"},
		Reason:              "Changed",
		Message:             "it changed",
		Source:              corev1.EventSource{Component: "ctl", Host: "node-1"},
		FirstTimestamp:      t0,
		LastTimestamp:       metav1.NewTime(t0.Add(time.Minute)),
		Count:               3,
		Type:                corev1.EventTypeWarning,
		EventTime:           metav1.NewMicroTime(t0.Add(time.Microsecond)),
		Series:              &corev1.EventSeries{Count: 4, LastObservedTime: metav1.NewMicroTime(t0.Add(2 * time.Minute))},
		Action:              "Reconcile",
		Related:             &corev1.ObjectReference{Kind: "Secret", Name: "s"},
		ReportingController: "example.com/ctl",
		ReportingInstance:   "ctl-1",
	}
}

// TestEventConversion: kube's field mapping between core/v1 and
// events.k8s.io/v1, and that neither direction loses a field.
func TestEventConversion(t *testing.T) {
	core := fullEvent()
	v1 := eventToV1(core)
	want := &eventsv1.Event{
		TypeMeta:                 metav1.TypeMeta{APIVersion: "events.k8s.io/v1", Kind: "Event"},
		ObjectMeta:               core.ObjectMeta,
		EventTime:                core.EventTime,
		Series:                   &eventsv1.EventSeries{Count: 4, LastObservedTime: core.Series.LastObservedTime},
		ReportingController:      "example.com/ctl",
		ReportingInstance:        "ctl-1",
		Action:                   "Reconcile",
		Reason:                   "Changed",
		Regarding:                core.InvolvedObject,
		Related:                  core.Related,
		Note:                     "it changed",
		Type:                     corev1.EventTypeWarning,
		DeprecatedSource:         core.Source,
		DeprecatedFirstTimestamp: core.FirstTimestamp,
		DeprecatedLastTimestamp:  core.LastTimestamp,
		DeprecatedCount:          3,
	}
	if diff := cmp.Diff(want, v1); diff != "" {
		t.Errorf("eventToV1 (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(core, eventFromV1(v1)); diff != "" {
		t.Errorf("eventFromV1(eventToV1(e)) differs from e (-want +got):\n%s", diff)
	}
	v1.Labels["a"] = "changed"
	if core.Labels["a"] != "b" {
		t.Errorf("the converted event shares its labels with the original")
	}
}

type eventFixture struct {
	etcd         *etcdtest.Etcd
	core, v1, ns *Store
}

func newEventFixture(t *testing.T) *eventFixture {
	t.Helper()
	e := etcdtest.Start(t)
	stores := NewStores(etcdstore.New(e.Client, "/registry"), DefaultWatchConfig())
	f := &eventFixture{etcd: e}
	for _, s := range stores {
		t.Cleanup(s.StopWatches)
		switch s.Resource {
		case Events:
			f.core = s
		case EventsV1:
			f.v1 = s
		case Namespaces:
			f.ns = s
		}
	}
	ctx := testCtx(t)
	if err := EnsureSystemNamespaces(ctx, stores); err != nil {
		t.Fatal(err)
	}
	if _, err := f.ns.Create(ctx, "", &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team"}}, WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	return f
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// raw is the stored value of an event, as etcd holds it.
func (f *eventFixture) raw(t *testing.T, name string) map[string]any {
	t.Helper()
	resp, err := f.etcd.Client.Get(testCtx(t), "/registry/events/team/"+name)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("etcd get %s: %v, %d keys", name, err, len(resp.Kvs))
	}
	var m map[string]any
	if err := json.Unmarshal(resp.Kvs[0].Value, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// newV1Event is a valid events.k8s.io/v1 Event about ConfigMap team/cm.
func newV1Event(name string) *eventsv1.Event {
	return &eventsv1.Event{
		ObjectMeta:          metav1.ObjectMeta{Name: name},
		EventTime:           metav1.NowMicro(),
		ReportingController: "example.com/ctl",
		ReportingInstance:   "ctl-1",
		Action:              "Reconcile",
		Reason:              "Changed",
		Regarding:           corev1.ObjectReference{Kind: "ConfigMap", Namespace: "team", Name: "cm"},
		Note:                "note " + name,
		Type:                corev1.EventTypeNormal,
	}
}

// TestEventsOneStorageTwoVersions: what is written in one version is read
// in the other, and etcd holds core/v1 JSON either way, for create, get,
// list, watch, patch and update.
func TestEventsOneStorageTwoVersions(t *testing.T) {
	f := newEventFixture(t)
	ctx := testCtx(t)

	// Written as core/v1, read as events.k8s.io/v1.
	core := fullEvent()
	core.UID, core.Series, core.EventTime = "", nil, metav1.MicroTime{}
	if _, err := f.core.Create(ctx, "team", core.DeepCopy(), WriteOptions{}); err != nil {
		t.Fatalf("core create: %v", err)
	}
	got, err := f.v1.Get(ctx, "team", "cm.1")
	if err != nil {
		t.Fatalf("v1 get: %v", err)
	}
	ev := got.(*eventsv1.Event)
	if ev.APIVersion != "events.k8s.io/v1" || ev.Note != "it changed" || ev.Regarding != core.InvolvedObject ||
		ev.DeprecatedCount != 3 || ev.DeprecatedSource != core.Source || ev.ResourceVersion == "" {
		t.Errorf("v1 get of a core event = %+v; want note, regarding, deprecated* from the core fields", ev)
	}
	if raw := f.raw(t, "cm.1"); raw["apiVersion"] != "v1" || raw["message"] != "it changed" {
		t.Errorf("stored %v; want core/v1 JSON with message", raw)
	}

	// Written as events.k8s.io/v1: stored as core/v1.
	created, err := f.v1.Create(ctx, "team", newV1Event("v1.a"), WriteOptions{})
	if err != nil {
		t.Fatalf("v1 create: %v", err)
	}
	raw := f.raw(t, "v1.a")
	if raw["apiVersion"] != "v1" || raw["kind"] != "Event" || raw["message"] != "note v1.a" || raw["note"] != nil || raw["involvedObject"] == nil || raw["regarding"] != nil {
		t.Errorf("stored %v; want core/v1 JSON: message and involvedObject, no note or regarding", raw)
	}
	if raw, _, err := f.v1.GetJSON(ctx, "team", "v1.a"); err != nil || !strings.Contains(string(raw), `"apiVersion":"events.k8s.io/v1"`) || !strings.Contains(string(raw), `"note":"note v1.a"`) {
		t.Errorf("v1 GetJSON = %s, %v; want the events.k8s.io/v1 form", raw, err)
	}
	coreGot, err := f.core.Get(ctx, "team", "v1.a")
	if err != nil || coreGot.(*corev1.Event).Message != "note v1.a" || coreGot.(*corev1.Event).InvolvedObject.Name != "cm" {
		t.Errorf("core get of a v1 event = %+v, %v", coreGot, err)
	}

	// Lists in both versions hold both, each in its own version.
	for _, s := range []*Store{f.core, f.v1} {
		list, err := s.List(ctx, "team", &metainternalversion.ListOptions{})
		if err != nil {
			t.Fatalf("%s list: %v", s.Resource.GroupVersion, err)
		}
		if _, served, _ := s.ListJSON(ctx, "team", &metainternalversion.ListOptions{}); served != (s == f.core) {
			t.Errorf("%s ListJSON served = %v; only the stored version passes stored JSON through", s.Resource.GroupVersion, served)
		}
		items, _ := meta.ExtractList(list)
		if len(items) != 2 {
			t.Fatalf("%s list has %d items; want 2", s.Resource.GroupVersion, len(items))
		}
		// Typed list items carry no kind (as kube's): their Go type says
		// their version.
		for _, item := range items {
			if got, want := reflect.TypeOf(item), reflect.TypeOf(s.Resource.New()); got != want {
				t.Errorf("%s list item is a %s; want a %s", s.Resource.GroupVersion, got, want)
			}
		}
	}

	// A watch of events.k8s.io/v1 sees a core write converted.
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w, err := f.v1.Watch(wctx, "team", &metainternalversion.ListOptions{ResourceVersion: created.GetResourceVersion()})
	if err != nil {
		t.Fatalf("v1 watch: %v", err)
	}
	events := make(chan watch.Event, 10)
	go func() {
		_ = w.Run(wctx, func(e watch.Event, _ *Encodings) error { events <- e; return nil })
	}()

	// A strategic-merge patch to events.k8s.io/v1 applies to that form.
	series := `{"series":{"count":2,"lastObservedTime":"2026-01-02T03:04:05.000000Z"}}`
	patched, err := f.v1.Patch(ctx, "team", "v1.a", types.StrategicMergePatchType, []byte(series), WriteOptions{})
	if err != nil {
		t.Fatalf("v1 patch: %v", err)
	}
	if s := patched.(*eventsv1.Event).Series; s == nil || s.Count != 2 {
		t.Errorf("v1 patch answered series %+v; want count 2", s)
	}
	if raw := f.raw(t, "v1.a"); raw["series"].(map[string]any)["count"] != float64(2) {
		t.Errorf("stored series %v; want count 2", raw["series"])
	}
	// A core patch without resourceVersion, as client-go's recorder sends.
	if _, err := f.core.Patch(ctx, "team", "cm.1", types.StrategicMergePatchType, []byte(`{"count":4}`), WriteOptions{}); err != nil {
		t.Fatalf("core patch: %v", err)
	}
	for _, want := range []string{"v1.a", "cm.1"} {
		select {
		case e := <-events:
			obj, ok := e.Object.(*eventsv1.Event)
			if e.Type != watch.Modified || !ok || obj.Name != want {
				t.Errorf("v1 watch event %s %T %v; want MODIFIED events.k8s.io/v1 Event %s", e.Type, e.Object, e.Object, want)
			}
			if ok && want == "cm.1" && obj.DeprecatedCount != 4 {
				t.Errorf("v1 watch of the core patch: deprecatedCount %d; want 4", obj.DeprecatedCount)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no watch event for %s", want)
		}
	}

	// An update through events.k8s.io/v1 may not change what kube keeps
	// immutable, and changes what it may.
	cur, err := f.v1.Get(ctx, "team", "v1.a")
	if err != nil {
		t.Fatal(err)
	}
	changed := cur.(*eventsv1.Event).DeepCopy()
	changed.Note = "rewritten"
	_, _, err = f.v1.Update(ctx, "team", "v1.a", changed, WriteOptions{})
	if !apierrors.IsInvalid(err) || !hasCause(err, "message", "field is immutable") {
		t.Errorf("v1 update of note = %v; want 422 with message immutable", err)
	}
	changed = cur.(*eventsv1.Event).DeepCopy()
	changed.Labels = map[string]string{"seen": "yes"}
	if _, _, err := f.v1.Update(ctx, "team", "v1.a", changed, WriteOptions{}); err != nil {
		t.Errorf("v1 update of labels: %v", err)
	}
	if raw := f.raw(t, "v1.a"); raw["metadata"].(map[string]any)["labels"] == nil || raw["message"] != "note v1.a" {
		t.Errorf("after the v1 update etcd holds %v", raw)
	}
}

func hasCause(err error, field, message string) bool {
	var st *apierrors.StatusError
	if !errors.As(err, &st) || st.ErrStatus.Details == nil {
		return false
	}
	for _, c := range st.ErrStatus.Details.Causes {
		if c.Field == field && strings.Contains(c.Message, message) {
			return true
		}
	}
	return false
}

// TestEventValidation: kube's validation of either version, 422 with
// causes, and nothing stored.
func TestEventValidation(t *testing.T) {
	f := newEventFixture(t)
	ctx := testCtx(t)
	long := strings.Repeat("x", 1025)
	for _, tc := range []struct {
		name       string
		v1         bool
		edit       func(core *corev1.Event, v1 *eventsv1.Event)
		field, msg string
	}{
		{"core: no involvedObject outside default", false, func(e *corev1.Event, _ *eventsv1.Event) { e.InvolvedObject = corev1.ObjectReference{} },
			"involvedObject.namespace", "does not match event.namespace"},
		{"core: involvedObject in another namespace", false, func(e *corev1.Event, _ *eventsv1.Event) { e.InvolvedObject.Namespace = "other" },
			"involvedObject.namespace", "does not match event.namespace"},
		{"core with eventTime: message over 1 KiB", false, func(e *corev1.Event, _ *eventsv1.Event) {
			e.EventTime, e.ReportingController, e.ReportingInstance, e.Action, e.Message = metav1.NowMicro(), "c", "i", "a", long
		}, "message", "can have at most 1024 characters"},
		{"core with eventTime: no reportingController", false, func(e *corev1.Event, _ *eventsv1.Event) {
			e.EventTime, e.ReportingInstance, e.Action = metav1.NowMicro(), "i", "a"
		}, "reportingController", "Required value"},
		{"v1: invalid type", true, func(_ *corev1.Event, e *eventsv1.Event) { e.Type = "Bogus" }, "type", "has invalid value: Bogus"},
		{"v1: note over 1 KiB", true, func(_ *corev1.Event, e *eventsv1.Event) { e.Note = long }, "message", "can have at most 1024 characters"},
		{"v1: no regarding outside default", true, func(_ *corev1.Event, e *eventsv1.Event) { e.Regarding = corev1.ObjectReference{} },
			"involvedObject.namespace", "does not match event.namespace"},
		{"v1: no eventTime", true, func(_ *corev1.Event, e *eventsv1.Event) { e.EventTime = metav1.MicroTime{} }, "eventTime", "Required value"},
		{"v1: no action", true, func(_ *corev1.Event, e *eventsv1.Event) { e.Action = "" }, "action", "Required value"},
		{"v1: reportingInstance over 128", true, func(_ *corev1.Event, e *eventsv1.Event) { e.ReportingInstance = long[:129] }, "reportingInstance", "can have at most 128 characters"},
		{"v1: reportingController not a qualified name", true, func(_ *corev1.Event, e *eventsv1.Event) { e.ReportingController = "no spaces" }, "reportingController", "name part must consist of"},
		{"v1: deprecatedCount set", true, func(_ *corev1.Event, e *eventsv1.Event) { e.DeprecatedCount = 2 }, "count", "needs to be unset"},
		{"v1: series count 1", true, func(_ *corev1.Event, e *eventsv1.Event) {
			e.Series = &eventsv1.EventSeries{Count: 1, LastObservedTime: metav1.NowMicro()}
		}, "series.count", "should be at least 2"},
		{"v1: name not a DNS subdomain", true, func(_ *corev1.Event, e *eventsv1.Event) { e.Name = "Not_DNS" }, "metadata.name", "RFC 1123"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			core := &corev1.Event{
				ObjectMeta:     metav1.ObjectMeta{Name: "bad"},
				InvolvedObject: corev1.ObjectReference{Kind: "ConfigMap", Namespace: "team", Name: "cm"},
				Reason:         "Changed", Message: "m", Type: corev1.EventTypeNormal,
			}
			v1 := newV1Event("bad")
			tc.edit(core, v1)
			var err error
			if tc.v1 {
				_, err = f.v1.Create(ctx, "team", v1, WriteOptions{})
			} else {
				_, err = f.core.Create(ctx, "team", core, WriteOptions{})
			}
			var st *apierrors.StatusError
			if !errors.As(err, &st) || st.ErrStatus.Code != 422 || st.ErrStatus.Reason != metav1.StatusReasonInvalid || st.ErrStatus.Details.Kind != "Event" {
				t.Fatalf("create = %v; want 422 Invalid of kind Event", err)
			}
			if !hasCause(err, tc.field, tc.msg) {
				t.Errorf("create = %v (causes %+v); want a cause on %s saying %q", err, st.ErrStatus.Details.Causes, tc.field, tc.msg)
			}
			if resp, _ := f.etcd.Client.Get(ctx, "/registry/events/team/"+v1.Name); len(resp.Kvs) != 0 {
				t.Errorf("the invalid event was stored")
			}
		})
	}
	// What each version accepts that the other's strict rules would not.
	if _, err := f.core.Create(ctx, "default", &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "Old_Style"}, Reason: "r", Type: "Custom"}, WriteOptions{}); err != nil {
		t.Errorf("core create of an old-style event in default (no involvedObject, custom type, path-segment name): %v", err)
	}
}

// TestEventFieldSelectors: kube's selectable fields of either version, in
// lists (from etcd and from the cache) and watches, and kube's 400 for the
// others.
func TestEventFieldSelectors(t *testing.T) {
	f := newEventFixture(t)
	ctx := testCtx(t)
	mk := func(name, involved, reason, typ, component, controller string) {
		t.Helper()
		e := &corev1.Event{
			ObjectMeta:     metav1.ObjectMeta{Name: name},
			InvolvedObject: corev1.ObjectReference{Kind: "ConfigMap", Namespace: "team", Name: involved, UID: types.UID("uid-" + involved), APIVersion: "v1"},
			Reason:         reason, Type: typ, Source: corev1.EventSource{Component: component}, ReportingController: controller,
		}
		if _, err := f.core.Create(ctx, "team", e, WriteOptions{}); err != nil {
			t.Fatalf("create %s: %v", name, err)
		}
	}
	mk("a", "x", "Created", "Normal", "kubelet", "")
	mk("b", "y", "Deleted", "Warning", "", "example.com/ctl")
	mk("c", "x", "Deleted", "Normal", "kubelet", "example.com/ctl")

	names := func(s *Store, selector string) ([]string, error) {
		sel, err := fields.ParseSelector(selector)
		if err != nil {
			t.Fatal(err)
		}
		list, err := s.List(ctx, "team", &metainternalversion.ListOptions{FieldSelector: sel})
		if err != nil {
			return nil, err
		}
		items, _ := meta.ExtractList(list)
		var out []string
		for _, it := range items {
			out = append(out, it.(Object).GetName())
		}
		return out, nil
	}
	cases := []struct {
		store    *Store
		selector string
		want     []string
	}{
		{f.core, "involvedObject.name=x", []string{"a", "c"}},
		{f.core, "involvedObject.name=x,reason=Deleted", []string{"c"}},
		{f.core, "involvedObject.kind=ConfigMap,involvedObject.namespace=team,involvedObject.uid=uid-y", []string{"b"}},
		{f.core, "involvedObject.apiVersion=v1,type=Warning", []string{"b"}},
		{f.core, "type!=Warning", []string{"a", "c"}},
		{f.core, "source=kubelet", []string{"a", "c"}},
		{f.core, "source=example.com/ctl", []string{"b"}}, // no component: the reporting controller
		{f.core, "reportingComponent=example.com/ctl", []string{"b", "c"}},
		{f.core, "metadata.name=a", []string{"a"}},
		{f.v1, "regarding.name=x", []string{"a", "c"}},
		{f.v1, "reportingController=example.com/ctl,type=Normal", []string{"c"}},
		{f.v1, "source=kubelet,reason=Created", []string{"a"}},
	}
	// Twice: the first lists read etcd and start the cache, the later ones
	// are answered from it once it has loaded.
	for round := range 3 {
		for _, tc := range cases {
			got, err := names(tc.store, tc.selector)
			if err != nil || !cmp.Equal(got, tc.want) {
				t.Errorf("round %d: %s list %q = %v, %v; want %v", round, tc.store.Resource.GroupVersion, tc.selector, got, err, tc.want)
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	for _, tc := range []struct {
		store    *Store
		selector string
		msg      string
	}{
		{f.core, "regarding.name=x", "field label not supported: regarding.name"},
		{f.v1, "involvedObject.name=x", "field label not supported: involvedObject.name"},
		{f.core, "spec.x=1", "field label not supported: spec.x"},
	} {
		_, err := names(tc.store, tc.selector)
		if !apierrors.IsBadRequest(err) || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%s list %q = %v; want 400 %q", tc.store.Resource.GroupVersion, tc.selector, err, tc.msg)
		}
	}

	// A watch filters with the same fields.
	sel := fields.OneTermEqualSelector("involvedObject.name", "x")
	list, err := f.core.List(ctx, "team", &metainternalversion.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rv, _ := meta.NewAccessor().ResourceVersion(list)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w, err := f.core.Watch(wctx, "team", &metainternalversion.ListOptions{FieldSelector: sel, ResourceVersion: rv})
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 10)
	go func() {
		_ = w.Run(wctx, func(e watch.Event, _ *Encodings) error {
			got <- string(e.Type) + " " + e.Object.(Object).GetName()
			return nil
		})
	}()
	mk("d", "y", "Created", "Normal", "", "")
	mk("e", "x", "Created", "Normal", "", "")
	select {
	case g := <-got:
		if g != "ADDED e" {
			t.Errorf("watch %s: first event %q; want ADDED e", sel, g)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("watch %s: no event", sel)
	}
	if _, err := f.core.Watch(wctx, "team", &metainternalversion.ListOptions{FieldSelector: fields.OneTermEqualSelector("bogus", "1")}); !apierrors.IsBadRequest(err) {
		t.Errorf("watch with an unknown field = %v; want 400", err)
	}
	// Resources without declared fields keep kube's default message.
	cms := NewStore(f.core.storage, ConfigMaps, DefaultWatchConfig(), WithoutReadCache())
	_, err = cms.List(ctx, "team", &metainternalversion.ListOptions{FieldSelector: fields.OneTermEqualSelector("data", "1")})
	if !apierrors.IsBadRequest(err) || !strings.Contains(err.Error(), `"data" is not a known field selector: only "metadata.name", "metadata.namespace"`) {
		t.Errorf("configmaps list with data=1 = %v; want kube's default 400", err)
	}
}
