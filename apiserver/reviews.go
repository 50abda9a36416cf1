package apiserver

import (
	"fmt"
	"net/http"

	"github.com/gorilla/mux"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
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

// SelfSubjectRulesReviews is authorization.k8s.io/v1
// selfsubjectrulesreviews: what the caller may do in a namespace (kubectl
// auth can-i --list), from the authorizers that can list their rules.
var SelfSubjectRulesReviews = &registry.Resource{
	GroupVersion: authorizationv1.SchemeGroupVersion,
	Kind:         "SelfSubjectRulesReview",
	Plural:       "selfsubjectrulesreviews",
	Singular:     "selfsubjectrulesreview",
	CreateOnly:   true,
	New:          func() registry.Object { return &authorizationv1.SelfSubjectRulesReview{} },
}

// SubjectAccessReviews is authorization.k8s.io/v1 subjectaccessreviews:
// whether any user may do something (for admins, and for the webhook
// authorizers of other systems); LocalSubjectAccessReviews the same within
// the namespace of the request.
var SubjectAccessReviews = &registry.Resource{
	GroupVersion: authorizationv1.SchemeGroupVersion,
	Kind:         "SubjectAccessReview",
	Plural:       "subjectaccessreviews",
	Singular:     "subjectaccessreview",
	CreateOnly:   true,
	New:          func() registry.Object { return &authorizationv1.SubjectAccessReview{} },
}

var LocalSubjectAccessReviews = &registry.Resource{
	GroupVersion: authorizationv1.SchemeGroupVersion,
	Kind:         "LocalSubjectAccessReview",
	Plural:       "localsubjectaccessreviews",
	Singular:     "localsubjectaccessreview",
	Namespaced:   true,
	CreateOnly:   true,
	New:          func() registry.Object { return &authorizationv1.LocalSubjectAccessReview{} },
}

// reviewResources are the resources served without storage.
var reviewResources = []*registry.Resource{SelfSubjectAccessReviews, SelfSubjectRulesReviews, SubjectAccessReviews, LocalSubjectAccessReviews, SelfSubjectReviews}

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
	handleReview(router, SelfSubjectRulesReviews, func(w http.ResponseWriter, r *http.Request, obj runtime.Object) {
		review := obj.(*authorizationv1.SelfSubjectRulesReview)
		if review.Spec.Namespace == "" {
			writeError(w, r, apierrors.NewBadRequest("no namespace on request"))
			return
		}
		user := filters.UserOf(r.Context())
		if authn == nil || user == nil {
			review.Status = authorizationv1.SubjectRulesReviewStatus{Incomplete: true, EvaluationError: "the API is open: no authentication or authorization"}
			writeObject(w, r, http.StatusCreated, review)
			return
		}
		rules, incomplete, err := filters.RulesFor(r.Context(), authz, *user, review.Spec.Namespace)
		review.Status = rulesReviewStatus(rules, incomplete)
		if err != nil {
			review.Status.EvaluationError = err.Error()
		}
		writeObject(w, r, http.StatusCreated, review)
	})
	handleReview(router, SubjectAccessReviews, func(w http.ResponseWriter, r *http.Request, obj runtime.Object) {
		review := obj.(*authorizationv1.SubjectAccessReview)
		errs := validateSubjectAccessReviewSpec(&review.Spec, field.NewPath("spec"))
		if errs = append(errs, validateReviewMeta(review.ObjectMeta, "must be empty")...); len(errs) > 0 {
			writeError(w, r, apierrors.NewInvalid(SubjectAccessReviews.GroupVersionKind().GroupKind(), "", errs))
			return
		}
		review.Status = accessReviewStatus(r, authn, authz, &review.Spec)
		writeObject(w, r, http.StatusCreated, review)
	})
	handleReview(router, LocalSubjectAccessReviews, func(w http.ResponseWriter, r *http.Request, obj runtime.Object) {
		review := obj.(*authorizationv1.LocalSubjectAccessReview)
		errs := validateSubjectAccessReviewSpec(&review.Spec, field.NewPath("spec"))
		errs = append(errs, validateReviewMeta(review.ObjectMeta, "must be empty except for namespace")...)
		if review.Spec.NonResourceAttributes != nil {
			errs = append(errs, field.Invalid(field.NewPath("spec", "nonResourceAttributes"), review.Spec.NonResourceAttributes, "disallowed on this kind of request"))
		}
		if ra := review.Spec.ResourceAttributes; ra != nil && ra.Namespace != review.Namespace {
			errs = append(errs, field.Invalid(field.NewPath("spec", "resourceAttributes", "namespace"), ra.Namespace, "must match metadata.namespace"))
		}
		if len(errs) > 0 {
			writeError(w, r, apierrors.NewInvalid(LocalSubjectAccessReviews.GroupVersionKind().GroupKind(), "", errs))
			return
		}
		review.Status = accessReviewStatus(r, authn, authz, &review.Spec)
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
	path := groupVersionPath(res.GroupVersion) + "/" + res.Plural
	if res.Namespaced {
		path = groupVersionPath(res.GroupVersion) + "/namespaces/{namespace}/" + res.Plural
	}
	router.Handle(path, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		describeResource(r, res, r.Method, mux.Vars(r)["namespace"], "")
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
		if err := reviewNamespace(obj.(registry.Object), mux.Vars(r)["namespace"]); err != nil {
			writeError(w, r, err)
			return
		}
		answer(w, r, obj)
	}))
}

