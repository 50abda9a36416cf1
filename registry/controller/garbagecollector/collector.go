// Package garbagecollector deletes objects whose owners are gone, as
// kube-controller-manager's garbage collector does: it watches every
// resource the catalog serves (custom resources too, as they come and go),
// keeps a graph of owner uid → dependents from what the watches say, and
// when an owner is gone deletes its dependents (Background), deletes the
// blocking dependents of an owner being deleted in the foreground and then
// lets the owner go (Foreground), or removes the references to an orphaning
// owner from its dependents and then lets it go (Orphan).
//
// The graph only says what to look at. Before a dependent is deleted its
// owners are read from etcd (a uid found absent there stays absent: uids
// are never reused), and the delete is guarded by the dependent's uid and
// resourceVersion, so a dependent that was adopted or changed meanwhile is
// looked at again, never deleted on a stale view. An owner is let go
// (Orphan, Foreground) only once every watch has applied every change up
// to the revision its deletion was seen at (progress.go), so that no
// dependent written before is missed. One replica runs it at a time (under
// a Lease).
package garbagecollector

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/concord-dev/concord/registry"
	"github.com/concord-dev/concord/registry/controller"
)

// FieldManager is who the collector's writes are recorded as, as kube's
// collector's are (its client's User-Agent).
const FieldManager = "kube-controller-manager"

// Config tunes a Collector; the zero value is kube's defaults.
type Config struct {
	// Workers is how many objects are worked on at once (0: 20, kube's
	// --concurrent-gc-syncs).
	Workers int
	// RewatchDelay is the pause before a watch that ended is opened again
	// (0: 500ms).
	RewatchDelay time.Duration
	// WatchWait bounds how long letting an owner go waits for the watches
	// to catch up before it is looked at again later (0: 5s).
	WatchWait time.Duration
}

// Collector collects the objects of one catalog.
type Collector struct {
	catalog *registry.Catalog
	log     *slog.Logger
	cfg     Config
	// changed is signalled when the catalog's set of stores changes.
	changed chan struct{}

	mu    sync.Mutex
	graph *graph
	// absent are the owners etcd said are gone, by ownerKey: a uid never
	// comes back.
	absent map[string]bool
	// unknownKinds are the owner kinds not served, logged once each, and the
	// dependents naming them, looked at again when the catalog changes.
	unknownKinds map[schema.GroupKind]map[types.UID]struct{}
	// reported are the invalid references an Event was recorded for.
	reported map[string]bool
	queue    *controller.Queue[types.UID]
	orphans  *controller.Queue[types.UID]

	// progressMu guards watches, advanced and each monitor's seen and
	// askedAt (progress.go).
	progressMu sync.Mutex
	watches    map[*monitor]struct{}
	// advanced is closed (and replaced) when a watch moves on.
	advanced chan struct{}

	// Tests' hooks: beforeEvent is called by a watch before it applies an
	// event or a bookmark (to hold one resource's watch back); awaiting
	// when a decision starts waiting for watches behind rev.
	beforeEvent func(ctx context.Context, resource schema.GroupResource)
	awaiting    func(rev int64, behind []schema.GroupResource)
}

// New returns the collector of catalog's objects. Run it under a Lease.
func New(catalog *registry.Catalog, cfg Config, log *slog.Logger) *Collector {
	if cfg.Workers <= 0 {
		cfg.Workers = 20
	}
	if cfg.RewatchDelay <= 0 {
		cfg.RewatchDelay = 500 * time.Millisecond
	}
	if cfg.WatchWait <= 0 {
		cfg.WatchWait = 5 * time.Second
	}
	c := &Collector{catalog: catalog, cfg: cfg, log: log, changed: make(chan struct{}, 1)}
	catalog.Subscribe(func() {
		select {
		case c.changed <- struct{}{}:
		default: // a change is pending already; Run reads the whole set
		}
	})
	return c
}

