package apiserver

import (
	"context"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"mime"
	"net/http"
	goruntime "runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/mux"
	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/version"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/concord-dev/concord/registry"
	"github.com/concord-dev/concord/registry/controller"
)

// KubernetesVersion is the Kubernetes API level Concord speaks.
var KubernetesVersion = version.Info{
	Major:      "1",
	Minor:      "37",
	GitVersion: "v1.37.0-concord",
	Platform:   goruntime.GOOS + "/" + goruntime.GOARCH,
	GoVersion:  goruntime.Version(),
	Compiler:   goruntime.Compiler,
}

// aggregatedDiscoveryMediaType is the Content-Type of an aggregated
// discovery answer; client-go checks its g, v and as parameters to tell it
// from the legacy APIVersions / APIGroupList.
const aggregatedDiscoveryMediaType = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"

// installDiscovery serves /api, /apis, /api/v1, /apis/<g>, /apis/<g>/<v>
// and /version, all derived from the catalog's declarations as they are
// at the time (computed once per catalog generation). /api and /apis
// answer aggregated discovery (apidiscovery.k8s.io/v2) to clients that ask
// for it, and the legacy APIVersions / APIGroupList otherwise. extra are
// resources served without a store (SelfSubjectAccessReview).
func installDiscovery(router *mux.Router, catalog *registry.Catalog, extra ...*registry.Resource) {
	d := &discovery{catalog: catalog, extra: extra}
	gv := registry.CustomResourceDefinitions.GroupVersion
	if crds, ok := catalog.Lookup(gv.Group, gv.Version, registry.CustomResourceDefinitions.Plural); ok {
		d.crds = newCRDStates(crds)
	}
	apis := withAggregatedDiscovery(func() encodedDiscovery { return d.current().apis },
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			writeObject(w, r, http.StatusOK, d.current().groupList.DeepCopyObject())
		}))
	api := withAggregatedDiscovery(func() encodedDiscovery { return d.current().core },
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			writeObject(w, r, http.StatusOK, &metav1.APIVersions{
				Versions: []string{"v1"},
				ServerAddressByClientCIDRs: []metav1.ServerAddressByClientCIDR{
					{ClientCIDR: "0.0.0.0/0", ServerAddress: r.Host},
				},
			})
		}))
	// With a trailing slash too, as kube-apiserver (its conformance tests
	// read /apis/).
	for _, path := range []string{"/apis", "/apis/"} {
		router.Handle(path, apis).Methods(http.MethodGet)
	}
	for _, path := range []string{"/api", "/api/"} {
		router.Handle(path, api).Methods(http.MethodGet)
	}
	router.HandleFunc("/api/{version}", func(w http.ResponseWriter, r *http.Request) {
		list, ok := d.current().groupVersions[schema.GroupVersion{Version: mux.Vars(r)["version"]}]
		serveDiscovery(w, r, list, ok)
	}).Methods(http.MethodGet)
	router.HandleFunc("/apis/{group}", func(w http.ResponseWriter, r *http.Request) {
		group, ok := d.current().groups[mux.Vars(r)["group"]]
		serveDiscovery(w, r, group, ok)
	}).Methods(http.MethodGet)
	router.HandleFunc("/apis/{group}/{version}", func(w http.ResponseWriter, r *http.Request) {
		vars := mux.Vars(r)
		list, ok := d.current().groupVersions[schema.GroupVersion{Group: vars["group"], Version: vars["version"]}]
		serveDiscovery(w, r, list, ok)
	}).Methods(http.MethodGet)
	router.HandleFunc("/version", func(w http.ResponseWriter, r *http.Request) {
		// version.Info is plain JSON, not a runtime.Object.
		w.Header().Set("Content-Type", "application/json")
		if err := json.NewEncoder(w).Encode(KubernetesVersion); err != nil {
			logger(r).Warn("write response", "err", err)
		}
	}).Methods(http.MethodGet)
}