// reviewNamespace is kube's create handler on a review's metadata: the
// system fields wiped, the namespace the URL's (filled in when empty, a
// 400 when another; cleared on a cluster-scoped review).
func reviewNamespace(obj registry.Object, namespace string) error {
	obj.SetCreationTimestamp(metav1.Time{})
	obj.SetUID("")
	obj.SetDeletionTimestamp(nil)
	obj.SetDeletionGracePeriodSeconds(nil)
	obj.SetSelfLink("")
	switch ns := obj.GetNamespace(); {
	case ns == namespace:
	case ns == "", namespace == "":
		obj.SetNamespace(namespace)
	default:
		return apierrors.NewBadRequest("the namespace of the provided object does not match the namespace sent on the request")
	}
	return nil
}

// validateReviewMeta is kube's: a review's metadata holds nothing (but
// the namespace of a LocalSubjectAccessReview, checked before).
func validateReviewMeta(m metav1.ObjectMeta, msg string) field.ErrorList {
	c := m
	c.Namespace, c.ManagedFields = "", nil
	if !apiequality.Semantic.DeepEqual(metav1.ObjectMeta{}, c) {
		return field.ErrorList{field.Invalid(field.NewPath("metadata"), m, msg)}
	}
	return nil
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
// resourceAttributes and nonResourceAttributes, and no metadata.
func validateSelfSubjectAccessReview(review *authorizationv1.SelfSubjectAccessReview) field.ErrorList {
	errs := validateAttributesUnion(review.Spec.ResourceAttributes, review.Spec.NonResourceAttributes, field.NewPath("spec"))
	errs = append(errs, validateResourceAttributes(review.Spec.ResourceAttributes, field.NewPath("spec", "resourceAttributes"))...)
	return append(errs, validateReviewMeta(review.ObjectMeta, "must be empty")...)
}

// validateResourceAttributes is kube's check of a review's selectors
// (which only narrow what is asked; RBAC does not look at them): either
// requirements or rawSelector, each requirement well formed, operators
// this server does not know allowed (a newer client's).
func validateResourceAttributes(ra *authorizationv1.ResourceAttributes, p *field.Path) field.ErrorList {
	if ra == nil {
		return nil
	}
	var errs field.ErrorList
	if fs := ra.FieldSelector; fs != nil {
		fp := p.Child("fieldSelector")
		errs = append(errs, validateSelectorUnion(fs.RawSelector, len(fs.Requirements), fp)...)
		for i, req := range fs.Requirements {
			errs = append(errs, metav1validation.ValidateFieldSelectorRequirement(req,
				metav1validation.FieldSelectorValidationOptions{AllowUnknownOperatorInRequirement: true}, fp.Child("requirements").Index(i))...)
		}
	}
	if ls := ra.LabelSelector; ls != nil {
		lp := p.Child("labelSelector")
		errs = append(errs, validateSelectorUnion(ls.RawSelector, len(ls.Requirements), lp)...)
		for i, req := range ls.Requirements {
			errs = append(errs, metav1validation.ValidateLabelSelectorRequirement(req,
				metav1validation.LabelSelectorValidationOptions{AllowUnknownOperatorInRequirement: true}, lp.Child("requirements").Index(i))...)
		}
	}
	return errs
}

func validateSelectorUnion(raw string, requirements int, p *field.Path) field.ErrorList {
	switch {
	case raw != "" && requirements > 0:
		return field.ErrorList{field.Invalid(p.Child("rawSelector"), raw, "may not specified at the same time as requirements")}
	case raw == "" && requirements == 0:
		return field.ErrorList{field.Required(p.Child("requirements"), fmt.Sprintf("when %s is specified, requirements or rawSelector is required", p))}
	}
	return nil
}

// validateAttributesUnion is kube 1.37's (a union: its errors are the
// spec's, the value the non-resource attributes).
func validateAttributesUnion(ra *authorizationv1.ResourceAttributes, nra *authorizationv1.NonResourceAttributes, p *field.Path) field.ErrorList {
	if (ra == nil) == (nra == nil) {
		return field.ErrorList{field.Invalid(p, nra, `exactly one of nonResourceAttributes or resourceAttributes must be specified`)}
	}
	return nil
}

// accessReviewStatus answers a SubjectAccessReview's spec with the
// authorizer, for the user it names.
func accessReviewStatus(r *http.Request, authn *filters.Authentication, authz filters.Authorizer, spec *authorizationv1.SubjectAccessReviewSpec) authorizationv1.SubjectAccessReviewStatus {
	if authn == nil {
		return authorizationv1.SubjectAccessReviewStatus{Allowed: true, Reason: "the API is open: no authentication or authorization"}
	}
	user := filters.UserInfo{Name: spec.User, UID: spec.UID, Groups: spec.Groups}
	for k, v := range spec.Extra {
		if user.Extra == nil {
			user.Extra = map[string][]string{}
		}
		user.Extra[k] = v
	}
	self := authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: spec.ResourceAttributes, NonResourceAttributes: spec.NonResourceAttributes}
	d, reason, err := authz.Authorize(r.Context(), reviewAttributes(user, &self))
	status := authorizationv1.SubjectAccessReviewStatus{Allowed: d == filters.Allow, Denied: d == filters.Deny, Reason: reason}
	if err != nil {
		status.EvaluationError = err.Error()
	}
	return status
}

