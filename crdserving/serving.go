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
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/concord-dev/concord/etcdstore"
	"github.com/concord-dev/concord/registry"
)

// catchUpWait bounds how long a write to a custom object waits for this
// replica to apply the CRD version etcd holds.
const catchUpWait = 3 * time.Second

// rewatchDelay is the pause before the CRD watch is opened again after it
// ended.
const rewatchDelay = 500 * time.Millisecond

// removeGrace is how long a deleted CRD's resource is still served (reads
// and watches) after the CRD is gone.
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
}

// served is what one CRD makes the catalog serve.
type served struct {
	gr schema.GroupResource
	// revision is the CRD's latest resourceVersion this replica applied;
	// generation and names what its stores were built from (a change of
	// status alone, such as its conditions, does not rebuild them).
	revision   int64
	generation int64
	names      apiextensionsv1.CustomResourceDefinitionNames
}

// NewStore makes the store of one custom resource version over storage, as
// the built-in stores are made (the same options).
type NewStore func(storage registry.Storage, res *registry.Resource) *registry.Store

// New returns a Server that serves the CRDs of crds (the
// CustomResourceDefinition store) in catalog, their objects kept in
// storage.
func New(crds *registry.Store, catalog *registry.Catalog, storage registry.Storage, newStore NewStore, log *slog.Logger) *Server {
	return &Server{crds: crds, catalog: catalog, storage: storage, newStore: newStore, log: log, served: map[string]served{}, removing: map[schema.GroupResource]*time.Timer{}, caughtUp: make(chan struct{})}
}

