// Package crdserving keeps a replica's catalog serving the custom resources
// that the stored CustomResourceDefinitions define: every replica runs it,
// from a watch of the CRDs, so that a CRD created through one replica is
// served by all of them, and a write to a custom object is checked against
// the CRD as it is in etcd, never against a schema this replica has not
// caught up with.
package crdserving

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/concord-dev/concord/etcdstore"
	"github.com/concord-dev/concord/internal/freshread"
	"github.com/concord-dev/concord/registry"
	"github.com/concord-dev/concord/registry/controller"
)

// catchUpWait bounds how long a write to a custom object waits for this
// replica to apply the CRD version etcd holds.
const catchUpWait = 3 * time.Second

// rewatchDelay is the pause before the CRD watch is opened again after it
// ended.
const rewatchDelay = 500 * time.Millisecond

// removeGrace is how long a deleted CRD's stores stay in the catalog after
// the CRD is gone, for the watches open on them to drain; a new request
// finds the resource gone at once (Server.gone).
const removeGrace = time.Second

// Server serves the custom resources of the stored CRDs in a catalog.
type Server struct {
	crds     *registry.Store
	catalog  *registry.Catalog
	storage  registry.Storage
	newStore NewStore
	log      *slog.Logger

	mu sync.Mutex
	// served are the CRDs whose resources the catalog serves, by name;
	// removing the resources of deleted CRDs still served for removeGrace.
	served   map[string]served
	removing map[schema.GroupResource]*time.Timer
	// applied is the CRD revision this replica has applied everything up
	// to; caughtUp is closed (and replaced) whenever it grows.
	applied  int64
	caughtUp chan struct{}
	// synced is closed once the first watch's initial CRDs are applied.
	synced     chan struct{}
	syncedOnce sync.Once
}

// served is what one CRD makes the catalog serve.
type served struct {
	gr   schema.GroupResource
	view *view
}

// view is what the stores of one CRD were built from — its generation and
// accepted names (a change of status alone, such as its conditions, does
// not rebuild them) — and the CRD's latest revision this replica applied
// while they stand: the revision every write through them is guarded by.
type view struct {
	// ref is the CRD's key, gr its resource.
	ref        etcdstore.Ref
	gr         schema.GroupResource
	uid        types.UID
	generation int64
	names      apiextensionsv1.CustomResourceDefinitionNames
	revision   atomic.Int64
	// deleting: the CRD is marked for deletion (creates are refused).
	deleting atomic.Bool
	// replaced: the CRD changed and new stores replaced these.
	replaced atomic.Bool
	// gone: the CRD was deleted (these stores are being removed).
	gone atomic.Bool
	// present: a read of the CRD sent after etcd was at this revision
	// found it (gone).
	present atomic.Int64
	// exists reads whether the CRD's key is in etcd, a read shared by the
	// writes that want one at the same time.
	exists *freshread.Reader[bool]
}

// checkTimeout bounds a read of a CRD's key that callers share: not any
// one caller's context (the storage bounds it with its own timeout too).
const checkTimeout = time.Minute

func (v *view) update(crd *apiextensionsv1.CustomResourceDefinition) {
	v.deleting.Store(crd.DeletionTimestamp != nil)
	v.revision.Store(revisionOf(crd.ResourceVersion))
}

// NewStore makes the store of one custom resource version over storage, as
// the built-in stores are made (the same options).
type NewStore func(storage registry.Storage, res *registry.Resource) *registry.Store

// New returns a Server that serves the CRDs of crds (the
// CustomResourceDefinition store) in catalog, their objects kept in
// storage.
func New(crds *registry.Store, catalog *registry.Catalog, storage registry.Storage, newStore NewStore, log *slog.Logger) *Server {
	return &Server{crds: crds, catalog: catalog, storage: storage, newStore: newStore, log: log, served: map[string]served{}, removing: map[schema.GroupResource]*time.Timer{}, caughtUp: make(chan struct{}), synced: make(chan struct{})}
}

// Run watches the CRDs until ctx ends, keeping the catalog equal to what
// they define; a watch that ends is opened again, from the start, so a
// replica that missed events (compaction) converges.
func (s *Server) Run(ctx context.Context) {
	// seen are the CRDs of a watch's initial events, until their end: the
	// others are gone.
	var seen map[string]bool
	controller.Watch(ctx, s.crds, controller.WatchOptions{Name: "crdserving", Log: s.log, RewatchDelay: rewatchDelay}, controller.Handler[*apiextensionsv1.CustomResourceDefinition]{
		Event: func(_ context.Context, typ watch.EventType, crd *apiextensionsv1.CustomResourceDefinition, initial bool) error {
			if typ == watch.Deleted {
				s.remove(crd.Name, revisionOf(crd.ResourceVersion))
				return nil
			}
			if initial {
				if seen == nil {
					seen = map[string]bool{}
				}
				seen[crd.Name] = true
			}
			s.apply(crd)
			return nil
		},
		Synced: func(_ context.Context, rev int64) error {
			s.removeAllBut(seen)
			seen = nil
			s.advanceTo(rev)
			s.syncedOnce.Do(func() { close(s.synced) })
			return nil
		},
		Progress: func(_ context.Context, rev int64) error {
			s.advanceTo(rev)
			return nil
		},
		Opened: func(context.Context) error { seen = nil; return nil },
	})
}