// discovery computes the discovery documents of a catalog, once per
// generation.
type discovery struct {
	catalog *registry.Catalog
	extra   []*registry.Resource
	// crds follows which CRDs are terminating (nil: the catalog serves no
	// CustomResourceDefinitions).
	crds *crdStates
	mu   sync.Mutex // held while docs are computed
	docs atomic.Pointer[discoveryDocs]
}

// discoveryDocs are the discovery documents of one catalog generation and
// one state of the CRDs (epoch). They are shared by every request: never
// change them.
type discoveryDocs struct {
	generation, epoch uint64
	// groupVersions are /api/v1 and /apis/<group>/<version>; groups are
	// /apis/<group>, groupList is /apis.
	groupVersions map[schema.GroupVersion]*metav1.APIResourceList
	groups        map[string]*metav1.APIGroup
	groupList     *metav1.APIGroupList
	// core and apis are the aggregated documents of /api and /apis.
	core, apis encodedDiscovery
}

// current returns the documents of the catalog and the CRDs as they are.
// The CRDs are followed from the first time the catalog serves a custom
// resource; until then no CRD can be terminating in discovery.
func (d *discovery) current() *discoveryDocs {
	gen, epoch := d.catalog.Generation(), d.crds.currentEpoch()
	if docs := d.docs.Load(); docs != nil && docs.generation == gen && docs.epoch == epoch {
		return docs
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	gen, stores := d.catalog.Snapshot()
	if d.crds != nil && slices.ContainsFunc(stores, func(s *registry.Store) bool { return registry.CustomResourceDefinitionOf(s.Resource) != nil }) {
		d.crds.follow()
	}
	epoch, terminating := d.crds.snapshot()
	if docs := d.docs.Load(); docs != nil && docs.generation == gen && docs.epoch == epoch {
		return docs
	}
	docs := buildDiscovery(gen, stores, d.extra, terminating)
	docs.epoch = epoch
	d.docs.Store(docs)
	return docs
}

// serveDiscovery answers a copy of obj (encoding sets its TypeMeta),
// labelled in the metrics by its path; a document that is not served (not
// ok) is 404, unlabelled, so that no client can make up series.
func serveDiscovery(w http.ResponseWriter, r *http.Request, obj runtime.Object, ok bool) {
	if !ok {
		infoOf(r).subresource = ""
		notFound(w, r)
		return
	}
	infoOf(r).subresource = r.URL.Path
	writeObject(w, r, http.StatusOK, obj.DeepCopyObject())
}

// buildDiscovery computes the discovery documents of stores and extra, the
// resources of the CRDs whose UIDs are in terminating listed as
// terminating. A group served in several versions lists them in kube's
// order of preference (version.CompareKubeAwareVersionStrings: v2 before v1
// before v1beta1), the first preferred; a CRD whose versions are all
// unserved has no store, so its group is not listed, as kube's discovery
// controller drops a group without served versions.
func buildDiscovery(generation uint64, stores []*registry.Store, extra []*registry.Resource, terminating map[types.UID]bool) *discoveryDocs {
	byGV := map[schema.GroupVersion][]*registry.Resource{}
	for _, s := range stores {
		byGV[s.Resource.GroupVersion] = append(byGV[s.Resource.GroupVersion], s.Resource)
	}
	for _, res := range extra {
		byGV[res.GroupVersion] = append(byGV[res.GroupVersion], res)
	}
	versions := map[string][]string{}
	for gv, resources := range byGV {
		sort.Slice(resources, func(i, j int) bool { return resources[i].Plural < resources[j].Plural })
		versions[gv.Group] = append(versions[gv.Group], gv.Version)
	}
	docs := &discoveryDocs{
		generation:    generation,
		groupVersions: map[schema.GroupVersion]*metav1.APIResourceList{},
		groups:        map[string]*metav1.APIGroup{},
		groupList:     &metav1.APIGroupList{},
	}
	coreAggregated := &apidiscoveryv2.APIGroupDiscoveryList{}
	groupsAggregated := &apidiscoveryv2.APIGroupDiscoveryList{}
	for group, vs := range versions {
		sort.Slice(vs, func(i, j int) bool { return version.CompareKubeAwareVersionStrings(vs[i], vs[j]) > 0 })
		groupDiscovery := apidiscoveryv2.APIGroupDiscovery{ObjectMeta: metav1.ObjectMeta{Name: group}}
		apiGroup := &metav1.APIGroup{Name: group}
		for _, v := range vs {
			gv := schema.GroupVersion{Group: group, Version: v}
			list := &metav1.APIResourceList{GroupVersion: gv.String()}
			versionDiscovery := apidiscoveryv2.APIVersionDiscovery{Version: v, Freshness: apidiscoveryv2.DiscoveryFreshnessCurrent}
			for _, res := range byGV[gv] {
				verbs := discoveryVerbs(res, terminating)
				list.APIResources = append(list.APIResources, apiResources(res, verbs)...)
				versionDiscovery.Resources = append(versionDiscovery.Resources, resourceDiscovery(res, verbs))
			}
			docs.groupVersions[gv] = list
			groupDiscovery.Versions = append(groupDiscovery.Versions, versionDiscovery)
			apiGroup.Versions = append(apiGroup.Versions, metav1.GroupVersionForDiscovery{GroupVersion: gv.String(), Version: v})
		}
		if group == "" {
			coreAggregated.Items = append(coreAggregated.Items, groupDiscovery)
			continue
		}
		apiGroup.PreferredVersion = apiGroup.Versions[0]
		docs.groups[group] = apiGroup
		docs.groupList.Groups = append(docs.groupList.Groups, *apiGroup)
		groupsAggregated.Items = append(groupsAggregated.Items, groupDiscovery)
	}
	sort.Slice(docs.groupList.Groups, func(i, j int) bool { return docs.groupList.Groups[i].Name < docs.groupList.Groups[j].Name })
	sort.Slice(groupsAggregated.Items, func(i, j int) bool {
		return groupsAggregated.Items[i].Name < groupsAggregated.Items[j].Name
	})
	docs.core = aggregatedDiscovery(coreAggregated)
	docs.apis = aggregatedDiscovery(groupsAggregated)
	return docs
}

// Verbs kube's discovery controller lists for a custom resource, in its
// order (customresource_discovery_controller.go), and while its CRD is
// terminating (no create, update or patch).
var (
	customResourceVerbs            = metav1.Verbs{"delete", "deletecollection", "get", "list", "patch", "create", "update", "watch"}
	terminatingCustomResourceVerbs = metav1.Verbs{"delete", "deletecollection", "get", "list", "watch"}
)

// discoveryVerbs are the verbs discovery lists for res: a built-in
// resource's sorted, as kube's installer lists them; a custom resource's as
// kube's discovery controller does, those of a terminating CRD (its UID in
// terminating) without create, update and patch. Concord refuses creates of
// a terminating CRD's objects with kube's 403 and, as kube, serves replaces
// and patches of the remaining ones.
func discoveryVerbs(res *registry.Resource, terminating map[types.UID]bool) metav1.Verbs {
	crd := registry.CustomResourceDefinitionOf(res)
	switch {
	case crd == nil:
		return res.Verbs()
	case terminating[crd.UID]:
		return terminatingCustomResourceVerbs
	default:
		return customResourceVerbs
	}
}

// storageVersionHash is kube's storageVersionHash of res in the legacy
// APIResourceList: the hash of the group, version and kind its objects are
// stored as — a CRD's storage version and spec.names.kind, as kube's
// discovery controller hashes them; the declaration a built-in stores
// through (events.k8s.io/v1 Events are stored as core/v1 Events, and hash
// as them, as kube's). Resources that are not stored (the reviews) have
// none, as kube's. CustomResourceDefinitions hash as the apiextensions.k8s.io/v1
// Concord stores them in; kube, which stores them as v1beta1, answers the
// v1beta1 hash.
func storageVersionHash(res *registry.Resource) string {
	if crd := registry.CustomResourceDefinitionOf(res); crd != nil {
		return discoveryStorageVersionHash(crd.Spec.Group, registry.CRDStorageVersion(crd), crd.Spec.Names.Kind)
	}
	if res.CreateOnly {
		return ""
	}
	stored := res
	if res.Storage != nil {
		stored = res.Storage.Of
	}
	return discoveryStorageVersionHash(stored.GroupVersion.Group, stored.GroupVersion.Version, stored.Kind)
}

// discoveryStorageVersionHash is k8s.io/apiserver/pkg/endpoints/discovery's
// StorageVersionHash (storageversionhash.go), copied: importing that
// package would link a dozen packages of kube's generic server for these
// five lines. The first 8 bytes of the SHA-256 of "<group>/<version>/<kind>",
// in base64.
func discoveryStorageVersionHash(group, version, kind string) string {
	sum := sha256.Sum256([]byte(group + "/" + version + "/" + kind))
	return base64.StdEncoding.EncodeToString(sum[:8])
}

// apiResources are a resource's entries in the legacy APIResourceList:
// the resource, with verbs and its storageVersionHash, then its
// subresources as kube lists them ("widgets/status", "widgets/scale").
func apiResources(res *registry.Resource, verbs metav1.Verbs) []metav1.APIResource {
	out := []metav1.APIResource{{
		Name:               res.Plural,
		SingularName:       res.Singular,
		Namespaced:         res.Namespaced,
		Kind:               res.Kind,
		Verbs:              verbs,
		ShortNames:         res.ShortNames,
		Categories:         res.Categories,
		StorageVersionHash: storageVersionHash(res),
	}}
	for _, sub := range subresourcesOf(res) {
		out = append(out, metav1.APIResource{
			Name:       res.Plural + "/" + sub.Subresource,
			Namespaced: res.Namespaced,
			Group:      sub.group,
			Version:    sub.version,
			Kind:       sub.ResponseKind.Kind,
			Verbs:      sub.Verbs,
		})
	}
	return out
}

// subresourceDiscovery is a subresource's entry in aggregated discovery,
// and the group and version the legacy entry names (those of its kind,
// when not the resource's).
type subresourceDiscovery struct {
	apidiscoveryv2.APISubresourceDiscovery
	group, version string
}

// subresourcesOf are the subresources res serves: status (a StatusStrategy)
// and scale (an autoscaling/v1 Scale), each with get, patch and update, a
// ServiceAccount's token (create) and a Namespace's finalize (update).
func subresourcesOf(res *registry.Resource) []subresourceDiscovery {
	var out []subresourceDiscovery
	verbs := []string{"get", "patch", "update"}
	if res.StatusStrategy != nil {
		out = append(out, subresourceDiscovery{APISubresourceDiscovery: apidiscoveryv2.APISubresourceDiscovery{
			Subresource:  "status",
			ResponseKind: &metav1.GroupVersionKind{Group: res.GroupVersion.Group, Version: res.GroupVersion.Version, Kind: res.Kind},
			Verbs:        verbs,
		}})
	}
	if _, ok := res.Scale(); ok {
		out = append(out, subresourceDiscovery{
			APISubresourceDiscovery: apidiscoveryv2.APISubresourceDiscovery{
				Subresource:  "scale",
				ResponseKind: &metav1.GroupVersionKind{Group: scaleGVK.Group, Version: scaleGVK.Version, Kind: scaleGVK.Kind},
				Verbs:        verbs,
			},
			group: scaleGVK.Group, version: scaleGVK.Version,
		})
	}
	if hasTokenSubresource(res) {
		out = append(out, tokenDiscovery)
	}
	if res.IsNamespace {
		out = append(out, subresourceDiscovery{APISubresourceDiscovery: apidiscoveryv2.APISubresourceDiscovery{
			Subresource:  "finalize",
			ResponseKind: &metav1.GroupVersionKind{Group: res.GroupVersion.Group, Version: res.GroupVersion.Version, Kind: res.Kind},
			Verbs:        []string{"update"},
		}})
	}
	return out
}

// resourceDiscovery is a resource's entry in aggregated discovery (which
// has no storageVersionHash).
func resourceDiscovery(res *registry.Resource, verbs metav1.Verbs) apidiscoveryv2.APIResourceDiscovery {
	scope := apidiscoveryv2.ScopeCluster
	if res.Namespaced {
		scope = apidiscoveryv2.ScopeNamespace
	}
	d := apidiscoveryv2.APIResourceDiscovery{
		Resource:         res.Plural,
		ResponseKind:     &metav1.GroupVersionKind{Group: res.GroupVersion.Group, Version: res.GroupVersion.Version, Kind: res.Kind},
		Scope:            scope,
		SingularResource: res.Singular,
		Verbs:            verbs,
		ShortNames:       res.ShortNames,
		Categories:       res.Categories,
	}
	for _, sub := range subresourcesOf(res) {
		d.Subresources = append(d.Subresources, sub.APISubresourceDiscovery)
	}
	return d
}

// encodedDiscovery is an aggregated discovery document, encoded once.
type encodedDiscovery struct {
	body []byte
	etag string
}

func aggregatedDiscovery(list *apidiscoveryv2.APIGroupDiscoveryList) encodedDiscovery {
	list.Kind = "APIGroupDiscoveryList"
	list.APIVersion = apidiscoveryv2.SchemeGroupVersion.String()
	if list.Items == nil {
		list.Items = []apidiscoveryv2.APIGroupDiscovery{}
	}
	body, err := json.Marshal(list)
	if err != nil {
		panic(fmt.Sprintf("encode aggregated discovery: %v", err)) // plain data: a bug
	}
	return encodedDiscovery{body: append(body, '\n'), etag: strconv.Quote(fmt.Sprintf("%X", sha512.Sum512(body)))}
}

// withAggregatedDiscovery answers the current doc to the clients whose
// Accept prefers aggregated discovery, and passes the others to legacy.
// Like kube-apiserver it sends an ETag (a hash of the document, so it
// changes with the resources served) and answers If-None-Match with 304.
func withAggregatedDiscovery(current func() encodedDiscovery, legacy http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Add("Vary", "Accept")
		if !wantsAggregatedDiscovery(r.Header.Get("Accept")) {
			legacy.ServeHTTP(w, r)
			return
		}
		doc := current()
		w.Header().Set("Content-Type", aggregatedDiscoveryMediaType)
		w.Header().Set("Cache-Control", "no-cache, private")
		w.Header().Set("ETag", doc.etag)
		if match := r.Header.Get("If-None-Match"); match != "" && match == doc.etag {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		w.WriteHeader(http.StatusOK)
		if _, err := w.Write(doc.body); err != nil {
			logger(r).Warn("write response", "err", err)
		}
	})
}

