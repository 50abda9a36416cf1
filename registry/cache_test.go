package registry

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/concord-dev/concord/etcdstore"
	"github.com/concord-dev/concord/etcdstore/etcdtest"
)

// countingStorage counts the ranges and gets a store reads from etcd.
type countingStorage struct {
	Storage
	lists, gets atomic.Int64
}

func (c *countingStorage) Get(ctx context.Context, ref etcdstore.Ref, revision int64) (etcdstore.Object, error) {
	c.gets.Add(1)
	return c.Storage.Get(ctx, ref, revision)
}

func (c *countingStorage) List(ctx context.Context, resource, namespace string, opts etcdstore.ListOptions) (etcdstore.ListResult, error) {
	c.lists.Add(1)
	return c.Storage.List(ctx, resource, namespace, opts)
}

type cacheFixture struct {
	etcd *etcdtest.Etcd
	// cached serves lists from its cache; direct always reads etcd.
	cached, direct *Store
	counted        *countingStorage
}

func newCacheFixture(t *testing.T) *cacheFixture {
	e := etcdtest.Start(t)
	storage := etcdstore.New(e.Client, "/registry")
	counted := &countingStorage{Storage: storage}
	f := &cacheFixture{
		etcd:    e,
		cached:  NewStore(counted, ConfigMaps, DefaultWatchConfig()),
		direct:  NewStore(storage, ConfigMaps, DefaultWatchConfig(), WithoutReadCache()),
		counted: counted,
	}
	t.Cleanup(f.cached.StopWatches)
	return f
}

// put writes a ConfigMap as another replica would, straight into etcd, and
// returns the write's revision.
func (f *cacheFixture) put(t *testing.T, namespace, name, value string) int64 {
	t.Helper()
	obj := fmt.Sprintf(`{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":%q,"namespace":%q,"uid":"u-%s","labels":{"v":%q}},"data":{"k":%q}}`, name, namespace, name, value, value)
	resp, err := f.etcd.Client.Put(context.Background(), "/registry/configmaps/"+namespace+"/"+name, obj)
	if err != nil {
		t.Fatalf("put %s/%s: %v", namespace, name, err)
	}
	return resp.Header.Revision
}

