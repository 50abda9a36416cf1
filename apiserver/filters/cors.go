package filters

import (
	"net/http"
	"regexp"
	"strings"
)

// CORS answers for browsers on other origins, as kube-apiserver's
// --cors-allowed-origins does, plus what conditional requests need: the
// preflight allows If-Match and If-None-Match, and responses expose ETag.
var (
	corsAllowedMethods = []string{"GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"}
	corsAllowedHeaders = []string{"Content-Type", "Content-Length", "Accept-Encoding", "Authorization", "X-Requested-With", "If-Match", "If-None-Match"}
	corsExposedHeaders = []string{"ETag", "Date", "Audit-Id"}
)

// WithCORS adds CORS headers for origins that match one of allowed (regular
// expressions, matched anywhere in the Origin value as kube-apiserver does:
// anchor them). Other origins get no CORS headers, so browsers block them.
// An allowed preflight is answered 204 here.
func WithCORS(next http.Handler, allowed []*regexp.Regexp) http.Handler {
	if len(allowed) == 0 {
		return next
	}
	methods := strings.Join(corsAllowedMethods, ", ")
	headers := strings.Join(corsAllowedHeaders, ", ")
	exposed := strings.Join(corsExposedHeaders, ", ")
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		origin := r.Header.Get("Origin")
		if origin == "" {
			next.ServeHTTP(w, r)
			return
		}
		w.Header().Add("Vary", "Origin")
		if !originAllowed(origin, allowed) {
			next.ServeHTTP(w, r)
			return
		}
		h := w.Header()
		h.Set("Access-Control-Allow-Origin", origin)
		h.Set("Access-Control-Allow-Methods", methods)
		h.Set("Access-Control-Allow-Headers", headers)
		h.Set("Access-Control-Expose-Headers", exposed)
		h.Set("Access-Control-Allow-Credentials", "true")
		if r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "" {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func originAllowed(origin string, allowed []*regexp.Regexp) bool {
	for _, re := range allowed {
		if re.MatchString(origin) {
			return true
		}
	}
	return false
}
