package garbagecollector

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/concord-dev/concord/registry"
)

// gate holds back the collector's watch of one resource: while shut, that
// watch's events (and bookmarks) wait before they are applied, as on a
// replica where that watch lags behind the others. etcd is real underneath.
type gate struct {
	resource schema.GroupResource
	mu       sync.Mutex
	// shut is closed when the gate opens; nil while open.
	shut chan struct{}
}

func (g *gate) hold(ctx context.Context, resource schema.GroupResource) {
	if resource != g.resource {
		return
	}
	g.mu.Lock()
	shut := g.shut
	g.mu.Unlock()
	if shut == nil {
		return
	}
	select {
	case <-shut:
	case <-ctx.Done():
	}
}

func (g *gate) close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.shut = make(chan struct{})
}

func (g *gate) open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.shut != nil {
		close(g.shut)
		g.shut = nil
	}
}

// lagFixture runs a collector whose watch of Secrets can be held back, and
// records whether a decision waited for that watch.
type lagFixture struct {
	*fixture
	secrets *registry.Store
	gate    *gate
	mu      sync.Mutex
	waited  bool
}

func newLagFixture(t *testing.T) *lagFixture {
	f := &lagFixture{fixture: newFixture(t, nil)}
	f.secrets, _ = f.catalog.Lookup("", "v1", "secrets")
	f.gate = &gate{resource: f.secrets.Resource.GroupResource()}
	t.Cleanup(f.gate.open)
	f.runWith(t, func(c *Collector) {
		c.beforeEvent = f.gate.hold
		c.awaiting = func(_ int64, behind []schema.GroupResource) {
			if slices.Contains(behind, f.gate.resource) {
				f.mu.Lock()
				f.waited = true
				f.mu.Unlock()
			}
		}
	})
	// The gate shuts on a collector that has its graph: the initial state
	// of Secrets is not held back.
	eventually(t, "the collector's graph built", func() bool { return strings.Contains(f.log.String(), "graph built") })
	return f
}

func (f *lagFixture) waitedForSecrets() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.waited
}

func (f *lagFixture) secret(t *testing.T, name string, owners ...metav1.OwnerReference) {
	t.Helper()
	if _, err := f.secrets.Create(ctxFor(t), "default", &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, OwnerReferences: owners}}, registry.WriteOptions{}); err != nil {
		t.Fatalf("create Secret %s: %v", name, err)
	}
}

// deleteWithLaggingSecrets creates an owner ConfigMap and two dependents,
// a Secret (its event held back) and a ConfigMap, and deletes the owner
// with policy. It returns once the collector has let the owner go or waits
// for the Secrets' watch, and reports whether the owner went before the
// Secret's event was applied; the Secrets' watch is let go then.
func (f *lagFixture) deleteWithLaggingSecrets(t *testing.T, policy metav1.DeletionPropagation) (early bool) {
	t.Helper()
	owner := f.configMap(t, "owner")
	f.gate.close()
	f.secret(t, "dep-secret", ref(owner, true))
	f.configMap(t, "dep-cm", ref(owner, true))
	f.delete(t, f.configMaps, "default", "owner", policy)
	ownerGone := func() bool { return get(t, f.configMaps, "default", "owner") == nil }
	eventually(t, "the owner let go, or the collector waiting for the Secrets' watch", func() bool {
		return ownerGone() || f.waitedForSecrets()
	})
	early = ownerGone()
	if early && get(t, f.secrets, "default", "dep-secret") == nil {
		t.Fatal("dep-secret is gone while its watch was held back")
	}
	f.gate.open()
	return early
}

// TestOrphanWaitsForLaggingWatch: a dependent whose resource's watch has
// not yet delivered it when its owner is deleted with Orphan is orphaned,
// not deleted: the owner is let go only once every watch has reached the
// revision of its deletion.
func TestOrphanWaitsForLaggingWatch(t *testing.T) {
	f := newLagFixture(t)
	if f.deleteWithLaggingSecrets(t, metav1.DeletePropagationOrphan) {
		t.Error("the owner was let go before the Secrets' watch had delivered dep-secret")
	}
	f.gone(t, f.configMaps, "default", "owner")
	for _, dep := range []struct {
		store *registry.Store
		name  string
	}{{f.secrets, "dep-secret"}, {f.configMaps, "dep-cm"}} {
		obj := get(t, dep.store, "default", dep.name)
		if obj == nil {
			t.Errorf("%s was deleted; want it orphaned", dep.name)
			continue
		}
		if refs := obj.GetOwnerReferences(); len(refs) != 0 {
			t.Errorf("%s's ownerReferences %v; want none", dep.name, refs)
		}
	}
}

// TestForegroundWaitsForLaggingWatch: an owner deleted in the foreground
// is not let go while a blocking dependent its watch has not yet delivered
// exists; it goes after that dependent.
func TestForegroundWaitsForLaggingWatch(t *testing.T) {
	f := newLagFixture(t)
	if f.deleteWithLaggingSecrets(t, metav1.DeletePropagationForeground) {
		t.Error("the owner was let go while dep-secret, blocking it, existed (its watch held back)")
	}
	f.gone(t, f.secrets, "default", "dep-secret")
	f.gone(t, f.configMaps, "default", "dep-cm", "owner")
}
