package apiserver_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestGetWithResourceVersion: a GET's resourceVersion means what it means to
// kube-apiserver: malformed → 400; 0 → any version; N → at least as new as
// N, waiting for etcd to reach it and then 504 Too large resource version
// with Retry-After. In JSON (passed through) and in YAML (encoded).
func TestGetWithResourceVersion(t *testing.T) {
	s := startServer(t)
	const path = "/api/v1/namespaces/default/configmaps/flags"
	cm := s.create(t, "default", "flags", nil)
	current := s.revision(t)
	for _, accept := range []string{"application/json", "application/yaml"} {
		cases := []struct {
			rv     string
			code   int
			reason metav1.StatusReason
		}{
			{"abc", 400, metav1.StatusReasonBadRequest},
			{"-1", 400, metav1.StatusReasonBadRequest},
			{"1.5", 400, metav1.StatusReasonBadRequest},
			{"99999999999999999999", 400, metav1.StatusReasonBadRequest},
			{"", 200, ""},
			{"0", 200, ""},
			{"1", 200, ""},
			{cm.ResourceVersion, 200, ""},
			{fmt.Sprint(current), 200, ""},
		}
		for _, tc := range cases {
			resp := s.do(t, http.MethodGet, path+"?resourceVersion="+tc.rv, nil, "Accept", accept)
			if resp.Code != tc.code {
				t.Errorf("%s GET ?resourceVersion=%s: %d %s; want %d", accept, tc.rv, resp.Code, resp.Body, tc.code)
				continue
			}
			if tc.code == 200 {
				if !strings.Contains(string(resp.Body), cm.ResourceVersion) {
					t.Errorf("%s GET ?resourceVersion=%s: %s; want the object at %s", accept, tc.rv, resp.Body, cm.ResourceVersion)
				}
				continue
			}
			if accept == "application/json" {
				if st := resp.status(t); st.Reason != tc.reason || !strings.Contains(st.Message, tc.rv) {
					t.Errorf("GET ?resourceVersion=%s: %s %q; want %s naming the value", tc.rv, st.Reason, st.Message, tc.reason)
				}
			}
		}
	}

	// A version etcd has not reached: 504 after kube's 3 s.
	future := current + 1000
	start := time.Now()
	resp := s.do(t, http.MethodGet, fmt.Sprintf("%s?resourceVersion=%d", path, future), nil)
	took := time.Since(start)
	if resp.Code != http.StatusGatewayTimeout {
		t.Fatalf("GET ?resourceVersion=%d (etcd at %d): %d %s; want 504", future, current, resp.Code, resp.Body)
	}
	st := resp.status(t)
	if want := fmt.Sprintf("Timeout: Too large resource version: %d, current: %d", future, current); st.Reason != metav1.StatusReasonTimeout || st.Message != want {
		t.Errorf("Status %s %q; want Timeout %q", st.Reason, st.Message, want)
	}
	if st.Details == nil || len(st.Details.Causes) != 1 || st.Details.Causes[0].Type != metav1.CauseTypeResourceVersionTooLarge || st.Details.RetryAfterSeconds != 1 || resp.Header.Get("Retry-After") != "1" {
		t.Errorf("details %+v, Retry-After %q; want one ResourceVersionTooLarge cause and Retry-After 1", st.Details, resp.Header.Get("Retry-After"))
	}
	if took < 2500*time.Millisecond || took > 6*time.Second {
		t.Errorf("answered after %s; want after about 3s of waiting", took)
	}

	// A version a write reaches while the GET waits: the object at it.
	next := current + 1
	done := make(chan response, 1)
	go func() {
		done <- s.do(t, http.MethodGet, fmt.Sprintf("%s?resourceVersion=%d", path, next), nil)
	}()
	time.Sleep(300 * time.Millisecond)
	cm.Data = map[string]string{"v": "2"}
	updated := s.put(t, cm)
	resp = <-done
	if resp.Code != http.StatusOK || !strings.Contains(string(resp.Body), `"resourceVersion":"`+updated.ResourceVersion+`"`) {
		t.Errorf("GET ?resourceVersion=%d while a write reaches it: %d %s; want 200 with the object at %s", next, resp.Code, resp.Body, updated.ResourceVersion)
	}
}
