package etcdstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/concord-dev/concord/etcdstore"
	"github.com/concord-dev/concord/etcdstore/etcdtest"
)

func newStore(t *testing.T) (*etcdstore.Store, *etcdtest.Etcd) {
	t.Helper()
	e := etcdtest.Start(t)
	return etcdstore.New(e.Client, "/registry"), e
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestCreateGetUpdateDelete(t *testing.T) {
	s, e := newStore(t)
	ctx := testContext(t)
	ref := etcdstore.Ref{Resource: "configmaps", Namespace: "default", Name: "flags"}

	rev1, err := s.Create(ctx, ref, []byte("v1"))
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	if _, err := s.Create(ctx, ref, []byte("again")); !errors.Is(err, etcdstore.ErrExists) {
		t.Fatalf("second Create = %v; want ErrExists", err)
	}
	raw, err := e.Client.Get(ctx, "/registry/configmaps/default/flags")
	if err != nil || len(raw.Kvs) != 1 || string(raw.Kvs[0].Value) != "v1" || raw.Kvs[0].ModRevision != rev1 {
		t.Fatalf("raw etcd key = %v, %v; want value v1 at revision %d", raw, err, rev1)
	}

	got, err := s.Get(ctx, ref, 0)
	if err != nil || string(got.Value) != "v1" || got.Revision != rev1 {
		t.Fatalf("Get = %+v, %v; want v1 at %d", got, err, rev1)
	}

	rev2, err := s.Update(ctx, ref, []byte("v2"), rev1)
	if err != nil || rev2 <= rev1 {
		t.Fatalf("Update at current revision = %d, %v; want a revision after %d", rev2, err, rev1)
	}
	if _, err := s.Update(ctx, ref, []byte("stale"), rev1); !errors.Is(err, etcdstore.ErrConflict) {
		t.Fatalf("Update at stale revision = %v; want ErrConflict", err)
	}
	if _, err := s.Delete(ctx, ref, rev1); !errors.Is(err, etcdstore.ErrConflict) {
		t.Fatalf("Delete at stale revision = %v; want ErrConflict", err)
	}
	got, err = s.Get(ctx, ref, 0)
	if err != nil || string(got.Value) != "v2" || got.Revision != rev2 {
		t.Fatalf("after stale writes Get = %+v, %v; want v2 at %d", got, err, rev2)
	}

	delRev, err := s.Delete(ctx, ref, rev2)
	if err != nil || delRev <= rev2 {
		t.Fatalf("Delete = %d, %v; want a revision after %d", delRev, err, rev2)
	}
	for name, err := range map[string]error{
		"Get":    func() error { _, err := s.Get(ctx, ref, 0); return err }(),
		"Update": func() error { _, err := s.Update(ctx, ref, []byte("x"), rev2); return err }(),
		"Delete": func() error { _, err := s.Delete(ctx, ref, rev2); return err }(),
	} {
		if !errors.Is(err, etcdstore.ErrNotFound) {
			t.Errorf("%s after delete = %v; want ErrNotFound", name, err)
		}
	}
	// The old version is still readable at its revision until compaction.
	old, err := s.Get(ctx, ref, rev1)
	if err != nil || string(old.Value) != "v1" {
		t.Errorf("Get at revision %d = %+v, %v; want v1", rev1, old, err)
	}
}

func TestListIsolatesNamespacesAndReportsRevision(t *testing.T) {
	s, _ := newStore(t)
	ctx := testContext(t)
	var last int64
	for _, ref := range []etcdstore.Ref{
		{Resource: "configmaps", Namespace: "a", Name: "one"},
		{Resource: "configmaps", Namespace: "a", Name: "two"},
		{Resource: "configmaps", Namespace: "ab", Name: "three"},
		{Resource: "secrets", Namespace: "a", Name: "other-resource"},
	} {
		rev, err := s.Create(ctx, ref, []byte(ref.Name))
		if err != nil {
			t.Fatalf("Create %v: %v", ref, err)
		}
		last = rev
	}
	tests := []struct {
		namespace string
		want      []string
	}{
		{"a", []string{"one", "two"}},
		{"ab", []string{"three"}},
		{"", []string{"one", "two", "three"}},
		{"empty", nil},
	}
	for _, tc := range tests {
		res, err := s.List(ctx, "configmaps", tc.namespace, etcdstore.ListOptions{})
		if err != nil {
			t.Fatalf("List(%q): %v", tc.namespace, err)
		}
		var got []string
		for _, o := range res.Objects {
			got = append(got, string(o.Value))
		}
		if len(got) != len(tc.want) || (len(got) > 0 && !equal(got, tc.want)) {
			t.Errorf("List(%q) = %v; want %v", tc.namespace, got, tc.want)
		}
		if res.Revision != last {
			t.Errorf("List(%q) revision = %d; want the store revision %d", tc.namespace, res.Revision, last)
		}
	}
}

func equal(a, b []string) bool {
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return len(a) == len(b)
}

// TestGroupResourceKeys: a resource of two segments (custom resources:
// "<group>/<plural>") is keyed as kube-apiserver keys it, and its list
// range holds its own keys only.
func TestGroupResourceKeys(t *testing.T) {
	s, e := newStore(t)
	ctx := testContext(t)
	ref := etcdstore.Ref{Resource: "example.com/widgets", Namespace: "default", Name: "w"}
	if _, err := s.Create(ctx, ref, []byte("v1")); err != nil {
		t.Fatalf("Create(%+v): %v", ref, err)
	}
	other := etcdstore.Ref{Resource: "example.com/widgetsets", Namespace: "default", Name: "w"}
	if _, err := s.Create(ctx, other, []byte("v2")); err != nil {
		t.Fatalf("Create(%+v): %v", other, err)
	}
	raw, err := e.Client.Get(ctx, "/registry/example.com/widgets/default/w")
	if err != nil || len(raw.Kvs) != 1 || string(raw.Kvs[0].Value) != "v1" {
		t.Fatalf("raw etcd key = %v, %v; want value v1", raw, err)
	}
	list, err := s.List(ctx, "example.com/widgets", "", etcdstore.ListOptions{})
	if err != nil || len(list.Objects) != 1 || list.Objects[0].Key != "default/w" {
		t.Fatalf("List(example.com/widgets) = %+v, %v; want the one key default/w", list, err)
	}
	if n, err := s.Count(ctx, "example.com/widgets"); err != nil || n != 1 {
		t.Errorf("Count(example.com/widgets) = %d, %v; want 1", n, err)
	}
}

func TestInvalidKeysNeverReachEtcd(t *testing.T) {
	s, e := newStore(t)
	ctx := testContext(t)
	for _, ref := range []etcdstore.Ref{
		{Resource: "configmaps", Namespace: "default", Name: ""},
		{Resource: "configmaps", Namespace: "default", Name: ".."},
		{Resource: "configmaps", Namespace: "default", Name: "."},
		{Resource: "configmaps", Namespace: "default", Name: "a/b"},
		{Resource: "configmaps", Namespace: "..", Name: "x"},
		{Resource: "configmaps", Namespace: "a/../b", Name: "x"},
		{Resource: "", Namespace: "default", Name: "x"},
		{Resource: "example.com/", Namespace: "default", Name: "x"},
		{Resource: "/widgets", Namespace: "default", Name: "x"},
		{Resource: "example.com/../widgets", Namespace: "default", Name: "x"},
		{Resource: "example.com//widgets", Name: "x"},
	} {
		if _, err := s.Create(ctx, ref, []byte("x")); !errors.Is(err, etcdstore.ErrInvalidKey) {
			t.Errorf("Create(%+v) = %v; want ErrInvalidKey", ref, err)
		}
		if _, err := s.Get(ctx, ref, 0); !errors.Is(err, etcdstore.ErrInvalidKey) {
			t.Errorf("Get(%+v) = %v; want ErrInvalidKey", ref, err)
		}
	}
	if _, err := s.List(ctx, "configmaps", "..", etcdstore.ListOptions{}); !errors.Is(err, etcdstore.ErrInvalidKey) {
		t.Errorf("List(..) = %v; want ErrInvalidKey", err)
	}
	if _, err := s.List(ctx, "example.com/..", "", etcdstore.ListOptions{}); !errors.Is(err, etcdstore.ErrInvalidKey) {
		t.Errorf("List(example.com/..) = %v; want ErrInvalidKey", err)
	}
	all, err := e.Client.Get(ctx, "\x00", clientv3.WithFromKey())
	if err != nil {
		t.Fatal(err)
	}
	if all.Count != 0 {
		t.Errorf("etcd holds %d keys after only invalid writes; want 0", all.Count)
	}
}

func TestReadsAtCompactedOrFutureRevision(t *testing.T) {
	s, e := newStore(t)
	ctx := testContext(t)
	ref := etcdstore.Ref{Resource: "configmaps", Namespace: "default", Name: "c"}
	rev1, err := s.Create(ctx, ref, []byte("1"))
	if err != nil {
		t.Fatal(err)
	}
	rev2, err := s.Update(ctx, ref, []byte("2"), rev1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Client.Compact(ctx, rev2); err != nil {
		t.Fatal(err)
	}
	if _, err := s.List(ctx, "configmaps", "default", etcdstore.ListOptions{Revision: rev1}); !errors.Is(err, etcdstore.ErrCompacted) {
		t.Errorf("List at compacted revision = %v; want ErrCompacted", err)
	}
	if _, err := s.Get(ctx, ref, rev1); !errors.Is(err, etcdstore.ErrCompacted) {
		t.Errorf("Get at compacted revision = %v; want ErrCompacted", err)
	}
	if _, err := s.List(ctx, "configmaps", "default", etcdstore.ListOptions{Revision: rev2 + 100}); !errors.Is(err, etcdstore.ErrFutureRevision) {
		t.Errorf("List at future revision = %v; want ErrFutureRevision", err)
	}
	res, err := s.List(ctx, "configmaps", "default", etcdstore.ListOptions{Revision: rev2})
	if err != nil || len(res.Objects) != 1 || string(res.Objects[0].Value) != "2" {
		t.Errorf("List at compaction revision = %+v, %v; want the one object", res, err)
	}
}
