// Package rbac enforces rbac.authorization.k8s.io/v1 as kube-apiserver's
// RBAC authorizer does, from a per-replica view of the stored Roles,
// ClusterRoles and bindings (View), kept current by one etcd watch and
// indexed by subject, so that a decision looks at the bindings of the
// requester only. Every decision first waits until the view has applied
// etcd's revision as of a quorum read made after the request arrived
// (shared by concurrent requests): a change acknowledged by any replica
// counts on every replica for the requests that follow it.
package rbac

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"

	"github.com/concord-dev/concord/registry"
	"github.com/concord-dev/concord/registry/controller"
)

// Source is where the view reads from: etcd, through the registry's
// storage, and the stores of the four resources, which decode their values.
type Source struct {
	Storage                                                controller.PrefixStorage
	Roles, ClusterRoles, RoleBindings, ClusterRoleBindings *registry.Store
}

// awaitTimeout bounds how long a decision waits for the view to catch up
// with etcd (kube-apiserver's consistent reads wait 3 s); then it fails.
const awaitTimeout = 3 * time.Second

// View is the replica's copy of the RBAC objects, indexed for decisions.
type View struct {
	src Source
	log *slog.Logger

	mu    sync.RWMutex
	ready bool
	rev   int64
	idx   *index
	watch *controller.PrefixWatch
	// advanced is closed (and replaced) whenever rev or ready change.
	advanced chan struct{}
	askedAt  time.Time
	// gen is the ModRevision of the generation key (registry.RBACGeneration,
	// put by every RBAC write) as of rev: what a write allowed on this view
	// is guarded by (0: no key, as etcd compares a missing key).
	gen int64
	// hold, in tests, is called before each watch response is applied.
	hold func()

	// loading is the index a watch's initial keys are read into, and
	// loadingGen the generation key's revision among them (the watch's
	// goroutine only).
	loading    *index
	loadingGen int64
}

// NewView returns a view that serves once Run has loaded it.
func NewView(src Source, log *slog.Logger) *View {
	return &View{src: src, log: log, idx: newIndex(), advanced: make(chan struct{})}
}

// Run loads the objects and applies their changes until ctx ends; a broken
// watch loads them again (decisions wait meanwhile).
func (v *View) Run(ctx context.Context) {
	controller.WatchPrefix(ctx, v.src.Storage, registry.RBACStoragePrefix, controller.WatchOptions{Name: "rbac view", Log: v.log}, controller.PrefixHandler{
		Event: v.event, Synced: v.synced, Progress: v.progress, Ended: v.ended,
	})
}