// wantsAggregatedDiscovery reads Accept the way the content negotiation
// does, in order of preference: the first media range Concord can serve
// decides. application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList
// (with or without profile=nopeer) is aggregated discovery; other ranges
// with g/v/as parameters (v2beta1, Table) are skipped; any plain type the
// server encodes means the legacy answer.
func wantsAggregatedDiscovery(accept string) bool {
	type clause struct {
		aggregated bool
		q          float64
	}
	var clauses []clause
	for _, part := range strings.Split(accept, ",") {
		mediaType, params, err := mime.ParseMediaType(strings.TrimSpace(part))
		if err != nil {
			continue
		}
		q := 1.0
		if v, ok := params["q"]; ok {
			if q, err = strconv.ParseFloat(v, 64); err != nil || q <= 0 {
				continue
			}
		}
		if params["g"] != "" || params["v"] != "" || params["as"] != "" {
			if mediaType == runtime.ContentTypeJSON && params["g"] == apidiscoveryv2.SchemeGroupVersion.Group &&
				params["v"] == apidiscoveryv2.SchemeGroupVersion.Version && params["as"] == "APIGroupDiscoveryList" {
				clauses = append(clauses, clause{aggregated: true, q: q})
			}
			continue
		}
		if _, ok := serializerFor(mediaType); ok || mediaType == "*/*" || mediaType == "application/*" {
			clauses = append(clauses, clause{q: q})
		}
	}
	sort.SliceStable(clauses, func(i, j int) bool { return clauses[i].q > clauses[j].q })
	return len(clauses) > 0 && clauses[0].aggregated
}

