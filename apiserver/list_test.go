package apiserver_test

import (
	"context"
	"encoding/base64"
	"net/http"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func (s *testServer) create(t *testing.T, namespace, name string, labels map[string]string) corev1.ConfigMap {
	t.Helper()
	cm := configMap(name, "", map[string]string{"k": "v"})
	cm.Labels = labels
	resp := s.do(t, http.MethodPost, "/api/v1/namespaces/"+namespace+"/configmaps", cm)
	if resp.Code != http.StatusCreated {
		t.Fatalf("create %s/%s: %d %s", namespace, name, resp.Code, resp.Body)
	}
	var out corev1.ConfigMap
	resp.decode(t, &out)
	return out
}

func (s *testServer) list(t *testing.T, path string, query url.Values) (response, corev1.ConfigMapList) {
	t.Helper()
	resp := s.do(t, http.MethodGet, path+"?"+query.Encode(), nil)
	var list corev1.ConfigMapList
	if resp.Code == http.StatusOK {
		resp.decode(t, &list)
	}
	return resp, list
}

func names(list corev1.ConfigMapList) []string {
	var out []string
	for _, item := range list.Items {
		out = append(out, item.Namespace+"/"+item.Name)
	}
	return out
}

func (s *testServer) compact(t *testing.T) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := s.Etcd.Client.Get(ctx, "/")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Etcd.Client.Compact(ctx, resp.Header.Revision); err != nil {
		t.Fatal(err)
	}
	return resp.Header.Revision
}

func TestListSelectorsAndNamespaces(t *testing.T) {
	s := startServer(t)
	s.namespace(t, "other", "otherx")
	s.create(t, "default", "a", map[string]string{"env": "prod", "tier": "web"})
	s.create(t, "default", "b", map[string]string{"env": "staging"})
	s.create(t, "default", "c", map[string]string{"env": "dev", "tier": "db"})
	s.create(t, "other", "a", map[string]string{"env": "prod"})
	s.create(t, "otherx", "z", nil)

	tests := []struct {
		path  string
		query url.Values
		want  []string
	}{
		{nsPath, nil, []string{"default/a", "default/b", "default/c"}},
		{"/api/v1/namespaces/other/configmaps", nil, []string{"other/a"}},
		{"/api/v1/configmaps", nil, []string{"default/a", "default/b", "default/c", "other/a", "otherx/z"}},
		{nsPath, url.Values{"labelSelector": {"env=prod"}}, []string{"default/a"}},
		{nsPath, url.Values{"labelSelector": {"env!=prod"}}, []string{"default/b", "default/c"}},
		{nsPath, url.Values{"labelSelector": {"env in (prod,staging)"}}, []string{"default/a", "default/b"}},
		{nsPath, url.Values{"labelSelector": {"env notin (prod),tier"}}, []string{"default/c"}},
		{nsPath, url.Values{"labelSelector": {"!tier"}}, []string{"default/b"}},
		{"/api/v1/configmaps", url.Values{"labelSelector": {"env=prod"}}, []string{"default/a", "other/a"}},
		{"/api/v1/configmaps", url.Values{"fieldSelector": {"metadata.name=a"}}, []string{"default/a", "other/a"}},
		{"/api/v1/configmaps", url.Values{"fieldSelector": {"metadata.namespace!=default"}}, []string{"other/a", "otherx/z"}},
		{"/api/v1/configmaps", url.Values{"fieldSelector": {"metadata.name=a,metadata.namespace=other"}}, []string{"other/a"}},
		{nsPath, url.Values{"fieldSelector": {"metadata.name=nope"}}, nil},
	}
	for _, tc := range tests {
		resp, list := s.list(t, tc.path, tc.query)
		if resp.Code != http.StatusOK {
			t.Errorf("GET %s?%s: %d %s", tc.path, tc.query.Encode(), resp.Code, resp.Body)
			continue
		}
		if diff := cmp.Diff(names(list), tc.want); diff != "" {
			t.Errorf("GET %s?%s items (-got +want):\n%s", tc.path, tc.query.Encode(), diff)
		}
	}
}

