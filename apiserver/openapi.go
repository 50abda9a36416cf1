package apiserver

import (
	"bytes"
	"fmt"
	"log/slog"
	"maps"
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
// as kube-apiserver does, with kube-openapi's own handlers: the built-in
// resources with OpenAPI definitions (openapi.Documented) and the custom
// resources, from their CRDs as kube's apiextensions-apiserver documents
// them (openapi.CustomResources):
//
//   - GET /openapi/v3: the index {"paths":{"api/v1":{"serverRelativeURL":
//     "/openapi/v3/api/v1?hash=…"}, …}};
//   - GET /openapi/v3/api/v1, /openapi/v3/apis/<group>/<version>: the
//     OpenAPI 3.0 document of that group version (a CRD's group version
//     too, while one of its versions is served), as JSON or protobuf, with
//     an ETag; asked for with its ?hash=, it is cacheable for good;
//   - GET /openapi/v2: the Swagger 2.0 document of everything, as JSON or,
//     when asked (kubectl does), as protobuf
//     (application/com.github.proto-openapi.spec.v2.v1.0+protobuf).
//
// The documents are built on the first request that needs them after the
// catalog changed, once per catalog generation; kube-openapi re-encodes
// them then, and its ETags and hashes are those of the encoded documents,
// so they change only when a document does. A custom resource whose
// documents cannot be built is left out, and log says so once per build.
func installOpenAPI(router *mux.Router, catalog *registry.Catalog, log *slog.Logger) {
	o := &openAPI{catalog: catalog, log: log, v3: handler3.NewOpenAPIService()}

	v2 := handler.NewOpenAPIServiceLazy(cached.Func(func() (*spec.Swagger, string, error) {
		b := o.build()
		if b.err != nil {
			return nil, "", b.err
		}
		return b.specs.V2, b.etag, nil
	}))
	v2.RegisterOpenAPIVersionedService("/openapi/v2", muxPathHandler{router})

	router.HandleFunc("/openapi/v3", func(w http.ResponseWriter, r *http.Request) {
		o.serveV3(w, r, func(w http.ResponseWriter, _ *openAPIBuild) { o.v3.HandleDiscovery(w, r) })
	}).Methods(http.MethodGet, http.MethodHead)
	router.PathPrefix("/openapi/v3/").Methods(http.MethodGet, http.MethodHead).HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		o.serveV3(w, r, func(w http.ResponseWriter, b *openAPIBuild) {
			// kube-openapi answers a group version it does not have with
			// an empty 200: one that is not served is 404 here, and no
			// series.
			if !b.v3Keys[strings.TrimPrefix(r.URL.Path, "/openapi/v3/")] {
				infoOf(r).subresource = ""
				notFound(w, r)
				return
			}
			infoOf(r).subresource = r.URL.Path
			o.v3.HandleGroupVersion(w, r)
		})
	})
}

// bufferedResponse holds a response in memory, to be written out later.
type bufferedResponse struct {
	header http.Header
	code   int
	body   bytes.Buffer
}

func (b *bufferedResponse) Header() http.Header { return b.header }

func (b *bufferedResponse) WriteHeader(code int) {
	if b.code == 0 {
		b.code = code
	}
}

func (b *bufferedResponse) Write(p []byte) (int, error) {
	b.WriteHeader(http.StatusOK)
	return b.body.Write(p)
}

// writeTo sends the response to w.
func (b *bufferedResponse) writeTo(w http.ResponseWriter) error {
	maps.Copy(w.Header(), b.header)
	if b.code == 0 {
		b.code = http.StatusOK
	}
	w.WriteHeader(b.code)
	if b.body.Len() == 0 {
		// A 304 has no body, and HTTP/2 refuses even an empty write.
		return nil
	}
	_, err := w.Write(b.body.Bytes())
	return err
}

// openAPI builds the documents of a catalog, once per generation, and
// keeps kube-openapi's v3 service serving the group versions of one build.
type openAPI struct {
	catalog *registry.Catalog
	log     *slog.Logger
	v3      *handler3.OpenAPIService
	// builder keeps the custom resources' documents between builds.
	builder openapi.Builder

	mu    sync.Mutex // held while the documents are built
	built atomic.Pointer[openAPIBuild]

	// v3Mu is held to read (RLock) while the v3 service serves, and to
	// write while its group versions change to those of another build,
	// v3Built: what it serves is always one build's documents.
	v3Mu    sync.RWMutex
	v3Built atomic.Pointer[openAPIBuild]
}

// openAPIBuild is the documents of one catalog generation.
type openAPIBuild struct {
	generation uint64
	// etag tells kube-openapi's caches that the documents are new.
	etag  string
	specs *openapi.Specs
	err   error
	// v3Keys are the group versions (openapi.V3Key) documented: the keys
	// of specs.V3 (or, if the build failed, the built-in group versions,
	// whose documents are then the error).
	v3Keys map[string]bool
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
	resources := resourcesOf(stores)
	specs, err := o.builder.Build(resources, KubernetesVersion.GitVersion)
	b := &openAPIBuild{generation: gen, etag: strconv.FormatUint(gen, 10), specs: specs, err: err, v3Keys: map[string]bool{}}
	if err != nil {
		o.log.Error("build the OpenAPI documents", "generation", gen, "err", err)
		for _, gv := range openapi.GroupVersions(openapi.Documented(resources)) {
			b.v3Keys[openapi.V3Key(gv)] = true
		}
	} else {
		for key := range specs.V3 {
			b.v3Keys[key] = true
		}
		for _, err := range specs.Errors {
			o.log.Error("custom resource left out of the OpenAPI documents", "generation", gen, "err", err)
		}
	}
	o.built.Store(b)
	return b
}

// serveV3 has the v3 service serve the documents of the catalog as it is
// (or newer), and calls serve with that build while nothing changes them.
// serve answers into memory: a slow client must not hold up a change,
// which would hold up every request after it.
func (o *openAPI) serveV3(w http.ResponseWriter, r *http.Request, serve func(http.ResponseWriter, *openAPIBuild)) {
	b := o.build()
	o.v3Mu.RLock()
	if served := o.v3Built.Load(); served == nil || served.generation < b.generation {
		o.v3Mu.RUnlock()
		o.v3Mu.Lock()
		o.syncV3Locked(b)
		o.v3Mu.Unlock()
		o.v3Mu.RLock()
	}
	resp := &bufferedResponse{header: http.Header{}}
	serve(resp, o.v3Built.Load())
	o.v3Mu.RUnlock()
	if err := resp.writeTo(w); err != nil {
		logger(r).Warn("write response", "err", err)
	}
}

// syncV3Locked makes the v3 service serve b's group versions, unless it
// serves a newer build already.
func (o *openAPI) syncV3Locked(b *openAPIBuild) {
	old := o.v3Built.Load()
	if old != nil && old.generation >= b.generation {
		return
	}
	for key := range b.v3Keys {
		if old != nil && old.v3Keys[key] {
			continue
		}
		o.v3.UpdateGroupVersionLazy(key, cached.Func(func() (*spec3.OpenAPI, string, error) {
			served := o.v3Built.Load()
			if served.err != nil {
				return nil, "", served.err
			}
			doc, ok := served.specs.V3[key]
			if !ok {
				return nil, "", fmt.Errorf("no OpenAPI v3 document for %s", key)
			}
			return doc, served.etag, nil
		}))
	}
	if old != nil {
		for key := range old.v3Keys {
			if !b.v3Keys[key] {
				o.v3.DeleteGroupVersion(key)
			}
		}
	}
	o.v3Built.Store(b)
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
