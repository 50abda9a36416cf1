package filters

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"
)

// Decision is an authorizer's answer, as kube's authorizer.Decision: an
// authorizer allows, denies, or has no opinion (the next one decides).
type Decision int

const (
	NoOpinion Decision = iota
	Allow
	Deny
)

// Authorizer decides whether a request may be served. reason says why,
// for SelfSubjectAccessReview and the 403. An error (the RBAC view could
// not be brought up to date) is no decision: the request is answered 500.
type Authorizer interface {
	Authorize(ctx context.Context, a Attributes) (Decision, string, error)
}

// AlwaysAllow allows every request of every authenticated (or, with
// anonymous requests allowed, anonymous) user: kube-apiserver's
// --authorization-mode=AlwaysAllow.
var AlwaysAllow Authorizer = alwaysAllow{}

type alwaysAllow struct{}

func (alwaysAllow) Authorize(context.Context, Attributes) (Decision, string, error) {
	return Allow, "", nil
}

// Chain asks each authorizer in turn, as kube's union authorizer: the first
// that allows or denies decides; when none does, the request is not
// allowed, with every reason given (one a line) and the errors met. The
// group system:masters is allowed everything first, whatever the chain
// (kube's privileged groups).
func Chain(authorizers ...Authorizer) Authorizer {
	return chain(slices.Clone(authorizers))
}

type chain []Authorizer

func (c chain) Authorize(ctx context.Context, a Attributes) (Decision, string, error) {
	if slices.Contains(a.User.Groups, MastersGroup) {
		return Allow, mastersReason, nil
	}
	var reasons []string
	var errs []error
	for _, z := range c {
		d, reason, err := z.Authorize(ctx, a)
		if err != nil {
			errs = append(errs, err)
		}
		if d != NoOpinion {
			return d, reason, errors.Join(errs...)
		}
		if reason != "" {
			reasons = append(reasons, reason)
		}
	}
	return NoOpinion, strings.Join(reasons, "\n"), errors.Join(errs...)
}

// Allowed is the yes or no of a decision, for callers that need no more.
func Allowed(ctx context.Context, z Authorizer, a Attributes) (bool, string, error) {
	d, reason, err := z.Authorize(ctx, a)
	return d == Allow, reason, err
}

// PolicyRule is one rule of a policy file: the users and groups it is for,
// and what it allows them. A rule names resources or non-resource URLs,
// never both.
//
// A resource rule allows its verbs on its resources in its namespaces:
// "*" in verbs, resources or namespaces means all. Namespaces ["*"] also
// covers cluster-scoped resources (namespaces themselves) and the lists
// and watches across all namespaces; a rule for some namespaces covers
// only requests within them. APIGroups, if given, restricts the rule to
// those API groups ("" is the core group); left out, the resource names
// alone decide.
//
// A non-resource rule allows its verbs (the lower-case HTTP methods: get,
// post, …) on its URLs: exact paths, or prefixes ending in "*".
type PolicyRule struct {
	Users           []string `json:"users,omitempty"`
	Groups          []string `json:"groups,omitempty"`
	Verbs           []string `json:"verbs"`
	APIGroups       []string `json:"apiGroups,omitempty"`
	Resources       []string `json:"resources,omitempty"`
	Namespaces      []string `json:"namespaces,omitempty"`
	NonResourceURLs []string `json:"nonResourceURLs,omitempty"`
}

// policyFile is the format of --authorization-policy-file.
type policyFile struct {
	Rules []PolicyRule `json:"rules"`
}

// UnsafeDeleteVerb is the verb kube-apiserver authorizes, besides delete,
// for a delete with ignoreStoreReadErrorWithClusterBreakingPotential.
const UnsafeDeleteVerb = "unsafe-delete-ignore-read-errors"

// resourceVerbs are the verbs of resource rules (unsafe-delete-ignore-read-errors:
// also needed to delete an object whose stored value cannot be read, as in
// kube-apiserver); nonResourceVerbs those of non-resource rules.
var (
	resourceVerbs    = []string{"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection", UnsafeDeleteVerb, "*"}
	nonResourceVerbs = []string{"get", "head", "post", "put", "patch", "delete", "options", "*"}
)

// LoadPolicyFile reads a policy file (YAML or JSON):
//
//	rules:
//	- users: [alice]
//	  groups: [team-a]
//	  verbs: [get, list, watch]
//	  resources: [configmaps]
//	  namespaces: [team-a]
//	- groups: [monitoring]
//	  verbs: [get]
//	  nonResourceURLs: [/openapi/*]
//
// Unknown fields, unknown verbs and incomplete rules are errors, so that a
// typo is not a silent denial (or grant).
func LoadPolicyFile(path string) ([]PolicyRule, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	rules, err := ParsePolicy(data)
	if err != nil {
		return nil, fmt.Errorf("policy file %s: %w", path, err)
	}
	return rules, nil
}

