package registry

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/concord-dev/concord/etcdstore"
	"github.com/concord-dev/concord/etcdstore/etcdtest"
)

// widgets declares example.com/<version> widgets with ConfigMap's types
// and strategy: a resource that is not built in, as a CRD's would be.
func widgets(version string) *Resource {
	res := *ConfigMaps
	res.GroupVersion = schema.GroupVersion{Group: "example.com", Version: version}
	res.Kind, res.Plural, res.Singular, res.ShortNames = "Widget", "widgets", "widget", nil
	res.AllowUnconditionalUpdate = false
	return &res
}

var widgetsGR = schema.GroupResource{Group: "example.com", Resource: "widgets"}

type catalogFixture struct {
	storage  Storage
	builtins []*Store
	catalog  *Catalog
	// changes counts the subscriber's calls.
	changes atomic.Int64
}

func newCatalogFixture(t *testing.T) *catalogFixture {
	t.Helper()
	e := etcdtest.Start(t)
	f := &catalogFixture{storage: etcdstore.New(e.Client, "/registry")}
	f.builtins = NewStores(f.storage, DefaultWatchConfig())
	f.catalog = NewCatalog(f.builtins)
	f.catalog.Subscribe(func() { f.changes.Add(1) })
	t.Cleanup(func() {
		for _, s := range f.catalog.Stores() {
			s.StopWatches()
		}
	})
	return f
}

func (f *catalogFixture) store(res *Resource) *Store {
	return NewStore(f.storage, res, DefaultWatchConfig())
}

// TestCatalogLookup: the built-ins are served at generation 1, each in its
// group version, and nothing else is.
func TestCatalogLookup(t *testing.T) {
	f := newCatalogFixture(t)
	c := f.catalog
	if got := c.Generation(); got != 1 {
		t.Errorf("Generation() = %d; want 1", got)
	}
	for _, res := range Resources {
		s, ok := c.Lookup(res.GroupVersion.Group, res.GroupVersion.Version, res.Plural)
		if !ok || s.Resource != res {
			t.Errorf("Lookup(%q, %q, %q) = %v, %v; want the store of %s", res.GroupVersion.Group, res.GroupVersion.Version, res.Plural, s, ok, res.GroupVersionKind())
		}
	}
	for _, gvr := range [][3]string{
		{"", "v1", "widgets"},
		{"", "v2", "configmaps"},
		{"apps", "v1", "configmaps"},
		{"events.k8s.io", "v1beta1", "events"},
		{"", "v1", "ConfigMaps"},
	} {
		if s, ok := c.Lookup(gvr[0], gvr[1], gvr[2]); ok {
			t.Errorf("Lookup(%q, %q, %q) = %s; want none", gvr[0], gvr[1], gvr[2], s.Resource.GroupVersionKind())
		}
	}
	gen, stores := c.Snapshot()
	if gen != 1 || !slices.Equal(stores, f.builtins) {
		t.Errorf("Snapshot() = %d, %d stores; want 1, the built-ins", gen, len(stores))
	}
	// The slice is the caller's.
	stores[0] = nil
	if c.Stores()[0] == nil {
		t.Errorf("changing the slice Stores returned changed the catalog")
	}
}