// Synced is closed once the replica serves the custom resources of every
// CRD stored when it started (kube-apiserver's readyz check
// poststarthook/crd-informer-synced), so that a load balancer sends it no
// request for them before.
func (s *Server) Synced() <-chan struct{} { return s.synced }

func equalNames(a, b apiextensionsv1.CustomResourceDefinitionNames) bool {
	return a.Plural == b.Plural && a.Singular == b.Singular && a.Kind == b.Kind && a.ListKind == b.ListKind &&
		slices.Equal(a.ShortNames, b.ShortNames) && slices.Equal(a.Categories, b.Categories)
}

func revisionOf(rv string) int64 {
	n, _ := strconv.ParseInt(rv, 10, 64)
	return n
}

// Serves reports whether crd is one the catalog serves resources for:
// established (its names accepted). A CRD being deleted is still served, as
// kube serves it, so that its objects' watchers see them deleted; only
// creates are refused (guard).
func Serves(crd *apiextensionsv1.CustomResourceDefinition) bool {
	for _, c := range crd.Status.Conditions {
		if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
			return true
		}
	}
	return false
}

// apply makes the catalog serve what crd defines now.
func (s *Server) apply(crd *apiextensionsv1.CustomResourceDefinition) {
	rev := revisionOf(crd.ResourceVersion)
	s.mu.Lock()
	old, had := s.served[crd.Name]
	s.mu.Unlock()
	if had && Serves(crd) && old.view.generation == crd.Generation && equalNames(old.view.names, crd.Status.AcceptedNames) {
		old.view.update(crd)
		s.advanceTo(rev)
		return
	}
	if had {
		old.view.replaced.Store(true)
	}
	gr := schema.GroupResource{Group: crd.Spec.Group, Resource: crd.Status.AcceptedNames.Plural}
	s.finishRemoval(gr)
	if had && (!Serves(crd) || old.gr != gr) {
		s.catalog.Remove(old.gr)
		had = false
	}
	if !Serves(crd) {
		s.forget(crd.Name, rev)
		return
	}
	view := &view{ref: s.crds.Ref("", crd.Name), gr: gr, uid: crd.UID, generation: crd.Generation, names: crd.Status.AcceptedNames}
	view.exists = existsRead(s.storage, view.ref)
	view.update(crd)
	var stores []*registry.Store
	for _, v := range crd.Spec.Versions {
		if !v.Served {
			continue
		}
		res, err := registry.CustomResource(crd, v.Name)
		if err != nil {
			s.log.Error("CustomResourceDefinition cannot be served", "crd", crd.Name, "version", v.Name, "err", err)
			s.forget(crd.Name, rev)
			return
		}
		name := crd.Name
		res.Gone = func(ctx context.Context, guardedWrite bool) (bool, error) {
			return s.gone(ctx, name, view, guardedWrite)
		}
		stores = append(stores, s.newStore(&guardedStorage{Storage: s.storage, server: s, name: crd.Name, view: view}, res))
	}
	// A changed CRD's stores are replaced in one change of the catalog, so
	// that no request in between finds its resource unserved.
	add := s.catalog.Add
	if had {
		add = func(stores ...*registry.Store) error { return s.catalog.Replace(old.gr, stores...) }
	}
	if err := add(stores...); err != nil {
		if had {
			s.catalog.Remove(old.gr)
		}
		s.log.Error("CustomResourceDefinition cannot be served", "crd", crd.Name, "err", err)
		s.forget(crd.Name, rev)
		return
	}
	s.mu.Lock()
	s.served[crd.Name] = served{gr: gr, view: view}
	s.mu.Unlock()
	s.log.Info("serving custom resource", "crd", crd.Name, "resource", gr.String(), "resourceVersion", crd.ResourceVersion)
	s.advanceTo(rev)
}

