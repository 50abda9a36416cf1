package apiserver_test

import (
	"net/http"
	"regexp"
	"testing"

	"github.com/concord-dev/concord/etcdstore"
	"github.com/concord-dev/concord/registry"
)

func TestCORS(t *testing.T) {
	allowed := regexp.MustCompile(`^http://app\.example:8443$`)
	s := startServerOn(t, registry.DefaultWatchConfig(), func(st *etcdstore.Store) registry.Storage { return st }, allowed)
	c := s.create(t, "default", "flags", nil)

	preflight := func(origin string) response {
		return s.do(t, http.MethodOptions, flagsPath, nil,
			"Origin", origin, "Access-Control-Request-Method", "PUT", "Access-Control-Request-Headers", "content-type,if-match")
	}
	resp := preflight("http://app.example:8443")
	want := map[string]string{
		"Access-Control-Allow-Origin":      "http://app.example:8443",
		"Access-Control-Allow-Methods":     "GET, POST, PUT, PATCH, DELETE, OPTIONS",
		"Access-Control-Allow-Headers":     "Content-Type, Content-Length, Accept-Encoding, Authorization, X-Requested-With, If-Match, If-None-Match",
		"Access-Control-Expose-Headers":    "ETag, Date, Audit-Id",
		"Access-Control-Allow-Credentials": "true",
		"Vary":                             "Origin",
	}
	if resp.Code != http.StatusNoContent {
		t.Errorf("allowed preflight: %d; want 204", resp.Code)
	}
	for k, v := range want {
		if got := resp.Header.Get(k); got != v {
			t.Errorf("allowed preflight %s = %q; want %q", k, got, v)
		}
	}

	for _, origin := range []string{"http://evil.example", "http://app.example:8443.evil", "null"} {
		resp := preflight(origin)
		if got := resp.Header.Get("Access-Control-Allow-Origin"); got != "" || resp.Code == http.StatusNoContent {
			t.Errorf("preflight from %s: %d, Allow-Origin %q; want no CORS approval", origin, resp.Code, got)
		}
	}

	get := s.do(t, http.MethodGet, flagsPath, nil, "Origin", "http://app.example:8443")
	if get.Code != http.StatusOK || get.Header.Get("Access-Control-Allow-Origin") != "http://app.example:8443" ||
		get.Header.Get("Access-Control-Expose-Headers") != want["Access-Control-Expose-Headers"] || get.Header.Get("ETag") != quoted(c.ResourceVersion) {
		t.Errorf("GET from the allowed origin: %d %v; want 200 with Allow-Origin, exposed ETag", get.Code, get.Header)
	}
	if got := s.do(t, http.MethodGet, flagsPath, nil).Header.Get("Access-Control-Allow-Origin"); got != "" {
		t.Errorf("GET without Origin: Allow-Origin %q; want none", got)
	}

	// Without --cors-allowed-origins there is no CORS at all.
	off := startServer(t)
	if resp := off.do(t, http.MethodOptions, flagsPath, nil, "Origin", "http://app.example:8443", "Access-Control-Request-Method", "PUT"); resp.Header.Get("Access-Control-Allow-Origin") != "" {
		t.Errorf("CORS off: preflight got Allow-Origin %q", resp.Header.Get("Access-Control-Allow-Origin"))
	}
}