// Run watches the CRDs until ctx ends, keeping the catalog equal to what
// they define; a watch that ends is opened again, from the start, so a
// replica that missed events (compaction) converges.
func (s *Server) Run(ctx context.Context) {
	for ctx.Err() == nil {
		if err := s.watchOnce(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("watch of CustomResourceDefinitions ended; watching again", "err", err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(rewatchDelay):
		}
	}
}

func (s *Server) watchOnce(ctx context.Context) error {
	yes := true
	w, err := s.crds.Watch(ctx, "", &metainternalversion.ListOptions{Watch: true, SendInitialEvents: &yes, ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan, AllowWatchBookmarks: true})
	if err != nil {
		return err
	}
	// The initial events end with a bookmark: CRDs not among them are gone.
	seen := map[string]bool{}
	initial := true
	return w.Run(ctx, func(ev watch.Event, _ *registry.Encodings) error {
		switch ev.Type {
		case watch.Bookmark:
			meta, err := metaOf(ev)
			if err != nil {
				return err
			}
			if initial {
				s.removeAllBut(seen)
				initial = false
			}
			s.advance(meta)
		case watch.Added, watch.Modified:
			crd, ok := ev.Object.(*apiextensionsv1.CustomResourceDefinition)
			if !ok {
				return fmt.Errorf("watch of CRDs sent a %T", ev.Object)
			}
			seen[crd.Name] = true
			s.apply(crd)
		case watch.Deleted:
			crd, ok := ev.Object.(*apiextensionsv1.CustomResourceDefinition)
			if !ok {
				return fmt.Errorf("watch of CRDs sent a %T", ev.Object)
			}
			s.remove(crd.Name, revisionOf(crd.ResourceVersion))
		case watch.Error:
			return fmt.Errorf("watch of CRDs: %v", apierrors.FromObject(ev.Object))
		}
		return nil
	})
}

func equalNames(a, b apiextensionsv1.CustomResourceDefinitionNames) bool {
	return a.Plural == b.Plural && a.Singular == b.Singular && a.Kind == b.Kind && a.ListKind == b.ListKind &&
		slices.Equal(a.ShortNames, b.ShortNames) && slices.Equal(a.Categories, b.Categories)
}

func metaOf(ev watch.Event) (metav1.Object, error) {
	if m, ok := ev.Object.(metav1.Object); ok {
		return m, nil
	}
	return nil, fmt.Errorf("watch of CRDs sent a bookmark of %T", ev.Object)
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
	if had && Serves(crd) && old.generation == crd.Generation && equalNames(old.names, crd.Status.AcceptedNames) {
		old.revision = rev
		s.mu.Lock()
		s.served[crd.Name] = old
		s.mu.Unlock()
		s.advanceTo(rev)
		return
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
		guarded := &guardedStorage{Storage: s.storage, check: s.guard(crd.Name, crd.Generation, crd.Status.AcceptedNames)}
		stores = append(stores, s.newStore(guarded, res))
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
	s.served[crd.Name] = served{gr: gr, revision: rev, generation: crd.Generation, names: crd.Status.AcceptedNames}
	s.mu.Unlock()
	s.log.Info("serving custom resource", "crd", crd.Name, "resource", gr.String(), "resourceVersion", crd.ResourceVersion)
	s.advanceTo(rev)
}

// remove stops serving the CRD name (deleted at revision rev), after
// removeGrace: its objects were deleted just before it (crdcleanup), and
// the watchers of its resource are sent their DELETED events meanwhile, as
// kube-apiserver keeps a deleted CRD's storage while its requests drain.
// Writes are refused from the start (the guard finds no CRD).
func (s *Server) remove(name string, rev int64) {
	s.mu.Lock()
	old, had := s.served[name]
	if had {
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
	delete(s.served, name)
	s.mu.Unlock()
	s.advanceTo(rev)
}

func (s *Server) advance(meta metav1.Object) { s.advanceTo(revisionOf(meta.GetResourceVersion())) }

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

// guardedStorage checks, before each write it sends to etcd, that the
// write was decided with the CRD etcd holds (check).
type guardedStorage struct {
	registry.Storage
	check func(ctx context.Context, create bool) error
}

func (g *guardedStorage) Create(ctx context.Context, ref etcdstore.Ref, value []byte, guards ...etcdstore.Guard) (int64, error) {
	if err := g.check(ctx, true); err != nil {
		return 0, err
	}
	return g.Storage.Create(ctx, ref, value, guards...)
}

func (g *guardedStorage) Update(ctx context.Context, ref etcdstore.Ref, value []byte, revision int64) (int64, error) {
	if err := g.check(ctx, false); err != nil {
		return 0, err
	}
	return g.Storage.Update(ctx, ref, value, revision)
}

func (g *guardedStorage) Delete(ctx context.Context, ref etcdstore.Ref, revision int64) (int64, error) {
	if err := g.check(ctx, false); err != nil {
		return 0, err
	}
	return g.Storage.Delete(ctx, ref, revision)
}

// guard is the check of the stores built from CRD name at generation with
// names: read the CRD linearizably; if its spec or accepted names are no
// longer what the store was built from, this replica has not applied the
// change yet (or is applying it): wait up to catchUpWait for that, and
// refuse the write either way (503 with Retry-After: nothing was sent, and
// the client's retry meets the new schema). A CRD that is gone refuses it
// as not found; one being deleted refuses creates (403, kube's message).
func (s *Server) guard(name string, generation int64, names apiextensionsv1.CustomResourceDefinitionNames) func(ctx context.Context, create bool) error {
	return func(ctx context.Context, create bool) error {
		obj, err := s.crds.Get(ctx, "", name)
		if apierrors.IsNotFound(err) {
			return apierrors.NewNotFound(schema.GroupResource{Group: apiextensionsv1.GroupName, Resource: "customresourcedefinitions"}, name)
		}
		if err != nil {
			return err
		}
		crd := obj.(*apiextensionsv1.CustomResourceDefinition)
		if create && crd.DeletionTimestamp != nil {
			return apierrors.NewForbidden(schema.GroupResource{Group: crd.Spec.Group, Resource: names.Plural}, "", errors.New("create not allowed while custom resource definition is terminating"))
		}
		if crd.Generation == generation && equalNames(crd.Status.AcceptedNames, names) && Serves(crd) {
			return nil
		}
		rev := revisionOf(crd.ResourceVersion)
		wctx, cancel := context.WithTimeout(ctx, catchUpWait)
		defer cancel()
		_ = s.waitApplied(wctx, rev) // the retry then goes to the new stores
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return &apierrors.StatusError{ErrStatus: metav1.Status{
			Status: metav1.StatusFailure, Code: http.StatusServiceUnavailable, Reason: metav1.StatusReasonServiceUnavailable,
			Message: fmt.Sprintf("customresourcedefinition %q changed (now at generation %d) while the write was checked against generation %d; nothing was written: send it again",
				name, crd.Generation, generation),
			Details: &metav1.StatusDetails{RetryAfterSeconds: 1},
		}}
	}
}
