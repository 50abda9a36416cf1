package admission

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/informers"
	admissionregistrationinformers "k8s.io/client-go/informers/admissionregistration"
	admissionregistrationinformersv1 "k8s.io/client-go/informers/admissionregistration/v1"
	coreinformers "k8s.io/client-go/informers/core"
	coreinformersv1 "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	admissionregistrationlisters "k8s.io/client-go/listers/admissionregistration/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/concord-dev/concord/registry"
	"github.com/concord-dev/concord/registry/controller"
)

// kube's webhook plugins take their configurations and namespaces from a
// SharedInformerFactory and a clientset. The types below are the part of
// those interfaces the plugins call, backed by Concord's stores; the
// embedded interfaces are nil, so any other method would panic — kube's
// generic.Webhook, configuration managers and namespace.Matcher call none.

// informerFactory gives the plugins the two configuration informers and
// the namespaces.
type informerFactory struct {
	informers.SharedInformerFactory
	validating, mutating *configInformer
	namespaces           namespaceInformer
}

func (f *informerFactory) Admissionregistration() admissionregistrationinformers.Interface {
	return admissionregistrationGroup{f: f}
}

func (f *informerFactory) Core() coreinformers.Interface { return coreGroup{f: f} }

type admissionregistrationGroup struct {
	admissionregistrationinformers.Interface
	f *informerFactory
}

func (g admissionregistrationGroup) V1() admissionregistrationinformersv1.Interface {
	return admissionregistrationV1{f: g.f}
}

type admissionregistrationV1 struct {
	admissionregistrationinformersv1.Interface
	f *informerFactory
}

func (v admissionregistrationV1) ValidatingWebhookConfigurations() admissionregistrationinformersv1.TypedValidatingWebhookConfigurationInformer {
	return validatingInformer{i: v.f.validating}
}

func (v admissionregistrationV1) MutatingWebhookConfigurations() admissionregistrationinformersv1.TypedMutatingWebhookConfigurationInformer {
	return mutatingInformer{i: v.f.mutating}
}

type validatingInformer struct {
	admissionregistrationinformersv1.TypedValidatingWebhookConfigurationInformer
	i *configInformer
}

func (v validatingInformer) Informer() cache.SharedIndexInformer { return v.i }
func (v validatingInformer) Lister() admissionregistrationlisters.ValidatingWebhookConfigurationLister {
	return admissionregistrationlisters.NewValidatingWebhookConfigurationLister(v.i.indexer)
}

type mutatingInformer struct {
	admissionregistrationinformersv1.TypedMutatingWebhookConfigurationInformer
	i *configInformer
}

func (m mutatingInformer) Informer() cache.SharedIndexInformer { return m.i }
func (m mutatingInformer) Lister() admissionregistrationlisters.MutatingWebhookConfigurationLister {
	return admissionregistrationlisters.NewMutatingWebhookConfigurationLister(m.i.indexer)
}

// configInformer holds the webhook configurations of one store, kept
// current by Watch, and tells kube's configuration manager of each change
// (it rebuilds its webhook accessors from the lister then).
type configInformer struct {
	cache.SharedIndexInformer
	indexer  cache.Indexer
	mu       sync.Mutex
	handlers []cache.ResourceEventHandler
	synced   atomic.Bool
	syncedCh chan struct{}
	once     sync.Once
	// seen are the names handed over since the watch last opened.
	seen map[string]bool
}

func newConfigInformer() *configInformer {
	return &configInformer{
		indexer:  cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{}),
		syncedCh: make(chan struct{}),
	}
}

func (i *configInformer) AddEventHandler(h cache.ResourceEventHandler) (cache.ResourceEventHandlerRegistration, error) {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.handlers = append(i.handlers, h)
	return registration{i}, nil
}

func (i *configInformer) HasSynced() bool           { return i.synced.Load() }
func (i *configInformer) GetIndexer() cache.Indexer { return i.indexer }

// registration is a handler's: synced with its informer, since every
// event is handed to every handler before Synced.
type registration struct{ i *configInformer }

func (r registration) HasSynced() bool { return r.i.HasSynced() }
func (r registration) HasSyncedChecker() cache.DoneChecker {
	return doneChecker{r.i}
}

type doneChecker struct{ i *configInformer }

func (d doneChecker) Name() string          { return "admission webhook configurations" }
func (d doneChecker) Done() <-chan struct{} { return d.i.syncedCh }

func (i *configInformer) opened(context.Context) error {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.seen = map[string]bool{}
	return nil
}

