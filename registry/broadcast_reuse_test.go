package registry

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/concord-dev/concord/etcdstore"
	"github.com/concord-dev/concord/etcdstore/etcdtest"
)

// TestWatchEventsOfOwnWritesAreTheStoredObjects: the fan-out skips decoding
// the objects this replica wrote and the previous states it has seen, and
// what it sends instead must be what decoding the stored values gives: the
// same kind, the same JSON and the same protobuf, for a namespaced and a
// cluster-scoped kind, through create, update, patch, apply, a change that
// leaves a label selection (DELETED with the previous state) and delete.
func TestWatchEventsOfOwnWritesAreTheStoredObjects(t *testing.T) {
	e := etcdtest.Start(t)
	storage := etcdstore.New(e.Client, "/registry")
	stores := NewStores(storage, DefaultWatchConfig())
	for _, s := range stores {
		t.Cleanup(s.StopWatches)
	}
	if err := EnsureSystemNamespaces(testCtx(t), stores); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		res       *Resource
		namespace string
		object    func(name string) Object
	}{
		{ConfigMaps, "default", func(name string) Object {
			return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"in": "yes"}}, Data: map[string]string{"k": "v"}}
		}},
		{Leases, "default", func(name string) Object {
			holder := "a"
			return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"in": "yes"}}, Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder}}
		}},
		{Namespaces, "", func(name string) Object {
			return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"in": "yes"}}}
		}},
	} {
		t.Run(tc.res.Plural, func(t *testing.T) {
			var s *Store
			for _, st := range stores {
				if st.Resource == tc.res {
					s = st
				}
			}
			ctx := testCtx(t)
			rv, err := storage.CurrentRevision(ctx)
			if err != nil {
				t.Fatal(err)
			}
			events := make(chan watch.Event, 100)
			for _, selector := range []labels.Selector{labels.Everything(), labels.SelectorFromSet(labels.Set{"in": "yes"})} {
				w, err := s.Watch(ctx, tc.namespace, &metainternalversion.ListOptions{ResourceVersion: formatRevision(rv), LabelSelector: selector})
				if err != nil {
					t.Fatal(err)
				}
				go func() {
					_ = w.Run(ctx, func(ev watch.Event, _ *Encodings) error {
						if !selector.Empty() {
							events <- ev
						}
						return nil
					})
				}()
			}
			opts := WriteOptions{FieldManager: "test"}
			reused := 0
			name := "reuse-" + tc.res.Plural
			written := func(op string, obj Object, err error) {
				t.Helper()
				if err != nil {
					t.Fatalf("%s: %v", op, err)
				}
				want := watch.Modified
				if op == "create" {
					want = watch.Added
				}
				ev := nextEvent(t, events)
				if ev.Type != want {
					t.Fatalf("%s: a %s event; want %s", op, ev.Type, want)
				}
				if got := ev.Object.(Object); got.GetResourceVersion() != obj.GetResourceVersion() {
					t.Fatalf("%s: event at %s; want %s", op, got.GetResourceVersion(), obj.GetResourceVersion())
				}
				sameAsStored(t, s, ev.Object.(Object), 0)
				// Store.recent holds the event's state, under the key
				// writes look it up by.
				r, ok := s.recent.get(s.recentKey(tc.namespace, name))
				if !ok || formatRevision(r.stored.Revision) != obj.GetResourceVersion() {
					t.Fatalf("%s: Store.recent has %v at %d for %s; want the event's revision %s", op, ok, r.stored.Revision, name, obj.GetResourceVersion())
				}
				// The write's own object, not a decoding of it, unless the
				// event came before the write remembered it.
				if r.obj == ev.Object {
					reused++
				}
			}
			obj, err := s.Create(ctx, tc.namespace, tc.object(name), opts)
			written("create", obj, err)
			next := copyObject(obj)
			next.SetAnnotations(map[string]string{"step": "update"})
			obj, _, err = s.Update(ctx, tc.namespace, name, next, opts)
			written("update", obj, err)
			obj, err = s.Patch(ctx, tc.namespace, name, types.MergePatchType, []byte(`{"metadata":{"annotations":{"step":"patch"}}}`), opts)
			written("patch", obj, err)
			apply := []byte(`{"apiVersion":"` + tc.res.GroupVersion.String() + `","kind":"` + tc.res.Kind + `","metadata":{"name":"` + name + `","annotations":{"applied":"yes"}}}`)
			obj, _, err = s.Apply(ctx, tc.namespace, name, apply, WriteOptions{FieldManager: "applier"})
			written("apply", obj, err)
			for i := range 20 {
				obj, err = s.Patch(ctx, tc.namespace, name, types.MergePatchType, []byte(`{"metadata":{"annotations":{"step":"`+strconv.Itoa(i)+`"}}}`), opts)
				written("patch", obj, err)
			}
			// Namespaces are written by the namespace life cycle's own code.
			if reused == 0 && tc.res != Namespaces {
				t.Errorf("none of 24 events carried the object the write remembered")
			}

			// Leaving the selection: DELETED with the previous state (the
			// last event's object, copied) at the change's revision.
			before := obj.GetResourceVersion()
			obj, err = s.Patch(ctx, tc.namespace, name, types.MergePatchType, []byte(`{"metadata":{"labels":{"in":"no"}}}`), opts)
			if err != nil {
				t.Fatal(err)
			}
			ev := nextEvent(t, events)
			if ev.Type != watch.Deleted || ev.Object.(Object).GetResourceVersion() != obj.GetResourceVersion() {
				t.Fatalf("label removed: %s at %s; want DELETED at %s", ev.Type, ev.Object.(Object).GetResourceVersion(), obj.GetResourceVersion())
			}
			sameAsStored(t, s, ev.Object.(Object), parseRevision(t, before))
		})
	}
}