func TestListResourceVersionSemantics(t *testing.T) {
	s := startServer(t)
	first := s.create(t, "default", "first", nil)
	s.create(t, "default", "second", nil)
	if resp := s.do(t, http.MethodDelete, nsPath+"/first", nil); resp.Code != http.StatusOK {
		t.Fatalf("delete: %d %s", resp.Code, resp.Body)
	}
	_, latest := s.list(t, nsPath, nil)
	current, _ := strconv.ParseInt(latest.ResourceVersion, 10, 64)
	if diff := cmp.Diff(names(latest), []string{"default/second"}); diff != "" {
		t.Fatalf("latest list (-got +want):\n%s", diff)
	}

	ok := []struct {
		query  url.Values
		wantRV string
		want   []string
	}{
		{url.Values{"resourceVersion": {"0"}}, latest.ResourceVersion, []string{"default/second"}},
		{url.Values{"resourceVersion": {first.ResourceVersion}}, latest.ResourceVersion, []string{"default/second"}},
		{url.Values{"resourceVersion": {first.ResourceVersion}, "resourceVersionMatch": {"NotOlderThan"}}, latest.ResourceVersion, []string{"default/second"}},
		// Exact reads the past: "first" still existed at its creation revision.
		{url.Values{"resourceVersion": {first.ResourceVersion}, "resourceVersionMatch": {"Exact"}}, first.ResourceVersion, []string{"default/first"}},
		// Legacy: a paged list at N is Exact.
		{url.Values{"resourceVersion": {first.ResourceVersion}, "limit": {"10"}}, first.ResourceVersion, []string{"default/first"}},
	}
	for _, tc := range ok {
		resp, list := s.list(t, nsPath, tc.query)
		if resp.Code != http.StatusOK || list.ResourceVersion != tc.wantRV || !cmp.Equal(names(list), tc.want) {
			t.Errorf("list ?%s: %d rv %q items %v; want 200 rv %s items %v: %s", tc.query.Encode(), resp.Code, list.ResourceVersion, names(list), tc.wantRV, tc.want, resp.Body)
		}
	}

	future := strconv.FormatInt(current+100, 10)
	tooLarge := "Timeout: Too large resource version: " + future + ", current: " + latest.ResourceVersion
	compactedAt := s.compact(t)
	bad := []struct {
		query   url.Values
		code    int
		reason  metav1.StatusReason
		message string
	}{
		{url.Values{"resourceVersion": {future}}, http.StatusGatewayTimeout, metav1.StatusReasonTimeout, tooLarge},
		{url.Values{"resourceVersion": {future}, "resourceVersionMatch": {"Exact"}}, http.StatusGatewayTimeout, metav1.StatusReasonTimeout, tooLarge},
		{url.Values{"resourceVersion": {first.ResourceVersion}, "resourceVersionMatch": {"Exact"}}, http.StatusGone, metav1.StatusReasonExpired, "The resourceVersion for the provided list is too old."},
		{url.Values{"resourceVersionMatch": {"Exact"}}, http.StatusUnprocessableEntity, metav1.StatusReasonInvalid,
			"ListOptions.meta.k8s.io \"\" is invalid: resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided"},
		{url.Values{"resourceVersion": {"0"}, "resourceVersionMatch": {"Exact"}}, http.StatusUnprocessableEntity, metav1.StatusReasonInvalid,
			"ListOptions.meta.k8s.io \"\" is invalid: resourceVersionMatch: Forbidden: resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\""},
		{url.Values{"resourceVersion": {"1"}, "resourceVersionMatch": {"Sometime"}}, http.StatusUnprocessableEntity, metav1.StatusReasonInvalid, ""},
		{url.Values{"sendInitialEvents": {"true"}}, http.StatusUnprocessableEntity, metav1.StatusReasonInvalid,
			"ListOptions.meta.k8s.io \"\" is invalid: sendInitialEvents: Forbidden: sendInitialEvents is forbidden for list"},
		{url.Values{"resourceVersion": {"abc"}}, http.StatusBadRequest, metav1.StatusReasonBadRequest, ""},
		{url.Values{"limit": {"x"}}, http.StatusBadRequest, metav1.StatusReasonBadRequest, ""},
	}
	for _, tc := range bad {
		resp, _ := s.list(t, nsPath, tc.query)
		st := resp.status(t)
		if resp.Code != tc.code || st.Reason != tc.reason || (tc.message != "" && st.Message != tc.message) {
			t.Errorf("list ?%s: %d %s %q; want %d %s %q", tc.query.Encode(), resp.Code, st.Reason, st.Message, tc.code, tc.reason, tc.message)
		}
		if tc.code == http.StatusGatewayTimeout && (st.Details == nil || len(st.Details.Causes) != 1 || st.Details.Causes[0].Type != metav1.CauseTypeResourceVersionTooLarge) {
			t.Errorf("list ?%s: details %+v; want one ResourceVersionTooLarge cause", tc.query.Encode(), st.Details)
		}
	}
	t.Logf("compacted at %d", compactedAt)
}

func TestListPagesAreOneSnapshot(t *testing.T) {
	s := startServer(t)
	for i := range 7 {
		s.create(t, "default", "cm-"+strconv.Itoa(i), nil)
	}
	resp, page1 := s.list(t, nsPath, url.Values{"limit": {"3"}})
	if resp.Code != http.StatusOK || len(page1.Items) != 3 || page1.Continue == "" || page1.RemainingItemCount == nil || *page1.RemainingItemCount != 4 {
		t.Fatalf("page 1: %d, %d items, continue %q, remaining %v; want 3 items, a token, 4 remaining: %s", resp.Code, len(page1.Items), page1.Continue, page1.RemainingItemCount, resp.Body)
	}
	// Writes after the first page do not show up in later pages.
	s.create(t, "default", "cm-9-late", nil)
	if resp := s.do(t, http.MethodDelete, nsPath+"/cm-6", nil); resp.Code != http.StatusOK {
		t.Fatalf("delete: %d", resp.Code)
	}
	got := names(page1)
	token := page1.Continue
	for pages := 1; token != ""; pages++ {
		if pages > 5 {
			t.Fatal("more pages than objects")
		}
		resp, page := s.list(t, nsPath, url.Values{"limit": {"3"}, "continue": {token}})
		if resp.Code != http.StatusOK || page.ResourceVersion != page1.ResourceVersion {
			t.Fatalf("page %d: %d rv %q; want 200 at the first page's rv %s: %s", pages+1, resp.Code, page.ResourceVersion, page1.ResourceVersion, resp.Body)
		}
		got = append(got, names(page)...)
		token = page.Continue
	}
	want := []string{"default/cm-0", "default/cm-1", "default/cm-2", "default/cm-3", "default/cm-4", "default/cm-5", "default/cm-6"}
	if diff := cmp.Diff(got, want); diff != "" {
		t.Errorf("paged list (-got +want):\n%s", diff)
	}
}