// TestCatalogAddRemove: Add serves a resource (in two versions), refuses
// what is served already, and Remove stops serving every version; each
// change moves the generation on and is told to subscribers, a refusal or
// a Remove of nothing is no change.
func TestCatalogAddRemove(t *testing.T) {
	f := newCatalogFixture(t)
	c := f.catalog
	v1 := f.store(widgets("v1"))
	if err := c.Add(v1); err != nil {
		t.Fatalf("Add(widgets v1): %v", err)
	}
	if got, ok := c.Lookup("example.com", "v1", "widgets"); !ok || got != v1 {
		t.Errorf("Lookup(example.com, v1, widgets) = %v, %v; want the added store", got, ok)
	}
	if gen, n := c.Generation(), f.changes.Load(); gen != 2 || n != 1 {
		t.Errorf("after Add: generation %d, %d changes told; want 2, 1", gen, n)
	}
	if stores := c.Stores(); stores[len(stores)-1] != v1 || len(stores) != len(f.builtins)+1 {
		t.Errorf("Stores() = %d stores ending with %s; want the built-ins, then widgets", len(stores), stores[len(stores)-1].Resource.GroupVersionKind())
	}

	refused := map[string]*Resource{
		"the same resource again": widgets("v1"),
		"configmaps again":        ConfigMaps,
		"the same kind under another plural": func() *Resource {
			r := widgets("v1")
			r.Plural, r.Singular = "gadgets", "gadget"
			return r
		}(),
		"the kind as another resource in another version": func() *Resource {
			r := widgets("v2")
			r.Plural, r.Singular = "gadgets", "gadget"
			return r
		}(),
		"another kind for the resource in another version": func() *Resource {
			r := widgets("v2")
			r.Kind = "Gadget"
			return r
		}(),
		"another scope for the resource in another version": func() *Resource {
			r := widgets("v2")
			r.Namespaced = false
			return r
		}(),
	}
	for name, res := range refused {
		if err := c.Add(f.store(res)); !errors.Is(err, ErrAlreadyServed) {
			t.Errorf("Add(%s) = %v; want ErrAlreadyServed", name, err)
		}
	}
	if err := c.Add(f.store(Namespaces)); err == nil {
		t.Errorf("Add(a second Namespace store) succeeded")
	}
	// All or nothing: the second of these is refused, so the first is not
	// served either.
	gadgets := widgets("v1")
	gadgets.Kind, gadgets.Plural, gadgets.Singular = "Gadget", "gadgets", "gadget"
	if err := c.Add(f.store(gadgets), f.store(gadgets)); !errors.Is(err, ErrAlreadyServed) {
		t.Errorf("Add(gadgets, gadgets) = %v; want ErrAlreadyServed", err)
	}
	if _, ok := c.Lookup("example.com", "v1", "gadgets"); ok {
		t.Errorf("gadgets are served after a refused Add")
	}
	if gen, n := c.Generation(), f.changes.Load(); gen != 2 || n != 1 {
		t.Errorf("after refused Adds: generation %d, %d changes told; want 2, 1", gen, n)
	}

	v2 := f.store(widgets("v2"))
	if err := c.Add(v2); err != nil {
		t.Fatalf("Add(widgets v2): %v", err)
	}
	for _, v := range []string{"v1", "v2"} {
		if _, ok := c.Lookup("example.com", v, "widgets"); !ok {
			t.Errorf("widgets %s are not served", v)
		}
	}
	c.Remove(widgetsGR)
	for _, v := range []string{"v1", "v2"} {
		if _, ok := c.Lookup("example.com", v, "widgets"); ok {
			t.Errorf("widgets %s are served after Remove", v)
		}
	}
	if gen, n := c.Generation(), f.changes.Load(); gen != 4 || n != 3 {
		t.Errorf("after Remove: generation %d, %d changes told; want 4, 3", gen, n)
	}
	if !slices.Equal(c.Stores(), f.builtins) {
		t.Errorf("Stores() after Remove is not the built-ins")
	}
	c.Remove(widgetsGR)
	if gen, n := c.Generation(), f.changes.Load(); gen != 4 || n != 3 {
		t.Errorf("after a second Remove: generation %d, %d changes told; want 4, 3 (no change)", gen, n)
	}
	// Served again, by a new store.
	if err := c.Add(f.store(widgets("v1"))); err != nil {
		t.Errorf("Add(widgets v1) after Remove: %v", err)
	}
}

