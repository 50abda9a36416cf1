package registry

import (
	"strings"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/api/validation/path"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/concord-dev/concord/etcdstore"
)

// RBACStoragePrefix is the part of the etcd keys of the four RBAC
// resources: <prefix>/rbac.authorization.k8s.io/<plural>/..., so that one
// etcd watch sees every change to them (package rbac's view). kube-apiserver
// keys them /registry/<plural>/...; no client sees the difference.
const RBACStoragePrefix = rbacv1.GroupName

// RBACGeneration is the key every write of the four RBAC resources puts in
// its own etcd transaction (etcdstore.Options.Bump: RBACBump), so that its
// ModRevision is the revision of the last change to them: a write allowed
// by RBAC on a view that may be behind is guarded by it (RBACGuard). It
// is under RBACStoragePrefix, so the view's watch sees it, and holds no
// object.
var RBACGeneration = etcdstore.Ref{Resource: RBACStoragePrefix, Name: "generation"}

// RBACBump is the etcdstore.Options.Bump of the RBAC resources.
func RBACBump() map[string]etcdstore.Ref {
	m := map[string]etcdstore.Ref{}
	for _, r := range []*Resource{Roles, ClusterRoles, RoleBindings, ClusterRoleBindings} {
		m[r.storagePrefix()] = RBACGeneration
	}
	return m
}

// Roles, ClusterRoles, RoleBindings and ClusterRoleBindings are
// rbac.authorization.k8s.io/v1, validated as kube's pkg/apis/rbac/validation
// (names are path segments; rules with unknown verbs are stored, as kube
// stores them). The RBAC authorizer reads them (package rbac); creating
// one that grants more than its writer holds is refused there too.
var (
	Roles = &Resource{
		GroupVersion:     rbacv1.SchemeGroupVersion,
		Kind:             "Role",
		Plural:           "roles",
		Singular:         "role",
		StoragePrefix:    RBACStoragePrefix + "/roles",
		Namespaced:       true,
		NameValidation:   path.ValidatePathSegmentName,
		New:              func() Object { return &rbacv1.Role{} },
		NewList:          func() runtime.Object { return &rbacv1.RoleList{} },
		Strategy:         roleStrategy{},
		TableColumns:     roleColumns,
		TableCells:       roleCells,
		TableColumnsOnly: true,
		// As kube's rbac strategies.
		AllowUnconditionalUpdate: true,
		AllowCreateOnUpdate:      true,
	}
	ClusterRoles = &Resource{
		GroupVersion:             rbacv1.SchemeGroupVersion,
		Kind:                     "ClusterRole",
		Plural:                   "clusterroles",
		Singular:                 "clusterrole",
		StoragePrefix:            RBACStoragePrefix + "/clusterroles",
		NameValidation:           path.ValidatePathSegmentName,
		New:                      func() Object { return &rbacv1.ClusterRole{} },
		NewList:                  func() runtime.Object { return &rbacv1.ClusterRoleList{} },
		Strategy:                 clusterRoleStrategy{},
		TableColumns:             roleColumns,
		TableCells:               roleCells,
		TableColumnsOnly:         true,
		AllowUnconditionalUpdate: true,
		AllowCreateOnUpdate:      true,
	}
	RoleBindings = &Resource{
		GroupVersion:             rbacv1.SchemeGroupVersion,
		Kind:                     "RoleBinding",
		Plural:                   "rolebindings",
		Singular:                 "rolebinding",
		StoragePrefix:            RBACStoragePrefix + "/rolebindings",
		Namespaced:               true,
		NameValidation:           path.ValidatePathSegmentName,
		New:                      func() Object { return &rbacv1.RoleBinding{} },
		NewList:                  func() runtime.Object { return &rbacv1.RoleBindingList{} },
		Strategy:                 roleBindingStrategy{},
		TableColumns:             bindingColumns("roleBinding"),
		TableCells:               func(obj Object) []any { b := obj.(*rbacv1.RoleBinding); return bindingCells(b, b.RoleRef, b.Subjects) },
		TableColumnsOnly:         true,
		AllowUnconditionalUpdate: true,
		AllowCreateOnUpdate:      true,
	}
	ClusterRoleBindings = &Resource{
		GroupVersion:   rbacv1.SchemeGroupVersion,
		Kind:           "ClusterRoleBinding",
		Plural:         "clusterrolebindings",
		Singular:       "clusterrolebinding",
		StoragePrefix:  RBACStoragePrefix + "/clusterrolebindings",
		NameValidation: path.ValidatePathSegmentName,
		New:            func() Object { return &rbacv1.ClusterRoleBinding{} },
		NewList:        func() runtime.Object { return &rbacv1.ClusterRoleBindingList{} },
		Strategy:       clusterRoleBindingStrategy{},
		TableColumns:   bindingColumns("clusterRoleBinding"),
		TableCells: func(obj Object) []any {
			b := obj.(*rbacv1.ClusterRoleBinding)
			return bindingCells(b, b.RoleRef, b.Subjects)
		},
		TableColumnsOnly:         true,
		AllowUnconditionalUpdate: true,
		AllowCreateOnUpdate:      true,
	}
)