func TestListPagesFillUpThroughASelector(t *testing.T) {
	s := startServer(t)
	// Matches are far apart, so filling a page takes several reads.
	for i := range 30 {
		var labels map[string]string
		if i%10 == 9 {
			labels = map[string]string{"pick": "yes"}
		}
		s.create(t, "default", "cm-"+strconv.Itoa(10+i), labels)
	}
	query := url.Values{"limit": {"2"}, "labelSelector": {"pick=yes"}}
	resp, page1 := s.list(t, nsPath, query)
	if resp.Code != http.StatusOK || !cmp.Equal(names(page1), []string{"default/cm-19", "default/cm-29"}) || page1.Continue == "" {
		t.Fatalf("page 1: %d %v continue %q; want cm-19, cm-29 and a token: %s", resp.Code, names(page1), page1.Continue, resp.Body)
	}
	if page1.RemainingItemCount != nil {
		t.Errorf("page 1 remainingItemCount %d; want none with a selector", *page1.RemainingItemCount)
	}
	query.Set("continue", page1.Continue)
	resp, page2 := s.list(t, nsPath, query)
	if resp.Code != http.StatusOK || !cmp.Equal(names(page2), []string{"default/cm-39"}) || page2.Continue != "" {
		t.Errorf("page 2: %d %v continue %q; want only cm-39 and no token", resp.Code, names(page2), page2.Continue)
	}
}

func TestListContinueTokens(t *testing.T) {
	s := startServer(t)
	for i := range 4 {
		s.create(t, "default", "cm-"+strconv.Itoa(i), nil)
	}
	_, page1 := s.list(t, nsPath, url.Values{"limit": {"2"}})
	forge := func(json string) string { return base64.RawURLEncoding.EncodeToString([]byte(json)) }
	bad := []struct {
		name  string
		query url.Values
		msg   string
	}{
		{"garbage", url.Values{"continue": {"%%%not-base64"}}, "invalid continue token: continue key is not valid"},
		{"not json", url.Values{"continue": {forge("nope")}}, "invalid continue token: continue key is not valid"},
		{"path traversal", url.Values{"continue": {forge(`{"v":"meta.k8s.io/v1","rv":3,"start":"../secrets/x"}`)}}, "invalid continue token: continue key is not valid: ../secrets/x"},
		{"revision 0", url.Values{"continue": {forge(`{"v":"meta.k8s.io/v1","rv":0,"start":"a"}`)}}, "invalid continue token: continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)"},
		{"unknown version", url.Values{"continue": {forge(`{"v":"v9","rv":3,"start":"a"}`)}}, "invalid continue token"},
		{"with resourceVersion", url.Values{"continue": {page1.Continue}, "resourceVersion": {page1.ResourceVersion}}, "specifying resource version is not allowed when using continue"},
	}
	for _, tc := range bad {
		resp, _ := s.list(t, nsPath, tc.query)
		st := resp.status(t)
		if resp.Code != http.StatusBadRequest || st.Reason != metav1.StatusReasonBadRequest || len(st.Message) < len(tc.msg) || st.Message[:len(tc.msg)] != tc.msg {
			t.Errorf("%s: %d %s %q; want 400 BadRequest starting %q", tc.name, resp.Code, st.Reason, st.Message, tc.msg)
		}
	}

	// Once the first page's revision is compacted the token expires; the
	// 410 carries a token that continues at the latest revision.
	s.create(t, "default", "cm-late", nil)
	s.compact(t)
	resp, _ := s.list(t, nsPath, url.Values{"limit": {"2"}, "continue": {page1.Continue}})
	st := resp.status(t)
	if resp.Code != http.StatusGone || st.Reason != metav1.StatusReasonExpired || st.Message[:44] != "The provided continue parameter is too old t" || st.Continue == "" {
		t.Fatalf("compacted continue: %d %s %q continue %q; want 410 Expired with a new token", resp.Code, st.Reason, st.Message, st.Continue)
	}
	resp, rest := s.list(t, nsPath, url.Values{"limit": {"10"}, "continue": {st.Continue}})
	if resp.Code != http.StatusOK || !cmp.Equal(names(rest), []string{"default/cm-2", "default/cm-3", "default/cm-late"}) {
		t.Errorf("continue at latest: %d %v; want the rest at the latest revision: %s", resp.Code, names(rest), resp.Body)
	}
}
