package apiserver_test

import (
	"bytes"
	"context"
	"io"
	"mime"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// badInputCase is one request Concord must refuse with a Status, writing
// nothing to etcd.
type badInputCase struct {
	name   string
	method string
	path   string
	body   any
	header []string
	// send replaces method, path, body and header when the request needs
	// more than s.do offers (a body of unknown length).
	send func(t *testing.T) response
	// after runs once the row's own assertions are done.
	after func(t *testing.T)

	code     int
	reason   metav1.StatusReason
	message  string   // exact, when set
	prefix   string   // the message starts with it, when set
	contains []string // the message contains each
	details  *badInputDetails
	causes   []badInputCause // exactly these causes, in order, when set
}

// badInputDetails is what a row checks of Status.details.
type badInputDetails struct {
	Name string
	Kind string
}

// badInputCause is what a row checks of one of Status.details.causes; the
// message only when messageContains is set.
type badInputCause struct {
	Type            metav1.CauseType
	Field           string
	messageContains string
}

func TestBadInputIsRefusedWithStatusAndNothingStored(t *testing.T) {
	s := startServer(t)
	const ns = "/api/v1/namespaces/default/configmaps"

	// sendBody sends body as it is, with the Content-Length given (-1:
	// unknown, sent chunked), which s.do cannot.
	sendBody := func(t *testing.T, method, path string, body io.Reader, contentLength int64, contentType string) response {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, method, s.URL+path, body)
		if err != nil {
			t.Fatalf("new request: %v", err)
		}
		req.ContentLength = contentLength
		req.Header.Set("Content-Type", contentType)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s %s (Content-Length %d): %v", method, path, contentLength, err)
		}
		defer resp.Body.Close()
		data, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatalf("%s %s: read body: %v", method, path, err)
		}
		return response{Code: resp.StatusCode, Header: resp.Header, Body: data}
	}
	// etcdRevision is etcd's current revision: any write, even one that
	// stores the same bytes again, moves it.
	etcdRevision := func(t *testing.T) int64 {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		resp, err := s.Etcd.Client.Get(ctx, "/registry/")
		if err != nil {
			t.Fatalf("etcd get: %v", err)
		}
		return resp.Header.Revision
	}

	create := func(body string) metav1.ObjectMeta {
		t.Helper()
		resp := s.do(t, http.MethodPost, ns, body)
		if resp.Code != http.StatusCreated {
			t.Fatalf("POST %s %s: code %d; want 201: %s", ns, body, resp.Code, resp.Body)
		}
		var created struct{ Metadata metav1.ObjectMeta }
		resp.decode(t, &created)
		return created.Metadata
	}
	existing := create(`{"metadata":{"name":"existing"},"data":{"k":"v"}}`)
	frozen := create(`{"metadata":{"name":"frozen"},"immutable":true,"data":{"a":"1"}}`)
	if existing.ResourceVersion == "" || existing.ResourceVersion == "1" || existing.UID == "" {
		t.Fatalf("existing: resourceVersion %q, uid %q; want a resourceVersion other than 1 and a uid", existing.ResourceVersion, existing.UID)
	}
	wantStored := s.storedKeys(t, "/registry/")
	if n := len(s.storedKeys(t, "/registry/configmaps/")); n != 2 {
		t.Fatalf("etcd holds %d ConfigMaps after two creates; want 2: %v", n, wantStored)
	}
	wantRevision := etcdRevision(t)

	// cm is a ConfigMap body; rv and namespace are left out when empty.
	cm := func(name, namespace, rv string, data map[string]string) map[string]any {
		meta := map[string]any{}
		if name != "" {
			meta["name"] = name
		}
		if namespace != "" {
			meta["namespace"] = namespace
		}
		if rv != "" {
			meta["resourceVersion"] = rv
		}
		return map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data}
	}
	data := map[string]string{"k": "changed"}
	withUID := cm("existing", "", existing.ResourceVersion, data)
	withUID["metadata"].(map[string]any)["uid"] = "11111111-1111-4111-8111-111111111111"
	frozenChanged := cm("frozen", "", frozen.ResourceVersion, map[string]string{"a": "2"})
	frozenChanged["immutable"] = true
	deleteOptions := func(preconditions string) string {
		return `{"kind":"DeleteOptions","apiVersion":"v1","preconditions":` + preconditions + `}`
	}
	huge := bytes.Repeat([]byte("x"), 4<<20)
	unharmed := func(t *testing.T) {
		t.Helper()
		resp := s.do(t, http.MethodGet, ns+"/existing", nil)
		var got struct{ Metadata metav1.ObjectMeta }
		resp.decode(t, &got)
		if resp.Code != http.StatusOK || got.Metadata.ResourceVersion != existing.ResourceVersion {
			t.Errorf("GET %s/existing after a 413: code %d, resourceVersion %q; want 200, %q",
				ns, resp.Code, got.Metadata.ResourceVersion, existing.ResourceVersion)
		}
	}
	const (
		nsMismatch = "the namespace of the provided object does not match the namespace sent on the request"
		notFound   = "the server could not find the requested resource"
		badName    = "invalid resource name"
	)

	cases := []badInputCase{
		// 1-7: create and replace preconditions.
		{
			name: "01 POST with resourceVersion", method: http.MethodPost, path: ns,
			body: cm("new", "", "5", data),
			code: http.StatusBadRequest, reason: metav1.StatusReasonBadRequest,
			message: "create cannot set resourceVersion",
		},
		{
			name: "02 POST with another namespace", method: http.MethodPost, path: ns,
			body: cm("new", "other", "", data),
			code: http.StatusBadRequest, reason: metav1.StatusReasonBadRequest, message: nsMismatch,
		},
		{
			name: "03 PUT with another name", method: http.MethodPut, path: ns + "/existing",
			body: cm("other", "", existing.ResourceVersion, data),
			code: http.StatusBadRequest, reason: metav1.StatusReasonBadRequest,
			message: "the name of the object (other) does not match the name on the URL (existing)",
		},
		{
			name: "04 PUT with another namespace", method: http.MethodPut, path: ns + "/existing",
			body: cm("existing", "other", existing.ResourceVersion, data),
			code: http.StatusBadRequest, reason: metav1.StatusReasonBadRequest, message: nsMismatch,
		},
		{
			name: "05 PUT without resourceVersion", method: http.MethodPut, path: ns + "/existing",
			body: cm("existing", "", "", data),
			code: http.StatusPreconditionRequired, reason: "PreconditionRequired",
			contains: []string{"metadata.resourceVersion", "If-Match"},
		},
		{
			name: "06 PUT with a resourceVersion that is not a number", method: http.MethodPut, path: ns + "/existing",
			body: cm("existing", "", "abc", data),
			code: http.StatusBadRequest, reason: metav1.StatusReasonBadRequest,
		},
		{
			name: "07 PUT changing the uid", method: http.MethodPut, path: ns + "/existing",
			body: withUID,
			code: http.StatusConflict, reason: metav1.StatusReasonConflict,
			prefix: `Operation cannot be fulfilled on configmaps "existing": Precondition failed: UID in precondition`,
		},

		// 8-11: validation.
		{
			name: "08 POST with an invalid name", method: http.MethodPost, path: ns,
			body: cm("Bad_Name", "", "", data),
			code: http.StatusUnprocessableEntity, reason: metav1.StatusReasonInvalid,
			prefix:  `ConfigMap "Bad_Name" is invalid: metadata.name: Invalid value: "Bad_Name"`,
			details: &badInputDetails{Name: "Bad_Name", Kind: "ConfigMap"},
			causes:  []badInputCause{{Type: metav1.CauseTypeFieldValueInvalid, Field: "metadata.name"}},
		},
		{
			name: "09 POST with an invalid data key", method: http.MethodPost, path: ns,
			body: cm("badkey", "", "", map[string]string{"bad key!": "v"}),
			code: http.StatusUnprocessableEntity, reason: metav1.StatusReasonInvalid,
			details: &badInputDetails{Name: "badkey", Kind: "ConfigMap"},
			causes:  []badInputCause{{Type: metav1.CauseTypeFieldValueInvalid, Field: "data[bad key!]"}},
		},
		{
			name: "10 POST with more than 1 MiB of data", method: http.MethodPost, path: ns,
			body: cm("big", "", "", map[string]string{"big": strings.Repeat("x", 1<<20+10)}),
			code: http.StatusUnprocessableEntity, reason: metav1.StatusReasonInvalid,
			prefix:  `ConfigMap "big" is invalid`,
			details: &badInputDetails{Name: "big", Kind: "ConfigMap"},
		},
		{
			name: "11 POST without a name", method: http.MethodPost, path: ns,
			body: `{"data":{"k":"v"}}`,
			code: http.StatusUnprocessableEntity, reason: metav1.StatusReasonInvalid,
			causes: []badInputCause{{Type: metav1.CauseTypeFieldValueRequired, Field: "metadata.name"}},
		},

		// 12-19: bodies that cannot be read as a ConfigMap.
		{
			name: "12 POST malformed JSON", method: http.MethodPost, path: ns,
			body: `{"metadata": {`,
			code: http.StatusBadRequest, reason: metav1.StatusReasonBadRequest,
		},
		{
			name: "13 POST a JSON array", method: http.MethodPost, path: ns,
			body: `[1,2,3]`,
			code: http.StatusBadRequest, reason: metav1.StatusReasonBadRequest,
		},
		{
			name: "14 POST a Secret", method: http.MethodPost, path: ns,
			body: `{"apiVersion":"v1","kind":"Secret","metadata":{"name":"s"}}`,
			code: http.StatusBadRequest, reason: metav1.StatusReasonBadRequest,
			contains: []string{"cannot be handled as a ConfigMap"},
		},
		{
			name: "15 POST an unknown kind", method: http.MethodPost, path: ns,
			body: `{"apiVersion":"v1","kind":"Nonsense","metadata":{"name":"s"}}`,
			code: http.StatusBadRequest, reason: metav1.StatusReasonBadRequest,
		},
		{
			name: "15a POST another version", method: http.MethodPost, path: ns,
			body: `{"apiVersion":"v2","kind":"ConfigMap","metadata":{"name":"s"}}`,
			code: http.StatusBadRequest, reason: metav1.StatusReasonBadRequest,
			contains: []string{`ConfigMap in version "v2" cannot be handled as a ConfigMap`},
		},
		{
			name: "15b POST an apiVersion that is not one", method: http.MethodPost, path: ns,
			body: `{"apiVersion":"a/b/c","kind":"ConfigMap","metadata":{"name":"s"}}`,
			code: http.StatusBadRequest, reason: metav1.StatusReasonBadRequest,
			contains: []string{"a/b/c"},
		},
		{
			name: "15c POST JSON null", method: http.MethodPost, path: ns,
			body: `null`,
			code: http.StatusUnprocessableEntity, reason: metav1.StatusReasonInvalid,
		},
		{
			name: "16 POST text/plain", method: http.MethodPost, path: ns,
			body: cm("plain", "", "", data), header: []string{"Content-Type", "text/plain"},
			code: http.StatusUnsupportedMediaType, reason: metav1.StatusReasonUnsupportedMediaType,
			prefix: "the body of the request was in an unknown format - accepted media types include: application/json",
		},
		{
			name: "17 POST a form as curl -d sends it", method: http.MethodPost, path: ns,
			body: "metadata.name=form", header: []string{"Content-Type", "application/x-www-form-urlencoded"},
			code: http.StatusUnsupportedMediaType, reason: metav1.StatusReasonUnsupportedMediaType,
		},
		{
			name: "18a POST 4 MiB with Content-Length",
			send: func(t *testing.T) response {
				return sendBody(t, http.MethodPost, ns, bytes.NewReader(huge), int64(len(huge)), "application/json")
			},
			after: unharmed,
			code:  http.StatusRequestEntityTooLarge, reason: metav1.StatusReasonRequestEntityTooLarge,
			message: "Request entity too large: limit is 3145728",
		},
		{
			name: "18b POST 4 MiB chunked",
			send: func(t *testing.T) response {
				// MultiReader hides the length: the body goes out chunked.
				return sendBody(t, http.MethodPost, ns, io.MultiReader(bytes.NewReader(huge)), -1, "application/json")
			},
			after: unharmed,
			code:  http.StatusRequestEntityTooLarge, reason: metav1.StatusReasonRequestEntityTooLarge,
			message: "Request entity too large: limit is 3145728",
		},
		{
			name: "19 POST protobuf garbage", method: http.MethodPost, path: ns,
			body: "not protobuf", header: []string{"Content-Type", "application/vnd.kubernetes.protobuf"},
			code: http.StatusBadRequest, reason: metav1.StatusReasonBadRequest,
		},

		// 20-22: paths and methods not served.
		{
			name: "20a GET an unknown resource", method: http.MethodGet, path: "/api/v1/namespaces/default/nonsense",
			code: http.StatusNotFound, reason: metav1.StatusReasonNotFound, message: notFound,
		},
		{
			name: "20b GET an unknown path", method: http.MethodGet, path: "/totally/unknown",
			code: http.StatusNotFound, reason: metav1.StatusReasonNotFound, message: notFound,
		},
		{
			name: "21a PATCH with a JSON body that is no patch type", method: http.MethodPatch, path: ns + "/existing",
			body: `{"data":{"k":"patched"}}`, header: []string{"Content-Type", "application/json"},
			code: http.StatusUnsupportedMediaType, reason: metav1.StatusReasonUnsupportedMediaType,
			message: "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json, application/apply-patch+yaml",
		},
		{
			name: "21b server-side apply without a fieldManager", method: http.MethodPatch, path: ns + "/existing",
			body: `{"data":{"k":"patched"}}`, header: []string{"Content-Type", "application/apply-patch+yaml"},
			code: http.StatusUnprocessableEntity, reason: metav1.StatusReasonInvalid,
			message: `PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: is required for apply patch`,
		},
		{
			name: "21c JSON patch whose test fails", method: http.MethodPatch, path: ns + "/existing",
			body:   `[{"op":"test","path":"/data/k","value":"other"},{"op":"replace","path":"/data/k","value":"patched"}]`,
			header: []string{"Content-Type", "application/json-patch+json"},
			code:   http.StatusUnprocessableEntity, reason: metav1.StatusReasonInvalid,
			prefix: "the JSON patch does not apply: ",
		},
		{
			name: "21d malformed JSON patch", method: http.MethodPatch, path: ns + "/existing",
			body: `{"op":"add"}`, header: []string{"Content-Type", "application/json-patch+json"},
			code: http.StatusBadRequest, reason: metav1.StatusReasonBadRequest,
		},
		{
			name: "21e patch that renames the object", method: http.MethodPatch, path: ns + "/existing",
			body: `{"metadata":{"name":"renamed"}}`, header: []string{"Content-Type", "application/merge-patch+json"},
			code: http.StatusUnprocessableEntity, reason: metav1.StatusReasonInvalid,
			message: `ConfigMap "renamed" is invalid: metadata.name: Invalid value: "renamed": field is immutable`,
		},
		{
			name: "21f patch with a stale resourceVersion", method: http.MethodPatch, path: ns + "/existing",
			body: `{"metadata":{"resourceVersion":"1"},"data":{"k":"patched"}}`, header: []string{"Content-Type", "application/merge-patch+json"},
			code: http.StatusConflict, reason: metav1.StatusReasonConflict,
		},
		{
			name: "21g PATCH of a missing object", method: http.MethodPatch, path: ns + "/missing",
			body: `{"data":{"k":"patched"}}`, header: []string{"Content-Type", "application/merge-patch+json"},
			code: http.StatusNotFound, reason: metav1.StatusReasonNotFound,
		},
		{
			name: "22b DELETE on the namespaces collection", method: http.MethodDelete, path: "/api/v1/namespaces",
			code: http.StatusMethodNotAllowed, reason: metav1.StatusReasonMethodNotAllowed,
			message: `deletecollection is not supported on resources of kind "namespaces"`,
		},
		{
			name: "22 POST to all namespaces", method: http.MethodPost, path: "/api/v1/configmaps",
			body: cm("everywhere", "default", "", data),
			code: http.StatusMethodNotAllowed, reason: metav1.StatusReasonMethodNotAllowed,
		},

		// 23: names that could escape the key space.
		{
			name: "23a GET ..", method: http.MethodGet, path: ns + "/..",
			code: http.StatusBadRequest, reason: metav1.StatusReasonBadRequest, contains: []string{badName},
		},
		{
			name: "23b PUT ..", method: http.MethodPut, path: ns + "/..",
			body: cm("..", "", existing.ResourceVersion, data),
			code: http.StatusBadRequest, reason: metav1.StatusReasonBadRequest, contains: []string{badName},
		},
		{
			name: "23c DELETE ..", method: http.MethodDelete, path: ns + "/..",
			code: http.StatusBadRequest, reason: metav1.StatusReasonBadRequest, contains: []string{badName},
		},
		{
			name: "23d GET .", method: http.MethodGet, path: ns + "/.",
			code: http.StatusBadRequest, reason: metav1.StatusReasonBadRequest, contains: []string{badName},
		},
		{
			name: "23e PUT .", method: http.MethodPut, path: ns + "/.",
			body: cm(".", "", existing.ResourceVersion, data),
			code: http.StatusBadRequest, reason: metav1.StatusReasonBadRequest, contains: []string{badName},
		},
		{
			name: "23f DELETE .", method: http.MethodDelete, path: ns + "/.",
			code: http.StatusBadRequest, reason: metav1.StatusReasonBadRequest, contains: []string{badName},
		},
		{
			name: "23g GET an escaped slash", method: http.MethodGet, path: ns + "/a%2Fb",
			code: http.StatusNotFound, reason: metav1.StatusReasonNotFound,
		},
		{
			name: "23h GET in namespace ..", method: http.MethodGet, path: "/api/v1/namespaces/../configmaps/x",
			code: http.StatusBadRequest, reason: metav1.StatusReasonBadRequest, contains: []string{badName},
		},
		{
			name: "23i POST named ..", method: http.MethodPost, path: ns,
			body: cm("..", "", "", data),
			code: http.StatusUnprocessableEntity, reason: metav1.StatusReasonInvalid,
			causes: []badInputCause{{Type: metav1.CauseTypeFieldValueInvalid, Field: "metadata.name"}},
		},

		// 24-27: missing objects and delete preconditions.
		{
			name: "24 GET missing", method: http.MethodGet, path: ns + "/missing",
			code: http.StatusNotFound, reason: metav1.StatusReasonNotFound,
			message: `configmaps "missing" not found`,
			details: &badInputDetails{Name: "missing", Kind: "configmaps"},
		},
		{
			name: "25 PUT missing", method: http.MethodPut, path: ns + "/missing",
			body: cm("missing", "", "1", data),
			code: http.StatusNotFound, reason: metav1.StatusReasonNotFound,
			message: `configmaps "missing" not found`,
			details: &badInputDetails{Name: "missing", Kind: "configmaps"},
		},
		{
			name: "26 DELETE missing", method: http.MethodDelete, path: ns + "/missing",
			code: http.StatusNotFound, reason: metav1.StatusReasonNotFound,
			message: `configmaps "missing" not found`,
			details: &badInputDetails{Name: "missing", Kind: "configmaps"},
		},
		{
			name: "27a DELETE with a stale resourceVersion precondition", method: http.MethodDelete, path: ns + "/existing",
			body: deleteOptions(`{"resourceVersion":"1"}`),
			code: http.StatusConflict, reason: metav1.StatusReasonConflict,
			contains: []string{"Precondition failed: ResourceVersion in precondition"},
			details:  &badInputDetails{Name: "existing", Kind: "configmaps"},
		},
		{
			name: "27b DELETE with a wrong uid precondition", method: http.MethodDelete, path: ns + "/existing",
			body: deleteOptions(`{"uid":"11111111-1111-4111-8111-111111111111"}`),
			code: http.StatusConflict, reason: metav1.StatusReasonConflict,
			contains: []string{"Precondition failed: UID in precondition"},
			details:  &badInputDetails{Name: "existing", Kind: "configmaps"},
		},

		// 28-29: negotiation and query parameters.
		{
			name: "28 GET accepting only XML", method: http.MethodGet, path: ns,
			header: []string{"Accept", "application/xml"},
			code:   http.StatusNotAcceptable, reason: metav1.StatusReasonNotAcceptable,
			prefix: "only the following media types are accepted",
		},
		{
			name: "29a GET with a malformed labelSelector", method: http.MethodGet, path: ns + "?labelSelector=a%3D%3D%3Db",
			code: http.StatusBadRequest, reason: metav1.StatusReasonBadRequest,
		},
		{
			name: "29d GET with an unknown fieldSelector field", method: http.MethodGet, path: ns + "?fieldSelector=data.k%3Dv",
			code: http.StatusBadRequest, reason: metav1.StatusReasonBadRequest,
			message: `"data.k" is not a known field selector: only "metadata.name", "metadata.namespace"`,
		},
		{
			name: "29b watch with resourceVersionMatch but no sendInitialEvents", method: http.MethodGet,
			path: ns + "?watch=true&resourceVersion=1&resourceVersionMatch=NotOlderThan",
			code: http.StatusUnprocessableEntity, reason: metav1.StatusReasonInvalid,
			message: `ListOptions.meta.k8s.io "" is invalid: resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided`,
		},
		{
			name: "29c POST with an unknown dryRun value", method: http.MethodPost, path: ns + "?dryRun=Partial",
			body: cm("dry", "", "", data),
			code: http.StatusUnprocessableEntity, reason: metav1.StatusReasonInvalid,
			message: `CreateOptions.meta.k8s.io "" is invalid: dryRun: Unsupported value: "Partial": supported values: "All"`,
		},
		{
			name: "29e POST with an unknown field under fieldValidation=Strict", method: http.MethodPost, path: ns + "?fieldValidation=Strict",
			body: `{"metadata":{"name":"strict"},"spec":{"x":1}}`,
			code: http.StatusBadRequest, reason: metav1.StatusReasonBadRequest,
			message: `strict decoding error: unknown field "spec"`,
		},
		{
			name: "29f PATCH leaving an unknown field under fieldValidation=Strict", method: http.MethodPatch, path: ns + "/existing?fieldValidation=Strict",
			body: `{"spec":{"x":1}}`, header: []string{"Content-Type", "application/merge-patch+json"},
			code: http.StatusBadRequest, reason: metav1.StatusReasonBadRequest,
			prefix: `strict decoding error: unknown field "spec"`,
		},
		{
			name: "29h fieldManager over 128 characters", method: http.MethodPost, path: ns + "?fieldManager=" + strings.Repeat("m", 129),
			body: cm("fm", "", "", data),
			code: http.StatusUnprocessableEntity, reason: metav1.StatusReasonInvalid,
			prefix: `CreateOptions.meta.k8s.io "" is invalid: fieldManager: Too long`,
		},
		{
			name: "29i fieldManager with a control character", method: http.MethodPatch, path: ns + "/existing?fieldManager=a%0Ab",
			body: `{"data":{"k":"x"}}`, header: []string{"Content-Type", "application/merge-patch+json"},
			code: http.StatusUnprocessableEntity, reason: metav1.StatusReasonInvalid,
			prefix: `PatchOptions.meta.k8s.io "" is invalid: fieldManager: Invalid value`,
		},
		{
			name: "29g an unknown fieldValidation value", method: http.MethodPost, path: ns + "?fieldValidation=Loose",
			body: cm("fv", "", "", data),
			code: http.StatusUnprocessableEntity, reason: metav1.StatusReasonInvalid,
		},

		// 30: an immutable ConfigMap keeps its data.
		{
			name: "30 PUT changing an immutable ConfigMap", method: http.MethodPut, path: ns + "/frozen",
			body: frozenChanged,
			code: http.StatusUnprocessableEntity, reason: metav1.StatusReasonInvalid,
			details: &badInputDetails{Name: "frozen", Kind: "ConfigMap"},
			causes: []badInputCause{{
				Type: metav1.CauseTypeForbidden, Field: "data",
				messageContains: "field is immutable when `immutable` is set",
			}},
		},
	}

	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var resp response
			if tc.send != nil {
				resp = tc.send(t)
			} else {
				resp = s.do(t, tc.method, tc.path, tc.body, tc.header...)
			}
			request := tc.name
			if tc.method != "" {
				request = tc.method + " " + tc.path
			}
			// Checked first: a body that is not a Status stops the row.
			if diff := cmp.Diff(s.storedKeys(t, "/registry/"), wantStored); diff != "" {
				t.Errorf("%s changed etcd (-got +want):\n%s", request, diff)
			}
			if got := etcdRevision(t); got != wantRevision {
				t.Errorf("%s: etcd revision %d; want %d (nothing written)", request, got, wantRevision)
			}
			if resp.Code != tc.code {
				t.Errorf("%s: code %d; want %d: %s", request, resp.Code, tc.code, resp.Body)
			}
			if mediaType, _, err := mime.ParseMediaType(resp.Header.Get("Content-Type")); err != nil || mediaType != "application/json" {
				t.Errorf("%s: Content-Type %q; want application/json", request, resp.Header.Get("Content-Type"))
			}
			st := resp.status(t)
			if st.Status != metav1.StatusFailure {
				t.Errorf("%s: status %q; want %q", request, st.Status, metav1.StatusFailure)
			}
			if st.Reason != tc.reason {
				t.Errorf("%s: reason %q; want %q", request, st.Reason, tc.reason)
			}
			if tc.message != "" && st.Message != tc.message {
				t.Errorf("%s: message %q; want %q", request, st.Message, tc.message)
			}
			if !strings.HasPrefix(st.Message, tc.prefix) {
				t.Errorf("%s: message %q; want it to start with %q", request, st.Message, tc.prefix)
			}
			for _, sub := range tc.contains {
				if !strings.Contains(st.Message, sub) {
					t.Errorf("%s: message %q; want it to contain %q", request, st.Message, sub)
				}
			}
			var details metav1.StatusDetails
			if st.Details != nil {
				details = *st.Details
			}
			if tc.details != nil {
				got := badInputDetails{Name: details.Name, Kind: details.Kind}
				if diff := cmp.Diff(got, *tc.details); diff != "" {
					t.Errorf("%s: details (-got +want):\n%s", request, diff)
				}
			}
			if tc.causes != nil {
				got := make([]badInputCause, len(details.Causes))
				for i, c := range details.Causes {
					got[i] = badInputCause{Type: c.Type, Field: c.Field}
				}
				want := make([]badInputCause, len(tc.causes))
				for i, c := range tc.causes {
					want[i] = badInputCause{Type: c.Type, Field: c.Field}
				}
				if diff := cmp.Diff(got, want, cmp.AllowUnexported(badInputCause{})); diff != "" {
					t.Errorf("%s: causes (-got +want):\n%s\nall: %+v", request, diff, details.Causes)
				} else {
					for i, c := range tc.causes {
						if !strings.Contains(details.Causes[i].Message, c.messageContains) {
							t.Errorf("%s: cause %s message %q; want it to contain %q", request, c.Field, details.Causes[i].Message, c.messageContains)
						}
					}
				}
			}

			if tc.after != nil {
				tc.after(t)
			}
		})
	}
}