// crdStates follows which CRDs are terminating, from a watch of the CRDs,
// as kube's discovery controller follows them from its CRD informer: a
// terminating CRD does not change its spec, so the catalog keeps its stores
// (crdserving), and discovery learns it here. The watch starts with the
// first discovery document that lists a custom resource (follow) and runs
// until the store's watches stop (server shutdown).
type crdStates struct {
	store  *registry.Store
	start  sync.Once
	synced chan struct{} // closed once the first watch's initial events are in

	mu sync.Mutex
	// terminating holds the UIDs of the terminating CRDs; it is replaced,
	// never changed, so a snapshot may be read without mu. epoch counts
	// its changes.
	terminating map[types.UID]bool
	epoch       uint64
}

// crdRewatchDelay is the pause before the CRD watch is opened again, and
// crdSyncWait how long the first document that lists a custom resource
// waits for the CRDs' state.
const (
	crdRewatchDelay = 500 * time.Millisecond
	crdSyncWait     = 2 * time.Second
)

func newCRDStates(store *registry.Store) *crdStates {
	return &crdStates{store: store, synced: make(chan struct{}), terminating: map[types.UID]bool{}}
}

// follow starts the watch, once, and waits up to crdSyncWait for its
// initial state.
func (c *crdStates) follow() {
	c.start.Do(func() { go c.run() })
	select {
	case <-c.synced:
	case <-time.After(crdSyncWait):
	}
}

