package registry

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

// ErrAlreadyServed is the error of a Catalog.Add whose resource, or kind,
// the catalog serves already.
var ErrAlreadyServed = errors.New("already served")

// Catalog is the set of served resources: a store for each resource in
// each version it is served in. It is what the API routes by, and what
// discovery, OpenAPI, authorization and metrics read; it changes at run
// time (a CustomResourceDefinition adds its resource, and removes it).
// The built-in resources are its stores when it is made (NewStores); Add
// and Remove change it later.
//
// A Catalog is safe for concurrent use. Lookup, Stores, Snapshot and
// Generation never wait for a change: they read the set as it was before
// or after it.
type Catalog struct {
	// state is the current set; a change replaces it (copy on write), so
	// readers need no lock.
	state atomic.Pointer[catalogState]

	// mu serialises changes and the registration of hooks.
	mu sync.Mutex
	// namespaces is the Namespace store, if the catalog has one: its
	// objects guard the creates of namespaced stores.
	namespaces *Store
	// onAdd prepare the stores before they are served (OnAdd).
	onAdd []func(*Store)

	// notifyMu makes the subscribers' calls one at a time.
	notifyMu    sync.Mutex
	subscribers []func()
}

// catalogState is one version of the set. It is never changed once
// published.
type catalogState struct {
	generation uint64
	// stores are in the order they were added: the built-ins first.
	stores []*Store
	byGVR  map[schema.GroupVersionResource]*Store
}

// NewCatalog returns a catalog serving stores (the built-ins, as
// NewStores returns them), at generation 1. It wires the stores to the
// catalog: namespaced stores to its Namespace store, also those added
// later. Make it before the stores serve. It panics
// if two stores serve the same resource or kind in one version: the
// built-in declarations are a program's constants.
func NewCatalog(stores []*Store) *Catalog {
	c := &Catalog{}
	c.state.Store(&catalogState{byGVR: map[schema.GroupVersionResource]*Store{}})
	for _, s := range stores {
		if s.Resource.IsNamespace {
			c.namespaces = s
		}
	}
	next, err := c.state.Load().with(stores)
	if err != nil {
		panic(fmt.Sprintf("registry: the built-in resources: %v", err))
	}
	for _, s := range stores {
		c.wire(s)
	}
	next.generation = 1
	c.state.Store(next)
	return c
}

// Lookup returns the store serving resource (the plural, "configmaps") in
// group and version ("" and "v1" for the core group).
func (c *Catalog) Lookup(group, version, resource string) (*Store, bool) {
	s, ok := c.state.Load().byGVR[schema.GroupVersionResource{Group: group, Version: version, Resource: resource}]
	return s, ok
}

// Stores returns the stores served now, the built-ins first, then the
// others in the order they were added. The slice is the caller's.
func (c *Catalog) Stores() []*Store {
	return slices.Clone(c.state.Load().stores)
}

// Generation is a number that changes whenever the set of stores does (it
// only grows). Caches of what is derived from the set (discovery, OpenAPI)
// are valid for one generation.
func (c *Catalog) Generation() uint64 {
	return c.state.Load().generation
}

// Snapshot returns the stores served now and the generation they are
// the set of, read together.
func (c *Catalog) Snapshot() (generation uint64, stores []*Store) {
	st := c.state.Load()
	return st.generation, slices.Clone(st.stores)
}

// Add serves stores, all of them or none: it refuses (ErrAlreadyServed) a
// store whose resource is served already in its group version, whose kind
// is, or that disagrees with the other versions of its resource on the
// kind or the scope. A namespaced store is wired to the catalog's
// Namespace store: its creates are guarded by their namespace. The OnAdd
// hooks prepare
// each store before it is served; then the generation changes and the
// subscribers are called. Add stores that do not serve yet.
func (c *Catalog) Add(stores ...*Store) error {
	if len(stores) == 0 {
		return nil
	}
	for _, s := range stores {
		if s == nil || s.Resource == nil {
			return errors.New("registry: catalog add: a store without a resource")
		}
		if s.Resource.IsNamespace {
			return fmt.Errorf("registry: catalog add: %s: the Namespace store is a built-in", s.Resource.GroupResource())
		}
	}
	c.mu.Lock()
	current := c.state.Load()
	next, err := current.with(stores)
	if err != nil {
		c.mu.Unlock()
		return fmt.Errorf("registry: catalog add: %w", err)
	}
	c.prepareLocked(stores)
	next.generation = current.generation + 1
	c.state.Store(next)
	c.mu.Unlock()
	c.notify()
	return nil
}

// Remove stops serving every version of gr: Lookup no longer finds it, and
// its stores' watches and read caches are stopped (Store.StopWatches), so
// that its watchers are told to watch again (and find it gone). Requests
// already routed to a store finish on it. Its objects stay in etcd. A
// resource that is not served is no change.
func (c *Catalog) Remove(gr schema.GroupResource) {
	c.mu.Lock()
	current := c.state.Load()
	var removed []*Store
	next := &catalogState{generation: current.generation + 1, byGVR: make(map[schema.GroupVersionResource]*Store, len(current.byGVR))}
	for _, s := range current.stores {
		if s.Resource.GroupResource() == gr {
			removed = append(removed, s)
			continue
		}
		next.stores = append(next.stores, s)
		next.byGVR[gvrOf(s.Resource)] = s
	}
	if len(removed) == 0 {
		c.mu.Unlock()
		return
	}
	c.state.Store(next)
	c.mu.Unlock()
	for _, s := range removed {
		s.StopWatches()
	}
	c.notify()
}

