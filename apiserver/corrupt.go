package apiserver

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"reflect"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversionscheme "k8s.io/apimachinery/pkg/apis/meta/internalversion/scheme"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/concord-dev/concord/registry"
)

// reportCorruptObjects logs every stored value the stores meet that does
// not decrypt or decode, once, with its etcd key, and counts it in
// concord_storage_corrupt_objects_total (registry/corrupt.go).
func reportCorruptObjects(stores []*registry.Store, log *slog.Logger, reg prometheus.Registerer) {
	count := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "concord_storage_corrupt_objects_total",
		Help: "Stored values that do not decrypt or decode, each counted once when first read (the server log names its key). Reads that include one fail with 500; delete it with the delete option ignoreStoreReadErrorWithClusterBreakingPotential.",
	}, []string{"group", "resource"})
	reg.MustRegister(count)
	for _, s := range stores {
		res := s.Resource
		counter := count.WithLabelValues(res.GroupVersion.Group, res.Plural) // 0 until one is met
		s.OnCorruptObject(func(c registry.CorruptObject) {
			counter.Inc()
			log.Error("stored object cannot be read", "key", c.Key, "group", res.GroupVersion.Group, "resource", res.Plural,
				"revision", c.Revision, "err", c.Err,
				"fix", "restore the value in etcd, or delete the object with the delete option ignoreStoreReadErrorWithClusterBreakingPotential=true (docs/api.md)")
		})
	}
}

// unsafeDeleteVerb is the verb kube-apiserver authorizes, besides delete,
// for a delete with ignoreStoreReadErrorWithClusterBreakingPotential.
const unsafeDeleteVerb = "unsafe-delete-ignore-read-errors"

type authorizerKey struct{}

// authorizerOf is the authorizer that admitted the request; nil when the
// handler does not authenticate (Config.Authentication is nil).
func authorizerOf(ctx context.Context) Authorizer {
	a, _ := ctx.Value(authorizerKey{}).(Authorizer)
	return a
}

// checkUnsafeDelete admits a delete that sets
// ignoreStoreReadErrorWithClusterBreakingPotential as kube-apiserver does:
// not on a collection, not with options it cannot honour (422), and only
// for a user who may also do unsafe-delete-ignore-read-errors on the object
// (403). Without a body the option may come from the query, as all of
// kube's DeleteOptions do.
func checkUnsafeDelete(r *http.Request, opts *metav1.DeleteOptions, collection bool) error {
	const param = "ignoreStoreReadErrorWithClusterBreakingPotential"
	if q := r.URL.Query(); q.Has(param) && noDeleteOptions(opts) {
		if err := metainternalversionscheme.ParameterCodec.DecodeParameters(q, metav1.SchemeGroupVersion, opts); err != nil {
			return apierrors.NewBadRequest(err.Error())
		}
	}
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
	authz, attrs := authorizerOf(r.Context()), infoOf(r).attrs
	if authz == nil || attrs == nil {
		return nil // no authentication: nothing is authorized
	}
	a := *attrs
	a.Verb = unsafeDeleteVerb
	if allowed, reason := authz.Authorize(a); !allowed {
		return apierrors.NewForbidden(schema.GroupResource{Group: a.APIGroup, Resource: a.Resource}, a.Name,
			fmt.Errorf("not permitted to do %q, reason: %s", unsafeDeleteVerb, reason))
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
