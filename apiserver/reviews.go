package apiserver

import (
	"net/http"

	"github.com/gorilla/mux"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/concord-dev/concord/apiserver/filters"
	"github.com/concord-dev/concord/registry"
)

// SelfSubjectAccessReviews is authorization.k8s.io/v1
// selfsubjectaccessreviews: the caller asks whether it may do something,
// and the answer comes from the same authorizer as its requests (kubectl
// auth can-i). Nothing is stored; it is declared for discovery.
var SelfSubjectAccessReviews = &registry.Resource{
	GroupVersion: authorizationv1.SchemeGroupVersion,
	Kind:         "SelfSubjectAccessReview",
	Plural:       "selfsubjectaccessreviews",
	Singular:     "selfsubjectaccessreview",
	CreateOnly:   true,
	New:          func() registry.Object { return &authorizationv1.SelfSubjectAccessReview{} },
}

// SelfSubjectReviews is authentication.k8s.io/v1 selfsubjectreviews: the
// caller asks who the server takes it for (kubectl auth whoami).
var SelfSubjectReviews = &registry.Resource{
	GroupVersion: authenticationv1.SchemeGroupVersion,
	Kind:         "SelfSubjectReview",
	Plural:       "selfsubjectreviews",
	Singular:     "selfsubjectreview",
	CreateOnly:   true,
	New:          func() registry.Object { return &authenticationv1.SelfSubjectReview{} },
}

// reviewResources are the resources served without storage.
var reviewResources = []*registry.Resource{SelfSubjectAccessReviews, SelfSubjectReviews}

// installReviews serves POST
// /apis/authorization.k8s.io/v1/selfsubjectaccessreviews and
// /apis/authentication.k8s.io/v1/selfsubjectreviews. Without
// authentication (an open API) everything is allowed and nobody is known.
func installReviews(router *mux.Router, authn *filters.Authentication, authz filters.Authorizer) {
	if authz == nil {
		authz = filters.NewPolicyAuthorizer(nil)
	}
	handleReview(router, SelfSubjectAccessReviews, func(w http.ResponseWriter, r *http.Request, obj runtime.Object) {
		review := obj.(*authorizationv1.SelfSubjectAccessReview)
		if errs := validateSelfSubjectAccessReview(review); len(errs) > 0 {
			writeError(w, r, apierrors.NewInvalid(SelfSubjectAccessReviews.GroupVersionKind().GroupKind(), "", errs))
			return
		}
		user := filters.UserOf(r.Context())
		if authn == nil || user == nil {
			review.Status = authorizationv1.SubjectAccessReviewStatus{Allowed: true, Reason: "the API is open: no authentication or authorization"}
		} else {
			d, reason, err := authz.Authorize(r.Context(), reviewAttributes(*user, &review.Spec))
			review.Status = authorizationv1.SubjectAccessReviewStatus{Allowed: d == filters.Allow, Denied: d == filters.Deny, Reason: reason}
			if err != nil {
				review.Status.EvaluationError = err.Error()
			}
		}
		writeObject(w, r, http.StatusCreated, review)
	})
	handleReview(router, SelfSubjectReviews, func(w http.ResponseWriter, r *http.Request, obj runtime.Object) {
		review := obj.(*authenticationv1.SelfSubjectReview)
		if user := filters.UserOf(r.Context()); user != nil {
			review.Status.UserInfo = authenticationv1.UserInfo{Username: user.Name, UID: user.UID, Groups: user.Groups}
			for k, v := range user.Extra {
				if review.Status.UserInfo.Extra == nil {
					review.Status.UserInfo.Extra = map[string]authenticationv1.ExtraValue{}
				}
				review.Status.UserInfo.Extra[k] = v
			}
		}
		writeObject(w, r, http.StatusCreated, review)
	})
}

// handleReview serves POST of a review: the decoded body goes to answer.
func handleReview(router *mux.Router, res *registry.Resource, answer func(w http.ResponseWriter, r *http.Request, obj runtime.Object)) {
	router.Handle(groupVersionPath(res.GroupVersion)+"/"+res.Plural, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		describeResource(r, res, r.Method, "", "")
		if r.Method != http.MethodPost {
			writeError(w, r, apierrors.NewMethodNotSupported(res.GroupResource(), verb(r.Method)))
			return
		}
		if _, err := writeOptions(r, "CreateOptions"); err != nil {
			writeError(w, r, err)
			return
		}
		obj, err := decodeObject(w, r, res.GroupVersionKind(), r.URL.Query().Get("fieldValidation"))
		if err != nil {
			writeError(w, r, err)
			return
		}
		answer(w, r, obj)
	}))
}

// reviewAttributes are the attributes a review asks about, for user.
func reviewAttributes(user filters.UserInfo, spec *authorizationv1.SelfSubjectAccessReviewSpec) filters.Attributes {
	if ra := spec.ResourceAttributes; ra != nil {
		return filters.Attributes{
			User: user, Verb: ra.Verb, ResourceRequest: true,
			APIGroup: ra.Group, APIVersion: ra.Version, Resource: ra.Resource, Subresource: ra.Subresource,
			Namespace: ra.Namespace, Name: ra.Name,
		}
	}
	nra := spec.NonResourceAttributes
	return filters.Attributes{User: user, Verb: nra.Verb, Path: nra.Path}
}

// validateSelfSubjectAccessReview is kube-apiserver's: exactly one of
// resourceAttributes and nonResourceAttributes.
func validateSelfSubjectAccessReview(review *authorizationv1.SelfSubjectAccessReview) field.ErrorList {
	var errs field.ErrorList
	spec := field.NewPath("spec")
	ra, nra := review.Spec.ResourceAttributes != nil, review.Spec.NonResourceAttributes != nil
	switch {
	case ra && nra:
		errs = append(errs, field.Invalid(spec.Child("nonResourceAttributes"), review.Spec.NonResourceAttributes, `cannot be specified in combination with resourceAttributes`))
	case !ra && !nra:
		errs = append(errs, field.Required(spec.Child("resourceAttributes"), `exactly one of nonResourceAttributes or resourceAttributes must be specified`))
	}
	return errs
}