// kube's printers: roles print their creation time, not an age.
var roleColumns = []metav1.TableColumnDefinition{
	{Name: "Name", Type: "string", Format: "name", Description: metav1.ObjectMeta{}.SwaggerDoc()["name"]},
	{Name: "Created At", Type: "date", Description: metav1.ObjectMeta{}.SwaggerDoc()["creationTimestamp"]},
}

func roleCells(obj Object) []any {
	return []any{obj.GetName(), obj.GetCreationTimestamp().UTC().Format(time.RFC3339)}
}

func bindingColumns(what string) []metav1.TableColumnDefinition {
	return []metav1.TableColumnDefinition{
		{Name: "Name", Type: "string", Format: "name", Description: metav1.ObjectMeta{}.SwaggerDoc()["name"]},
		{Name: "Role", Type: "string", Description: rbacv1.RoleBinding{}.SwaggerDoc()["roleRef"]},
		{Name: "Age", Type: "string", Description: metav1.ObjectMeta{}.SwaggerDoc()["creationTimestamp"]},
		{Name: "Users", Type: "string", Priority: 1, Description: "Users in the " + what},
		{Name: "Groups", Type: "string", Priority: 1, Description: "Groups in the " + what},
		{Name: "ServiceAccounts", Type: "string", Priority: 1, Description: "ServiceAccounts in the " + what},
	}
}

// bindingCells is kube's printRoleBinding: the subjects by kind, wide.
func bindingCells(obj Object, ref rbacv1.RoleRef, subjects []rbacv1.Subject) []any {
	var users, groups, sas []string
	for _, s := range subjects {
		switch s.Kind {
		case rbacv1.UserKind:
			users = append(users, s.Name)
		case rbacv1.GroupKind:
			groups = append(groups, s.Name)
		case rbacv1.ServiceAccountKind:
			sas = append(sas, s.Namespace+"/"+s.Name)
		}
	}
	age := "<unknown>"
	if t := obj.GetCreationTimestamp(); !t.IsZero() {
		age = duration.HumanDuration(time.Since(t.Time))
	}
	return []any{obj.GetName(), ref.Kind + "/" + ref.Name, age, strings.Join(users, ", "), strings.Join(groups, ", "), strings.Join(sas, ", ")}
}

type (
	roleStrategy               struct{}
	clusterRoleStrategy        struct{}
	roleBindingStrategy        struct{}
	clusterRoleBindingStrategy struct{}
)

var (
	_ Strategy         = roleStrategy{}
	_ Strategy         = clusterRoleStrategy{}
	_ RequestDefaulter = roleBindingStrategy{}
	_ RequestDefaulter = clusterRoleBindingStrategy{}
)

func (roleStrategy) PrepareForCreate(Object)         {}
func (roleStrategy) PrepareForUpdate(Object, Object) {}
func (roleStrategy) Validate(obj Object) field.ErrorList {
	return validateRules(obj.(*rbacv1.Role).Rules, true)
}
func (s roleStrategy) ValidateUpdate(obj, _ Object) field.ErrorList { return s.Validate(obj) }

func (clusterRoleStrategy) PrepareForCreate(Object)         {}
func (clusterRoleStrategy) PrepareForUpdate(Object, Object) {}