// remove stops serving the CRD name (deleted at revision rev): a new
// request finds its resource gone at once, as kube's; its stores leave the
// catalog after removeGrace: its objects were deleted just before it
// (crdcleanup), and the watchers of its resource are sent their DELETED
// events meanwhile, as kube-apiserver keeps a deleted CRD's storage while
// its requests drain. Writes are refused from the start (the guard finds
// no CRD).
func (s *Server) remove(name string, rev int64) {
	s.mu.Lock()
	old, had := s.served[name]
	if had {
		old.view.gone.Store(true)
		gr := old.gr
		if t, pending := s.removing[gr]; pending {
			t.Stop()
		}
		s.removing[gr] = time.AfterFunc(removeGrace, func() {
			s.mu.Lock()
			_, pending := s.removing[gr]
			delete(s.removing, gr)
			s.mu.Unlock()
			if pending {
				s.catalog.Remove(gr)
				s.log.Info("no longer serving custom resource", "crd", name, "resource", gr.String())
			}
		})
	}
	s.mu.Unlock()
	s.forget(name, rev)
}

// finishRemoval removes at once a resource whose removal is pending (its
// CRD is being created again).
func (s *Server) finishRemoval(gr schema.GroupResource) {
	s.mu.Lock()
	t, pending := s.removing[gr]
	delete(s.removing, gr)
	s.mu.Unlock()
	if pending {
		t.Stop()
		s.catalog.Remove(gr)
	}
}

// removeAllBut stops serving every CRD not in keep (after a new watch's
// initial events: the others were deleted while no watch ran).
func (s *Server) removeAllBut(keep map[string]bool) {
	s.mu.Lock()
	var gone []string
	for name := range s.served {
		if !keep[name] {
			gone = append(gone, name)
		}
	}
	s.mu.Unlock()
	for _, name := range gone {
		s.remove(name, 0)
	}
}

func (s *Server) forget(name string, rev int64) {
	s.mu.Lock()
	if old, had := s.served[name]; had {
		old.view.replaced.Store(true)
	}
	delete(s.served, name)
	s.mu.Unlock()
	s.advanceTo(rev)
}

// advanceTo records that every CRD change up to rev is applied.
func (s *Server) advanceTo(rev int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if rev > s.applied {
		s.applied = rev
		close(s.caughtUp)
		s.caughtUp = make(chan struct{})
	}
}