// ParsePolicy parses and checks the contents of a policy file.
func ParsePolicy(data []byte) ([]PolicyRule, error) {
	var f policyFile
	if len(bytes.TrimSpace(data)) > 0 {
		if err := yaml.UnmarshalStrict(data, &f); err != nil {
			return nil, err
		}
	}
	var errs []error
	for i, r := range f.Rules {
		if err := r.validate(); err != nil {
			errs = append(errs, fmt.Errorf("rule %d: %w", i+1, err))
		}
	}
	return f.Rules, errors.Join(errs...)
}

func (r *PolicyRule) validate() error {
	var errs []error
	if len(r.Users) == 0 && len(r.Groups) == 0 {
		errs = append(errs, errors.New("give the users or the groups it is for"))
	}
	if slices.Contains(r.Users, "") || slices.Contains(r.Groups, "") {
		errs = append(errs, errors.New("an empty user or group name"))
	}
	if len(r.Verbs) == 0 {
		errs = append(errs, errors.New("verbs: give the verbs it allows, or \"*\""))
	}
	resource, nonResource := len(r.Resources) > 0 || len(r.Namespaces) > 0 || len(r.APIGroups) > 0, len(r.NonResourceURLs) > 0
	switch {
	case resource && nonResource:
		errs = append(errs, errors.New("a rule names resources or nonResourceURLs, not both"))
	case nonResource:
		for _, v := range r.Verbs {
			if !slices.Contains(nonResourceVerbs, v) {
				errs = append(errs, fmt.Errorf("verbs: %q is not one of %s (for nonResourceURLs)", v, strings.Join(nonResourceVerbs, ", ")))
			}
		}
		for _, u := range r.NonResourceURLs {
			if (u != "*" && !strings.HasPrefix(u, "/")) || strings.Contains(strings.TrimSuffix(u, "*"), "*") {
				errs = append(errs, fmt.Errorf("nonResourceURLs: %q is neither a path (/version) nor a prefix ending in * (/openapi/*)", u))
			}
		}
	default:
		if len(r.Resources) == 0 {
			errs = append(errs, errors.New("resources: give the resources (plural: configmaps) or \"*\", or nonResourceURLs"))
		}
		if len(r.Namespaces) == 0 {
			errs = append(errs, errors.New("namespaces: give the namespaces, or \"*\" for all of them and cluster-scoped resources"))
		}
		for _, v := range r.Verbs {
			if !slices.Contains(resourceVerbs, v) {
				errs = append(errs, fmt.Errorf("verbs: %q is not one of %s", v, strings.Join(resourceVerbs, ", ")))
			}
		}
		if slices.Contains(r.Resources, "") || slices.Contains(r.Namespaces, "") {
			errs = append(errs, errors.New("an empty resource or namespace name"))
		}
	}
	return errors.Join(errs...)
}

// appliesTo reports whether the rule is for user.
func (r *PolicyRule) appliesTo(user UserInfo) bool {
	if slices.Contains(r.Users, "*") || slices.Contains(r.Users, user.Name) || slices.Contains(r.Groups, "*") {
		return true
	}
	for _, g := range user.Groups {
		if slices.Contains(r.Groups, g) {
			return true
		}
	}
	return false
}

// allows reports whether the rule allows the request a.
func (r *PolicyRule) allows(a Attributes) bool {
	if !r.appliesTo(a.User) || !matches(r.Verbs, a.Verb) {
		return false
	}
	if !a.ResourceRequest {
		for _, u := range r.NonResourceURLs {
			if u == "*" || u == a.Path || (strings.HasSuffix(u, "*") && strings.HasPrefix(a.Path, strings.TrimSuffix(u, "*"))) {
				return true
			}
		}
		return false
	}
	if len(r.Resources) == 0 {
		return false
	}
	resource := a.Resource
	if a.Subresource != "" {
		resource += "/" + a.Subresource
	}
	if len(r.APIGroups) > 0 && !matches(r.APIGroups, a.APIGroup) {
		return false
	}
	if !matches(r.Resources, resource) {
		return false
	}
	// "" (cluster scope, all namespaces) is only within "*".
	return slices.Contains(r.Namespaces, "*") || (a.Namespace != "" && slices.Contains(r.Namespaces, a.Namespace))
}

func matches(list []string, v string) bool {
	return slices.Contains(list, "*") || slices.Contains(list, v)
}

