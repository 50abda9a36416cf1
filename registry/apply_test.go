package registry

import (
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/concord-dev/concord/etcdstore"
)

// entry is a managedFields entry without its time, which entries checks
// is set.
type entry struct {
	Manager, Operation, APIVersion, Subresource, Fields string
}

// entries are obj's managedFields, each checked to carry kube's format
// (FieldsV1, a time).
func entries(t *testing.T, obj metav1.Object) []entry {
	t.Helper()
	var out []entry
	for _, e := range obj.GetManagedFields() {
		if e.FieldsType != "FieldsV1" || e.FieldsV1 == nil || e.Time == nil || e.Time.Nanosecond() != 0 {
			t.Errorf("managedFields entry %+v: want fieldsType FieldsV1, fieldsV1 and a time in seconds", e)
			continue
		}
		out = append(out, entry{string(e.Manager), string(e.Operation), e.APIVersion, e.Subresource, string(e.FieldsV1.Raw)})
	}
	return out
}

// wantEntries checks obj's managedFields: in kube's order (operation,
// then time in seconds, then manager, apiVersion, subresource) by their own
// times, and holding want. The entries are compared in that order without
// the times, which only decide it when two writes fall in different seconds.
func wantEntries(t *testing.T, what string, obj metav1.Object, want ...entry) {
	t.Helper()
	mf := obj.GetManagedFields()
	if !sort.SliceIsSorted(mf, func(i, j int) bool {
		p, q := mf[i], mf[j]
		if p.Operation != q.Operation {
			return p.Operation < q.Operation
		}
		if ps, qs := unixOf(p.Time), unixOf(q.Time); ps != qs {
			return ps < qs
		}
		return entryLess(entry{Manager: p.Manager, APIVersion: p.APIVersion, Subresource: p.Subresource},
			entry{Manager: q.Manager, APIVersion: q.APIVersion, Subresource: q.Subresource})
	}) {
		t.Errorf("%s: managedFields not in kube's order: %+v", what, mf)
	}
	timeless := func(es []entry) []entry {
		out := slices.Clone(es)
		sort.SliceStable(out, func(i, j int) bool {
			if out[i].Operation != out[j].Operation {
				return out[i].Operation < out[j].Operation
			}
			return entryLess(out[i], out[j])
		})
		return out
	}
	if diff := cmp.Diff(timeless(want), timeless(entries(t, obj))); diff != "" {
		t.Errorf("%s: managedFields (-want +got):\n%s", what, diff)
	}
}

func entryLess(p, q entry) bool {
	if p.Manager != q.Manager {
		return p.Manager < q.Manager
	}
	if p.APIVersion != q.APIVersion {
		return p.APIVersion < q.APIVersion
	}
	return p.Subresource < q.Subresource
}

// wantStatus checks that err is the Status code, reason and message, and
// returns its causes.
func wantStatus(t *testing.T, what string, err error, code int32, reason metav1.StatusReason, message string) []metav1.StatusCause {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: no error; want %d %s", what, code, reason)
	}
	st := statusOf(t, err)
	if st.Code != code || st.Reason != reason || st.Message != message {
		t.Errorf("%s: %d %s %q; want %d %s %q", what, st.Code, st.Reason, st.Message, code, reason, message)
	}
	if st.Details == nil {
		return nil
	}
	return st.Details.Causes
}

func configMapYAML(name, data string) []byte {
	return []byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: " + name + "\ndata: " + data + "\n")
}

func apply(t *testing.T, s *Store, name string, patch []byte, opts WriteOptions) (Object, bool, error) {
	t.Helper()
	return s.Apply(testCtx(t), "ns", name, patch, opts)
}

func mustApply(t *testing.T, s *Store, name string, patch []byte, opts WriteOptions) Object {
	t.Helper()
	out, _, err := apply(t, s, name, patch, opts)
	if err != nil {
		t.Fatalf("Apply(%s) by %s: %v", patch, opts.FieldManager, err)
	}
	return out
}

func configMapData(t *testing.T, s *Store, name string) map[string]string {
	t.Helper()
	got, err := s.Get(testCtx(t), "ns", name)
	if err != nil {
		t.Fatal(err)
	}
	return got.(*corev1.ConfigMap).Data
}