// Replace serves stores in place of every version of gr, in one change:
// no request between finds gr unserved, as one would between a Remove and
// an Add (a CRD whose schema changed). It is all or nothing as Add is;
// the stores replaced are stopped as Remove stops them.
func (c *Catalog) Replace(gr schema.GroupResource, stores ...*Store) error {
	for _, s := range stores {
		if s == nil || s.Resource == nil {
			return errors.New("registry: catalog replace: a store without a resource")
		}
		if s.Resource.IsNamespace {
			return fmt.Errorf("registry: catalog replace: %s: the Namespace store is a built-in", s.Resource.GroupResource())
		}
	}
	c.mu.Lock()
	current := c.state.Load()
	var removed []*Store
	without := &catalogState{byGVR: make(map[schema.GroupVersionResource]*Store, len(current.byGVR))}
	for _, s := range current.stores {
		if s.Resource.GroupResource() == gr {
			removed = append(removed, s)
			continue
		}
		without.stores = append(without.stores, s)
		without.byGVR[gvrOf(s.Resource)] = s
	}
	next, err := without.with(stores)
	if err != nil {
		c.mu.Unlock()
		return fmt.Errorf("registry: catalog replace: %w", err)
	}
	c.prepareLocked(stores)
	next.generation = current.generation + 1
	c.state.Store(next)
	c.mu.Unlock()
	for _, s := range removed {
		s.StopWatches()
	}
	c.notify()
	return nil
}

// Subscribe has f called after each change of the set (Add, Remove), on the
// goroutine that made it, one call at a time; f reads the catalog to see
// what changed. f must not change the catalog.
func (c *Catalog) Subscribe(f func()) {
	c.notifyMu.Lock()
	defer c.notifyMu.Unlock()
	c.subscribers = append(c.subscribers, f)
}

// OnAdd has prepare called with every store the catalog serves now and,
// from then on, with every store Add adds, before the store is served:
// what must be set on a store before it serves (Store.OnCorruptObject,
// Store.OnUnconditionalUpdate) is set there. Calls are one at a time;
// prepare must not call the catalog's Add, Remove or OnAdd.
func (c *Catalog) OnAdd(prepare func(*Store)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.onAdd = append(c.onAdd, prepare)
	for _, s := range c.state.Load().stores {
		prepare(s)
	}
}

func (c *Catalog) notify() {
	c.notifyMu.Lock()
	defer c.notifyMu.Unlock()
	for _, f := range c.subscribers {
		f()
	}
}

// wire connects a namespaced store to the catalog's Namespace store.
func (c *Catalog) wire(s *Store) {
	if s.Resource.Namespaced && c.namespaces != nil && s.namespaces == nil {
		s.namespaces = c.namespaces
	}
}

func gvrOf(res *Resource) schema.GroupVersionResource {
	return res.GroupVersion.WithResource(res.Plural)
}

// with returns a new state: st and stores, if none of them conflicts with
// st or with another. Its generation is left for the caller to set.
func (st *catalogState) with(stores []*Store) (*catalogState, error) {
	next := &catalogState{
		stores: slices.Concat(st.stores, stores),
		byGVR:  make(map[schema.GroupVersionResource]*Store, len(st.byGVR)+len(stores)),
	}
	for gvr, s := range st.byGVR {
		next.byGVR[gvr] = s
	}
	for i, s := range stores {
		res := s.Resource
		gvr := gvrOf(res)
		if _, ok := next.byGVR[gvr]; ok {
			return nil, fmt.Errorf("resource %s in %s: %w", res.Plural, res.GroupVersion, ErrAlreadyServed)
		}
		// The stores served before this one, including the earlier ones
		// of this call.
		for _, other := range next.stores[:len(st.stores)+i] {
			o := other.Resource
			switch {
			case o.GroupVersionKind() == res.GroupVersionKind():
				return nil, fmt.Errorf("kind %s in %s (resource %s): %w", res.Kind, res.GroupVersion, o.Plural, ErrAlreadyServed)
			case o.GroupResource() == res.GroupResource() && o.Kind != res.Kind:
				return nil, fmt.Errorf("resource %s is served with kind %s in %s, not %s: %w", res.GroupResource(), o.Kind, o.GroupVersion, res.Kind, ErrAlreadyServed)
			case o.GroupResource() == res.GroupResource() && o.Namespaced != res.Namespaced:
				return nil, fmt.Errorf("resource %s is served with another scope in %s: %w", res.GroupResource(), o.GroupVersion, ErrAlreadyServed)
			case o.GroupVersion.Group == res.GroupVersion.Group && o.Kind == res.Kind && o.Plural != res.Plural:
				return nil, fmt.Errorf("kind %s in group %q is served as resource %s: %w", res.Kind, res.GroupVersion.Group, o.Plural, ErrAlreadyServed)
			}
		}
		next.byGVR[gvr] = s
	}
	return next, nil
}

// prepareLocked readies stores to serve: wired to the catalog, then the
// OnAdd hooks. Called with c.mu held.
func (c *Catalog) prepareLocked(stores []*Store) {
	for _, s := range stores {
		c.wire(s)
		for _, prepare := range c.onAdd {
			prepare(s)
		}
	}
}
