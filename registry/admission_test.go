package registry

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/admission"

	"github.com/concord-dev/concord/etcdstore"
	"github.com/concord-dev/concord/etcdstore/etcdtest"
)

// admitted is one call of a recordingAdmission: its step and a copy of
// the request as it was passed.
type admitted struct {
	step string // "mutate" or "validate"
	req  AdmissionRequest
}

// recordingAdmission records every call, then runs mutate or validate if
// set.
type recordingAdmission struct {
	mu       sync.Mutex
	calls    []admitted
	mutate   func(req *AdmissionRequest) error
	validate func(req *AdmissionRequest) error
}

func (a *recordingAdmission) record(step string, req *AdmissionRequest) {
	c := *req
	if c.Object != nil {
		c.Object = c.Object.DeepCopyObject()
	}
	if c.OldObject != nil {
		c.OldObject = c.OldObject.DeepCopyObject()
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.calls = append(a.calls, admitted{step, c})
}

func (a *recordingAdmission) Mutate(_ context.Context, req *AdmissionRequest) error {
	a.record("mutate", req)
	if a.mutate != nil {
		return a.mutate(req)
	}
	return nil
}

func (a *recordingAdmission) Validate(_ context.Context, req *AdmissionRequest) error {
	a.record("validate", req)
	if a.validate != nil {
		return a.validate(req)
	}
	return nil
}

// take returns the calls recorded since the last take.
func (a *recordingAdmission) take() []admitted {
	a.mu.Lock()
	defer a.mu.Unlock()
	calls := a.calls
	a.calls = nil
	return calls
}

type admissionFixture struct {
	adm *recordingAdmission
	// configMaps and widgets admit through adm; plain writes ConfigMaps
	// without admission (another client).
	configMaps, widgets, plain *Store
}

func newAdmissionFixture(t *testing.T) *admissionFixture {
	t.Helper()
	e := etcdtest.Start(t)
	storage := etcdstore.New(e.Client, "/registry")
	f := &admissionFixture{adm: &recordingAdmission{}}
	stores := NewStores(storage, DefaultWatchConfig(), WithAdmission(f.adm))
	for _, s := range stores {
		if s.Resource == ConfigMaps {
			f.configMaps = s
		}
	}
	f.widgets = NewStore(storage, widgetResource(t, "v1"), DefaultWatchConfig(), WithAdmission(f.adm))
	f.plain = NewStore(storage, ConfigMaps, DefaultWatchConfig())
	f.plain.namespaces, f.widgets.namespaces = f.configMaps.namespaces, f.configMaps.namespaces
	t.Cleanup(func() {
		for _, s := range append(stores, f.widgets, f.plain) {
			s.StopWatches()
		}
	})
	if err := EnsureSystemNamespaces(testCtx(t), stores); err != nil {
		t.Fatal(err)
	}
	f.adm.take()
	return f
}

func configMap(name string, data map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: data}
}

// call is what a test expects of one admission call; object and old say
// whether Object and OldObject are set.
type call struct {
	step, op, subresource, namespace, name string
	object, old                            bool
	options                                string // the Options' type
	dryRun                                 bool
}

func callOf(a admitted) call {
	return call{
		step: a.step, op: string(a.req.Operation), subresource: a.req.Subresource, namespace: a.req.Namespace, name: a.req.Name,
		object: a.req.Object != nil, old: a.req.OldObject != nil, options: optionsType(a.req.Options), dryRun: a.req.DryRun,
	}
}

func optionsType(o runtime.Object) string {
	switch o := o.(type) {
	case *metav1.CreateOptions:
		return "CreateOptions " + o.FieldManager + " " + strings.Join(o.DryRun, ",")
	case *metav1.UpdateOptions:
		return "UpdateOptions " + o.FieldManager + " " + strings.Join(o.DryRun, ",")
	case *metav1.DeleteOptions:
		p := ""
		if o.PropagationPolicy != nil {
			p = string(*o.PropagationPolicy)
		}
		return "DeleteOptions " + p + " " + strings.Join(o.DryRun, ",")
	}
	return ""
}

