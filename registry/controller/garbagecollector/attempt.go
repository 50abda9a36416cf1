package garbagecollector

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/concord-dev/concord/registry"
)

// writes are the options of every write the collector makes.
var writes = registry.WriteOptions{FieldManager: FieldManager}

// maxUpdateAttempts bounds the re-reads of an update that races others.
const maxUpdateAttempts = 5

// attemptToDelete looks at one object, as kube's attemptToDeleteItem: an
// object deleting its dependents in the foreground is let go once none
// blocks it; an object whose owners are all gone is deleted; one with some
// owners alive loses its references to the gone ones.
func (c *Collector) attemptToDelete(ctx context.Context, uid types.UID) error {
	c.mu.Lock()
	n := c.graph.nodes[uid]
	c.mu.Unlock()
	if n == nil {
		return nil // gone, or an owner never seen: its dependents were queued
	}
	if n.foreground {
		return c.processDeletingDependents(ctx, n)
	}
	if n.deleting || len(n.owners) == 0 {
		return nil // being deleted already, or nobody's
	}
	var solid, dangling, waiting []metav1.OwnerReference
	for _, ref := range n.owners {
		state, err := c.ownerState(ctx, n, ref)
		if err != nil {
			return err
		}
		switch state {
		case ownerUnresolvable:
			return nil // left alone, as kube leaves it
		case ownerAbsent:
			dangling = append(dangling, ref)
		case ownerWaiting:
			waiting = append(waiting, ref)
		default:
			solid = append(solid, ref)
		}
	}
	switch {
	case len(solid) > 0:
		if len(dangling) == 0 && len(waiting) == 0 {
			return nil
		}
		// Some owners remain: only the references to the others go (kube
		// drops those to owners waiting in the foreground too, so that
		// they need not wait for an object they do not own alone).
		drop := append(uidsOf(dangling), uidsOf(waiting)...)
		return c.updateOwners(ctx, n, func(refs []metav1.OwnerReference) []metav1.OwnerReference {
			return slices.DeleteFunc(refs, func(r metav1.OwnerReference) bool { return slices.Contains(drop, r.UID) })
		})
	case len(waiting) > 0 && c.hasDependents(n.uid):
		// An owner waits for n in the foreground and n owns others: n is
		// deleted in the foreground too, after it stops blocking the owner
		// (its own dependents may take a while), as kube does.
		unblock := uidsOf(waiting)
		if err := c.updateOwners(ctx, n, func(refs []metav1.OwnerReference) []metav1.OwnerReference {
			no := false
			for i := range refs {
				if slices.Contains(unblock, refs[i].UID) && refs[i].BlockOwnerDeletion != nil && *refs[i].BlockOwnerDeletion {
					refs[i].BlockOwnerDeletion = &no
				}
			}
			return refs
		}); err != nil {
			return err
		}
		foreground := metav1.DeletePropagationForeground
		return c.deleteObject(ctx, n, &foreground, false)
	default:
		// No policy: the object's own orphan or foregroundDeletion
		// finalizer decides, else Background, as kube's collector chooses.
		return c.deleteObject(ctx, n, nil, true)
	}
}

type ownerStatus int

const (
	ownerSolid ownerStatus = iota
	ownerAbsent
	// ownerWaiting: it exists and is deleting its dependents in the foreground.
	ownerWaiting
	// ownerUnresolvable: the reference cannot name an object (a kind not
	// served, a namespaced owner of a cluster-scoped object).
	ownerUnresolvable
)

// ownerState reads the owner ref names from etcd: absent when no object is
// at its name or another one (another uid) is. What the graph knows only
// saves the read when the owner is there and not deleting, which deletes
// nothing.
func (c *Collector) ownerState(ctx context.Context, n *node, ref metav1.OwnerReference) (ownerStatus, error) {
	store := c.storeOf(ref)
	if store == nil {
		c.unknownKind(n, ref)
		return ownerUnresolvable, nil
	}
	namespace := ""
	if store.Resource.Namespaced {
		if !n.store.Resource.Namespaced {
			c.invalidNamespace(ctx, n, ref)
			return ownerUnresolvable, nil
		}
		namespace = n.namespace
	}
	key := ownerKey(ref, namespace)
	c.mu.Lock()
	absent := c.absent[key]
	owner := c.graph.nodes[ref.UID]
	c.mu.Unlock()
	if absent {
		return ownerAbsent, nil
	}
	if owner != nil && owner.matches(ref, namespace) && !owner.deleting {
		return ownerSolid, nil
	}
	obj, err := store.GetFromStorage(ctx, namespace, ref.Name)
	switch {
	case apierrors.IsNotFound(err) || (err == nil && obj.GetUID() != ref.UID):
		c.mu.Lock()
		c.absent[key] = true
		c.mu.Unlock()
		return ownerAbsent, nil
	case err != nil:
		return 0, fmt.Errorf("read owner %s %s/%s: %w", ref.Kind, namespace, ref.Name, err)
	case obj.GetDeletionTimestamp() != nil && slices.Contains(obj.GetFinalizers(), metav1.FinalizerDeleteDependents):
		return ownerWaiting, nil
	}
	return ownerSolid, nil
}