func nextEvent(t *testing.T, events <-chan watch.Event) watch.Event {
	t.Helper()
	select {
	case ev := <-events:
		return ev
	case <-time.After(10 * time.Second):
		t.Fatal("no event within 10s")
		return watch.Event{}
	}
}

func parseRevision(t *testing.T, rv string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(rv, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// sameAsStored checks that obj is what decoding its stored value gives
// (the value at revision from, stamped with obj's resourceVersion, when
// from is not 0): kind, JSON and protobuf.
func sameAsStored(t *testing.T, s *Store, obj Object, from int64) {
	t.Helper()
	rev := parseRevision(t, obj.GetResourceVersion())
	at := rev
	if from != 0 {
		at = from
	}
	stored, err := s.storage.Get(testCtx(t), s.ref(obj.GetNamespace(), obj.GetName()), at)
	if err != nil {
		t.Fatal(err)
	}
	stored.Revision = rev
	want, err := s.decode(s.keyOf(obj.GetNamespace(), obj.GetName()), stored)
	if err != nil {
		t.Fatal(err)
	}
	if g, w := obj.GetObjectKind().GroupVersionKind(), want.GetObjectKind().GroupVersionKind(); g != w {
		t.Errorf("%s at %d: kind %v; decoding gives %v", obj.GetName(), rev, g, w)
	}
	gotJSON, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	wantJSON, err := json.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(gotJSON, wantJSON) {
		t.Errorf("%s at %d: JSON\n%s\ndecoding gives\n%s", obj.GetName(), rev, gotJSON, wantJSON)
	}
	gotPB, err := obj.(protoMarshaler).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	wantPB, err := want.(protoMarshaler).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(gotPB, wantPB) {
		t.Errorf("%s at %d: protobuf encodings differ from decoding's:\n%x\n%x", obj.GetName(), rev, gotPB, wantPB)
	}
}

// An event's key in Store.recent is the one writes look objects up by.
func TestEventRecentKeyIsTheStoresKey(t *testing.T) {
	storage := etcdstore.New(etcdtest.Start(t).Client, "/registry")
	for _, tc := range []struct {
		res             *Resource
		namespace, name string
	}{
		{ConfigMaps, "team", "a"},
		{Namespaces, "", "team"},
	} {
		s := NewStore(storage, tc.res, DefaultWatchConfig(), WithoutReadCache())
		e, err := s.decodeEvent(etcdstore.Event{Key: strings.TrimPrefix(tc.namespace+"/"+tc.name, "/"), Revision: 2}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := e.recentKey(), s.recentKey(tc.namespace, tc.name); got != want {
			t.Errorf("%s %s/%s: event's key %q; the store's %q", tc.res.Plural, tc.namespace, tc.name, got, want)
		}
	}
}
