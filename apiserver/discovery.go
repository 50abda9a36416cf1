package apiserver

import (
	"encoding/json"
	"net/http"
	goruntime "runtime"
	"sort"

	"github.com/gorilla/mux"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/version"

	"github.com/concord-dev/concord/registry"
)

// servedVerbs are the verbs every resource answers today.
var servedVerbs = metav1.Verbs{"create", "delete", "get", "list", "patch", "update", "watch"}

// KubernetesVersion is the Kubernetes API level Concord speaks.
var KubernetesVersion = version.Info{
	Major:      "1",
	Minor:      "37",
	GitVersion: "v1.37.0-concord",
	Platform:   goruntime.GOOS + "/" + goruntime.GOARCH,
	GoVersion:  goruntime.Version(),
	Compiler:   goruntime.Compiler,
}

// installDiscovery serves /api, /apis, /api/v1, /apis/<g>, /apis/<g>/<v>
// and /version, all derived from the registry's declarations.
func installDiscovery(router *mux.Router, stores []*registry.Store) {
	byGV := map[schema.GroupVersion][]metav1.APIResource{}
	for _, s := range stores {
		res := s.Resource
		byGV[res.GroupVersion] = append(byGV[res.GroupVersion], metav1.APIResource{
			Name:         res.Plural,
			SingularName: res.Singular,
			Namespaced:   res.Namespaced,
			Kind:         res.Kind,
			Verbs:        servedVerbs,
			ShortNames:   res.ShortNames,
		})
	}
	var groups []metav1.APIGroup
	for gv, resources := range byGV {
		list := &metav1.APIResourceList{GroupVersion: gv.String(), APIResources: resources}
		router.Handle(groupVersionPath(gv), staticObject(list)).Methods(http.MethodGet)
		if gv.Group == "" {
			continue
		}
		gvd := metav1.GroupVersionForDiscovery{GroupVersion: gv.String(), Version: gv.Version}
		group := metav1.APIGroup{Name: gv.Group, Versions: []metav1.GroupVersionForDiscovery{gvd}, PreferredVersion: gvd}
		groups = append(groups, group)
		router.Handle("/apis/"+gv.Group, staticObject(&group)).Methods(http.MethodGet)
	}
	sort.Slice(groups, func(i, j int) bool { return groups[i].Name < groups[j].Name })
	router.Handle("/apis", staticObject(&metav1.APIGroupList{Groups: groups})).Methods(http.MethodGet)
	router.HandleFunc("/api", func(w http.ResponseWriter, r *http.Request) {
		writeObject(w, r, http.StatusOK, &metav1.APIVersions{
			Versions: []string{"v1"},
			ServerAddressByClientCIDRs: []metav1.ServerAddressByClientCIDR{
				{ClientCIDR: "0.0.0.0/0", ServerAddress: r.Host},
			},
		})
	}).Methods(http.MethodGet)
	router.HandleFunc("/version", func(w http.ResponseWriter, r *http.Request) {
		// version.Info is plain JSON, not a runtime.Object.
		w.Header().Set("Content-Type", "application/json")
		if err := json.NewEncoder(w).Encode(KubernetesVersion); err != nil {
			logger(r).Warn("write response", "err", err)
		}
	}).Methods(http.MethodGet)
}

// staticObject serves a fresh copy of obj (encoding sets its TypeMeta).
func staticObject(obj runtime.Object) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeObject(w, r, http.StatusOK, obj.DeepCopyObject())
	})
}