// Run collects until ctx ends; it starts from nothing each time (a new
// leadership term), watching every store from its current state.
func (c *Collector) Run(ctx context.Context) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	retries := controller.QueueOptions{Name: "garbage collector", Log: c.log, MinRetry: 5 * time.Millisecond, MaxRetry: 10 * time.Second}
	c.mu.Lock()
	c.graph, c.absent, c.reported = newGraph(), map[string]bool{}, map[string]bool{}
	c.unknownKinds = map[schema.GroupKind]map[types.UID]struct{}{}
	c.queue, c.orphans = controller.NewQueue[types.UID](retries), controller.NewQueue[types.UID](retries)
	queue, orphans := c.queue, c.orphans
	c.mu.Unlock()
	c.progressMu.Lock()
	c.watches, c.advanced = map[*monitor]struct{}{}, make(chan struct{})
	c.progressMu.Unlock()

	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()

	monitors := map[schema.GroupResource]*monitor{}
	synced := c.monitor(ctx, &wg, monitors)
	for _, ch := range synced {
		select {
		case <-ch:
		case <-ctx.Done():
			// A term that ends before the graph is built shuts its queues
			// down unworked (Run with no workers).
			queue.Run(ctx, 0, nil)
			orphans.Run(ctx, 0, nil)
			return
		}
	}
	c.log.Info("garbage collector: graph built from every served resource; collecting", "resources", len(monitors))
	wg.Add(2)
	go func() { defer wg.Done(); queue.Run(ctx, c.cfg.Workers, retried(c.attemptToDelete)) }()
	go func() { defer wg.Done(); orphans.Run(ctx, c.cfg.Workers, retried(c.attemptToOrphan)) }()
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.changed:
			c.monitor(ctx, &wg, monitors)
			c.retryUnknownKinds()
		}
	}
}

// monitor watches every key space the catalog serves and stops the
// watches of those it no longer serves; it returns the channels that are
// closed once each new watch has sent its initial state.
func (c *Collector) monitor(ctx context.Context, wg *sync.WaitGroup, monitors map[schema.GroupResource]*monitor) []<-chan struct{} {
	want := map[schema.GroupResource]*registry.Store{}
	for _, s := range c.catalog.Stores() {
		res := s.Resource
		// One watch per key space: another served version of the same
		// objects (Resource.Storage, a CRD's other versions) adds nothing.
		if res.Storage != nil || res.CreateOnly {
			continue
		}
		if _, ok := want[res.GroupResource()]; !ok {
			want[res.GroupResource()] = s
		}
	}
	for gr, m := range monitors {
		if want[gr] != m.store {
			m.cancel()
			delete(monitors, gr)
			c.watching(m, true)
		}
	}
	var synced []<-chan struct{}
	for gr, s := range want {
		if _, ok := monitors[gr]; ok {
			continue
		}
		mctx, cancel := context.WithCancel(ctx)
		m := &monitor{c: c, store: s, cancel: cancel, synced: make(chan struct{})}
		monitors[gr] = m
		c.watching(m, false)
		synced = append(synced, m.synced)
		wg.Add(1)
		go func() {
			defer wg.Done()
			m.run(mctx)
		}()
	}
	return synced
}

// monitor feeds one store's watch into the graph.
type monitor struct {
	c      *Collector
	store  *registry.Store
	cancel context.CancelFunc
	// synced is closed once the first watch has sent the initial state.
	synced     chan struct{}
	syncedOnce sync.Once
	// initial holds the uids of a watch's initial objects until their end
	// (the watch's goroutine only).
	initial map[types.UID]struct{}
	// seen is the revision the watch has applied every change up to;
	// askedAt, when etcd was last asked for its progress.
	seen    int64
	askedAt time.Time
}

// run watches from the current state, again whenever the watch ends: each
// watch's initial events replace what the graph knows of this resource
// (objects deleted while no watch ran are forgotten as deleted), then
// every change is applied as it comes.
func (m *monitor) run(ctx context.Context) {
	controller.Watch(ctx, m.store, controller.WatchOptions{Name: "garbage collector", Log: m.c.log, RewatchDelay: m.c.cfg.RewatchDelay}, controller.Handler[registry.Object]{
		Event:    m.apply,
		Synced:   m.initialEnd,
		Progress: m.progress,
		Opened:   func(context.Context) error { m.initial = nil; return nil },
	})
	// A store no longer served never syncs: nobody waits for it.
	m.syncedOnce.Do(func() { close(m.synced) })
	m.c.watching(m, true)
}

func (m *monitor) apply(ctx context.Context, typ watch.EventType, obj registry.Object, initial bool) error {
	m.hold(ctx)
	rev, err := strconv.ParseInt(obj.GetResourceVersion(), 10, 64)
	if err != nil {
		return fmt.Errorf("watch of %s sent resourceVersion %q: %w", m.store.Resource.GroupResource(), obj.GetResourceVersion(), err)
	}
	if initial {
		if m.initial == nil {
			m.initial = map[types.UID]struct{}{}
		}
		m.initial[obj.GetUID()] = struct{}{}
	}
	if typ == watch.Deleted {
		m.c.deleted(obj.GetUID())
	} else {
		m.c.observed(newNode(m.store, obj))
	}
	// Applied: the graph holds every change of this resource up to rev.
	m.c.reached(m, rev)
	return nil
}