// Validate is kube's ValidateClusterRole: its rules, and the label
// selectors of its aggregationRule.
func (clusterRoleStrategy) Validate(obj Object) field.ErrorList {
	r := obj.(*rbacv1.ClusterRole)
	errs := validateRules(r.Rules, false)
	if r.AggregationRule != nil {
		p := field.NewPath("aggregationRule", "clusterRoleSelectors")
		if len(r.AggregationRule.ClusterRoleSelectors) == 0 {
			errs = append(errs, field.Required(p, "at least one clusterRoleSelector required if aggregationRule is non-nil"))
		}
		for i := range r.AggregationRule.ClusterRoleSelectors {
			errs = append(errs, metav1validation.ValidateLabelSelector(&r.AggregationRule.ClusterRoleSelectors[i], metav1validation.LabelSelectorValidationOptions{}, p.Index(i))...)
		}
	}
	return errs
}
func (s clusterRoleStrategy) ValidateUpdate(obj, _ Object) field.ErrorList { return s.Validate(obj) }

func validateRules(rules []rbacv1.PolicyRule, namespaced bool) field.ErrorList {
	var errs field.ErrorList
	for i, rule := range rules {
		errs = append(errs, validatePolicyRule(rule, namespaced, field.NewPath("rules").Index(i))...)
	}
	return errs
}

// validatePolicyRule is kube's: verbs are not checked against a list.
func validatePolicyRule(rule rbacv1.PolicyRule, namespaced bool, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if len(rule.Verbs) == 0 {
		errs = append(errs, field.Required(p.Child("verbs"), "verbs must contain at least one value"))
	}
	if len(rule.NonResourceURLs) > 0 {
		if namespaced {
			errs = append(errs, field.Invalid(p.Child("nonResourceURLs"), rule.NonResourceURLs, "namespaced rules cannot apply to non-resource URLs"))
		}
		if len(rule.APIGroups) > 0 || len(rule.Resources) > 0 || len(rule.ResourceNames) > 0 {
			errs = append(errs, field.Invalid(p.Child("nonResourceURLs"), rule.NonResourceURLs, "rules cannot apply to both regular resources and non-resource URLs"))
		}
		return errs
	}
	if len(rule.APIGroups) == 0 {
		errs = append(errs, field.Required(p.Child("apiGroups"), "resource rules must supply at least one api group"))
	}
	if len(rule.Resources) == 0 {
		errs = append(errs, field.Required(p.Child("resources"), "resource rules must supply at least one resource"))
	}
	if len(rule.ResourceNames) > 0 && len(rule.Resources) > 1 {
		errs = append(errs, field.Required(p.Child("resourceNames"), "resource names cannot apply to multiple resources"))
	}
	return errs
}

// PrepareForCreate and DefaultRequest default as kube's rbac/v1 defaults:
// roleRef.apiGroup and the apiGroup of User and Group subjects.
func (roleBindingStrategy) PrepareForCreate(obj Object) {
	b := obj.(*rbacv1.RoleBinding)
	defaultBinding(&b.RoleRef, b.Subjects)
}
func (s roleBindingStrategy) PrepareForUpdate(obj, _ Object) { s.PrepareForCreate(obj) }
func (s roleBindingStrategy) DefaultRequest(obj, _ Object)   { s.PrepareForCreate(obj) }
func (roleBindingStrategy) Validate(obj Object) field.ErrorList {
	b := obj.(*rbacv1.RoleBinding)
	return validateBinding(b.RoleRef, b.Subjects, true)
}
func (s roleBindingStrategy) ValidateUpdate(obj, old Object) field.ErrorList {
	return append(s.Validate(obj), roleRefUnchanged(obj.(*rbacv1.RoleBinding).RoleRef, old.(*rbacv1.RoleBinding).RoleRef)...)
}

func (clusterRoleBindingStrategy) PrepareForCreate(obj Object) {
	b := obj.(*rbacv1.ClusterRoleBinding)
	defaultBinding(&b.RoleRef, b.Subjects)
}
func (s clusterRoleBindingStrategy) PrepareForUpdate(obj, _ Object) { s.PrepareForCreate(obj) }
func (s clusterRoleBindingStrategy) DefaultRequest(obj, _ Object)   { s.PrepareForCreate(obj) }
func (clusterRoleBindingStrategy) Validate(obj Object) field.ErrorList {
	b := obj.(*rbacv1.ClusterRoleBinding)
	return validateBinding(b.RoleRef, b.Subjects, false)
}
func (s clusterRoleBindingStrategy) ValidateUpdate(obj, old Object) field.ErrorList {
	return append(s.Validate(obj), roleRefUnchanged(obj.(*rbacv1.ClusterRoleBinding).RoleRef, old.(*rbacv1.ClusterRoleBinding).RoleRef)...)
}