// validateSubjectAccessReviewSpec is kube's.
func validateSubjectAccessReviewSpec(spec *authorizationv1.SubjectAccessReviewSpec, p *field.Path) field.ErrorList {
	errs := validateAttributesUnion(spec.ResourceAttributes, spec.NonResourceAttributes, p)
	if spec.User == "" && len(spec.Groups) == 0 {
		errs = append(errs, field.Invalid(p.Child("user"), spec.User, `at least one of user or group must be specified`))
	}
	return append(errs, validateResourceAttributes(spec.ResourceAttributes, p.Child("resourceAttributes"))...)
}

// rulesReviewStatus is kube's: resource rules and non-resource rules.
func rulesReviewStatus(rules []rbacv1.PolicyRule, incomplete bool) authorizationv1.SubjectRulesReviewStatus {
	status := authorizationv1.SubjectRulesReviewStatus{Incomplete: incomplete,
		ResourceRules: []authorizationv1.ResourceRule{}, NonResourceRules: []authorizationv1.NonResourceRule{}}
	for _, r := range rules {
		if len(r.Resources) > 0 {
			status.ResourceRules = append(status.ResourceRules, authorizationv1.ResourceRule{Verbs: r.Verbs, APIGroups: r.APIGroups, Resources: r.Resources, ResourceNames: r.ResourceNames})
		}
		if len(r.NonResourceURLs) > 0 {
			status.NonResourceRules = append(status.NonResourceRules, authorizationv1.NonResourceRule{Verbs: r.Verbs, NonResourceURLs: r.NonResourceURLs})
		}
	}
	return status
}