// ownerKey names the owner a reference means, from a dependent in
// namespace (empty for a cluster-scoped owner).
func ownerKey(ref metav1.OwnerReference, namespace string) string {
	gv, _ := schema.ParseGroupVersion(ref.APIVersion)
	return fmt.Sprintf("%s/%s/%s/%s/%s", gv.Group, ref.Kind, namespace, ref.Name, ref.UID)
}

// storeOf is the store of the kind ref names: its version if served, else
// another version of the same group and kind (the same objects).
func (c *Collector) storeOf(ref metav1.OwnerReference) *registry.Store {
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	if err != nil {
		return nil
	}
	var found *registry.Store
	for _, s := range c.catalog.Stores() {
		res := s.Resource
		if res.GroupVersion.Group != gv.Group || res.Kind != ref.Kind || res.CreateOnly {
			continue
		}
		if res.GroupVersion.Version == gv.Version {
			return s
		}
		if found == nil {
			found = s
		}
	}
	return found
}

// unknownKind leaves a reference to a kind not served alone, logged once
// per kind; the dependent is looked at again when the catalog changes.
func (c *Collector) unknownKind(n *node, ref metav1.OwnerReference) {
	gv, _ := schema.ParseGroupVersion(ref.APIVersion)
	gk := schema.GroupKind{Group: gv.Group, Kind: ref.Kind}
	c.mu.Lock()
	deps, logged := c.unknownKinds[gk]
	if !logged {
		deps = map[types.UID]struct{}{}
		c.unknownKinds[gk] = deps
	}
	deps[n.uid] = struct{}{}
	c.mu.Unlock()
	if !logged {
		c.log.Warn("garbage collector: an ownerReference names a kind that is not served; its dependents are left alone",
			"apiVersion", ref.APIVersion, "kind", ref.Kind, "dependent", n.store.Resource.GroupResource().String()+" "+n.namespace+"/"+n.name)
	}
}

// invalidNamespace reports a cluster-scoped object naming a namespaced
// owner, which can never resolve, with kube's warning Event (once).
func (c *Collector) invalidNamespace(ctx context.Context, n *node, ref metav1.OwnerReference) {
	key := string(n.uid) + "/" + string(ref.UID)
	c.mu.Lock()
	done := c.reported[key]
	c.reported[key] = true
	c.mu.Unlock()
	if done {
		return
	}
	message := fmt.Sprintf("ownerRef [%s/%s, namespace: %s, name: %s, uid: %s] does not exist in namespace %q",
		ref.APIVersion, ref.Kind, n.namespace, ref.Name, ref.UID, n.namespace)
	c.log.Warn("garbage collector: a cluster-scoped object names a namespaced owner; it is left alone",
		"dependent", n.store.Resource.GroupResource().String()+" "+n.name, "owner", ref.Kind+" "+ref.Name)
	events, ok := c.catalog.Lookup("", "v1", "events")
	if !ok {
		return
	}
	now := metav1.NewTime(time.Now())
	res := n.store.Resource
	ev := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s.%x", n.name, now.UnixNano()), Namespace: metav1.NamespaceDefault},
		InvolvedObject: corev1.ObjectReference{
			Kind: res.Kind, APIVersion: res.GroupVersion.String(), Name: n.name, UID: n.uid, ResourceVersion: n.resourceVersion,
		},
		Reason: "OwnerRefInvalidNamespace", Message: message, Type: corev1.EventTypeWarning,
		Source:         corev1.EventSource{Component: "garbage-collector-controller"},
		FirstTimestamp: now, LastTimestamp: now, Count: 1,
	}
	if _, err := events.Create(ctx, metav1.NamespaceDefault, ev, writes); err != nil {
		c.log.Warn("garbage collector: could not record an Event", "reason", ev.Reason, "err", err)
	}
}

func (c *Collector) hasDependents(uid types.UID) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.graph.dependents[uid]) > 0
}

