package apiserver

import (
	"testing"

	"github.com/concord-dev/concord/etcdstore"
	"github.com/concord-dev/concord/registry"
)

// TestRouteResource: the path shapes kube-apiserver serves for namespaced
// and cluster-scoped resources resolve to their store, namespace and name;
// every other path is left to the other routes.
func TestRouteResource(t *testing.T) {
	// The stores are never used: no etcd is needed.
	c := registry.NewCatalog(registry.NewStores(etcdstore.New(nil, "/registry"), registry.DefaultWatchConfig()))
	type want struct {
		resource, group, namespace, name, subresource string
		collection, watch                             bool
	}
	tests := map[string]*want{
		"/api/v1/namespaces/default/configmaps":                            {resource: "configmaps", namespace: "default", collection: true},
		"/api/v1/namespaces/default/configmaps/x":                          {resource: "configmaps", namespace: "default", name: "x"},
		"/api/v1/configmaps":                                               {resource: "configmaps", collection: true},
		"/api/v1/watch/namespaces/default/configmaps":                      {resource: "configmaps", namespace: "default", collection: true, watch: true},
		"/api/v1/watch/namespaces/default/configmaps/x":                    {resource: "configmaps", namespace: "default", name: "x", watch: true},
		"/api/v1/watch/configmaps":                                         {resource: "configmaps", collection: true, watch: true},
		"/api/v1/namespaces":                                               {resource: "namespaces", collection: true},
		"/api/v1/namespaces/default":                                       {resource: "namespaces", name: "default"},
		"/api/v1/namespaces/watch":                                         {resource: "namespaces", name: "watch"},
		"/api/v1/watch/namespaces":                                         {resource: "namespaces", collection: true, watch: true},
		"/api/v1/watch/namespaces/default":                                 {resource: "namespaces", name: "default", watch: true},
		"/api/v1/namespaces/watch/configmaps/watch":                        {resource: "configmaps", namespace: "watch", name: "watch"},
		"/api/v1/namespaces/../configmaps/..":                              {resource: "configmaps", namespace: "..", name: ".."},
		"/apis/coordination.k8s.io/v1/namespaces/a/leases":                 {resource: "leases", group: "coordination.k8s.io", namespace: "a", collection: true},
		"/apis/events.k8s.io/v1/events":                                    {resource: "events", group: "events.k8s.io", collection: true},
		"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/c/status": {resource: "customresourcedefinitions", group: "apiextensions.k8s.io", name: "c", subresource: "status"},

		"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/c/scale":        nil, // a built-in's subresources are its own
		"/apis/apiextensions.k8s.io/v1/watch/customresourcedefinitions/c/status": nil,
		"/api/v1/namespaces/default/configmaps/x/status":                         nil,

		"/api/v1/configmaps/x":                                   nil, // namespaced: no object path without a namespace
		"/api/v1/watch/configmaps/x":                             nil,
		"/api/v1/configmaps/":                                    nil,
		"/api/v1/namespaces//configmaps":                         nil,
		"/api/v1/namespaces/default/configmaps/x/y":              nil,
		"/api/v1/namespaces/default/status":                      nil,
		"/api/v1/namespaces/default/namespaces":                  nil,
		"/api/v1/namespaces/default/leases":                      nil, // leases are not core/v1
		"/api/v1/widgets":                                        nil,
		"/api/v2/configmaps":                                     nil,
		"/api/v1":                                                nil,
		"/api/v1/":                                               nil,
		"/api/v1/watch":                                          nil,
		"/api//configmaps":                                       nil,
		"/apis/v1/configmaps":                                    nil,
		"/apis//v1/configmaps":                                   nil,
		"/apis/coordination.k8s.io/v1":                           nil,
		"/apis/authorization.k8s.io/v1/selfsubjectaccessreviews": nil,
		"/apiss/v1/configmaps":                                   nil,
		"/version":                                               nil,
	}
	for path, w := range tests {
		got, ok := routeResource(c, path)
		if w == nil {
			if ok {
				t.Errorf("routeResource(%q) = %s %+v; want no route", path, got.store.Resource.GroupResource(), got)
			}
			continue
		}
		if !ok {
			t.Errorf("routeResource(%q): no route; want %+v", path, *w)
			continue
		}
		res := got.store.Resource
		if res.Plural != w.resource || res.GroupVersion.Group != w.group || got.namespace != w.namespace || got.name != w.name || got.subresource != w.subresource ||
			got.collection != w.collection || got.watch != w.watch {
			t.Errorf("routeResource(%q) = %s %+v; want %+v", path, res.GroupResource(), got, *w)
		}
	}
}
