package apiserver

import (
	"fmt"
	"net/http"
	"sync"

	"github.com/gorilla/mux"
	"k8s.io/kube-openapi/pkg/cached"
	"k8s.io/kube-openapi/pkg/handler"
	"k8s.io/kube-openapi/pkg/handler3"
	"k8s.io/kube-openapi/pkg/spec3"
	"k8s.io/kube-openapi/pkg/validation/spec"

	"github.com/concord-dev/concord/apiserver/openapi"
	"github.com/concord-dev/concord/registry"
)

// installOpenAPI serves the OpenAPI documents of the stores' resources as
// kube-apiserver does, with kube-openapi's own handlers:
//
//   - GET /openapi/v3: the index {"paths":{"api/v1":{"serverRelativeURL":
//     "/openapi/v3/api/v1?hash=…"}, …}};
//   - GET /openapi/v3/api/v1, /openapi/v3/apis/<group>/<version>: the
//     OpenAPI 3.0 document of that group version, as JSON or protobuf, with
//     an ETag; asked for with its ?hash=, it is cacheable for good;
//   - GET /openapi/v2: the Swagger 2.0 document of everything, as JSON or,
//     when asked (kubectl does), as protobuf
//     (application/com.github.proto-openapi.spec.v2.v1.0+protobuf).
//
// The documents are built once, on the first request that needs them.
func installOpenAPI(router *mux.Router, stores []*registry.Store) {
	resources := make([]*registry.Resource, 0, len(stores))
	for _, s := range stores {
		resources = append(resources, s.Resource)
	}
	build := sync.OnceValues(func() (*openapi.Specs, error) {
		return openapi.Build(resources, KubernetesVersion.GitVersion)
	})

	v2 := handler.NewOpenAPIServiceLazy(cached.Func(func() (*spec.Swagger, string, error) {
		specs, err := build()
		if err != nil {
			return nil, "", err
		}
		return specs.V2, "v2", nil
	}))
	v2.RegisterOpenAPIVersionedService("/openapi/v2", muxPathHandler{router})

	v3 := handler3.NewOpenAPIService()
	router.HandleFunc("/openapi/v3", v3.HandleDiscovery).Methods(http.MethodGet, http.MethodHead)
	for _, gv := range openapi.GroupVersions(resources) {
		key := openapi.V3Key(gv)
		v3.UpdateGroupVersionLazy(key, cached.Func(func() (*spec3.OpenAPI, string, error) {
			specs, err := build()
			if err != nil {
				return nil, "", err
			}
			doc, ok := specs.V3[key]
			if !ok {
				return nil, "", fmt.Errorf("no OpenAPI v3 document for %s", key)
			}
			return doc, key, nil
		}))
		// One route per group version: kube-openapi answers an unknown
		// group with an empty 200, the router answers it 404.
		router.HandleFunc("/openapi/v3/"+key, v3.HandleGroupVersion).Methods(http.MethodGet, http.MethodHead)
	}
}

// muxPathHandler lets kube-openapi register its handlers on the router.
type muxPathHandler struct{ router *mux.Router }

func (m muxPathHandler) Handle(path string, h http.Handler) {
	m.router.Handle(path, h).Methods(http.MethodGet, http.MethodHead)
}
