package apiserver

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/gorilla/mux"
	"k8s.io/kube-openapi/pkg/cached"
	"k8s.io/kube-openapi/pkg/handler"
	"k8s.io/kube-openapi/pkg/handler3"
	"k8s.io/kube-openapi/pkg/spec3"
	"k8s.io/kube-openapi/pkg/validation/spec"

	"github.com/concord-dev/concord/apiserver/openapi"
	"github.com/concord-dev/concord/registry"
)

// installOpenAPI serves the OpenAPI documents of the catalog's resources
// (those with OpenAPI definitions: openapi.Documented) as kube-apiserver
// does, with kube-openapi's own handlers:
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
// The documents are built on the first request that needs them after the
// catalog changed, once per catalog generation; kube-openapi re-encodes
// them then, and its ETags and hashes are those of the encoded documents,
// so they change only when a document does.
func installOpenAPI(router *mux.Router, catalog *registry.Catalog) {
	o := &openAPI{catalog: catalog, v3: handler3.NewOpenAPIService(), v3Keys: map[string]bool{}}

	v2 := handler.NewOpenAPIServiceLazy(cached.Func(func() (*spec.Swagger, string, error) {
		b := o.build()
		if b.err != nil {
			return nil, "", b.err
		}
		return b.specs.V2, b.etag, nil
	}))
	v2.RegisterOpenAPIVersionedService("/openapi/v2", muxPathHandler{router})

	router.HandleFunc("/openapi/v3", func(w http.ResponseWriter, r *http.Request) {
		o.syncV3()
		o.v3.HandleDiscovery(w, r)
	}).Methods(http.MethodGet, http.MethodHead)
	router.PathPrefix("/openapi/v3/").Methods(http.MethodGet, http.MethodHead).HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// kube-openapi answers a group version it does not have with an
		// empty 200: one that is not served is 404 here, and no series.
		if !o.syncV3()[strings.TrimPrefix(r.URL.Path, "/openapi/v3/")] {
			infoOf(r).subresource = ""
			notFound(w, r)
			return
		}
		infoOf(r).subresource = r.URL.Path
		o.v3.HandleGroupVersion(w, r)
	})
}

// openAPI builds the documents of a catalog, once per generation, and
// keeps kube-openapi's v3 service serving its group versions.
type openAPI struct {
	catalog *registry.Catalog
	v3      *handler3.OpenAPIService

	mu    sync.Mutex // held while the documents are built
	built atomic.Pointer[openAPIBuild]

	v3Mu  sync.Mutex // held while the v3 service's group versions change
	v3Gen uint64
	// v3Keys are the group versions (openapi.V3Key) the v3 service
	// serves, those of generation v3Gen; never changed, replaced.
	v3Keys map[string]bool
}

// openAPIBuild is the documents of one catalog generation.
type openAPIBuild struct {
	generation uint64
	// etag tells kube-openapi's caches that the documents are new.
	etag  string
	specs *openapi.Specs
	err   error
}

// build returns the documents of the catalog as it is.
func (o *openAPI) build() *openAPIBuild {
	if b := o.built.Load(); b != nil && b.generation == o.catalog.Generation() {
		return b
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if b := o.built.Load(); b != nil && b.generation == o.catalog.Generation() {
		return b
	}
	gen, stores := o.catalog.Snapshot()
	specs, err := openapi.Build(resourcesOf(stores), KubernetesVersion.GitVersion)
	b := &openAPIBuild{generation: gen, etag: strconv.FormatUint(gen, 10), specs: specs, err: err}
	o.built.Store(b)
	return b
}

// syncV3 makes the v3 service serve the group versions of the catalog as
// it is, and returns them.
func (o *openAPI) syncV3() map[string]bool {
	o.v3Mu.Lock()
	defer o.v3Mu.Unlock()
	gen, stores := o.catalog.Snapshot()
	if gen == o.v3Gen {
		return o.v3Keys
	}
	keys := map[string]bool{}
	for _, gv := range openapi.GroupVersions(openapi.Documented(resourcesOf(stores))) {
		key := openapi.V3Key(gv)
		keys[key] = true
		if o.v3Keys[key] {
			continue
		}
		o.v3.UpdateGroupVersionLazy(key, cached.Func(func() (*spec3.OpenAPI, string, error) {
			b := o.build()
			if b.err != nil {
				return nil, "", b.err
			}
			doc, ok := b.specs.V3[key]
			if !ok {
				return nil, "", fmt.Errorf("no OpenAPI v3 document for %s", key)
			}
			return doc, b.etag, nil
		}))
	}
	for key := range o.v3Keys {
		if !keys[key] {
			o.v3.DeleteGroupVersion(key)
		}
	}
	o.v3Gen, o.v3Keys = gen, keys
	return keys
}

func resourcesOf(stores []*registry.Store) []*registry.Resource {
	resources := make([]*registry.Resource, 0, len(stores))
	for _, s := range stores {
		resources = append(resources, s.Resource)
	}
	return resources
}

// muxPathHandler lets kube-openapi register its handlers on the router.
type muxPathHandler struct{ router *mux.Router }

func (m muxPathHandler) Handle(path string, h http.Handler) {
	m.router.Handle(path, h).Methods(http.MethodGet, http.MethodHead)
}
