package apiserver

import (
	"fmt"
	"log/slog"
	"net/http"
	"reflect"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/concord-dev/concord/apiserver/filters"
	"github.com/concord-dev/concord/registry"
)

// reportCorruptObjects logs every stored value the catalog's stores meet
// that does not decrypt or decode, once, with its etcd key, and counts it
// in concord_storage_corrupt_objects_total (registry/corrupt.go): the
// stores served now and those added later, each from before it serves. A
// resource that is no longer served in any version loses its series.
func reportCorruptObjects(catalog *registry.Catalog, log *slog.Logger, reg prometheus.Registerer) {
	count := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "concord_storage_corrupt_objects_total",
		Help: "Stored values that do not decrypt or decode, each counted once when first read (the server log names its key). Reads that include one fail with 500; delete it with the delete option ignoreStoreReadErrorWithClusterBreakingPotential.",
	}, []string{"group", "resource"})
	reg.MustRegister(count)
	catalog.OnAdd(func(s *registry.Store) {
		res := s.Resource
		counter := count.WithLabelValues(res.GroupVersion.Group, res.Plural) // 0 until one is met
		s.OnCorruptObject(func(c registry.CorruptObject) {
			counter.Inc()
			log.Error("stored object cannot be read", "key", c.Key, "group", res.GroupVersion.Group, "resource", res.Plural,
				"revision", c.Revision, "err", c.Err,
				"fix", "restore the value in etcd, or delete the object with the delete option ignoreStoreReadErrorWithClusterBreakingPotential=true (docs/api.md)")
		})
	})
	forgetRemoved(catalog, func(*registry.Resource) bool { return true }, count)
}

// forgetRemoved deletes vec's {group, resource} series of the resources
// (those of which counted is true) that the catalog stops serving in every
// version, after each change.
func forgetRemoved(catalog *registry.Catalog, counted func(*registry.Resource) bool, vec *prometheus.CounterVec) {
	var mu sync.Mutex
	served := servedGroupResources(catalog, counted)
	catalog.Subscribe(func() {
		mu.Lock()
		defer mu.Unlock()
		now := servedGroupResources(catalog, counted)
		for gr := range served {
			if !now[gr] {
				vec.DeleteLabelValues(gr.Group, gr.Resource)
			}
		}
		served = now
	})
}

func servedGroupResources(catalog *registry.Catalog, counted func(*registry.Resource) bool) map[schema.GroupResource]bool {
	served := map[schema.GroupResource]bool{}
	for _, s := range catalog.Stores() {
		if counted(s.Resource) {
			served[s.Resource.GroupResource()] = true
		}
	}
	return served
}

// checkUnsafeDelete admits a delete that sets
// ignoreStoreReadErrorWithClusterBreakingPotential as kube-apiserver does:
// not on a collection, not with options it cannot honour (422), and only
// for a user who may also do unsafe-delete-ignore-read-errors on the object
// (403).
func checkUnsafeDelete(r *http.Request, opts *metav1.DeleteOptions, collection bool) error {
	const param = "ignoreStoreReadErrorWithClusterBreakingPotential"
	if !registry.IgnoresReadErrors(opts) {
		return nil
	}
	path := field.NewPath(param)
	if collection {
		return invalidDeleteOptions(field.ErrorList{field.Invalid(path, true, "is not allowed with DELETECOLLECTION, try again after removing the option")})
	}
	if errs := validation.ValidateIgnoreStoreReadError(path, opts); len(errs) > 0 {
		return invalidDeleteOptions(errs)
	}
	authz, attrs := filters.AuthorizerOf(r.Context()), infoOf(r).attrs
	if authz == nil || attrs == nil {
		return nil // no authentication: nothing is authorized
	}
	a := *attrs
	a.Verb = filters.UnsafeDeleteVerb
	if allowed, reason, _ := filters.Allowed(r.Context(), authz, a); !allowed {
		return apierrors.NewForbidden(schema.GroupResource{Group: a.APIGroup, Resource: a.Resource}, a.Name,
			fmt.Errorf("not permitted to do %q, reason: %s", filters.UnsafeDeleteVerb, reason))
	}
	return nil
}

// noDeleteOptions reports whether the request's body set no option.
func noDeleteOptions(opts *metav1.DeleteOptions) bool {
	o := *opts
	o.TypeMeta = metav1.TypeMeta{}
	return reflect.DeepEqual(o, metav1.DeleteOptions{})
}

func invalidDeleteOptions(errs field.ErrorList) error {
	return apierrors.NewInvalid(schema.GroupKind{Group: metav1.GroupName, Kind: "DeleteOptions"}, "", errs)
}