// event reads the initial keys into a new index, and applies each batch of
// changes after them at once.
func (v *View) event(_ context.Context, kvs []controller.KV, initial bool) error {
	if initial {
		if v.loading == nil {
			v.loading = newIndex()
		}
		for _, kv := range kvs {
			if kv.Key == generationKey {
				v.loadingGen = kv.Revision
			}
			v.apply(v.loading, kv)
		}
		return nil
	}
	if v.hold != nil {
		v.hold()
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, kv := range kvs {
		if kv.Key == generationKey {
			v.gen = 0
			if kv.Value != nil {
				v.gen = kv.Revision
			}
		}
		if kv.Value == nil {
			v.idx.remove(kv.Key)
		} else {
			v.apply(v.idx, kv)
		}
		v.rev = kv.Revision
	}
	v.advanceLocked()
	return nil
}

// synced serves the index the initial keys were read into.
func (v *View) synced(_ context.Context, rev int64, w *controller.PrefixWatch) error {
	idx, gen := v.loading, v.loadingGen
	if idx == nil {
		idx = newIndex()
	}
	v.loading, v.loadingGen = nil, 0
	v.mu.Lock()
	v.idx, v.rev, v.gen, v.ready, v.watch = idx, rev, gen, true, w
	v.advanceLocked()
	v.mu.Unlock()
	return nil
}

// progress: every change up to rev is applied.
func (v *View) progress(_ context.Context, rev int64) error {
	if v.hold != nil {
		v.hold()
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if rev > v.rev {
		v.rev = rev
	}
	v.advanceLocked()
	return nil
}

// ended: the view is no longer kept current; decisions wait until the next
// watch has loaded it again.
func (v *View) ended(error) {
	v.loading, v.loadingGen = nil, 0
	v.mu.Lock()
	v.ready, v.watch = false, nil
	v.advanceLocked()
	v.mu.Unlock()
}

// generationKey is registry.RBACGeneration's key as the view reads it.
var generationKey = registry.RBACGeneration.Name

// apply decodes the stored value at kv's key (<plural>/<namespace>/<name>)
// into idx; one that does not decode is removed, so it grants nothing.
func (v *View) apply(idx *index, kv controller.KV) {
	plural, rest, _ := strings.Cut(kv.Key, "/")
	var store *registry.Store
	switch plural {
	case registry.Roles.Plural:
		store = v.src.Roles
	case registry.ClusterRoles.Plural:
		store = v.src.ClusterRoles
	case registry.RoleBindings.Plural:
		store = v.src.RoleBindings
	case registry.ClusterRoleBindings.Plural:
		store = v.src.ClusterRoleBindings
	default:
		return
	}
	obj, err := store.Decode(rest, kv.Object)
	if err != nil {
		idx.remove(kv.Key)
		v.log.Error("rbac view: an object that cannot be read grants nothing", "key", kv.Key, "err", err)
		return
	}
	idx.put(kv.Key, obj)
}

func (v *View) advanceLocked() {
	close(v.advanced)
	v.advanced = make(chan struct{})
}

// errNotCurrent is a decision's error when the view could not catch up.
var errNotCurrent = errors.New("the RBAC authorizer's view of roles and bindings is not current (etcd unavailable?)")

// await waits until the view holds etcd's state as of a revision read after
// await was called, and returns with v.mu read-locked.
func (v *View) await(ctx context.Context) error {
	revision := v.src.Roles.CurrentRevision // shared by every store
	want, err := revision(ctx)
	if err != nil {
		return fmt.Errorf("%w: %w", errNotCurrent, err)
	}
	wantAt := time.Now()
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		v.mu.RLock()
		if v.ready && v.rev >= want {
			return nil
		}
		advanced, ready := v.advanced, v.ready
		v.mu.RUnlock()
		if timer == nil {
			timer = time.NewTimer(awaitTimeout)
		}
		if ready {
			// A progress report answers for every revision current when
			// it was asked for: ask only if the last request predates want.
			v.mu.Lock()
			var ask *controller.PrefixWatch
			if v.askedAt.Before(wantAt) {
				v.askedAt, ask = time.Now(), v.watch
			}
			v.mu.Unlock()
			if ask != nil {
				_ = ask.RequestProgress() // a failure makes this wait time out
			}
		}
		select {
		case <-advanced:
		case <-timer.C:
			return errNotCurrent
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// index is the objects, and the bindings by the subjects they name.
type index struct {
	roles        map[string]*rbacv1.Role        // namespace/name
	clusterRoles map[string]*rbacv1.ClusterRole // name
	bindings     map[string]*binding            // by key
	// cluster are the ClusterRoleBindings by subject key; namespaced the
	// RoleBindings by namespace, then subject key.
	cluster    map[string][]*binding
	namespaced map[string]map[string][]*binding
}

// binding is a RoleBinding or ClusterRoleBinding as decisions need it.
type binding struct {
	key       string
	name      string
	namespace string // "": a ClusterRoleBinding
	ref       rbacv1.RoleRef
	subjects  []rbacv1.Subject
	// subjectKeys are the index keys of subjects, in their order.
	subjectKeys []string
}

func newIndex() *index {
	return &index{
		roles: map[string]*rbacv1.Role{}, clusterRoles: map[string]*rbacv1.ClusterRole{}, bindings: map[string]*binding{},
		cluster: map[string][]*binding{}, namespaced: map[string]map[string][]*binding{},
	}
}

// subjectKey is how decisions look subjects up: users by name (a
// ServiceAccount is its user name, its namespace defaulting to the
// binding's as kube's), groups by name; "" when it can match nobody.
func subjectKey(s rbacv1.Subject, namespace string) string {
	switch s.Kind {
	case rbacv1.UserKind:
		return "u:" + s.Name
	case rbacv1.GroupKind:
		return "g:" + s.Name
	case rbacv1.ServiceAccountKind:
		ns := s.Namespace
		if ns == "" {
			ns = namespace
		}
		if ns == "" {
			return ""
		}
		return "u:system:serviceaccount:" + ns + ":" + s.Name
	}
	return ""
}

func (x *index) put(key string, obj registry.Object) {
	x.remove(key)
	_, rest, _ := strings.Cut(key, "/")
	switch o := obj.(type) {
	case *rbacv1.Role:
		x.roles[rest] = o
	case *rbacv1.ClusterRole:
		x.clusterRoles[rest] = o
	case *rbacv1.RoleBinding:
		x.addBinding(&binding{key: key, name: o.Name, namespace: o.Namespace, ref: o.RoleRef, subjects: o.Subjects})
	case *rbacv1.ClusterRoleBinding:
		x.addBinding(&binding{key: key, name: o.Name, ref: o.RoleRef, subjects: o.Subjects})
	}
}

func (x *index) addBinding(b *binding) {
	x.bindings[b.key] = b
	for _, s := range b.subjects {
		k := subjectKey(s, b.namespace)
		b.subjectKeys = append(b.subjectKeys, k)
		if k == "" || slices.Contains(b.subjectKeys[:len(b.subjectKeys)-1], k) {
			continue
		}
		m := x.cluster
		if b.namespace != "" {
			if m = x.namespaced[b.namespace]; m == nil {
				m = map[string][]*binding{}
				x.namespaced[b.namespace] = m
			}
		}
		list := append(m[k], b)
		// In name order, so that the binding a reason names is stable.
		slices.SortFunc(list, func(a, b *binding) int { return strings.Compare(a.name, b.name) })
		m[k] = list
	}
}

func (x *index) remove(key string) {
	plural, rest, _ := strings.Cut(key, "/")
	switch plural {
	case registry.Roles.Plural:
		delete(x.roles, rest)
	case registry.ClusterRoles.Plural:
		delete(x.clusterRoles, rest)
	}
	b := x.bindings[key]
	if b == nil {
		return
	}
	delete(x.bindings, key)
	m := x.cluster
	if b.namespace != "" {
		m = x.namespaced[b.namespace]
	}
	for _, k := range b.subjectKeys {
		if list, ok := m[k]; ok {
			list = slices.DeleteFunc(slices.Clone(list), func(o *binding) bool { return o == b })
			if len(list) == 0 {
				delete(m, k)
			} else {
				m[k] = list
			}
		}
	}
	if b.namespace != "" && len(m) == 0 {
		delete(x.namespaced, b.namespace)
	}
}

// roleRules are the rules a binding's roleRef names; a missing role is
// kube's NotFound error, and grants nothing.
func (x *index) roleRules(ref rbacv1.RoleRef, namespace string) ([]rbacv1.PolicyRule, error) {
	switch ref.Kind {
	case "Role":
		if r := x.roles[namespace+"/"+ref.Name]; r != nil {
			return r.Rules, nil
		}
		return nil, fmt.Errorf("%s.%s %q not found", registry.Roles.Plural, rbacv1.GroupName, ref.Name)
	case "ClusterRole":
		if r := x.clusterRoles[ref.Name]; r != nil {
			return r.Rules, nil
		}
		return nil, fmt.Errorf("%s.%s %q not found", registry.ClusterRoles.Plural, rbacv1.GroupName, ref.Name)
	}
	return nil, fmt.Errorf("unsupported role reference kind: %q", ref.Kind)
}