// warm starts the cache and waits (bounded) until it serves.
func (f *cacheFixture) warm(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, _, ok, err := f.cached.cache.list(context.Background(), ""); err != nil {
			t.Fatalf("cache list: %v", err)
		} else if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the read cache did not start within 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// jsonList lists namespace as JSON and returns the body and resourceVersion.
func jsonList(t *testing.T, s *Store, namespace string) (string, string) {
	t.Helper()
	list, served, err := s.ListJSON(context.Background(), namespace, &metainternalversion.ListOptions{})
	if err != nil || !served {
		t.Fatalf("ListJSON(%q) = served %v, %v", namespace, served, err)
	}
	var b bytes.Buffer
	w := bufio.NewWriter(&b)
	for _, item := range list.Items {
		if err := item.WriteJSON(w); err != nil {
			t.Fatal(err)
		}
		w.WriteByte('\n')
	}
	w.Flush()
	return b.String(), list.ResourceVersion
}

func TestReadCacheServesWhatEtcdHolds(t *testing.T) {
	f := newCacheFixture(t)
	for i := range 5 {
		for _, ns := range []string{"a", "a-b", "b"} {
			f.put(t, ns, "cm-"+strconv.Itoa(i), ns+strconv.Itoa(i))
		}
	}
	f.warm(t)
	before := f.counted.lists.Load()
	for _, ns := range []string{"", "a", "a-b", "b", "empty"} {
		got, gotRV := jsonList(t, f.cached, ns)
		want, wantRV := jsonList(t, f.direct, ns)
		if got != want || gotRV != wantRV {
			t.Errorf("namespace %q: cached list (rv %s)\n%s\nwant (rv %s, read from etcd)\n%s", ns, gotRV, got, wantRV, want)
		}
	}
	// Decoded lists (protobuf, Table, selectors) decode each cached object
	// once and share it; twice in a row they equal etcd's.
	for range 2 {
		for _, ns := range []string{"", "a", "a-b"} {
			got, err := f.cached.List(context.Background(), ns, &metainternalversion.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			want, err := f.direct.List(context.Background(), ns, &metainternalversion.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if !apiequality.Semantic.DeepEqual(got, want) {
				t.Errorf("namespace %q: decoded list from the cache\n%v\nwant\n%v", ns, got, want)
			}
		}
	}
	// Selectors decode the cached objects.
	sel := labels.SelectorFromSet(labels.Set{"v": "a-b3"})
	for _, s := range []*Store{f.cached, f.direct} {
		list, err := s.List(context.Background(), "", &metainternalversion.ListOptions{LabelSelector: sel})
		if err != nil {
			t.Fatal(err)
		}
		items, _ := meta.ExtractList(list)
		if len(items) != 1 {
			t.Errorf("label selector v=a-b3: %d items; want 1", len(items))
		}
	}
	if n := f.counted.lists.Load() - before; n != 0 {
		t.Errorf("the cached store read etcd's ranges %d times; want 0 (every list from the cache)", n)
	}
}

// TestReadCacheIsLinearizable: a list or get that starts after a write was
// acknowledged — by another replica, with etcd's revision moved on by other
// resources too — reflects it, without reading the range from etcd.
func TestReadCacheIsLinearizable(t *testing.T) {
	f := newCacheFixture(t)
	f.put(t, "a", "x", "0")
	f.warm(t)
	before, getsBefore := f.counted.lists.Load(), f.counted.gets.Load()
	ctx := context.Background()
	for i := range 100 {
		var rev int64
		switch i % 4 {
		case 0, 1:
			rev = f.put(t, "a", "x", strconv.Itoa(i))
		case 2:
			// Another resource moves etcd's revision: only a progress
			// report can tell the cache it is current.
			resp, err := f.etcd.Client.Put(ctx, "/registry/secrets/a/s", strconv.Itoa(i))
			if err != nil {
				t.Fatal(err)
			}
			rev = resp.Header.Revision
		case 3:
			resp, err := f.etcd.Client.Delete(ctx, "/registry/configmaps/a/x")
			if err != nil {
				t.Fatal(err)
			}
			rev = resp.Header.Revision
		}
		got, gotRV := jsonList(t, f.cached, "a")
		want, _ := jsonList(t, f.direct, "a")
		if got != want {
			t.Fatalf("write %d (revision %d): cached list\n%s\nwant\n%s", i, rev, got, want)
		}
		// A get from the cache, as JSON and decoded, answers what etcd holds.
		gotJSON, _, gotErr := f.cached.GetJSON(ctx, "a", "x")
		wantJSON, _, wantErr := f.direct.GetJSON(ctx, "a", "x")
		if string(gotJSON) != string(wantJSON) || fmt.Sprint(gotErr) != fmt.Sprint(wantErr) {
			t.Fatalf("write %d (revision %d): cached get %s, %v; want %s, %v", i, rev, gotJSON, gotErr, wantJSON, wantErr)
		}
		gotObj, gotErr := f.cached.Get(ctx, "a", "x")
		wantObj, wantErr := f.direct.Get(ctx, "a", "x")
		if fmt.Sprint(gotErr) != fmt.Sprint(wantErr) || (gotErr == nil && !apiequality.Semantic.DeepEqual(gotObj, wantObj)) {
			t.Fatalf("write %d (revision %d): cached decoded get %v, %v; want %v, %v", i, rev, gotObj, gotErr, wantObj, wantErr)
		}
		if n, _ := strconv.ParseInt(gotRV, 10, 64); n < rev {
			t.Fatalf("write %d at revision %d: the list's resourceVersion is %s, older than the write", i, rev, gotRV)
		}
	}
	if n := f.counted.lists.Load() - before; n != 0 {
		t.Errorf("the cached store read etcd's ranges %d times; want 0", n)
	}
	if n := f.counted.gets.Load() - getsBefore; n != 0 {
		t.Errorf("the cached store read objects from etcd %d times; want 0 (every get from the cache)", n)
	}
}

func TestReadCacheStoppedReadsEtcd(t *testing.T) {
	f := newCacheFixture(t)
	f.put(t, "a", "x", "1")
	f.warm(t)
	f.cached.StopWatches()
	f.put(t, "a", "y", "2")
	before := f.counted.lists.Load()
	got, _ := jsonList(t, f.cached, "a")
	want, _ := jsonList(t, f.direct, "a")
	if got != want {
		t.Errorf("after stop: list\n%s\nwant\n%s", got, want)
	}
	if f.counted.lists.Load() == before {
		t.Error("a stopped cache served a list; want it read from etcd")
	}
}

// TestRevisionReaderSharesRequests: concurrent readers each get a revision
// no older than the last write acknowledged before they asked, while one
// etcd request serves many of them.
func TestRevisionReaderSharesRequests(t *testing.T) {
	e := etcdtest.Start(t)
	storage := etcdstore.New(e.Client, "/registry")
	var requests atomic.Int64
	r := newRevisionReader(func(ctx context.Context) (int64, error) {
		requests.Add(1)
		return storage.CurrentRevision(ctx)
	})
	ctx := context.Background()
	var acked atomic.Int64 // the newest acknowledged write's revision
	stop := make(chan struct{})
	writerDone := make(chan error, 1)
	go func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				writerDone <- nil
				return
			default:
			}
			resp, err := e.Client.Put(ctx, "/registry/configmaps/a/w", strconv.Itoa(i))
			if err != nil {
				writerDone <- err
				return
			}
			acked.Store(resp.Header.Revision)
		}
	}()
	const readers, reads = 16, 100
	errs := make(chan error, readers)
	for range readers {
		go func() {
			for range reads {
				before := acked.Load()
				rev, err := r.read(ctx)
				if err != nil {
					errs <- err
					return
				}
				if rev < before {
					errs <- fmt.Errorf("read %d; a write was acknowledged at %d before the read began", rev, before)
					return
				}
			}
			errs <- nil
		}()
	}
	for range readers {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	close(stop)
	if err := <-writerDone; err != nil {
		t.Fatal(err)
	}
	if n := requests.Load(); n >= readers*reads {
		t.Errorf("%d etcd requests for %d reads; want them shared", n, readers*reads)
	} else {
		t.Logf("%d etcd requests for %d reads", n, readers*reads)
	}
}

// TestReadCachePagesMatchEtcd: a paged list's first page comes from the
// cache and the rest from etcd at the cache's revision; every page, token
// and remaining count equals what reading etcd alone gives, with and
// without a selector.
func TestReadCachePagesMatchEtcd(t *testing.T) {
	f := newCacheFixture(t)
	for i := range 7 {
		for _, ns := range []string{"a", "a-b", "b"} {
			f.put(t, ns, fmt.Sprintf("cm-%d", i), strconv.Itoa(i%2))
		}
	}
	f.warm(t)
	ctx := context.Background()
	type page struct {
		items                []string
		rv, token, remaining string
	}
	read := func(s *Store, ns string, limit int64, sel labels.Selector, token string) page {
		list, err := s.List(ctx, ns, &metainternalversion.ListOptions{Limit: limit, Continue: token, LabelSelector: sel})
		if err != nil {
			t.Fatalf("list %q limit %d continue %q: %v", ns, limit, token, err)
		}
		items, _ := meta.ExtractList(list)
		lm, _ := meta.ListAccessor(list)
		p := page{rv: lm.GetResourceVersion(), token: lm.GetContinue(), remaining: fmt.Sprint(lm.GetRemainingItemCount())}
		if c := lm.GetRemainingItemCount(); c != nil {
			p.remaining = strconv.FormatInt(*c, 10)
		}
		for _, it := range items {
			o := it.(Object)
			p.items = append(p.items, o.GetNamespace()+"/"+o.GetName()+"@"+o.GetResourceVersion())
		}
		return p
	}
	for _, ns := range []string{"", "a", "a-b"} {
		for _, limit := range []int64{1, 2, 3, 7, 100} {
			for _, sel := range []labels.Selector{labels.Everything(), labels.SelectorFromSet(labels.Set{"v": "1"})} {
				token, wantToken := "", ""
				for n := 0; ; n++ {
					ranges := f.counted.lists.Load()
					got := read(f.cached, ns, limit, sel, token)
					if n == 0 && f.counted.lists.Load() != ranges {
						t.Errorf("namespace %q, limit %d, selector %q: the first page read etcd; want it from the cache", ns, limit, sel)
					}
					want := read(f.direct, ns, limit, sel, wantToken)
					if fmt.Sprint(got) != fmt.Sprint(want) {
						t.Fatalf("namespace %q, limit %d, selector %q, page %d: cached %+v; want (etcd) %+v", ns, limit, sel, n, got, want)
					}
					if got.token == "" {
						break
					}
					if n > 25 {
						t.Fatal("more than 25 pages")
					}
					token, wantToken = got.token, want.token
				}
			}
		}
	}
}