// waitApplied waits until this replica has applied the CRD changes up to
// rev.
func (s *Server) waitApplied(ctx context.Context, rev int64) error {
	for {
		s.mu.Lock()
		applied, caughtUp := s.applied, s.caughtUp
		s.mu.Unlock()
		if applied >= rev {
			return nil
		}
		select {
		case <-caughtUp:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// gone reports whether the CRD name, whose view v serves a request, was
// deleted before the request began, for a request to its resource: a
// request is served by this replica's view of the CRDs only if that view
// is current, so that once a CRD's deletion is acknowledged no replica
// serves its resource. rev, etcd's revision read for the request (shared
// with its other linearizable reads), was read after the request began:
// the view answers if this replica has applied the CRD changes up to rev,
// or if the CRD was found by a read sent after etcd was at rev or later
// (present). Otherwise the CRD's key is read from etcd, one quorum read
// without decoding: the read cache would wait for etcd's progress report
// on every request while writes move the revision.
func (s *Server) gone(ctx context.Context, name string, v *view, guardedWrite bool) (bool, error) {
	if v.gone.Load() || guardedWrite {
		// A guarded write needs no read: its guard fails if the CRD is
		// gone, and catchUp refuses it as not found. (Nor does a patch's
		// syntax then wait for etcd.)
		return v.gone.Load(), nil
	}
	rev, err := s.crds.CurrentRevision(ctx)
	if err != nil {
		return false, err
	}
	s.mu.Lock()
	applied := s.applied
	s.mu.Unlock()
	if applied >= rev || v.present.Load() >= rev {
		return v.gone.Load(), nil // remove marks the view before it advances
	}
	found, err := v.exists.Read(ctx)
	if err != nil {
		return false, fmt.Errorf("read customresourcedefinition %q: %w", name, err)
	}
	if !found {
		return true, nil
	}
	raise(&v.present, rev)
	return v.gone.Load(), nil
}

// existsRead reads whether the CRD's key is in etcd. The writes that
// ask at the same time share one read (freshread): without that, every
// write of a custom object would add its own.
func existsRead(storage registry.Storage, ref etcdstore.Ref) *freshread.Reader[bool] {
	return freshread.New(func() (bool, error) {
		ctx, cancel := context.WithTimeout(context.Background(), checkTimeout)
		defer cancel()
		_, err := storage.Get(ctx, ref, 0)
		if errors.Is(err, etcdstore.ErrNotFound) {
			return false, nil
		}
		return err == nil, err
	})
}

// raise makes n at least rev.
func raise(n *atomic.Int64, rev int64) {
	for {
		old := n.Load()
		if old >= rev || n.CompareAndSwap(old, rev) {
			return
		}
	}
}

// guardedStorage sends every write with a guard on the CRD's key at the
// revision of this replica's view: etcd applies it only if the CRD is still
// what the write was checked against, so no write decided with a schema this
// replica has not caught up with can land — at no cost of a further request.
// A write whose guard fails was not applied; it is checked again (catchUp).
type guardedStorage struct {
	registry.Storage
	server *Server
	name   string
	view   *view
}

// guardAttempts bounds how often one write is sent again after its guard
// failed on a change of the CRD's status alone.
const guardAttempts = 3

func (g *guardedStorage) Create(ctx context.Context, ref etcdstore.Ref, value []byte, guards ...etcdstore.Guard) (int64, error) {
	return g.write(ctx, true, func(guard etcdstore.Guard) (int64, error) {
		return g.Storage.Create(ctx, ref, value, append(slices.Clip(guards), guard)...)
	})
}

func (g *guardedStorage) Update(ctx context.Context, ref etcdstore.Ref, value []byte, revision int64, guards ...etcdstore.Guard) (int64, error) {
	return g.write(ctx, false, func(guard etcdstore.Guard) (int64, error) {
		return g.Storage.Update(ctx, ref, value, revision, append(slices.Clip(guards), guard)...)
	})
}

func (g *guardedStorage) Delete(ctx context.Context, ref etcdstore.Ref, revision int64, guards ...etcdstore.Guard) (int64, error) {
	return g.write(ctx, false, func(guard etcdstore.Guard) (int64, error) {
		return g.Storage.Delete(ctx, ref, revision, append(slices.Clip(guards), guard)...)
	})
}

// write sends a write (create tells which) guarded by the view's revision.
// When the guard fails, the CRD changed after this replica's view: if only
// its status changed, the write is sent again under the view this replica
// then has; otherwise it is refused as catchUp says.
func (g *guardedStorage) write(ctx context.Context, create bool, send func(etcdstore.Guard) (int64, error)) (int64, error) {
	for attempt := 1; ; attempt++ {
		if !g.view.replaced.Load() {
			if create && g.view.deleting.Load() {
				return 0, terminating(g.view.gr)
			}
			rev, err := send(etcdstore.Guard{Ref: g.view.ref, Revision: g.view.revision.Load()})
			if !errors.Is(err, etcdstore.ErrGuardChanged) {
				return rev, err
			}
		}
		if err := g.server.catchUp(ctx, g.name, g.view, create); err != nil {
			return 0, err
		}
		if attempt == guardAttempts {
			return 0, changed(g.name, g.view.generation, "kept changing")
		}
	}
}

// catchUp reads the CRD name linearizably after a write through the stores
// of view found it changed. If its spec or accepted names are no longer
// what the stores were built from, this replica has not applied the change
// yet (or is applying it): it waits up to catchUpWait for that and refuses
// the write either way (503 with Retry-After: nothing was written, and the
// client's retry meets the new schema). A CRD that is gone refuses it as not
// found; one being deleted refuses creates (403, kube's message). Otherwise
// (its status alone changed) it waits until the view has the CRD's revision,
// and the write may be sent again.
func (s *Server) catchUp(ctx context.Context, name string, v *view, create bool) error {
	obj, err := s.crds.Get(ctx, "", name)
	if apierrors.IsNotFound(err) {
		return apierrors.NewNotFound(schema.GroupResource{Group: apiextensionsv1.GroupName, Resource: "customresourcedefinitions"}, name)
	}
	if err != nil {
		return err
	}
	crd := obj.(*apiextensionsv1.CustomResourceDefinition)
	if create && crd.DeletionTimestamp != nil {
		return terminating(v.gr)
	}
	wctx, cancel := context.WithTimeout(ctx, catchUpWait)
	defer cancel()
	_ = s.waitApplied(wctx, revisionOf(crd.ResourceVersion)) // the retry then goes to the new stores
	if ctx.Err() != nil {
		return ctx.Err()
	}
	switch {
	case crd.UID != v.uid:
		return changed(name, v.generation, "was deleted and created again")
	case v.replaced.Load() || crd.Generation != v.generation || !equalNames(crd.Status.AcceptedNames, v.names) || !Serves(crd):
		return changed(name, v.generation, fmt.Sprintf("is now at generation %d", crd.Generation))
	}
	return nil
}

// terminating is kube's refusal of a create while the CRD is being deleted.
func terminating(gr schema.GroupResource) error {
	return apierrors.NewForbidden(gr, "", errors.New("create not allowed while custom resource definition is terminating"))
}

// changed refuses a write checked against generation of the CRD name, which
// changed since (how): nothing was written, the client sends it again.
func changed(name string, generation int64, how string) error {
	return &registry.RetryError{Message: fmt.Sprintf("customresourcedefinition %q changed while the write was checked against generation %d (it %s); nothing was written: send it again",
		name, generation, how)}
}
