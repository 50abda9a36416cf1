package admission

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/concord-dev/concord/apiserver/filters"
	"github.com/concord-dev/concord/registry"
)

// Stores finds the store of a served kind: the catalog
// (registry.Catalog.Stores), built-in and custom.
type Stores func() []*registry.Store

// byKind is the store serving kind, if one does.
func (f Stores) byKind(kind schema.GroupVersionKind) (*registry.Store, bool) {
	for _, s := range f() {
		if s.Resource.GroupVersionKind() == kind && !s.Resource.CreateOnly {
			return s, true
		}
	}
	return nil, false
}

// paramReadTimeout bounds a read of a policy's params, whose lister has
// no context (kube's dispatcher waits 1 s for its informer).
const paramReadTimeout = 10 * time.Second

// paramInformer gives kube's dispatcher a policy's params (paramKind) read
// from their store, linearizably (the store's read cache): a binding sees
// its params as they are, not as a watch last saw them. kube reads them
// from an informer.
type paramInformer struct {
	stores Stores
	kind   schema.GroupVersionKind
	// ctx, when set, is the request's (see namespaceLister).
	ctx context.Context
}

// readContext is the context of one read of l.
func (l paramLister) readContext() (context.Context, context.CancelFunc) {
	parent := l.ctx
	if parent == nil {
		parent = context.Background()
	}
	return context.WithTimeout(parent, paramReadTimeout)
}

var _ informers.GenericInformer = paramInformer{}

func (p paramInformer) Informer() cache.SharedIndexInformer { return alwaysSynced{} }
func (p paramInformer) Lister() cache.GenericLister         { return paramLister(p) }

type paramLister paramInformer

func (l paramLister) List(selector labels.Selector) ([]runtime.Object, error) {
	return l.list("", selector)
}

func (l paramLister) Get(name string) (runtime.Object, error) { return l.get("", name) }

func (l paramLister) ByNamespace(namespace string) cache.GenericNamespaceLister {
	return paramNamespaceLister{l: l, namespace: namespace}
}

type paramNamespaceLister struct {
	l         paramLister
	namespace string
}

func (n paramNamespaceLister) List(selector labels.Selector) ([]runtime.Object, error) {
	return n.l.list(n.namespace, selector)
}

func (n paramNamespaceLister) Get(name string) (runtime.Object, error) {
	return n.l.get(n.namespace, name)
}

func (l paramLister) store(name string) (*registry.Store, error) {
	s, ok := l.stores.byKind(l.kind)
	if !ok { // a CRD deleted since the hooks were built
		return nil, apierrors.NewNotFound(schema.GroupResource{Group: l.kind.Group, Resource: l.kind.Kind}, name)
	}
	return s, nil
}

func (l paramLister) get(namespace, name string) (runtime.Object, error) {
	s, err := l.store(name)
	if err != nil {
		return nil, err
	}
	ctx, cancel := l.readContext()
	defer cancel()
	return s.Get(ctx, namespace, name)
}

func (l paramLister) list(namespace string, selector labels.Selector) ([]runtime.Object, error) {
	s, err := l.store("")
	if err != nil {
		return nil, nil
	}
	ctx, cancel := l.readContext()
	defer cancel()
	list, err := s.List(ctx, namespace, &metainternalversion.ListOptions{LabelSelector: selector})
	if err != nil {
		return nil, err
	}
	return meta.ExtractList(list)
}

// scopeOf is kube's RESTScope of res.
func scopeOf(res *registry.Resource) meta.RESTScope {
	if res.Namespaced {
		return meta.RESTScopeNamespace
	}
	return meta.RESTScopeRoot
}

// authorizerOf answers the `authorizer` of policy expressions with
// Concord's own authorizer, as kube's with its own.
type authorizerOf struct{ authz filters.Authorizer }

func (a authorizerOf) Authorize(ctx context.Context, attrs authorizer.Attributes) (authorizer.Decision, string, error) {
	var u filters.UserInfo
	if info := attrs.GetUser(); info != nil {
		u = filters.UserInfo{Name: info.GetName(), UID: info.GetUID(), Groups: info.GetGroups(), Extra: info.GetExtra()}
	}
	d, reason, err := a.authz.Authorize(ctx, filters.Attributes{
		User:            u,
		Verb:            attrs.GetVerb(),
		ResourceRequest: attrs.IsResourceRequest(),
		APIGroup:        attrs.GetAPIGroup(),
		APIVersion:      attrs.GetAPIVersion(),
		Resource:        attrs.GetResource(),
		Subresource:     attrs.GetSubresource(),
		Namespace:       attrs.GetNamespace(),
		Name:            attrs.GetName(),
		Path:            attrs.GetPath(),
	})
	switch d {
	case filters.Allow:
		return authorizer.DecisionAllow, reason, err
	case filters.Deny:
		return authorizer.DecisionDeny, reason, err
	}
	return authorizer.DecisionNoOpinion, reason, err
}

// typeConverters give kube's ApplyConfiguration mutations the types of
// each kind, as server-side apply merges them (registry.Store.TypeConverter);
// kube's manager reads them from its OpenAPI.
type typeConverters struct{ stores Stores }

func (t typeConverters) GetTypeConverter(kind schema.GroupVersionKind) managedfields.TypeConverter {
	s, ok := t.stores.byKind(kind)
	if !ok {
		return nil
	}
	c, err := s.TypeConverter()
	if err != nil {
		return nil
	}
	return c
}

func (typeConverters) Run(ctx context.Context) { <-ctx.Done() }

// errNoParamKind is kube's configuration error of a paramKind not served.
func errNoParamKind(kind schema.GroupVersionKind) error {
	return fmt.Errorf("failed to find resource referenced by paramKind: '%v'", kind)
}
