package apiserver_test

import (
	"bytes"
	"net/http"
	"net/url"
	"strconv"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"

	"github.com/concord-dev/concord/registry"
)

// TestListProtobufFastPathAnswersWhatDecodingAnswers: a protobuf list is
// written from each cached object's encoding, made once. Its items must be,
// page for page, what the decoding path answers (taken by asking for pretty
// JSON), and its bytes exactly what the protobuf serializer gives that list
// — the framing is written by hand.
func TestListProtobufFastPathAnswersWhatDecodingAnswers(t *testing.T) {
	s := startServer(t)
	s.namespace(t, "other")
	for i := range 5 {
		c := s.create(t, "default", "cm-"+strconv.Itoa(i), map[string]string{"i": strconv.Itoa(i), "even": strconv.FormatBool(i%2 == 0)})
		c.Data = map[string]string{"edited": "yes", "b": "2", "a": "1"}
		s.put(t, c)
	}
	s.create(t, "other", "x", nil)
	for _, name := range []string{"reader", "writer"} {
		role := `{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRole","metadata":{"name":"` + name + `"},"rules":[{"apiGroups":[""],"resources":["configmaps"],"verbs":["get"]}]}`
		if resp := s.do(t, http.MethodPost, "/apis/rbac.authorization.k8s.io/v1/clusterroles", role); resp.Code != http.StatusCreated {
			t.Fatalf("create ClusterRole %s: %d %s", name, resp.Code, resp.Body)
		}
	}
	codec := protobuf.NewSerializer(registry.Scheme, registry.Scheme)
	for _, tc := range []struct {
		path string
		list func() runtime.Object
	}{
		{nsPath, func() runtime.Object { return &corev1.ConfigMapList{} }},
		{"/api/v1/configmaps", func() runtime.Object { return &corev1.ConfigMapList{} }},
		{"/api/v1/namespaces", func() runtime.Object { return &corev1.NamespaceList{} }},
		{"/apis/rbac.authorization.k8s.io/v1/clusterroles", func() runtime.Object { return &rbacv1.ClusterRoleList{} }},
	} {
		for _, q := range []url.Values{{}, {"limit": {"2"}}, {"resourceVersion": {"0"}}, {"labelSelector": {"even=true"}}} {
			token := ""
			for page := 0; page < 10; page++ {
				query := url.Values{}
				for k, v := range q {
					query[k] = v
				}
				if token != "" {
					query.Set("continue", token)
				}
				where := tc.path + "?" + query.Encode()
				fast := s.do(t, http.MethodGet, where, nil, "Accept", "application/vnd.kubernetes.protobuf")
				if fast.Code != http.StatusOK || fast.Header.Get("Content-Type") != "application/vnd.kubernetes.protobuf" {
					t.Fatalf("%s: %d %q", where, fast.Code, fast.Header.Get("Content-Type"))
				}
				got := tc.list()
				if _, _, err := codec.Decode(fast.Body, nil, got); err != nil {
					t.Fatalf("%s: decode the protobuf list: %v", where, err)
				}
				var again bytes.Buffer
				if err := codec.Encode(got, &again); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(again.Bytes(), fast.Body) {
					t.Fatalf("%s: %d bytes; the serializer writes that list in %d other bytes", where, len(fast.Body), again.Len())
				}
				query.Set("pretty", "true")
				want := tc.list()
				s.do(t, http.MethodGet, tc.path+"?"+query.Encode(), nil).decode(t, want)
				got.GetObjectKind().SetGroupVersionKind(want.GetObjectKind().GroupVersionKind())
				// Protobuf has no place for an item's kind and apiVersion.
				if err := meta.EachListItem(want, func(item runtime.Object) error {
					item.GetObjectKind().SetGroupVersionKind(schema.GroupVersionKind{})
					return nil
				}); err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(got, want, compactFields, cmpopts.EquateEmpty()); diff != "" {
					t.Fatalf("%s: fast path differs from decoding (-protobuf +decoded):\n%s", where, diff)
				}
				lm, err := meta.ListAccessor(got)
				if err != nil {
					t.Fatal(err)
				}
				if token = lm.GetContinue(); token == "" {
					break
				}
			}
		}
	}
}

// TestGetProtobufFastPathAnswersWhatDecodingAnswers: the same for one
// object: its bytes are the serializer's, its content the decoding path's,
// its ETag the object's version, and If-None-Match of it is 304.
func TestGetProtobufFastPathAnswersWhatDecodingAnswers(t *testing.T) {
	s := startServer(t)
	c := s.create(t, "default", "one", map[string]string{"app": "web"})
	c.Data = map[string]string{"b": "2", "a": "1"}
	s.put(t, c)
	codec := protobuf.NewSerializer(registry.Scheme, registry.Scheme)
	for _, path := range []string{nsPath + "/one", "/api/v1/namespaces/default"} {
		fast := s.do(t, http.MethodGet, path, nil, "Accept", "application/vnd.kubernetes.protobuf")
		if fast.Code != http.StatusOK || fast.Header.Get("Content-Type") != "application/vnd.kubernetes.protobuf" {
			t.Fatalf("%s: %d %q", path, fast.Code, fast.Header.Get("Content-Type"))
		}
		got, _, err := codec.Decode(fast.Body, nil, nil)
		if err != nil {
			t.Fatalf("%s: decode: %v", path, err)
		}
		var again bytes.Buffer
		if err := codec.Encode(got, &again); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(again.Bytes(), fast.Body) {
			t.Fatalf("%s: %d bytes; the serializer writes that object in %d other bytes", path, len(fast.Body), again.Len())
		}
		want, _ := registry.Scheme.New(got.GetObjectKind().GroupVersionKind())
		s.do(t, http.MethodGet, path+"?pretty=true", nil).decode(t, want)
		if diff := cmp.Diff(got, want, compactFields, cmpopts.EquateEmpty()); diff != "" {
			t.Fatalf("%s: fast path differs from decoding (-protobuf +decoded):\n%s", path, diff)
		}
		rv := want.(metav1.Object).GetResourceVersion()
		if tag := fast.Header.Get("ETag"); tag != `"`+rv+`"` {
			t.Errorf("%s: ETag %q; want %q", path, tag, `"`+rv+`"`)
		}
		if resp := s.do(t, http.MethodGet, path, nil, "Accept", "application/vnd.kubernetes.protobuf", "If-None-Match", `"`+rv+`"`); resp.Code != http.StatusNotModified || len(resp.Body) != 0 {
			t.Errorf("%s with If-None-Match of its version: %d %q; want 304, no body", path, resp.Code, resp.Body)
		}
	}
	if resp := s.do(t, http.MethodGet, nsPath+"/missing", nil, "Accept", "application/vnd.kubernetes.protobuf"); resp.Code != http.StatusNotFound {
		t.Errorf("a missing object in protobuf: %d; want 404", resp.Code)
	}
}