// event stores obj and tells the handlers, as an informer does.
func (i *configInformer) event(typ watch.EventType, obj registry.Object) error {
	i.mu.Lock()
	defer i.mu.Unlock()
	old, exists, err := i.indexer.Get(obj)
	if err != nil {
		return err
	}
	if typ == watch.Deleted {
		if err := i.indexer.Delete(obj); err != nil {
			return err
		}
		for _, h := range i.handlers {
			h.OnDelete(obj)
		}
		return nil
	}
	i.seen[obj.GetName()] = true
	if err := i.indexer.Update(obj); err != nil {
		return err
	}
	for _, h := range i.handlers {
		if exists {
			h.OnUpdate(old, obj)
		} else {
			h.OnAdd(obj, !i.synced.Load())
		}
	}
	return nil
}

// resynced drops what the reopened watch no longer holds (deleted while
// no watch ran).
func (i *configInformer) resynced(context.Context, int64) error {
	i.mu.Lock()
	defer i.mu.Unlock()
	for _, obj := range i.indexer.List() {
		o := obj.(metav1.Object)
		if i.seen[o.GetName()] {
			continue
		}
		if err := i.indexer.Delete(obj); err != nil {
			return err
		}
		for _, h := range i.handlers {
			h.OnDelete(obj)
		}
	}
	i.synced.Store(true)
	i.once.Do(func() { close(i.syncedCh) })
	return nil
}

// watch keeps i current from store until ctx ends.
func (i *configInformer) watch(ctx context.Context, store *registry.Store, log *slog.Logger) {
	controller.Watch(ctx, store, controller.WatchOptions{Name: "admission webhooks", Log: log}, controller.Handler[registry.Object]{
		Opened: i.opened,
		Event: func(_ context.Context, typ watch.EventType, obj registry.Object, _ bool) error {
			return i.event(typ, obj)
		},
		Synced: i.resynced,
	})
}

// coreGroup gives the namespaces.
type coreGroup struct {
	coreinformers.Interface
	f *informerFactory
}

func (g coreGroup) V1() coreinformersv1.Interface { return coreV1{f: g.f} }

type coreV1 struct {
	coreinformersv1.Interface
	f *informerFactory
}

func (v coreV1) Namespaces() coreinformersv1.TypedNamespaceInformer { return v.f.namespaces }

// namespaceInformer reads namespaces from their store: a linearizable
// read (from the store's read cache), so a namespaceSelector is matched
// against the labels as they are, not as a watch last saw them.
type namespaceInformer struct {
	coreinformersv1.TypedNamespaceInformer
	store *registry.Store
}

func (n namespaceInformer) Informer() cache.SharedIndexInformer { return alwaysSynced{} }
func (n namespaceInformer) Lister() corelisters.NamespaceLister {
	return namespaceLister{store: n.store}
}

// alwaysSynced: reads go to the store, which has nothing to wait for.
type alwaysSynced struct{ cache.SharedIndexInformer }

func (alwaysSynced) HasSynced() bool { return true }

// namespaceReadTimeout bounds a namespace read of the lister, whose Get
// has no context.
const namespaceReadTimeout = 10 * time.Second

type namespaceLister struct {
	corelisters.NamespaceLister
	store *registry.Store
	// ctx, when set, is the request's: its reads share the request's
	// revision (registry.WithRevisionMemo) instead of reading etcd's.
	ctx context.Context
	// recent: read the namespaces' cache as it is, as kube's informer
	// (registry.Store.GetRecent); a namespace it does not have is read
	// from etcd (namespaceClient).
	recent bool
}

func (l namespaceLister) Get(name string) (*corev1.Namespace, error) {
	parent := l.ctx
	if parent == nil {
		parent = context.Background()
	}
	ctx, cancel := context.WithTimeout(parent, namespaceReadTimeout)
	defer cancel()
	if l.recent {
		obj, err := l.store.GetRecent(ctx, "", name)
		if err != nil {
			return nil, err
		}
		return obj.(*corev1.Namespace), nil
	}
	return getNamespace(ctx, l.store, name)
}

func getNamespace(ctx context.Context, store *registry.Store, name string) (*corev1.Namespace, error) {
	obj, err := store.Get(ctx, "", name)
	if err != nil {
		return nil, err
	}
	return obj.(*corev1.Namespace), nil
}

// namespaceClient is the clientset namespace.Matcher reads a namespace
// its lister did not find with; the lister reads the store already, so
// this reads it again (a namespace created in between is found).
type namespaceClient struct {
	kubernetes.Interface
	store *registry.Store
}

func (c namespaceClient) CoreV1() corev1client.CoreV1Interface {
	return namespaceCoreV1{store: c.store}
}

type namespaceCoreV1 struct {
	corev1client.CoreV1Interface
	store *registry.Store
}

func (c namespaceCoreV1) Namespaces() corev1client.NamespaceInterface {
	return namespaceGetter{store: c.store}
}

type namespaceGetter struct {
	corev1client.NamespaceInterface
	store *registry.Store
}

func (g namespaceGetter) Get(ctx context.Context, name string, _ metav1.GetOptions) (*corev1.Namespace, error) {
	return getNamespace(ctx, g.store, name)
}
