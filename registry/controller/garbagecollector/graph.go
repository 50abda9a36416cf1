package garbagecollector

import (
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/concord-dev/concord/registry"
)

// node is what the collector last saw of one object on its resource's
// watch. It decides only what to look at: every deletion is decided again
// from etcd and guarded by the object's uid and resourceVersion.
type node struct {
	store           *registry.Store
	namespace, name string
	uid             types.UID
	resourceVersion string
	owners          []metav1.OwnerReference
	// deleting: deletionTimestamp is set; foreground and orphan: with the
	// foregroundDeletion or orphan finalizer.
	deleting, foreground, orphan bool
}

func newNode(store *registry.Store, obj metav1.Object) *node {
	n := &node{
		store: store, namespace: obj.GetNamespace(), name: obj.GetName(), uid: obj.GetUID(),
		resourceVersion: obj.GetResourceVersion(), owners: obj.GetOwnerReferences(),
		deleting: obj.GetDeletionTimestamp() != nil,
	}
	n.foreground = n.deleting && slices.Contains(obj.GetFinalizers(), metav1.FinalizerDeleteDependents)
	n.orphan = n.deleting && slices.Contains(obj.GetFinalizers(), metav1.FinalizerOrphanDependents)
	return n
}

// blocks reports whether n's reference to owner has blockOwnerDeletion.
func (n *node) blocks(owner types.UID) bool {
	for _, ref := range n.owners {
		if ref.UID == owner {
			return ref.BlockOwnerDeletion != nil && *ref.BlockOwnerDeletion
		}
	}
	return false
}

// matches reports whether n is the object ref names (kind and group, name),
// as seen from a dependent in namespace.
func (n *node) matches(ref metav1.OwnerReference, namespace string) bool {
	res := n.store.Resource
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	if err != nil || gv.Group != res.GroupVersion.Group || ref.Kind != res.Kind || ref.Name != n.name {
		return false
	}
	return !res.Namespaced || n.namespace == namespace
}

// graph is the owner → dependents index built from the watches. Its
// methods are called with the collector's lock held.
type graph struct {
	nodes map[types.UID]*node
	// dependents: owner uid → the uids of the objects naming it.
	dependents map[types.UID]map[types.UID]struct{}
}

func newGraph() *graph {
	return &graph{nodes: map[types.UID]*node{}, dependents: map[types.UID]map[types.UID]struct{}{}}
}

// put records n (added or changed) and returns what was known of it before.
func (g *graph) put(n *node) (old *node) {
	old = g.nodes[n.uid]
	if old != nil {
		g.unlink(old)
	}
	g.nodes[n.uid] = n
	for _, ref := range n.owners {
		deps := g.dependents[ref.UID]
		if deps == nil {
			deps = map[types.UID]struct{}{}
			g.dependents[ref.UID] = deps
		}
		deps[n.uid] = struct{}{}
	}
	return old
}

// remove forgets the object uid and returns what was known of it.
func (g *graph) remove(uid types.UID) *node {
	n := g.nodes[uid]
	if n != nil {
		g.unlink(n)
		delete(g.nodes, uid)
	}
	return n
}

func (g *graph) unlink(n *node) {
	for _, ref := range n.owners {
		if deps := g.dependents[ref.UID]; deps != nil {
			delete(deps, n.uid)
			if len(deps) == 0 {
				delete(g.dependents, ref.UID)
			}
		}
	}
}

// dependentsOf are the nodes naming owner.
func (g *graph) dependentsOf(owner types.UID) []*node {
	var out []*node
	for uid := range g.dependents[owner] {
		if n := g.nodes[uid]; n != nil {
			out = append(out, n)
		}
	}
	return out
}
