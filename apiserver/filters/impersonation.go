package filters

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// The headers of kube's impersonation (kubectl --as, --as-group, --as-uid).
const (
	impersonateUser        = "Impersonate-User"
	impersonateGroup       = "Impersonate-Group"
	impersonateUID         = "Impersonate-Uid"
	impersonateExtraPrefix = "Impersonate-Extra-"
	serviceAccountPrefix   = "system:serviceaccount:"
)

// impersonate is kube's WithImpersonation: each thing asked for (the user,
// or the ServiceAccount it names; each group; each extra value; the uid)
// must be allowed the verb impersonate to the sender, and the request
// then runs as the user asked for, with system:authenticated (a
// ServiceAccount also with its groups, if no group is asked for). ok is
// false when the request asks for nobody.
func impersonate(ctx context.Context, r *http.Request, z Authorizer, sender UserInfo) (_ *UserInfo, ok bool, _ error) {
	name := r.Header.Get(impersonateUser)
	groups := r.Header.Values(impersonateGroup)
	uid := r.Header.Get(impersonateUID)
	extra := map[string][]string{}
	for h, v := range r.Header {
		if strings.HasPrefix(h, impersonateExtraPrefix) {
			key, err := url.PathUnescape(strings.TrimPrefix(h, impersonateExtraPrefix))
			if err != nil {
				return nil, true, apierrors.NewInternalError(fmt.Errorf("malformed %s header %q: %w", impersonateExtraPrefix, h, err))
			}
			extra[strings.ToLower(key)] = v
		}
	}
	if name == "" {
		if len(groups) == 0 && uid == "" && len(extra) == 0 {
			return nil, false, nil
		}
		return nil, true, apierrors.NewInternalError(fmt.Errorf("requested impersonation of groups %q, extras or a uid without impersonating a user", groups))
	}
	check := func(a Attributes) error {
		a.User, a.Verb, a.ResourceRequest = sender, "impersonate", true
		allowed, reason, err := Allowed(ctx, z, a)
		if err != nil && !allowed {
			return apierrors.NewInternalError(err)
		}
		if !allowed {
			return forbidden(a, reason)
		}
		return nil
	}
	impersonated := UserInfo{Name: name, UID: uid}
	if rest, isSA := strings.CutPrefix(name, serviceAccountPrefix); isSA && strings.Count(rest, ":") == 1 {
		ns, sa, _ := strings.Cut(rest, ":")
		if err := check(Attributes{Resource: "serviceaccounts", Namespace: ns, Name: sa}); err != nil {
			return nil, true, err
		}
		if len(groups) == 0 {
			groups = []string{"system:serviceaccounts", "system:serviceaccounts:" + ns}
		}
	} else if err := check(Attributes{Resource: "users", Name: name}); err != nil {
		return nil, true, err
	}
	for _, g := range r.Header.Values(impersonateGroup) {
		if err := check(Attributes{Resource: "groups", Name: g}); err != nil {
			return nil, true, err
		}
	}
	for key, values := range extra {
		for _, v := range values {
			if err := check(Attributes{APIGroup: "authentication.k8s.io", Resource: "userextras", Subresource: key, Name: v}); err != nil {
				return nil, true, err
			}
		}
	}
	if uid != "" {
		if err := check(Attributes{APIGroup: "authentication.k8s.io", Resource: "uids", Name: uid}); err != nil {
			return nil, true, err
		}
	}
	if len(extra) > 0 {
		impersonated.Extra = extra
	}
	impersonated.Groups = slices.Clone(groups)
	if name != "system:anonymous" {
		if !slices.Contains(groups, AuthenticatedGroup) && !slices.Contains(groups, UnauthenticatedGroup) {
			impersonated.Groups = append(impersonated.Groups, AuthenticatedGroup)
		}
	} else if !slices.Contains(groups, UnauthenticatedGroup) {
		impersonated.Groups = append(impersonated.Groups, UnauthenticatedGroup)
	}
	return &impersonated, true, nil
}