// both is a mutating then a validating call of the same request.
func both(c call) []call {
	m, v := c, c
	m.step, v.step = "mutate", "validate"
	return []call{m, v}
}

// TestAdmissionOfEachVerb: every write verb calls Admission as kube-apiserver
// calls its admission chain — mutating, then validating — with kube's
// operation, subresource, name, old and new objects, options and dry run.
func TestAdmissionOfEachVerb(t *testing.T) {
	f := newAdmissionFixture(t)
	ctx := testCtx(t)
	mustCreate := func(name string) {
		t.Helper()
		if _, err := f.plain.Create(ctx, "default", configMap(name, map[string]string{"a": "1"}), WriteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	background := metav1.DeletePropagationBackground
	rvOf := func(name string) string {
		t.Helper()
		obj, err := f.plain.GetFromStorage(ctx, "default", name)
		if err != nil {
			t.Fatal(err)
		}
		return obj.GetResourceVersion()
	}
	for _, tc := range []struct {
		name  string
		setup func()
		write func() error
		want  []call
	}{
		{"create", nil, func() error {
			_, err := f.configMaps.Create(ctx, "default", configMap("c1", nil), WriteOptions{FieldManager: "m"})
			return err
		}, both(call{op: "CREATE", namespace: "default", name: "c1", object: true, options: "CreateOptions m "})},
		{"create dry run", nil, func() error {
			_, err := f.configMaps.Create(ctx, "default", configMap("c2", nil), WriteOptions{FieldManager: "m", DryRun: true})
			return err
		}, both(call{op: "CREATE", namespace: "default", name: "c2", object: true, options: "CreateOptions m All", dryRun: true})},
		{"update", func() { mustCreate("u1") }, func() error {
			cm := configMap("u1", map[string]string{"a": "2"})
			cm.ResourceVersion = rvOf("u1")
			_, _, err := f.configMaps.Update(ctx, "default", "u1", cm, WriteOptions{FieldManager: "m"})
			return err
		}, both(call{op: "UPDATE", namespace: "default", name: "u1", object: true, old: true, options: "UpdateOptions m "})},
		{"create on update", nil, func() error {
			_, _, err := f.configMaps.Update(ctx, "default", "u2", configMap("u2", nil), WriteOptions{FieldManager: "m", CreateOnly: true})
			return err
		}, both(call{op: "CREATE", namespace: "default", name: "u2", object: true, options: "CreateOptions m "})},
		{"json patch", func() { mustCreate("p1") }, func() error {
			_, err := f.configMaps.Patch(ctx, "default", "p1", types.JSONPatchType, []byte(`[{"op":"add","path":"/data/b","value":"2"}]`), WriteOptions{FieldManager: "m"})
			return err
		}, both(call{op: "UPDATE", namespace: "default", name: "p1", object: true, old: true, options: "UpdateOptions m "})},
		{"merge patch dry run", func() { mustCreate("p2") }, func() error {
			_, err := f.configMaps.Patch(ctx, "default", "p2", types.MergePatchType, []byte(`{"data":{"b":"2"}}`), WriteOptions{FieldManager: "m", DryRun: true})
			return err
		}, both(call{op: "UPDATE", namespace: "default", name: "p2", object: true, old: true, options: "UpdateOptions m All", dryRun: true})},
		{"strategic merge patch", func() { mustCreate("p3") }, func() error {
			_, err := f.configMaps.Patch(ctx, "default", "p3", types.StrategicMergePatchType, []byte(`{"data":{"b":"2"}}`), WriteOptions{FieldManager: "m"})
			return err
		}, both(call{op: "UPDATE", namespace: "default", name: "p3", object: true, old: true, options: "UpdateOptions m "})},
		{"apply creating", nil, func() error {
			_, _, err := f.configMaps.Apply(ctx, "default", "a1", []byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a1"},"data":{"x":"1"}}`), WriteOptions{FieldManager: "m"})
			return err
		}, both(call{op: "CREATE", namespace: "default", name: "a1", object: true, options: "CreateOptions m "})},
		{"apply updating", func() { mustCreate("a2") }, func() error {
			_, _, err := f.configMaps.Apply(ctx, "default", "a2", []byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a2"},"data":{"x":"1"}}`), WriteOptions{FieldManager: "m"})
			return err
		}, both(call{op: "UPDATE", namespace: "default", name: "a2", object: true, old: true, options: "UpdateOptions m "})},
		{"delete", func() { mustCreate("d1") }, func() error {
			_, err := f.configMaps.Delete(ctx, "default", "d1", &metav1.DeleteOptions{PropagationPolicy: &background}, WriteOptions{})
			return err
		}, both(call{op: "DELETE", namespace: "default", name: "d1", old: true, options: "DeleteOptions Background "})},
		{"delete dry run", func() { mustCreate("d2") }, func() error {
			_, err := f.configMaps.Delete(ctx, "default", "d2", nil, WriteOptions{DryRun: true})
			return err
		}, both(call{op: "DELETE", namespace: "default", name: "d2", old: true, options: "DeleteOptions  All", dryRun: true})},
		{"scale", func() { mustCreate("s1") }, func() error {
			cm := configMap("s1", map[string]string{"a": "2"})
			cm.ResourceVersion = rvOf("s1")
			_, _, err := f.configMaps.Update(ctx, "default", "s1", cm, WriteOptions{FieldManager: "m", Scale: true, Tracked: true})
			return err
		}, both(call{op: "UPDATE", subresource: "scale", namespace: "default", name: "s1", object: true, old: true, options: "UpdateOptions m "})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.setup != nil {
				tc.setup()
			}
			f.adm.take()
			if err := tc.write(); err != nil {
				t.Fatal(err)
			}
			var got []call
			for _, c := range f.adm.take() {
				got = append(got, callOf(c))
			}
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(call{})); diff != "" {
				t.Errorf("admission calls (-want +got):\n%s", diff)
			}
		})
	}

	// Dry runs stored nothing.
	for _, name := range []string{"c2"} {
		if _, err := f.plain.GetFromStorage(ctx, "default", name); !apierrors.IsNotFound(err) {
			t.Errorf("dry-run create of %s: get = %v; want 404", name, err)
		}
	}
	if obj, err := f.plain.GetFromStorage(ctx, "default", "p2"); err != nil || obj.(*corev1.ConfigMap).Data["b"] != "" {
		t.Errorf("dry-run patch of p2 stored %v, %v", obj, err)
	}
	if _, err := f.plain.GetFromStorage(ctx, "default", "d2"); err != nil {
		t.Errorf("dry-run delete of d2: %v", err)
	}
}

// TestAdmissionSees: what each step sees, as kube's: the mutating step of a
// create the client's object with its managedFields but no uid,
// creationTimestamp or generated name; the validating step the object as it
// will be stored; a delete the stored object as old and its DeleteOptions.
func TestAdmissionSees(t *testing.T) {
	f := newAdmissionFixture(t)
	ctx := testCtx(t)
	in := configMap("", map[string]string{"a": "1"})
	in.GenerateName = "gen-"
	in.UID = "client-uid"
	created, err := f.configMaps.Create(ctx, "default", in, WriteOptions{FieldManager: "m"})
	if err != nil {
		t.Fatal(err)
	}
	calls := f.adm.take()
	if len(calls) != 2 {
		t.Fatalf("calls of a create: %d; want 2", len(calls))
	}
	m, v := calls[0].req.Object.(*corev1.ConfigMap), calls[1].req.Object.(*corev1.ConfigMap)
	if m.Name != "" || m.UID != "" || !m.CreationTimestamp.IsZero() || len(m.ManagedFields) != 1 || calls[0].req.Name != "" {
		t.Errorf("mutating step saw name %q (request %q), uid %q, creationTimestamp %v, managedFields %v; want none but managedFields", m.Name, calls[0].req.Name, m.UID, m.CreationTimestamp, m.ManagedFields)
	}
	if v.Name != created.GetName() || calls[1].req.Name != created.GetName() || v.UID != created.GetUID() || v.CreationTimestamp.IsZero() || len(v.ManagedFields) != 1 {
		t.Errorf("validating step saw name %q (request %q), uid %q, creationTimestamp %v, managedFields %v; want those stored (%s, %s)", v.Name, calls[1].req.Name, v.UID, v.CreationTimestamp, v.ManagedFields, created.GetName(), created.GetUID())
	}

	orphan := metav1.DeletePropagationOrphan
	if _, err := f.configMaps.Delete(ctx, "default", created.GetName(), &metav1.DeleteOptions{PropagationPolicy: &orphan}, WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, c := range f.adm.take() {
		old, ok := c.req.OldObject.(*corev1.ConfigMap)
		opts, _ := c.req.Options.(*metav1.DeleteOptions)
		if !ok || old.UID != created.GetUID() || old.ResourceVersion != created.GetResourceVersion() || c.req.Object != nil {
			t.Errorf("%s of a delete: old %v, object %v; want the stored object and none", c.step, c.req.OldObject, c.req.Object)
		}
		if opts == nil || opts.PropagationPolicy == nil || *opts.PropagationPolicy != orphan || opts.Kind != "DeleteOptions" || opts.APIVersion != "meta.k8s.io/v1" {
			t.Errorf("%s of a delete: options %#v; want the DeleteOptions sent", c.step, c.req.Options)
		}
	}
}

// TestAdmissionStatusAndCollection: a custom resource's status writes are
// admitted with subresource "status", and a delete of a collection admits
// each object, without a name as kube's deletecollection.
func TestAdmissionStatusAndCollection(t *testing.T) {
	f := newAdmissionFixture(t)
	ctx := testCtx(t)
	for _, name := range []string{"w1", "w2"} {
		if _, err := f.widgets.Create(ctx, "default", widget(t, widgetJSON(name, `{"replicas":1,"maxReplicas":3}`)), WriteOptions{FieldManager: "m"}); err != nil {
			t.Fatal(err)
		}
	}
	f.adm.take()
	if _, err := f.widgets.PatchStatus(ctx, "default", "w1", types.MergePatchType, []byte(`{"status":{"ready":true}}`), WriteOptions{FieldManager: "m"}); err != nil {
		t.Fatal(err)
	}
	cur, err := f.widgets.Get(ctx, "default", "w2")
	if err != nil {
		t.Fatal(err)
	}
	u := cur.(*unstructured.Unstructured)
	if err := unstructured.SetNestedField(u.Object, "yes", "status", "ready"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.widgets.UpdateStatus(ctx, "default", "w2", u, WriteOptions{FieldManager: "m"}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.widgets.DeleteCollection(ctx, "default", &metainternalversion.ListOptions{}, nil, WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	var got []call
	olds := map[string]bool{}
	for _, c := range f.adm.take() {
		got = append(got, callOf(c))
		if c.req.Operation == admission.Delete {
			olds[c.req.OldObject.(Object).GetName()] = true
		}
	}
	want := append(both(call{op: "UPDATE", subresource: "status", namespace: "default", name: "w1", object: true, old: true, options: "UpdateOptions m "}),
		both(call{op: "UPDATE", subresource: "status", namespace: "default", name: "w2", object: true, old: true, options: "UpdateOptions m "})...)
	want = append(want, both(call{op: "DELETE", namespace: "default", old: true, options: "DeleteOptions  "})...)
	want = append(want, both(call{op: "DELETE", namespace: "default", old: true, options: "DeleteOptions  "})...)
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(call{})); diff != "" {
		t.Errorf("admission calls (-want +got):\n%s", diff)
	}
	if !olds["w1"] || !olds["w2"] {
		t.Errorf("deletecollection admitted the deletes of %v; want w1 and w2", olds)
	}
}

// TestAdmissionMutationStored: what mutating admission sets is stored and
// answered, and belongs to no managedFields entry (kube does not track
// admission's changes).
func TestAdmissionMutationStored(t *testing.T) {
	f := newAdmissionFixture(t)
	ctx := testCtx(t)
	f.adm.mutate = func(req *AdmissionRequest) error {
		if cm, ok := req.Object.(*corev1.ConfigMap); ok {
			if cm.Labels == nil {
				cm.Labels = map[string]string{}
			}
			cm.Labels["admitted"] = string(req.Operation)
		}
		return nil
	}
	out, err := f.configMaps.Create(ctx, "default", configMap("m1", map[string]string{"a": "1"}), WriteOptions{FieldManager: "m"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.configMaps.Patch(ctx, "default", "m1", types.MergePatchType, []byte(`{"data":{"a":"2"}}`), WriteOptions{FieldManager: "m"}); err != nil {
		t.Fatal(err)
	}
	stored, err := f.plain.GetFromStorage(ctx, "default", "m1")
	if err != nil {
		t.Fatal(err)
	}
	if got := out.GetLabels()["admitted"]; got != "CREATE" {
		t.Errorf("created object's label admitted = %q; want CREATE", got)
	}
	if got := stored.GetLabels()["admitted"]; got != "UPDATE" {
		t.Errorf("stored label admitted = %q; want UPDATE", got)
	}
	for _, e := range stored.GetManagedFields() {
		if strings.Contains(string(e.FieldsV1.Raw), "admitted") || strings.Contains(string(e.FieldsV1.Raw), "labels") {
			t.Errorf("managedFields entry of %s owns the admission's label: %s", e.Manager, e.FieldsV1.Raw)
		}
	}
}

// TestAdmissionDenial: a refusal of either step is the write's answer —
// a Status as it is, another error a 500 — and nothing is stored.
func TestAdmissionDenial(t *testing.T) {
	f := newAdmissionFixture(t)
	ctx := testCtx(t)
	if _, err := f.plain.Create(ctx, "default", configMap("kept", map[string]string{"a": "1"}), WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	denied := apierrors.NewForbidden(ConfigMaps.GroupResource(), "x", errors.New("no"))
	for _, tc := range []struct {
		name        string
		mutateErr   error
		validateErr error
		code        int32
		calls       int
	}{
		{"mutating Status", denied, nil, http.StatusForbidden, 1},
		{"validating Status", nil, denied, http.StatusForbidden, 2},
		{"validating plain error", nil, errors.New("broken"), http.StatusInternalServerError, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f.adm.mutate = func(*AdmissionRequest) error { return tc.mutateErr }
			f.adm.validate = func(*AdmissionRequest) error { return tc.validateErr }
			f.adm.take()
			writes := map[string]func() error{
				"create": func() error {
					_, err := f.configMaps.Create(ctx, "default", configMap("new", nil), WriteOptions{})
					return err
				},
				"patch": func() error {
					_, err := f.configMaps.Patch(ctx, "default", "kept", types.MergePatchType, []byte(`{"data":{"a":"2"}}`), WriteOptions{})
					return err
				},
				"delete": func() error {
					_, err := f.configMaps.Delete(ctx, "default", "kept", nil, WriteOptions{})
					return err
				},
			}
			for what, write := range writes {
				err := write()
				var status apierrors.APIStatus
				if !errors.As(err, &status) || status.Status().Code != tc.code {
					t.Errorf("%s: %v; want a %d", what, err, tc.code)
				}
				if n := len(f.adm.take()); n != tc.calls {
					t.Errorf("%s: %d admission calls; want %d (called once per decision)", what, n, tc.calls)
				}
			}
			if _, err := f.plain.GetFromStorage(ctx, "default", "new"); !apierrors.IsNotFound(err) {
				t.Errorf("refused create stored: %v", err)
			}
			kept, err := f.plain.GetFromStorage(ctx, "default", "kept")
			if err != nil || kept.(*corev1.ConfigMap).Data["a"] != "1" {
				t.Errorf("refused patch or delete changed kept: %v, %v", kept, err)
			}
		})
	}
}

// TestAdmissionAgainAfterConflict: a patch that loses its race to another
// write is applied to the new state and admitted again on it.
func TestAdmissionAgainAfterConflict(t *testing.T) {
	f := newAdmissionFixture(t)
	ctx := testCtx(t)
	if _, err := f.plain.Create(ctx, "default", configMap("raced", map[string]string{"a": "1"}), WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	f.adm.validate = func(*AdmissionRequest) error {
		once.Do(func() { // another client writes between the decision and the transaction
			_, err := f.plain.Patch(ctx, "default", "raced", types.MergePatchType, []byte(`{"data":{"other":"x"}}`), WriteOptions{})
			if err != nil {
				t.Errorf("concurrent patch: %v", err)
			}
		})
		return nil
	}
	out, err := f.configMaps.Patch(ctx, "default", "raced", types.MergePatchType, []byte(`{"data":{"mine":"y"}}`), WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if d := out.(*corev1.ConfigMap).Data; d["other"] != "x" || d["mine"] != "y" {
		t.Errorf("patched data %v; want both writes", d)
	}
	calls := f.adm.take()
	var steps []string
	for _, c := range calls {
		steps = append(steps, c.step)
	}
	if diff := cmp.Diff([]string{"mutate", "validate", "mutate", "validate"}, steps); diff != "" {
		t.Fatalf("admission steps (-want +got):\n%s", diff)
	}
	for i, wantOther := range []string{"", "", "x", "x"} {
		if got := calls[i].req.OldObject.(*corev1.ConfigMap).Data["other"]; got != wantOther {
			t.Errorf("call %d (%s) saw old data.other %q; want %q", i, calls[i].step, got, wantOther)
		}
		if i >= 2 && calls[i].req.Object.(*corev1.ConfigMap).Data["other"] != "x" {
			t.Errorf("call %d (%s) admitted %v; want the patch on the new state", i, calls[i].step, calls[i].req.Object)
		}
	}
}

// TestAdmissionCannotRename: mutating admission may not change an object's
// name, namespace or uid; kube's metadata validation refuses it (422,
// field is immutable) and nothing is stored.
func TestAdmissionCannotRename(t *testing.T) {
	f := newAdmissionFixture(t)
	ctx := testCtx(t)
	if _, err := f.plain.Create(ctx, "default", configMap("named", nil), WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		change func(cm *corev1.ConfigMap)
		field  string
	}{
		{"name", func(cm *corev1.ConfigMap) { cm.Name = "renamed" }, "metadata.name"},
		{"namespace", func(cm *corev1.ConfigMap) { cm.Namespace = "kube-system" }, "metadata.namespace"},
		{"uid", func(cm *corev1.ConfigMap) { cm.UID = "other" }, "metadata.uid"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f.adm.mutate = func(req *AdmissionRequest) error {
				tc.change(req.Object.(*corev1.ConfigMap))
				return nil
			}
			_, createErr := f.configMaps.Create(ctx, "default", configMap("fresh", nil), WriteOptions{})
			_, patchErr := f.configMaps.Patch(ctx, "default", "named", types.MergePatchType, []byte(`{"data":{"a":"1"}}`), WriteOptions{})
			for what, err := range map[string]error{"create": createErr, "patch": patchErr} {
				var status apierrors.APIStatus
				if !errors.As(err, &status) || status.Status().Reason != metav1.StatusReasonInvalid ||
					status.Status().Details == nil || len(status.Status().Details.Causes) != 1 ||
					status.Status().Details.Causes[0].Field != tc.field || !strings.Contains(status.Status().Details.Causes[0].Message, "field is immutable") {
					t.Errorf("%s: %v; want 422 %s: field is immutable", what, err, tc.field)
				}
			}
			for _, ns := range []string{"default", "kube-system"} {
				for _, name := range []string{"fresh", "renamed"} {
					if _, err := f.plain.GetFromStorage(ctx, ns, name); !apierrors.IsNotFound(err) {
						t.Errorf("%s/%s stored: %v", ns, name, err)
					}
				}
			}
			if cm, err := f.plain.GetFromStorage(ctx, "default", "named"); err != nil || len(cm.(*corev1.ConfigMap).Data) != 0 {
				t.Errorf("named changed: %v, %v", cm, err)
			}
		})
	}
}

// TestAdmissionMutationValidated: the object is validated as mutating
// admission left it, on a create as on an update (422, nothing stored).
func TestAdmissionMutationValidated(t *testing.T) {
	f := newAdmissionFixture(t)
	ctx := testCtx(t)
	if _, err := f.plain.Create(ctx, "default", configMap("valid", map[string]string{"a": "1"}), WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	f.adm.mutate = func(req *AdmissionRequest) error {
		req.Object.(*corev1.ConfigMap).Data["bad key!"] = "x"
		return nil
	}
	_, createErr := f.configMaps.Create(ctx, "default", configMap("invalid", map[string]string{"a": "1"}), WriteOptions{})
	_, patchErr := f.configMaps.Patch(ctx, "default", "valid", types.MergePatchType, []byte(`{"data":{"a":"2"}}`), WriteOptions{})
	cm := configMap("valid", map[string]string{"a": "3"})
	_, _, updateErr := f.configMaps.Update(ctx, "default", "valid", cm, WriteOptions{IfMatch: func(string) bool { return true }})
	for what, err := range map[string]error{"create": createErr, "patch": patchErr, "update": updateErr} {
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "bad key!") {
			t.Errorf("%s mutated to an invalid key: %v; want 422 naming it", what, err)
		}
	}
	if _, err := f.plain.GetFromStorage(ctx, "default", "invalid"); !apierrors.IsNotFound(err) {
		t.Errorf("invalid create stored: %v", err)
	}
	if got, err := f.plain.GetFromStorage(ctx, "default", "valid"); err != nil || got.(*corev1.ConfigMap).Data["a"] != "1" {
		t.Errorf("valid changed: %v, %v", got, err)
	}
}

// TestAdmissionOfDeletesAgainAfterConflict: a delete that loses its race is
// admitted again with the new stored object; a Namespace's delete is
// admitted with its own name as namespace, as kube's.
func TestAdmissionOfDeletesAgainAfterConflict(t *testing.T) {
	f := newAdmissionFixture(t)
	ctx := testCtx(t)
	if _, err := f.plain.Create(ctx, "default", configMap("gone", map[string]string{"a": "1"}), WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	f.adm.validate = func(*AdmissionRequest) error {
		once.Do(func() {
			if _, err := f.plain.Patch(ctx, "default", "gone", types.MergePatchType, []byte(`{"data":{"a":"2"}}`), WriteOptions{}); err != nil {
				t.Errorf("concurrent patch: %v", err)
			}
		})
		return nil
	}
	if _, err := f.configMaps.Delete(ctx, "default", "gone", nil, WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	var olds []string
	for _, c := range f.adm.take() {
		olds = append(olds, c.step+" "+c.req.OldObject.(*corev1.ConfigMap).Data["a"])
	}
	if diff := cmp.Diff([]string{"mutate 1", "validate 1", "mutate 2", "validate 2"}, olds); diff != "" {
		t.Errorf("admission of the delete, with the old data (-want +got):\n%s", diff)
	}
	if _, err := f.plain.GetFromStorage(ctx, "default", "gone"); !apierrors.IsNotFound(err) {
		t.Errorf("get after delete: %v; want 404", err)
	}

	f.adm.validate = nil
	namespaces := f.configMaps.namespaces
	if _, err := namespaces.Create(ctx, "", &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team"}}, WriteOptions{FieldManager: "m"}); err != nil {
		t.Fatal(err)
	}
	if _, err := namespaces.Delete(ctx, "", "team", nil, WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	var got []call
	for _, c := range f.adm.take() {
		got = append(got, callOf(c))
	}
	want := append(both(call{op: "CREATE", namespace: "team", name: "team", object: true, options: "CreateOptions m "}),
		both(call{op: "DELETE", namespace: "team", name: "team", old: true, options: "DeleteOptions  "})...)
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(call{})); diff != "" {
		t.Errorf("admission of a Namespace (-want +got):\n%s", diff)
	}
}
