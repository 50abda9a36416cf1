package etcdstore_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/concord-dev/concord/etcdstore"
	"github.com/concord-dev/concord/etcdstore/etcdtest"
)

// A watch carries the values before each change only when it asks for them.
func TestWatchPrevValuesOnlyWhenAsked(t *testing.T) {
	e := etcdtest.Start(t)
	ctx := t.Context()
	s := etcdstore.New(e.Client, "/registry")
	from, err := s.CurrentRevision(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ref := etcdstore.Ref{Resource: "configmaps", Namespace: "default", Name: "a"}
	created, err := s.Create(ctx, ref, []byte("one"))
	if err != nil {
		t.Fatal(err)
	}
	updated, err := s.Update(ctx, ref, []byte("two"), created)
	if err != nil {
		t.Fatal(err)
	}
	deleted, err := s.Delete(ctx, ref, updated)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		opts etcdstore.WatchOptions
		want []etcdstore.Event
	}{
		{etcdstore.WatchOptions{PrevValues: true}, []etcdstore.Event{
			{Key: "default/a", Value: []byte("one"), Revision: created},
			{Key: "default/a", Value: []byte("two"), PrevValue: []byte("one"), PrevRevision: created, Revision: updated},
			{Key: "default/a", PrevValue: []byte("two"), PrevRevision: updated, Revision: deleted},
		}},
		{etcdstore.WatchOptions{}, []etcdstore.Event{
			{Key: "default/a", Value: []byte("one"), Revision: created},
			{Key: "default/a", Value: []byte("two"), Revision: updated},
			{Key: "default/a", Revision: deleted},
		}},
	} {
		w, err := s.Watch(ctx, "configmaps", from, tc.opts)
		if err != nil {
			t.Fatal(err)
		}
		var got []etcdstore.Event
		timeout := time.After(10 * time.Second)
		for len(got) < len(tc.want) {
			select {
			case r := <-w.C:
				if r.Err != nil {
					t.Fatal(r.Err)
				}
				got = append(got, r.Events...)
			case <-timeout:
				t.Fatalf("%+v: %d events within 10s; want %d", tc.opts, len(got), len(tc.want))
			}
		}
		if len(got) != len(tc.want) {
			t.Fatalf("%+v: %d events; want %d", tc.opts, len(got), len(tc.want))
		}
		for i, g := range got {
			w := tc.want[i]
			if g.Key != w.Key || g.Revision != w.Revision || g.PrevRevision != w.PrevRevision || !bytes.Equal(g.Value, w.Value) || !bytes.Equal(g.PrevValue, w.PrevValue) ||
				(g.Value == nil) != (w.Value == nil) || (g.PrevValue == nil) != (w.PrevValue == nil) {
				t.Errorf("%+v: event %d = %+v; want %+v", tc.opts, i, g, w)
			}
		}
	}
}