// createByCreator creates ConfigMap cm, k=1, as manager "creator".
func createByCreator(t *testing.T, s *Store) Object {
	t.Helper()
	created, err := s.Create(testCtx(t), "ns", &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm"}, Data: map[string]string{"k": "1"}}, WriteOptions{FieldManager: "creator"})
	if err != nil {
		t.Fatal(err)
	}
	return created
}

// TestApplyCreatesAndChanges: an apply creates the missing object, owned
// by its manager (an Apply entry), changes it when applied again, and
// writes nothing when applied unchanged.
func TestApplyCreatesAndChanges(t *testing.T) {
	f := newWidgetFixture(t)
	s := f.configMaps
	out, created, err := apply(t, s, "cm", []byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm\n  labels: {app: web}\ndata: {k: \"1\"}\n"), WriteOptions{FieldManager: "a"})
	if err != nil || !created {
		t.Fatalf("Apply of a missing ConfigMap: created %v, %v; want it created", created, err)
	}
	cm := out.(*corev1.ConfigMap)
	if cm.Data["k"] != "1" || cm.Labels["app"] != "web" || cm.UID == "" || cm.ResourceVersion == "" {
		t.Errorf("created %+v; want data, labels, uid and resourceVersion", cm)
	}
	wantEntries(t, "created", cm, entry{"a", "Apply", "v1", "", `{"f:data":{"f:k":{}},"f:metadata":{"f:labels":{"f:app":{}}}}`})
	got, err := s.Get(testCtx(t), "ns", "cm")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(out, got); diff != "" {
		t.Errorf("stored differs from the apply's answer (-answer +stored):\n%s", diff)
	}

	// JSON is YAML: the same apply again changes nothing.
	again, created, err := apply(t, s, "cm", []byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"cm","labels":{"app":"web"}},"data":{"k":"1"}}`), WriteOptions{FieldManager: "a"})
	if err != nil || created || again.GetResourceVersion() != cm.ResourceVersion {
		t.Errorf("unchanged apply: created %v, resourceVersion %s (was %s), %v; want nothing written", created, again.GetResourceVersion(), cm.ResourceVersion, err)
	}

	changed := mustApply(t, s, "cm", configMapYAML("cm", `{k: "2"}`), WriteOptions{FieldManager: "a"})
	if changed.GetResourceVersion() == cm.ResourceVersion || changed.(*corev1.ConfigMap).Data["k"] != "2" {
		t.Errorf("changed apply: %+v; want k=2 at a new resourceVersion", changed)
	}
	// The label a no longer applies is removed: only a owned it.
	if labels := changed.GetLabels(); len(labels) != 0 {
		t.Errorf("labels %v after a stopped applying them; want none", labels)
	}
	wantEntries(t, "changed", changed, entry{"a", "Apply", "v1", "", `{"f:data":{"f:k":{}}}`})
}

// TestApplyConflicts: a second manager applying another value of a field
// the first owns is a 409 with a cause per field, nothing written; with
// force it takes the fields over.
func TestApplyConflicts(t *testing.T) {
	f := newWidgetFixture(t)
	s := f.configMaps
	first := mustApply(t, s, "cm", configMapYAML("cm", `{k: "1", l: "1", m: "1"}`), WriteOptions{FieldManager: "a"})

	_, _, err := apply(t, s, "cm", configMapYAML("cm", `{k: "2", l: "2", m: "1"}`), WriteOptions{FieldManager: "b"})
	causes := wantStatus(t, "conflicting apply", err, http.StatusConflict, metav1.StatusReasonConflict,
		"Apply failed with 2 conflicts: conflicts with \"a\":\n- .data.k\n- .data.l")
	want := []metav1.StatusCause{
		{Type: metav1.CauseTypeFieldManagerConflict, Message: `conflict with "a"`, Field: ".data.k"},
		{Type: metav1.CauseTypeFieldManagerConflict, Message: `conflict with "a"`, Field: ".data.l"},
	}
	if diff := cmp.Diff(want, causes); diff != "" {
		t.Errorf("conflict causes (-want +got):\n%s", diff)
	}
	if got := configMapData(t, s, "cm"); got["k"] != "1" || got["l"] != "1" {
		t.Errorf("data %v after a refused apply; want it unchanged", got)
	}

	forced := mustApply(t, s, "cm", configMapYAML("cm", `{k: "2", l: "2", m: "1"}`), WriteOptions{FieldManager: "b", Force: true})
	if d := forced.(*corev1.ConfigMap).Data; d["k"] != "2" || d["l"] != "2" || d["m"] != "1" {
		t.Errorf("forced data %v; want k and l 2", d)
	}
	if forced.GetResourceVersion() == first.GetResourceVersion() {
		t.Error("forced apply wrote nothing")
	}
	// m, applied with the same value by both, is shared.
	wantEntries(t, "forced", forced,
		entry{"a", "Apply", "v1", "", `{"f:data":{"f:m":{}}}`},
		entry{"b", "Apply", "v1", "", `{"f:data":{"f:k":{},"f:l":{},"f:m":{}}}`})
}

// TestApplyUpdateManagers: create, replace and patch record their managers'
// changes as Update entries, and an apply then conflicts with them, naming
// the manager and its version.
func TestApplyUpdateManagers(t *testing.T) {
	f := newWidgetFixture(t)
	s := f.configMaps
	ctx := testCtx(t)
	created := createByCreator(t, s)
	wantEntries(t, "created", created, entry{"creator", "Update", "v1", "", `{"f:data":{".":{},"f:k":{}}}`})

	next := created.DeepCopyObject().(*corev1.ConfigMap)
	next.Data["k"] = "2"
	next.Labels = map[string]string{"x": "y"}
	replaced, _, err := s.Update(ctx, "ns", "cm", next, WriteOptions{FieldManager: "replacer"})
	if err != nil {
		t.Fatal(err)
	}
	// The creator keeps data itself ({} once it has no child).
	wantEntries(t, "replaced", replaced,
		entry{"creator", "Update", "v1", "", `{"f:data":{}}`},
		entry{"replacer", "Update", "v1", "", `{"f:data":{"f:k":{}},"f:metadata":{"f:labels":{".":{},"f:x":{}}}}`})

	patched, err := s.Patch(ctx, "ns", "cm", types.MergePatchType, []byte(`{"data":{"p":"1"}}`), WriteOptions{FieldManager: "patcher"})
	if err != nil {
		t.Fatal(err)
	}
	// Entries of one second sort by manager.
	wantEntries(t, "patched", patched,
		entry{"creator", "Update", "v1", "", `{"f:data":{}}`},
		entry{"patcher", "Update", "v1", "", `{"f:data":{"f:p":{}}}`},
		entry{"replacer", "Update", "v1", "", `{"f:data":{"f:k":{}},"f:metadata":{"f:labels":{".":{},"f:x":{}}}}`})

	// A patch that changes nothing writes nothing, managedFields included.
	same, err := s.Patch(ctx, "ns", "cm", types.MergePatchType, []byte(`{"data":{"p":"1"}}`), WriteOptions{FieldManager: "other"})
	if err != nil || same.GetResourceVersion() != patched.GetResourceVersion() {
		t.Errorf("no-op patch: resourceVersion %s (was %s), %v", same.GetResourceVersion(), patched.GetResourceVersion(), err)
	}

	_, _, err = apply(t, s, "cm", configMapYAML("cm", `{k: "3"}`), WriteOptions{FieldManager: "applier"})
	causes := wantStatus(t, "apply over an update", err, http.StatusConflict, metav1.StatusReasonConflict,
		`Apply failed with 1 conflict: conflict with "replacer" using v1: .data.k`)
	want := []metav1.StatusCause{{Type: metav1.CauseTypeFieldManagerConflict, Message: `conflict with "replacer" using v1`, Field: ".data.k"}}
	if diff := cmp.Diff(want, causes); diff != "" {
		t.Errorf("causes (-want +got):\n%s", diff)
	}
}

// TestManagedFieldsInRequests: entries that do not decode are ignored, the
// stored ones kept; an empty list clears them, and, as kube, updates are
// not tracked again until an apply; an apply may not send any.
func TestManagedFieldsInRequests(t *testing.T) {
	f := newWidgetFixture(t)
	s := f.configMaps
	ctx := testCtx(t)
	created := createByCreator(t, s)
	bad := created.DeepCopyObject().(*corev1.ConfigMap)
	bad.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "x", Operation: "Bogus", FieldsType: "FieldsV1"}}
	bad.Data["k"] = "2"
	out, _, err := s.Update(ctx, "ns", "cm", bad, WriteOptions{FieldManager: "u"})
	if err != nil {
		t.Fatalf("replace with malformed managedFields: %v; want them ignored", err)
	}
	wantEntries(t, "malformed sent", out,
		entry{"creator", "Update", "v1", "", `{"f:data":{}}`},
		entry{"u", "Update", "v1", "", `{"f:data":{"f:k":{}}}`})

	reset := out.DeepCopyObject().(*corev1.ConfigMap)
	reset.ManagedFields = []metav1.ManagedFieldsEntry{}
	reset.Data["k"] = "3"
	out, _, err = s.Update(ctx, "ns", "cm", reset, WriteOptions{FieldManager: "r"})
	if err != nil {
		t.Fatal(err)
	}
	wantEntries(t, "reset", out)
	next := out.DeepCopyObject().(*corev1.ConfigMap)
	next.Data["k"] = "4"
	if out, _, err = s.Update(ctx, "ns", "cm", next, WriteOptions{FieldManager: "r"}); err != nil {
		t.Fatal(err)
	}
	wantEntries(t, "updated after the reset", out)
	out = mustApply(t, s, "cm", configMapYAML("cm", `{l: "1"}`), WriteOptions{FieldManager: "a"})
	wantEntries(t, "applied after the reset", out,
		entry{"a", "Apply", "v1", "", `{"f:data":{"f:l":{}}}`},
		entry{"before-first-apply", "Update", "v1", "", `{"f:data":{".":{},"f:k":{}}}`})

	long := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "long", ManagedFields: []metav1.ManagedFieldsEntry{
		{Manager: strings.Repeat("m", 129), Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1", FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:data":{}}`)}}}}}
	_, err = s.Create(ctx, "ns", long, WriteOptions{FieldManager: "c"})
	wantStatus(t, "a manager name too long", err, http.StatusUnprocessableEntity, metav1.StatusReasonInvalid,
		`ConfigMap "long" is invalid: metadata.managedFields[0].manager: Too long: may not be more than 128 bytes`)

	_, _, err = apply(t, s, "cm", []byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"cm","managedFields":[]}}`), WriteOptions{FieldManager: "a"})
	wantStatus(t, "apply with managedFields", err, http.StatusBadRequest, metav1.StatusReasonBadRequest, "metadata.managedFields must be nil")
}

// TestApplyBadInput: what kube refuses of an apply is refused before
// anything is stored.
func TestApplyBadInput(t *testing.T) {
	f := newWidgetFixture(t)
	s := f.configMaps
	for _, tc := range []struct {
		name, body string
		code       int32
		reason     metav1.StatusReason
		message    string
	}{
		{"malformed YAML", "a: b: c", 400, metav1.StatusReasonBadRequest,
			"error encoding patch: yaml: mapping values are not allowed in this context"},
		{"malformed JSON", `{"apiVersion":`, 400, metav1.StatusReasonBadRequest,
			"error decoding patch: error converting YAML to JSON: yaml: line 1: did not find expected node content"},
		{"a list", `[]`, 400, metav1.StatusReasonBadRequest,
			"error decoding patch: error unmarshaling JSON: while decoding JSON: json: cannot unmarshal array into Go value of type map[string]interface {}"},
		{"another kind", `{"apiVersion":"v1","kind":"Secret","metadata":{"name":"x"}}`, 400, metav1.StatusReasonBadRequest,
			"invalid object type: /v1, Kind=Secret"},
		{"another version", `{"apiVersion":"v2","kind":"ConfigMap","metadata":{"name":"x"}}`, 400, metav1.StatusReasonBadRequest,
			"invalid object type: /v2, Kind=ConfigMap"},
		{"no kind", `{"metadata":{"name":"x"}}`, 400, metav1.StatusReasonBadRequest,
			"invalid object type: /, Kind="},
		{"another name", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"y"}}`, 400, metav1.StatusReasonBadRequest,
			"the name of the object (y) does not match the name on the URL (x)"},
		{"no name", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"generateName":"x-"}}`, 400, metav1.StatusReasonBadRequest,
			"the name of the object (x based on URL) was undeterminable: name must be provided"},
		{"another namespace", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x","namespace":"other"}}`, 400, metav1.StatusReasonBadRequest,
			"the namespace of the provided object does not match the namespace sent on the request"},
		{"an unknown field", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x"},"spec":{}}`, 400, metav1.StatusReasonBadRequest,
			"failed to create typed patch object (/x; /v1, Kind=ConfigMap): .spec: field not declared in schema"},
		{"a value of another type", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x"},"data":{"k":1}}`, 400, metav1.StatusReasonBadRequest,
			"failed to create typed patch object (/x; /v1, Kind=ConfigMap): .data.k: expected string, got &value.valueUnstructured{Value:1}"},
		{"a uid of no object", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x","uid":"u"}}`, 409, metav1.StatusReasonConflict,
			`Operation cannot be fulfilled on configmaps "x": uid mismatch: the provided object specified uid u, and no existing object was found`},
		{"a version of no object", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x","resourceVersion":"5"}}`, 404, metav1.StatusReasonNotFound,
			`configmaps "x" not found`},
		{"an invalid key", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x"},"data":{"a b":"1"}}`, 422, metav1.StatusReasonInvalid,
			`ConfigMap "x" is invalid: data[a b]: Invalid value: "a b": a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := apply(t, s, "x", []byte(tc.body), WriteOptions{FieldManager: "a"})
			wantStatus(t, tc.name, err, tc.code, tc.reason, tc.message)
			if _, err := s.Get(testCtx(t), "ns", "x"); !apierrors.IsNotFound(err) {
				t.Errorf("Get after a refused apply: %v; want 404", err)
			}
		})
	}

	// Strict field validation refuses duplicate fields, after the merge.
	_, _, err := apply(t, s, "x", []byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\ndata: {k: a, k: b}\n"), WriteOptions{FieldManager: "a", StrictFields: true})
	wantStatus(t, "duplicate field, Strict", err, 400, metav1.StatusReasonBadRequest,
		`error strict decoding patch: error converting YAML to JSON: yaml: unmarshal errors:
  line 4: key "k" already set in map`)
	var warned []string
	if _, _, err := apply(t, s, "x", []byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\ndata: {k: a, k: b}\n"), WriteOptions{FieldManager: "a", Warnings: func(w []string) { warned = w }}); err != nil {
		t.Fatal(err)
	}
	if want := []string{`line 4: key "k" already set in map`}; !cmp.Equal(warned, want) {
		t.Errorf("warnings %q; want %q, as kube", warned, want)
	}
}

// TestApplyPreconditions: a resourceVersion in the patch and If-Match are
// preconditions on the stored object.
func TestApplyPreconditions(t *testing.T) {
	f := newWidgetFixture(t)
	s := f.configMaps
	cm := mustApply(t, s, "cm", configMapYAML("cm", `{k: "1"}`), WriteOptions{FieldManager: "a"})
	stale := `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"cm","resourceVersion":"1"},"data":{"k":"2"}}`
	_, _, err := apply(t, s, "cm", []byte(stale), WriteOptions{FieldManager: "a"})
	wantStatus(t, "stale resourceVersion", err, 409, metav1.StatusReasonConflict,
		`Operation cannot be fulfilled on configmaps "cm": `+OptimisticLockErrorMsg)
	current := strings.Replace(stale, `"1"`, `"`+cm.GetResourceVersion()+`"`, 1)
	if _, _, err := apply(t, s, "cm", []byte(current), WriteOptions{FieldManager: "a"}); err != nil {
		t.Errorf("apply at the current resourceVersion: %v", err)
	}
	_, _, err = apply(t, s, "cm", configMapYAML("cm", `{k: "3"}`), WriteOptions{FieldManager: "a", IfMatch: func(string) bool { return false }})
	if st := statusOf(t, err); st.Code != http.StatusPreconditionFailed {
		t.Errorf("apply with a failing If-Match: %v; want 412", err)
	}
	if got := configMapData(t, s, "cm"); got["k"] != "2" {
		t.Errorf("data %v; want k=2", got)
	}
}

// TestApplyDryRun: a dry run answers what would be stored and stores
// nothing, for a create and a change.
func TestApplyDryRun(t *testing.T) {
	f := newWidgetFixture(t)
	s := f.configMaps
	out, created, err := apply(t, s, "cm", configMapYAML("cm", `{k: "1"}`), WriteOptions{FieldManager: "a", DryRun: true})
	if err != nil || !created || len(out.GetManagedFields()) != 1 {
		t.Fatalf("dry-run create: created %v, %v, %+v", created, err, out)
	}
	if _, err := s.Get(testCtx(t), "ns", "cm"); !apierrors.IsNotFound(err) {
		t.Fatalf("Get after a dry-run apply: %v; want 404", err)
	}
	cm := mustApply(t, s, "cm", configMapYAML("cm", `{k: "1"}`), WriteOptions{FieldManager: "a"})
	out, _, err = apply(t, s, "cm", configMapYAML("cm", `{k: "2"}`), WriteOptions{FieldManager: "b", DryRun: true, Force: true})
	if err != nil || out.(*corev1.ConfigMap).Data["k"] != "2" {
		t.Fatalf("dry-run change: %v, %+v", err, out)
	}
	got, err := s.Get(testCtx(t), "ns", "cm")
	if err != nil || got.GetResourceVersion() != cm.GetResourceVersion() || got.(*corev1.ConfigMap).Data["k"] != "1" {
		t.Errorf("after a dry-run change: %+v, %v; want it unchanged", got, err)
	}
}

// TestApplyConcurrent: managers applying disjoint fields at once all win,
// each re-applied to the state another one wrote; managers applying other
// values of one field: the first wins, the others conflict with it.
func TestApplyConcurrent(t *testing.T) {
	f := newWidgetFixture(t)
	s := f.configMaps
	const n = 8
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			_, _, errs[i] = apply(t, s, "disjoint", configMapYAML("disjoint", fmt.Sprintf(`{k%d: "v"}`, i)), WriteOptions{FieldManager: fmt.Sprintf("m%d", i)})
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("manager m%d: %v", i, err)
		}
	}
	got, err := s.Get(testCtx(t), "ns", "disjoint")
	if err != nil {
		t.Fatal(err)
	}
	if data := got.(*corev1.ConfigMap).Data; len(data) != n {
		t.Errorf("data %v; want the %d managers' keys", data, n)
	}
	if m := got.GetManagedFields(); len(m) != n {
		t.Errorf("%d managedFields entries; want %d", len(m), n)
	}

	mustApply(t, s, "same", configMapYAML("same", `{other: "x"}`), WriteOptions{FieldManager: "owner"})
	won := make([]bool, n)
	for i := range n {
		wg.Go(func() {
			_, _, errs[i] = apply(t, s, "same", configMapYAML("same", fmt.Sprintf(`{k: "v%d"}`, i)), WriteOptions{FieldManager: fmt.Sprintf("m%d", i)})
			won[i] = errs[i] == nil
		})
	}
	wg.Wait()
	winner := -1
	for i, ok := range won {
		if ok {
			if winner >= 0 {
				t.Errorf("managers m%d and m%d both set k", winner, i)
			}
			winner = i
		}
	}
	if winner < 0 {
		t.Fatal("no manager set k")
	}
	for i, err := range errs {
		if i == winner {
			continue
		}
		want := []metav1.StatusCause{{Type: metav1.CauseTypeFieldManagerConflict, Message: fmt.Sprintf(`conflict with "m%d"`, winner), Field: ".data.k"}}
		causes := wantStatus(t, fmt.Sprintf("m%d", i), err, 409, metav1.StatusReasonConflict, fmt.Sprintf(`Apply failed with 1 conflict: conflict with "m%d": .data.k`, winner))
		if diff := cmp.Diff(want, causes); diff != "" {
			t.Errorf("m%d's causes (-want +got):\n%s", i, diff)
		}
	}
	if data := configMapData(t, s, "same"); data["k"] != fmt.Sprintf("v%d", winner) {
		t.Errorf("data %v; want m%d's value", data, winner)
	}
}

// TestApplyCustomResource: a custom object is merged by its schema — a
// list-map by its keys, each item owned by who applied it — and its
// status subresource tracks status writes, which the main resource's
// managers do not own.
func TestApplyCustomResource(t *testing.T) {
	f := newWidgetFixture(t)
	obj := func(spec string) []byte {
		return []byte(`{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"w"},"spec":` + spec + `}`)
	}
	out, created, err := f.v1.Apply(testCtx(t), "ns", "w", obj(`{"ports":[{"name":"http","port":8080}]}`), WriteOptions{FieldManager: "a"})
	if err != nil || !created {
		t.Fatalf("Apply: created %v, %v", created, err)
	}
	out = mustApply(t, f.v1, "w", obj(`{"ports":[{"name":"metrics","port":9090}]}`), WriteOptions{FieldManager: "b"})
	ports, _, _ := unstructured.NestedSlice(out.(*unstructured.Unstructured).Object, "spec", "ports")
	want := []any{map[string]any{"name": "http", "port": int64(8080)}, map[string]any{"name": "metrics", "port": int64(9090)}}
	if diff := cmp.Diff(want, ports); diff != "" {
		t.Errorf("ports merged by name (-want +got):\n%s", diff)
	}
	wantEntries(t, "two appliers", out,
		entry{"a", "Apply", "example.com/v1", "", `{"f:spec":{"f:ports":{"k:{\"name\":\"http\"}":{".":{},"f:name":{},"f:port":{}}}}}`},
		entry{"b", "Apply", "example.com/v1", "", `{"f:spec":{"f:ports":{"k:{\"name\":\"metrics\"}":{".":{},"f:name":{},"f:port":{}}}}}`})

	// The main resource's status is not its managers'; the status
	// subresource's writes are recorded with it.
	out = mustApply(t, f.v1, "w", []byte(`{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"w"},"spec":{"ports":[{"name":"http","port":8080}]},"status":{"phase":"Main"}}`), WriteOptions{FieldManager: "a"})
	if _, ok := out.(*unstructured.Unstructured).Object["status"]; ok {
		t.Errorf("the main resource wrote a status: %v", out)
	}
	status, err := f.v1.ApplyStatus(testCtx(t), "ns", "w", []byte(`{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"w"},"status":{"phase":"Running"}}`), WriteOptions{FieldManager: "c"})
	if err != nil {
		t.Fatal(err)
	}
	wantEntries(t, "status applied", status,
		entry{"a", "Apply", "example.com/v1", "", `{"f:spec":{"f:ports":{"k:{\"name\":\"http\"}":{".":{},"f:name":{},"f:port":{}}}}}`},
		entry{"b", "Apply", "example.com/v1", "", `{"f:spec":{"f:ports":{"k:{\"name\":\"metrics\"}":{".":{},"f:name":{},"f:port":{}}}}}`},
		entry{"c", "Apply", "example.com/v1", "status", `{"f:status":{"f:phase":{}}}`})
	next := status.DeepCopyObject().(*unstructured.Unstructured)
	if err := unstructured.SetNestedField(next.Object, "Done", "status", "phase"); err != nil {
		t.Fatal(err)
	}
	updated, err := f.v1.UpdateStatus(testCtx(t), "ns", "w", next, WriteOptions{FieldManager: "d"})
	if err != nil {
		t.Fatal(err)
	}
	// d's update took the field c applied, c's only one.
	wantEntries(t, "status updated", updated,
		entry{"a", "Apply", "example.com/v1", "", `{"f:spec":{"f:ports":{"k:{\"name\":\"http\"}":{".":{},"f:name":{},"f:port":{}}}}}`},
		entry{"b", "Apply", "example.com/v1", "", `{"f:spec":{"f:ports":{"k:{\"name\":\"metrics\"}":{".":{},"f:name":{},"f:port":{}}}}}`},
		entry{"d", "Update", "example.com/v1", "status", `{"f:status":{"f:phase":{}}}`})
	if _, err := f.v1.ApplyStatus(testCtx(t), "ns", "missing", []byte(`{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"missing"},"status":{"phase":"x"}}`), WriteOptions{FieldManager: "c"}); !apierrors.IsNotFound(err) {
		t.Errorf("status apply of a missing object: %v; want 404 (a status write creates nothing)", err)
	}
}

// TestApplyEventVersions: the managedFields of an Event written through
// events.k8s.io/v1 and core/v1 keep both managers, each in its version.
func TestApplyEventVersions(t *testing.T) {
	e := newEventFixture(t)
	ctx := testCtx(t)
	ev := &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "e", Namespace: "team"}, InvolvedObject: corev1.ObjectReference{Kind: "Pod", Name: "p", Namespace: "team"},
		Reason: "Started", Message: "m", Type: "Normal", Source: corev1.EventSource{Component: "kubelet"}, ReportingController: "kubelet", ReportingInstance: "i"}
	if _, err := e.core.Create(ctx, "team", ev, WriteOptions{FieldManager: "core-writer"}); err != nil {
		t.Fatal(err)
	}
	out, err := e.v1.Patch(ctx, "team", "e", types.MergePatchType, []byte(`{"metadata":{"labels":{"x":"y"}}}`), WriteOptions{FieldManager: "v1-writer"})
	if err != nil {
		t.Fatal(err)
	}
	got := entries(t, out.(*eventsv1.Event))
	if len(got) != 2 || got[0].Manager != "core-writer" || got[0].APIVersion != "v1" || got[1] != (entry{"v1-writer", "Update", "events.k8s.io/v1", "", `{"f:metadata":{"f:labels":{".":{},"f:x":{}}}}`}) {
		t.Errorf("managedFields %+v; want core-writer's in v1 kept and v1-writer's label", got)
	}
}

// TestManagedFieldsOfLargeObjects: a create or replace that etcd refuses
// as too large once its managedFields are added is written without them,
// as kube does (they list every key of a ConfigMap once more).
func TestManagedFieldsOfLargeObjects(t *testing.T) {
	f := newWidgetFixture(t)
	s := f.configMaps
	ctx := testCtx(t)
	data := map[string]string{}
	for i := range 36000 { // 828 KiB of data, 1.9 MiB with its managedFields
		data[fmt.Sprintf("key-%016d", i)] = "v"
	}
	created, err := s.Create(ctx, "ns", &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "big"}, Data: data}, WriteOptions{FieldManager: "m"})
	if err != nil {
		t.Fatalf("create of a large ConfigMap: %v", err)
	}
	if created.GetManagedFields() != nil {
		t.Errorf("created with %d managedFields entries; want none", len(created.GetManagedFields()))
	}
	small := createByCreator(t, s).(*corev1.ConfigMap)
	small.Data = data
	replaced, _, err := s.Update(ctx, "ns", "cm", small, WriteOptions{FieldManager: "m"})
	if err != nil {
		t.Fatalf("replace by a large ConfigMap: %v", err)
	}
	got, err := s.Get(ctx, "ns", "cm")
	if err != nil {
		t.Fatal(err)
	}
	if got.GetManagedFields() != nil || len(got.(*corev1.ConfigMap).Data) != len(data) || replaced.GetManagedFields() != nil {
		t.Errorf("stored %d keys, %d managedFields entries; want every key, no managedFields", len(got.(*corev1.ConfigMap).Data), len(got.GetManagedFields()))
	}
}

// TestManagedFieldsOfDefaults: what kube's decoder fills in before its
// field manager runs is the writer's: a Secret's data from stringData and
// its type, a Namespace's name label.
func TestManagedFieldsOfDefaults(t *testing.T) {
	f := newEventFixture(t)
	ctx := testCtx(t)
	ns, err := f.ns.Create(ctx, "", &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "labelled"}}, WriteOptions{FieldManager: "kubectl-create"})
	if err != nil {
		t.Fatal(err)
	}
	wantEntries(t, "namespace", ns, entry{"kubectl-create", "Update", "v1", "", `{"f:metadata":{"f:labels":{".":{},"f:kubernetes.io/metadata.name":{}}}}`})

	var secrets *Store
	for _, s := range NewStores(etcdstore.New(f.etcd.Client, "/registry"), DefaultWatchConfig()) {
		if s.Resource == Secrets {
			secrets = s
		}
		t.Cleanup(s.StopWatches)
	}
	secret, err := secrets.Create(ctx, "team", &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s"}, StringData: map[string]string{"k": "v"}}, WriteOptions{FieldManager: "kubectl-create"})
	if err != nil {
		t.Fatal(err)
	}
	wantEntries(t, "secret", secret, entry{"kubectl-create", "Update", "v1", "", `{"f:data":{".":{},"f:k":{}},"f:type":{}}`})
}

// TestDropManagedFieldsOnlyOnADefiniteRefusal: a write etcd refused as too
// large is sent again without managedFields; one whose outcome is unknown
// (it may have landed) never is, nor an apply's.
func TestDropManagedFieldsOnlyOnADefiniteRefusal(t *testing.T) {
	entries := []metav1.ManagedFieldsEntry{{Manager: "m", Operation: metav1.ManagedFieldsOperationUpdate}}
	for _, tc := range []struct {
		name string
		err  error
		opts WriteOptions
		drop bool
	}{
		{"refused as too large", fmt.Errorf("update k: %w", etcdstore.ErrTooLarge), WriteOptions{}, true},
		{"too large, outcome unknown", fmt.Errorf("%w: update k: %w", etcdstore.ErrUnknownOutcome, etcdstore.ErrTooLarge), WriteOptions{}, false},
		{"an apply refused as too large", fmt.Errorf("update k: %w", etcdstore.ErrTooLarge), WriteOptions{applied: true}, false},
		{"another refusal", fmt.Errorf("update k: %w", etcdstore.ErrConflict), WriteOptions{}, false},
	} {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "c", ManagedFields: slices.Clone(entries)}}
		if got := dropManagedFields(tc.err, cm, tc.opts); got != tc.drop || (len(cm.ManagedFields) == 0) != tc.drop {
			t.Errorf("%s: dropped %v, managedFields left %v; want dropped %v", tc.name, got, cm.ManagedFields, tc.drop)
		}
	}
}

// unixOf is a managedFields time in seconds, 0 for none, as kube sorts them.
func unixOf(t *metav1.Time) int64 {
	if t == nil {
		return 0
	}
	return t.Unix()
}