// builtinRules are granted whatever the policy file says, as
// kube-apiserver's bootstrap roles are: system:masters may do everything
// (its privileged group); every authenticated user may read discovery,
// /version and the OpenAPI documents (system:discovery,
// system:public-info-viewer), ask what it may do itself
// (SelfSubjectAccessReview, SelfSubjectRulesReview) and who it is (SelfSubjectReview;
// system:basic-user); anonymous users may read
// /version; both may read the OpenID discovery documents of the service
// account issuer (kube grants them to system:serviceaccounts only, with
// system:service-account-issuer-discovery; anonymous requests exist only
// with --anonymous-auth). Health endpoints are answered before
// authentication.
var builtinRules = []PolicyRule{
	{Groups: []string{MastersGroup}, Verbs: []string{"*"}, Resources: []string{"*"}, Namespaces: []string{"*"}},
	{Groups: []string{MastersGroup}, Verbs: []string{"*"}, NonResourceURLs: []string{"*"}},
	{Groups: []string{AuthenticatedGroup}, Verbs: []string{"get", "head"}, NonResourceURLs: []string{"/api", "/api/*", "/apis", "/apis/*", "/openapi", "/openapi/*", "/version", "/version/"}},
	{Groups: []string{AuthenticatedGroup}, Verbs: []string{"create"}, APIGroups: []string{"authorization.k8s.io"}, Resources: []string{"selfsubjectaccessreviews", "selfsubjectrulesreviews"}, Namespaces: []string{"*"}},
	{Groups: []string{AuthenticatedGroup}, Verbs: []string{"create"}, APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"selfsubjectreviews"}, Namespaces: []string{"*"}},
	{Groups: []string{UnauthenticatedGroup}, Verbs: []string{"get", "head"}, NonResourceURLs: []string{"/version", "/version/"}},
	{Groups: []string{AuthenticatedGroup, UnauthenticatedGroup}, Verbs: []string{"get", "head"}, NonResourceURLs: []string{"/.well-known/openid-configuration", "/openid/v1/jwks"}},
}

const mastersReason = "allowed: group " + MastersGroup + " may do everything"

var builtinReasons = []string{
	mastersReason,
	mastersReason,
	"allowed: every authenticated user may read discovery, /version and OpenAPI",
	"allowed: every authenticated user may review its own access",
	"allowed: every authenticated user may ask who it is",
	"allowed: everyone may read /version",
	"allowed: everyone may read the service account issuer's OpenID discovery documents",
}

// NewPolicyAuthorizer allows what the built-in rules and rules allow; it
// has no opinion on anything else.
func NewPolicyAuthorizer(rules []PolicyRule) Authorizer {
	return &policyAuthorizer{rules: slices.Clone(rules)}
}

type policyAuthorizer struct {
	rules []PolicyRule
}

func (p *policyAuthorizer) Authorize(_ context.Context, a Attributes) (Decision, string, error) {
	for i := range builtinRules {
		if builtinRules[i].allows(a) {
			return Allow, builtinReasons[i], nil
		}
	}
	for i := range p.rules {
		if p.rules[i].allows(a) {
			return Allow, fmt.Sprintf("allowed by rule %d of the authorization policy", i+1), nil
		}
	}
	return NoOpinion, "", nil
}

var htmlEscaper = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;")

// forbidden is kube-apiserver's 403 (endpoints/handlers/responsewriters
// Forbidden): `configmaps "x" is forbidden: User "alice" cannot get
// resource "configmaps" in API group "" in the namespace "default"`.
func forbidden(a Attributes, reason string) error {
	var msg string
	switch {
	case !a.ResourceRequest:
		msg = fmt.Sprintf("User %q cannot %s path %q", a.User.Name, a.Verb, a.Path)
	default:
		resource := a.Resource
		if a.Subresource != "" {
			resource += "/" + a.Subresource
		}
		if a.Namespace != "" {
			msg = fmt.Sprintf("User %q cannot %s resource %q in API group %q in the namespace %q", a.User.Name, a.Verb, resource, a.APIGroup, a.Namespace)
		} else {
			msg = fmt.Sprintf("User %q cannot %s resource %q in API group %q at the cluster scope", a.User.Name, a.Verb, resource, a.APIGroup)
		}
	}
	// kube-apiserver escapes HTML in the message.
	msg = htmlEscaper.Replace(msg)
	if reason != "" {
		msg += ": " + reason
	}
	var gr schema.GroupResource
	if a.ResourceRequest {
		gr = schema.GroupResource{Group: a.APIGroup, Resource: a.Resource}
	}
	return apierrors.NewForbidden(gr, a.Name, errors.New(msg))
}
