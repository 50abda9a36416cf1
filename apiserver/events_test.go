package apiserver_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

const (
	coreEvents = "/api/v1/namespaces/default/events"
	v1Events   = "/apis/events.k8s.io/v1/namespaces/default/events"
)

// TestEventsClientGoBothVersions: client-go's typed clients (protobuf
// bodies and answers) write and read the same events through core/v1 and
// events.k8s.io/v1, each in its own form, for every verb.
func TestEventsClientGoBothVersions(t *testing.T) {
	s := startServer(t)
	recorder := &contentTypes{seen: map[string]string{}}
	client, err := kubernetes.NewForConfig(&rest.Config{Host: s.URL, WrapTransport: func(rt http.RoundTripper) http.RoundTripper {
		recorder.next = rt
		return recorder
	}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	core, v1 := client.CoreV1().Events("default"), client.EventsV1().Events("default")

	old, err := core.Create(ctx, &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: "cm.1"},
		InvolvedObject: corev1.ObjectReference{Kind: "ConfigMap", Namespace: "default", Name: "cm", UID: "u1"},
		Reason:         "Changed", Message: "it changed", Type: corev1.EventTypeNormal, Count: 1,
		Source:         corev1.EventSource{Component: "tester"},
		FirstTimestamp: metav1.Now(), LastTimestamp: metav1.Now(),
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("core create: %v", err)
	}
	if ct := posted(recorder); ct != "application/vnd.kubernetes.protobuf" {
		t.Errorf("client-go sent the core event as %q; want protobuf", ct)
	}
	got, err := v1.Get(ctx, "cm.1", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("v1 get: %v", err)
	}
	if got.Note != "it changed" || got.Regarding.Name != "cm" || got.DeprecatedSource.Component != "tester" || got.DeprecatedCount != 1 || got.ResourceVersion != old.ResourceVersion {
		t.Errorf("v1 get of a core event = %+v", got)
	}

	created, err := v1.Create(ctx, &eventsv1.Event{
		ObjectMeta: metav1.ObjectMeta{Name: "cm.2"},
		EventTime:  metav1.NowMicro(), ReportingController: "example.com/tester", ReportingInstance: "t-1",
		Action: "Test", Reason: "Tested", Note: "a v1 event", Type: corev1.EventTypeWarning,
		Regarding: corev1.ObjectReference{Kind: "ConfigMap", Namespace: "default", Name: "cm"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("v1 create: %v", err)
	}
	if ct := posted(recorder); ct != "application/vnd.kubernetes.protobuf" {
		t.Errorf("client-go sent the v1 event as %q; want protobuf", ct)
	}
	coreGot, err := core.Get(ctx, "cm.2", metav1.GetOptions{})
	if err != nil || coreGot.Message != "a v1 event" || coreGot.ReportingController != "example.com/tester" || coreGot.InvolvedObject.Name != "cm" {
		t.Errorf("core get of a v1 event = %+v, %v", coreGot, err)
	}
	stored := s.storedKeys(t, "/registry/events/default/cm.2")["/registry/events/default/cm.2"]
	var storedFields map[string]any
	if err := json.Unmarshal([]byte(stored), &storedFields); err != nil || storedFields["apiVersion"] != "v1" || storedFields["message"] != "a v1 event" || storedFields["note"] != nil {
		t.Errorf("etcd holds %s; want core/v1 JSON", stored)
	}

	// Field selectors by either version's names.
	coreList, err := core.List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=cm,type=Warning"})
	if err != nil || len(coreList.Items) != 1 || coreList.Items[0].Name != "cm.2" {
		t.Errorf("core list involvedObject.name=cm,type=Warning = %v, %v; want cm.2", coreList, err)
	}
	v1List, err := v1.List(ctx, metav1.ListOptions{FieldSelector: "regarding.name=cm,reportingController=example.com/tester"})
	if err != nil || len(v1List.Items) != 1 || v1List.Items[0].Name != "cm.2" {
		t.Errorf("v1 list regarding.name=cm,reportingController=example.com/tester = %v, %v; want cm.2", v1List, err)
	}

	// A protobuf watch of events.k8s.io/v1 sees a core patch converted.
	w, err := v1.Watch(ctx, metav1.ListOptions{ResourceVersion: created.ResourceVersion, FieldSelector: "metadata.name=cm.1"})
	if err != nil {
		t.Fatalf("v1 watch: %v", err)
	}
	defer w.Stop()
	// client-go's recorder: a strategic-merge patch without resourceVersion.
	if _, err := core.Patch(ctx, "cm.1", types.StrategicMergePatchType, []byte(`{"count":2,"message":"again"}`), metav1.PatchOptions{}); err != nil {
		t.Fatalf("core patch: %v", err)
	}
	select {
	case e := <-w.ResultChan():
		ev, ok := e.Object.(*eventsv1.Event)
		if e.Type != watch.Modified || !ok || ev.DeprecatedCount != 2 || ev.Note != "again" {
			t.Errorf("v1 watch: %s %#v; want MODIFIED with deprecatedCount 2, note again", e.Type, e.Object)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("v1 watch: no event")
	}

	// client-go's events/v1 recorder: a series patch to the v1 form.
	series := `{"series":{"count":2,"lastObservedTime":"` + metav1.NowMicro().UTC().Format(metav1.RFC3339Micro) + `"}}`
	patched, err := v1.Patch(ctx, "cm.2", types.StrategicMergePatchType, []byte(series), metav1.PatchOptions{})
	if err != nil || patched.Series == nil || patched.Series.Count != 2 {
		t.Fatalf("v1 series patch = %+v, %v; want series.count 2", patched, err)
	}
	if coreGot, err := core.Get(ctx, "cm.2", metav1.GetOptions{}); err != nil || coreGot.Series == nil || coreGot.Series.Count != 2 {
		t.Errorf("core get after the v1 series patch = %+v, %v", coreGot, err)
	}
	if err := v1.Delete(ctx, "cm.2", metav1.DeleteOptions{}); err != nil {
		t.Errorf("v1 delete: %v", err)
	}
	if _, err := core.Get(ctx, "cm.2", metav1.GetOptions{}); err == nil {
		t.Errorf("core get after the v1 delete found the event")
	}
}

// TestEventsTable: both versions print kube's Event columns; kubectl shows
// the priority 0 ones (LAST SEEN, TYPE, REASON, OBJECT, MESSAGE).
func TestEventsTable(t *testing.T) {
	s := startServer(t)
	body := `{"metadata":{"name":"cm.1"},"involvedObject":{"kind":"ConfigMap","namespace":"default","name":"cm","fieldPath":"data"},` +
		`"reason":"Changed","message":" it changed ","type":"Normal","count":3,"source":{"component":"tester","host":"h1"},` +
		`"firstTimestamp":"2020-01-01T00:00:00Z","lastTimestamp":"2020-01-01T00:00:00Z"}`
	if resp := s.do(t, http.MethodPost, coreEvents, body); resp.Code != http.StatusCreated {
		t.Fatalf("create: %d %s", resp.Code, resp.Body)
	}
	wantColumns := []string{"Last Seen", "Type", "Reason", "Object", "Subobject", "Source", "Message", "First Seen", "Count", "Name"}
	for _, path := range []string{coreEvents, coreEvents + "/cm.1", v1Events, v1Events + "/cm.1", "/api/v1/events"} {
		resp := s.do(t, http.MethodGet, path, nil, "Accept", kubectlTableAccept)
		var table metav1.Table
		resp.decode(t, &table)
		var columns []string
		var shown []string
		for _, c := range table.ColumnDefinitions {
			columns = append(columns, c.Name)
			if c.Priority == 0 {
				shown = append(shown, strings.ToUpper(c.Name))
			}
		}
		if diff := cmp.Diff(columns, wantColumns); diff != "" {
			t.Errorf("%s columns (-got +want):\n%s", path, diff)
		}
		if diff := cmp.Diff(shown, []string{"LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"}); diff != "" {
			t.Errorf("%s columns kubectl shows (-got +want):\n%s", path, diff)
		}
		if len(table.Rows) != 1 {
			t.Fatalf("%s: %d rows; want 1", path, len(table.Rows))
		}
		cells := table.Rows[0].Cells
		want := []any{cells[0], "Normal", "Changed", "configmap/cm", "data", "tester, h1", "it changed", cells[7], float64(3), "cm.1"}
		if diff := cmp.Diff(cells, want); diff != "" || !strings.Contains(cells[0].(string), "y") {
			t.Errorf("%s row (-got +want):\n%s (last seen %v: years ago)", path, diff, cells[0])
		}
		var meta metav1.PartialObjectMetadata
		if err := json.Unmarshal(table.Rows[0].Object.Raw, &meta); err != nil || meta.Name != "cm.1" {
			t.Errorf("%s row object = %s, %v; want the event's metadata", path, table.Rows[0].Object.Raw, err)
		}
	}
}

// TestEventsBadInput: kube's validation answers 422 with causes and stores
// nothing; an unknown field selector is 400 with kube's message.
func TestEventsBadInput(t *testing.T) {
	s := startServer(t)
	s.namespace(t, "team")
	long := strings.Repeat("x", 1025)
	v1 := func(edit string) string {
		return `{"apiVersion":"events.k8s.io/v1","kind":"Event","metadata":{"name":"bad"},"eventTime":"2026-01-01T00:00:00.000000Z",` +
			`"reportingController":"example.com/c","reportingInstance":"c-1","action":"A","reason":"R",` +
			`"regarding":{"kind":"ConfigMap","namespace":"team","name":"cm"},` + edit + `}`
	}
	for _, tc := range []struct {
		name, path, body string
		field, message   string
	}{
		{"core event without involvedObject", "/api/v1/namespaces/team/events",
			`{"metadata":{"name":"bad"},"reason":"R","message":"m","type":"Normal"}`,
			"involvedObject.namespace", `Invalid value: "": does not match event.namespace`},
		{"v1 event with an invalid type", "/apis/events.k8s.io/v1/namespaces/team/events", v1(`"type":"Sometimes","note":"n"`),
			"type", `Invalid value: "": has invalid value: Sometimes`},
		{"v1 event with a note over 1 KiB", "/apis/events.k8s.io/v1/namespaces/team/events", v1(`"type":"Normal","note":"` + long + `"`),
			"message", `Invalid value: "": can have at most 1024 characters`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := s.do(t, http.MethodPost, tc.path, tc.body)
			st := resp.status(t)
			if resp.Code != http.StatusUnprocessableEntity || st.Reason != metav1.StatusReasonInvalid || st.Details == nil || st.Details.Kind != "Event" || st.Details.Name != "bad" {
				t.Fatalf("%d %+v; want 422 Invalid of Event bad", resp.Code, st)
			}
			found := false
			for _, c := range st.Details.Causes {
				if c.Field == tc.field && strings.Contains(c.Message, tc.message) && c.Type == metav1.CauseTypeFieldValueInvalid {
					found = true
				}
			}
			if !found {
				t.Errorf("causes %+v; want FieldValueInvalid on %s with %q", st.Details.Causes, tc.field, tc.message)
			}
			if keys := s.storedKeys(t, "/registry/events/"); len(keys) != 0 {
				t.Errorf("stored %v; want nothing", keys)
			}
		})
	}
	for _, tc := range []struct{ path, selector, message string }{
		{coreEvents, "spec.x=1", "field label not supported: spec.x"},
		{v1Events, "involvedObject.name=x", "field label not supported: involvedObject.name"},
		{"/api/v1/namespaces/default/configmaps", "data=1", `"data" is not a known field selector: only "metadata.name", "metadata.namespace"`},
	} {
		resp := s.do(t, http.MethodGet, tc.path+"?fieldSelector="+tc.selector, nil)
		if st := resp.status(t); resp.Code != http.StatusBadRequest || st.Message != tc.message {
			t.Errorf("GET %s?fieldSelector=%s = %d %q; want 400 %q", tc.path, tc.selector, resp.Code, st.Message, tc.message)
		}
	}
}

// posted is the Content-Type of the last POST the recorder saw.
func posted(c *contentTypes) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.seen[http.MethodPost]
}