func defaultBinding(ref *rbacv1.RoleRef, subjects []rbacv1.Subject) {
	if ref.APIGroup == "" {
		ref.APIGroup = rbacv1.GroupName
	}
	for i := range subjects {
		if s := &subjects[i]; s.APIGroup == "" && (s.Kind == rbacv1.UserKind || s.Kind == rbacv1.GroupKind) {
			s.APIGroup = rbacv1.GroupName
		}
	}
}

// roleRefUnchanged is kube's ValidateImmutableField of roleRef.
func roleRefUnchanged(ref, old rbacv1.RoleRef) field.ErrorList {
	if ref != old {
		return field.ErrorList{field.Invalid(field.NewPath("roleRef"), internalRoleRef(ref), apivalidation.FieldImmutableErrorMsg)}
	}
	return nil
}

// internalRoleRef is kube's internal rbac.RoleRef, which has no JSON
// tags: its 422 shows the value as {"APIGroup":…,"Kind":…,"Name":…}.
type internalRoleRef struct {
	APIGroup, Kind, Name string
}

// validateBinding is kube's ValidateRoleBinding and
// ValidateClusterRoleBinding beyond the object meta.
func validateBinding(ref rbacv1.RoleRef, subjects []rbacv1.Subject, namespaced bool) field.ErrorList {
	var errs field.ErrorList
	refPath := field.NewPath("roleRef")
	if ref.APIGroup != rbacv1.GroupName {
		errs = append(errs, field.NotSupported(refPath.Child("apiGroup"), ref.APIGroup, []string{rbacv1.GroupName}))
	}
	kinds := []string{"ClusterRole"}
	if namespaced {
		kinds = []string{"Role", "ClusterRole"}
	}
	if ref.Kind != "ClusterRole" && (!namespaced || ref.Kind != "Role") {
		errs = append(errs, field.NotSupported(refPath.Child("kind"), ref.Kind, kinds))
	}
	if ref.Name == "" {
		errs = append(errs, field.Required(refPath.Child("name"), ""))
	} else {
		for _, msg := range path.IsValidPathSegmentName(ref.Name) {
			errs = append(errs, field.Invalid(refPath.Child("name"), ref.Name, msg))
		}
	}
	for i, s := range subjects {
		errs = append(errs, validateSubject(s, namespaced, field.NewPath("subjects").Index(i))...)
	}
	return errs
}

func validateSubject(s rbacv1.Subject, namespaced bool, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if s.Name == "" {
		errs = append(errs, field.Required(p.Child("name"), ""))
	}
	switch s.Kind {
	case rbacv1.ServiceAccountKind:
		if s.Name != "" {
			for _, msg := range apivalidation.ValidateServiceAccountName(s.Name, false) {
				errs = append(errs, field.Invalid(p.Child("name"), s.Name, msg))
			}
		}
		if s.APIGroup != "" {
			errs = append(errs, field.NotSupported(p.Child("apiGroup"), s.APIGroup, []string{""}))
		}
		if !namespaced && s.Namespace == "" {
			errs = append(errs, field.Required(p.Child("namespace"), ""))
		}
	case rbacv1.UserKind, rbacv1.GroupKind:
		if s.Name == "" {
			errs = append(errs, field.Invalid(p.Child("name"), s.Name, strings.ToLower(s.Kind)+" name cannot be empty"))
		}
		if s.APIGroup != rbacv1.GroupName {
			errs = append(errs, field.NotSupported(p.Child("apiGroup"), s.APIGroup, []string{rbacv1.GroupName}))
		}
	default:
		errs = append(errs, field.NotSupported(p.Child("kind"), s.Kind, []string{rbacv1.ServiceAccountKind, rbacv1.UserKind, rbacv1.GroupKind}))
	}
	return errs
}