// TestCatalogOnAdd: the hook sees the stores served and every store added
// later, before it is served.
func TestCatalogOnAdd(t *testing.T) {
	f := newCatalogFixture(t)
	c := f.catalog
	var seen []*Store
	var servedEarly []string
	c.OnAdd(func(s *Store) {
		seen = append(seen, s)
		if s.Resource.GroupVersion.Group == "example.com" {
			if _, ok := c.Lookup("example.com", "v1", "widgets"); ok {
				servedEarly = append(servedEarly, s.Resource.Plural)
			}
		}
	})
	if !slices.Equal(seen, f.builtins) {
		t.Errorf("OnAdd saw %d stores; want the %d built-ins", len(seen), len(f.builtins))
	}
	w := f.store(widgets("v1"))
	if err := c.Add(w); err != nil {
		t.Fatal(err)
	}
	if seen[len(seen)-1] != w {
		t.Errorf("OnAdd did not see the added store")
	}
	if len(servedEarly) > 0 {
		t.Errorf("the store was served before its OnAdd hook ran")
	}
}

// TestCatalogNamespaceGuard: a namespaced store added after the catalog
// was made has its creates checked against its namespace: refused in a
// missing one and in one being deleted.
func TestCatalogNamespaceGuard(t *testing.T) {
	f := newCatalogFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	namespaces, _ := f.catalog.Lookup("", "v1", "namespaces")
	if _, err := namespaces.Create(ctx, "", &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team"}}, WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	w := f.store(widgets("v1"))
	if err := f.catalog.Add(w); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Create(ctx, "nowhere", &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "w"}}, WriteOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("create a widget in a namespace that does not exist: %v; want NotFound", err)
	}
	if _, err := w.Create(ctx, "team", &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "w"}}, WriteOptions{}); err != nil {
		t.Fatalf("create widget: %v", err)
	}
	if _, err := namespaces.Delete(ctx, "", "team", &metav1.DeleteOptions{}, WriteOptions{}); err != nil {
		t.Fatalf("delete namespace: %v", err)
	}
	if _, err := w.Create(ctx, "team", &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "late"}}, WriteOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("create a widget in a terminating namespace: %v; want Forbidden", err)
	}
}

// TestCatalogRemoveStopsWatches: a watch of a removed resource ends.
func TestCatalogRemoveStopsWatches(t *testing.T) {
	f := newCatalogFixture(t)
	w := f.store(widgets("v1"))
	if err := f.catalog.Add(w); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	wa, err := w.Watch(ctx, "", &metainternalversion.ListOptions{ResourceVersion: "0"})
	if err != nil {
		t.Fatalf("watch: %v", err)
	}
	done := make(chan error, 1)
	go func() {
		done <- wa.Run(ctx, func(watch.Event, *Encodings) error { return nil })
	}()
	f.catalog.Remove(widgetsGR)
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("the watch ended with %v", err)
		}
	case <-ctx.Done():
		t.Fatalf("the watch of a removed resource did not end")
	}
}

// TestCatalogConcurrent: lookups, snapshots and generations read while
// resources come and go (run with -race) always see a whole set: the
// built-ins are always there, a snapshot's generation never goes back, and
// a snapshot holds each version of widgets at most once.
func TestCatalogConcurrent(t *testing.T) {
	f := newCatalogFixture(t)
	c := f.catalog
	stop := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan string, 100)
	fail := func(msg string) {
		select {
		case errs <- msg:
		default:
		}
	}
	for range 4 {
		wg.Go(func() {
			var last uint64
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, ok := c.Lookup("", "v1", "configmaps"); !ok {
					fail("configmaps are not served")
				}
				c.Lookup("example.com", "v1", "widgets")
				gen, stores := c.Snapshot()
				if gen < last {
					fail("the generation went back")
				}
				last = gen
				n := 0
				for _, s := range stores {
					if s.Resource.GroupResource() == widgetsGR {
						n++
					}
				}
				if n > 2 {
					fail("a snapshot holds widgets more than twice")
				}
			}
		})
	}
	for i := range 50 {
		if err := c.Add(f.store(widgets("v1")), f.store(widgets("v2"))); err != nil {
			t.Fatalf("Add %d: %v", i, err)
		}
		c.Remove(widgetsGR)
	}
	close(stop)
	wg.Wait()
	close(errs)
	for msg := range errs {
		t.Error(msg)
	}
	if gen := c.Generation(); gen != 101 {
		t.Errorf("Generation() = %d after 100 changes; want 101", gen)
	}
}
