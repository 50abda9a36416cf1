package filters

import (
	"context"
	"log/slog"
	"net/http"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// Requests is the server's record of each request. What the filter learns
// of a request is kept there: the audit log and the metrics read it once
// the request has ended, also when the filter refused it.
type Requests interface {
	// Parsed keeps what r asks; the filter fills in a.User once it knows
	// who sent r.
	Parsed(r *http.Request, a *Attributes)
	// Refused is told of a request the filter answers itself (401, 403):
	// no handler sees it, to label its metrics.
	Refused(r *http.Request, a Attributes)
	// Logger is r's logger: its lines name the request.
	Logger(r *http.Request) *slog.Logger
}

// WithAuth authenticates every request that reaches it, then authorizes
// it, before any routing or storage access: 401 for a request it cannot
// authenticate, 403 for one the authorizer denies. A nil authn leaves the
// API open (no users, no authorization); a nil authz is the built-in rules
// alone. writeError answers the refusals: Status errors go out in the
// format the client negotiated, which the server knows, not the filter.
func WithAuth(next http.Handler, authn *Authentication, authz Authorizer, writeError func(http.ResponseWriter, *http.Request, error), requests Requests) http.Handler {
	if authn == nil {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			attrs := requestAttributes(r)
			requests.Parsed(r, &attrs)
			next.ServeHTTP(w, r)
		})
	}
	if authz == nil {
		authz = NewPolicyAuthorizer(nil)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		attrs := requestAttributes(r)
		requests.Parsed(r, &attrs)
		user, err := authn.authenticate(r)
		if err != nil {
			requests.Refused(r, attrs)
			requests.Logger(r).Info("request not authenticated", "path", r.URL.Path, "reason", err.Error())
			writeError(w, r, unauthorized())
			return
		}
		attrs.User = *user
		as, asked, err := impersonate(r.Context(), r, authz, *user)
		if err != nil {
			requests.Refused(r, attrs)
			writeError(w, r, err)
			return
		}
		if asked {
			// From here on the request is the impersonated user's; the
			// audit line names both.
			attrs.Impersonator, attrs.User, user = user, *as, as
		}
		// A write may be allowed on a view that is not current, checked by
		// its own etcd transaction (Fence).
		fence := &Fence{state: fenceFast, authz: authz, attrs: attrs}
		allowed, reason, err := Allowed(context.WithValue(r.Context(), fenceKey{}, fence), authz, attrs)
		fence.mu.Lock()
		fence.state = fenceClosed
		fenced := fence.guard != nil
		fence.mu.Unlock()
		if !allowed {
			requests.Refused(r, attrs)
			if err != nil {
				// kube answers 500 when an authorizer fails and none allows.
				requests.Logger(r).Error("authorization failed", "err", err.Error())
				writeError(w, r, apierrors.NewInternalError(err))
				return
			}
			writeError(w, r, forbidden(attrs, reason))
			return
		}
		ctx := context.WithValue(r.Context(), userKey{}, user)
		// A handler may need to authorize more (an unsafe delete).
		ctx = context.WithValue(ctx, authorizerKey{}, authz)
		if fenced {
			ctx = context.WithValue(ctx, fenceKey{}, fence)
			r = r.WithContext(ctx)
			w = &fencedWriter{ResponseWriter: w, r: r, fence: fence, writeError: writeError}
		}
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

type (
	userKey       struct{}
	authorizerKey struct{}
)

// UserOf is the authenticated user of a request; nil when the API is open
// (WithAuth without authentication).
func UserOf(ctx context.Context) *UserInfo {
	u, _ := ctx.Value(userKey{}).(*UserInfo)
	return u
}

// AuthorizerOf is the authorizer that admitted the request; nil when the
// API is open (WithAuth without authentication).
func AuthorizerOf(ctx context.Context) Authorizer {
	a, _ := ctx.Value(authorizerKey{}).(Authorizer)
	return a
}
