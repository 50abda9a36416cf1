package apiserver_test

import (
	"net/http"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestInvalidTimeoutIsBadRequest: a ?timeout that is not a duration is
// kube-apiserver's 400, for every verb but watch; a valid one is served.
func TestInvalidTimeoutIsBadRequest(t *testing.T) {
	s := startServer(t)
	s.create(t, "default", "cm", nil)
	for _, tc := range []struct{ method, path string }{
		{http.MethodGet, nsPath},
		{http.MethodGet, nsPath + "/cm"},
		{http.MethodPost, nsPath},
		{http.MethodDelete, nsPath + "/cm"},
		{http.MethodGet, "/apis"},
	} {
		var body any
		if tc.method == http.MethodPost {
			body = map[string]any{"metadata": map[string]any{"name": "new"}}
		}
		resp := s.do(t, tc.method, tc.path+"?timeout=invalid", body)
		st := resp.status(t)
		want := `invalid timeout specified in the request URL - time: invalid duration "invalid"`
		if resp.Code != http.StatusBadRequest || st.Reason != metav1.StatusReasonBadRequest || st.Message != want {
			t.Errorf("%s %s?timeout=invalid: %d %s %q; want 400 BadRequest %q", tc.method, tc.path, resp.Code, st.Reason, st.Message, want)
		}
	}
	// Nothing was done.
	if keys := s.storedKeys(t, "/registry/configmaps/default/"); len(keys) != 1 {
		t.Errorf("stored: %v; want cm alone", keys)
	}
	for _, timeout := range []string{"1s", "1000s", "0"} {
		if resp := s.do(t, http.MethodGet, nsPath+"?timeout="+timeout, nil); resp.Code != http.StatusOK {
			t.Errorf("timeout=%s: %d %s", timeout, resp.Code, resp.Body)
		}
	}
	// A watch's own timeout is timeoutSeconds: kube does not check it.
	if resp := s.do(t, http.MethodGet, nsPath+"?watch=true&timeoutSeconds=1&timeout=invalid", nil); resp.Code != http.StatusOK {
		t.Errorf("watch with timeout=invalid: %d %s", resp.Code, resp.Body)
	}
}