// deleteObject deletes n with policy, guarded by its uid and (guarded) the
// resourceVersion the collector decided on: a dependent adopted or changed
// meanwhile is not deleted (409) but looked at again.
func (c *Collector) deleteObject(ctx context.Context, n *node, policy *metav1.DeletionPropagation, guarded bool) error {
	pre := &metav1.Preconditions{UID: &n.uid}
	if guarded {
		pre.ResourceVersion = &n.resourceVersion
	}
	_, err := n.store.Delete(ctx, n.namespace, n.name, &metav1.DeleteOptions{Preconditions: pre, PropagationPolicy: policy}, writes)
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// updateOwners rewrites n's ownerReferences with change, on its state in
// etcd (the uid must still be n's), guarded by its resourceVersion and
// retried on a race.
func (c *Collector) updateOwners(ctx context.Context, n *node, change func([]metav1.OwnerReference) []metav1.OwnerReference) error {
	for range maxUpdateAttempts {
		obj, err := n.store.GetFromStorage(ctx, n.namespace, n.name)
		if apierrors.IsNotFound(err) || (err == nil && obj.GetUID() != n.uid) {
			return nil
		}
		if err != nil {
			return err
		}
		refs := obj.GetOwnerReferences()
		next := change(slices.Clone(refs))
		if equalRefs(refs, next) {
			return nil
		}
		if len(next) == 0 {
			next = nil
		}
		obj.SetOwnerReferences(next)
		_, _, err = n.store.Update(ctx, n.namespace, n.name, obj, writes)
		if !apierrors.IsConflict(err) {
			return err
		}
	}
	return apierrors.NewConflict(n.store.Resource.GroupResource(), n.name, errors.New(registry.OptimisticLockErrorMsg))
}

// removeFinalizer removes finalizer from the object n, read from etcd,
// if it is still that object; the update that removes the last one
// deletes it.
func (c *Collector) removeFinalizer(ctx context.Context, n *node, finalizer string) error {
	for range maxUpdateAttempts {
		obj, err := n.store.GetFromStorage(ctx, n.namespace, n.name)
		if apierrors.IsNotFound(err) || (err == nil && obj.GetUID() != n.uid) {
			return nil
		}
		if err != nil {
			return err
		}
		if !slices.Contains(obj.GetFinalizers(), finalizer) {
			return nil
		}
		obj.SetFinalizers(slices.DeleteFunc(obj.GetFinalizers(), func(f string) bool { return f == finalizer }))
		_, _, err = n.store.Update(ctx, n.namespace, n.name, obj, writes)
		if apierrors.IsNotFound(err) {
			return nil
		}
		if !apierrors.IsConflict(err) {
			return err
		}
	}
	return apierrors.NewConflict(n.store.Resource.GroupResource(), n.name, errors.New(registry.OptimisticLockErrorMsg))
}

// processDeletingDependents lets an owner deleting in the foreground go
// once no dependent blocks it, and otherwise queues the blocking ones.
// "None" is decided on a graph that holds every dependent written before
// the owner was seen deleting: one whose watch is behind would block it.
func (c *Collector) processDeletingDependents(ctx context.Context, owner *node) error {
	if c.queueBlocking(owner) {
		return nil // each one's deletion queues the owner again
	}
	if err := c.awaitWatchesFor(ctx, owner); err != nil {
		return err
	}
	if c.queueBlocking(owner) {
		return nil
	}
	return c.removeFinalizer(ctx, owner, metav1.FinalizerDeleteDependents)
}

// queueBlocking queues the dependents the graph knows that block owner's
// deletion, and reports whether there are any.
func (c *Collector) queueBlocking(owner *node) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	blocking := false
	for _, dep := range c.graph.dependentsOf(owner.uid) {
		if !dep.blocks(owner.uid) {
			continue
		}
		blocking = true
		if !dep.deleting {
			c.queue.Add(dep.uid)
		}
	}
	return blocking
}

// attemptToOrphan removes the references to an owner deleting with the
// orphan finalizer from its dependents, then the finalizer. The dependents
// are the graph's once it holds every one written before the owner was
// seen orphaning: one whose watch is behind would be left naming an owner
// gone, and deleted.
func (c *Collector) attemptToOrphan(ctx context.Context, uid types.UID) error {
	c.mu.Lock()
	owner := c.graph.nodes[uid]
	c.mu.Unlock()
	if owner == nil || !owner.orphan {
		return nil
	}
	if err := c.awaitWatchesFor(ctx, owner); err != nil {
		return err
	}
	c.mu.Lock()
	deps := c.graph.dependentsOf(uid)
	c.mu.Unlock()
	for _, dep := range deps {
		err := c.updateOwners(ctx, dep, func(refs []metav1.OwnerReference) []metav1.OwnerReference {
			return slices.DeleteFunc(refs, func(r metav1.OwnerReference) bool { return r.UID == uid })
		})
		if err != nil {
			return fmt.Errorf("orphan %s %s/%s: %w", dep.store.Resource.Kind, dep.namespace, dep.name, err)
		}
	}
	return c.removeFinalizer(ctx, owner, metav1.FinalizerOrphanDependents)
}

func uidsOf(refs []metav1.OwnerReference) []types.UID {
	out := make([]types.UID, len(refs))
	for i, r := range refs {
		out[i] = r.UID
	}
	return out
}

func equalRefs(a, b []metav1.OwnerReference) bool {
	return slices.EqualFunc(a, b, func(x, y metav1.OwnerReference) bool {
		return x.UID == y.UID && x.Name == y.Name && x.Kind == y.Kind && x.APIVersion == y.APIVersion &&
			equalBool(x.Controller, y.Controller) && equalBool(x.BlockOwnerDeletion, y.BlockOwnerDeletion)
	})
}

func equalBool(a, b *bool) bool {
	return (a == nil && b == nil) || (a != nil && b != nil && *a == *b)
}