// initialEnd: the objects of this resource the initial state did not hold
// are gone.
func (m *monitor) initialEnd(ctx context.Context, rev int64) error {
	m.hold(ctx)
	m.c.forgetUnseen(m.store, m.initial)
	m.initial = nil
	m.syncedOnce.Do(func() { close(m.synced) })
	m.c.reached(m, rev)
	return nil
}

// progress: a bookmark's revision is reached too (etcd reports progress in
// order).
func (m *monitor) progress(ctx context.Context, rev int64) error {
	m.hold(ctx)
	m.c.reached(m, rev)
	return nil
}

// hold calls the tests' beforeEvent hook.
func (m *monitor) hold(ctx context.Context) {
	if m.c.beforeEvent != nil {
		m.c.beforeEvent(ctx, m.store.Resource.GroupResource())
	}
}

// observed applies an object added or changed, and queues what it may now
// let go: itself when an owner is not known to be there, it and its
// dependents when its foreground deletion starts, its dependents' orphaning
// when its orphan deletion starts, and owners it stopped blocking.
func (c *Collector) observed(n *node) {
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.graph.put(n)
	if n.orphan && (old == nil || !old.orphan) {
		c.orphans.Add(n.uid)
	}
	if n.foreground && (old == nil || !old.foreground) {
		c.queue.Add(n.uid)
		for _, dep := range c.graph.dependentsOf(n.uid) {
			c.queue.Add(dep.uid)
		}
	}
	if old != nil {
		for _, ref := range old.owners {
			if old.blocks(ref.UID) && !n.blocks(ref.UID) {
				c.queue.Add(ref.UID) // an owner waiting on it may be free now
			}
		}
	}
	if old == nil || !equalOwners(old.owners, n.owners) {
		for _, ref := range n.owners {
			if owner := c.graph.nodes[ref.UID]; owner == nil || owner.foreground || !owner.matches(ref, n.namespace) {
				c.queue.Add(n.uid)
				break
			}
		}
	}
}

// deleted applies an object's deletion: its dependents may be garbage now,
// and an owner waiting for it in the foreground may go.
func (c *Collector) deleted(uid types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.graph.remove(uid)
	for _, dep := range c.graph.dependentsOf(uid) {
		c.queue.Add(dep.uid)
	}
	if n != nil {
		for _, ref := range n.owners {
			if owner := c.graph.nodes[ref.UID]; owner != nil && owner.foreground {
				c.queue.Add(ref.UID)
			}
		}
	}
}

// forgetUnseen treats the objects of store the graph holds but a new
// watch's initial state did not as deleted.
func (c *Collector) forgetUnseen(store *registry.Store, seen map[types.UID]struct{}) {
	c.mu.Lock()
	var gone []types.UID
	for uid, n := range c.graph.nodes {
		if _, ok := seen[uid]; !ok && n.store.Resource.GroupResource() == store.Resource.GroupResource() {
			gone = append(gone, uid)
		}
	}
	c.mu.Unlock()
	for _, uid := range gone {
		c.deleted(uid)
	}
}

// retryUnknownKinds queues again the dependents naming kinds that were
// not served, once the catalog changed.
func (c *Collector) retryUnknownKinds() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for gk, deps := range c.unknownKinds {
		for uid := range deps {
			c.queue.Add(uid)
		}
		delete(c.unknownKinds, gk)
	}
}

// retried is process as the queues' workers call it: an item that fails
// is tried again later, backing off; a conflict (the object changed
// meanwhile) is no warning.
func retried(process func(context.Context, types.UID) error) func(context.Context, types.UID) (bool, error) {
	return func(ctx context.Context, uid types.UID) (bool, error) {
		err := process(ctx, uid)
		if apierrors.IsConflict(err) {
			return false, nil
		}
		return err == nil, err
	}
}

func equalOwners(a, b []metav1.OwnerReference) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].UID != b[i].UID || a[i].Name != b[i].Name || a[i].Kind != b[i].Kind || a[i].APIVersion != b[i].APIVersion {
			return false
		}
	}
	return true
}