// currentEpoch is the count of changes to the terminating CRDs (0 for nil).
func (c *crdStates) currentEpoch() uint64 {
	epoch, _ := c.snapshot()
	return epoch
}

// snapshot returns the epoch and the terminating CRDs' UIDs (none for nil);
// the map is shared: never change it.
func (c *crdStates) snapshot() (uint64, map[types.UID]bool) {
	if c == nil {
		return 0, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.epoch, c.terminating
}

// run watches the CRDs from their current state (a watch that ends is
// opened again, its initial events replacing what was known) until the
// store's watches stop.
func (c *crdStates) run() {
	// initial holds the terminating CRDs of a watch's initial events, until
	// their end.
	var initial map[types.UID]bool
	controller.Watch(context.Background(), c.store, controller.WatchOptions{Name: "discovery", RewatchDelay: crdRewatchDelay}, controller.Handler[*apiextensionsv1.CustomResourceDefinition]{
		Event: func(_ context.Context, typ watch.EventType, crd *apiextensionsv1.CustomResourceDefinition, isInitial bool) error {
			terminating := typ != watch.Deleted && registry.CRDTerminating(crd)
			if !isInitial {
				c.set(crd.UID, terminating)
				return nil
			}
			if initial == nil {
				initial = map[types.UID]bool{}
			}
			if terminating {
				initial[crd.UID] = true
			}
			return nil
		},
		Synced: func(context.Context, int64) error {
			if initial == nil {
				initial = map[types.UID]bool{}
			}
			c.replace(initial)
			initial = nil
			return nil
		},
		Opened: func(context.Context) error { initial = nil; return nil },
	})
}

// set records whether the CRD uid is terminating.
func (c *crdStates) set(uid types.UID, terminating bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.terminating[uid] == terminating {
		return
	}
	next := make(map[types.UID]bool, len(c.terminating)+1)
	for k := range c.terminating {
		next[k] = true
	}
	if terminating {
		next[uid] = true
	} else {
		delete(next, uid)
	}
	c.terminating = next
	c.epoch++
}

// replace records that the terminating CRDs are those of terminating.
func (c *crdStates) replace(terminating map[types.UID]bool) {
	c.mu.Lock()
	if !maps.Equal(c.terminating, terminating) {
		c.terminating = terminating
		c.epoch++
	}
	c.mu.Unlock()
	select {
	case <-c.synced:
	default:
		close(c.synced)
	}
}
