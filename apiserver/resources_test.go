package apiserver_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

func TestNamespaceLifecycle(t *testing.T) {
	s := startServerWithOptions(t, serverOptions{namespaces: true})
	_, list := s.list(t, "/api/v1/namespaces", nil)
	var names []string
	for _, ns := range list.Items {
		names = append(names, ns.Name)
	}
	if diff := cmp.Diff(names, []string{"default", "kube-node-lease", "kube-public", "kube-system"}); diff != "" {
		t.Errorf("namespaces at start (-got +want):\n%s", diff)
	}

	resp := s.do(t, http.MethodPost, "/api/v1/namespaces", map[string]any{"metadata": map[string]string{"name": "team"}})
	var team corev1.Namespace
	resp.decode(t, &team)
	if resp.Code != http.StatusCreated || team.Status.Phase != corev1.NamespaceActive || team.Labels["kubernetes.io/metadata.name"] != "team" || team.Namespace != "" {
		t.Fatalf("create namespace: %d %+v", resp.Code, team)
	}
	if resp := s.do(t, http.MethodPost, "/api/v1/namespaces", map[string]any{"metadata": map[string]string{"name": "Not_A_Label"}}); resp.Code != http.StatusUnprocessableEntity {
		t.Errorf("invalid namespace name: %d; want 422", resp.Code)
	}

	resp = s.do(t, http.MethodPost, "/api/v1/namespaces/nope/configmaps", configMap("a", "", nil))
	if st := resp.status(t); resp.Code != http.StatusNotFound || st.Message != `namespaces "nope" not found` || st.Details.Kind != "namespaces" {
		t.Errorf("create in a missing namespace: %d %q %+v; want 404 for the namespace", resp.Code, st.Message, st.Details)
	}

	s.create(t, "team", "settings", nil)
	for _, obj := range []struct{ path, body string }{
		{"/api/v1/namespaces/team/secrets", `{"metadata":{"name":"token"},"stringData":{"k":"v"}}`},
		{"/apis/coordination.k8s.io/v1/namespaces/team/leases", `{"metadata":{"name":"lock"},"spec":{"holderIdentity":"a"}}`},
	} {
		if resp := s.do(t, http.MethodPost, obj.path, obj.body); resp.Code != http.StatusCreated {
			t.Fatalf("POST %s: %d %s", obj.path, resp.Code, resp.Body)
		}
	}
	if n := len(s.storedKeys(t, "/registry/")) - 6; n != 3 { // minus the five namespaces and the namespace controller's Lease
		t.Fatalf("%d objects stored in team; want 3", n)
	}

	if resp := s.do(t, http.MethodDelete, "/api/v1/namespaces/default", nil); resp.Code != http.StatusForbidden {
		t.Errorf("DELETE namespace default: %d; want 403", resp.Code)
	}
	// As kube answers it: the namespace, marked; the namespace controller
	// deletes its content, then it.
	resp = s.do(t, http.MethodDelete, "/api/v1/namespaces/team", nil)
	var marked corev1.Namespace
	resp.decode(t, &marked)
	if resp.Code != http.StatusOK || marked.UID != team.UID || marked.DeletionTimestamp == nil || marked.Status.Phase != corev1.NamespaceTerminating ||
		len(marked.Spec.Finalizers) != 1 || marked.Spec.Finalizers[0] != corev1.FinalizerKubernetes {
		t.Fatalf("DELETE namespace team: %d %s", resp.Code, resp.Body)
	}
	eventually(t, "namespace team gone", func() (bool, string) {
		resp := s.do(t, http.MethodGet, "/api/v1/namespaces/team", nil)
		return resp.Code == http.StatusNotFound, string(resp.Body)
	})
	for key := range s.storedKeys(t, "/registry/") {
		for _, gone := range []string{"/registry/namespaces/team", "/registry/configmaps/team/", "/registry/secrets/team/", "/registry/leases/team/"} {
			if len(key) >= len(gone) && key[:len(gone)] == gone {
				t.Errorf("key %s left after deleting namespace team", key)
			}
		}
	}
	if resp := s.do(t, http.MethodPost, "/api/v1/namespaces/team/configmaps", configMap("late", "", nil)); resp.Code != http.StatusNotFound {
		t.Errorf("create in the deleted namespace: %d; want 404", resp.Code)
	}
}

// TestTerminatingNamespaceRefusesContent: a namespace whose deletion has
// begun (left Terminating, as by a replica that stopped) takes no new
// objects; a DELETE answers it, and the namespace controller, started
// later, finishes the job.
func TestTerminatingNamespaceRefusesContent(t *testing.T) {
	s := startServer(t)
	s.namespace(t, "leaving")
	s.create(t, "leaving", "old", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	raw, err := s.Etcd.Client.Get(ctx, "/registry/namespaces/leaving")
	if err != nil || len(raw.Kvs) != 1 {
		t.Fatalf("read namespace: %v", err)
	}
	var ns corev1.Namespace
	if err := json.Unmarshal(raw.Kvs[0].Value, &ns); err != nil {
		t.Fatal(err)
	}
	now := metav1.Now()
	ns.DeletionTimestamp, ns.Status.Phase = &now, corev1.NamespaceTerminating
	value, _ := json.Marshal(&ns)
	if _, err := s.Etcd.Client.Put(ctx, "/registry/namespaces/leaving", string(value)); err != nil {
		t.Fatal(err)
	}
	resp := s.do(t, http.MethodPost, "/api/v1/namespaces/leaving/configmaps", configMap("new", "", nil))
	if st := resp.status(t); resp.Code != http.StatusForbidden || st.Message != `configmaps "new" is forbidden: unable to create new content in namespace leaving because it is being terminated` {
		t.Errorf("create in a terminating namespace: %d %q; want 403", resp.Code, st.Message)
	}
	resp = s.do(t, http.MethodDelete, "/api/v1/namespaces/leaving", nil)
	var again corev1.Namespace
	resp.decode(t, &again)
	if resp.Code != http.StatusOK || again.Status.Phase != corev1.NamespaceTerminating {
		t.Fatalf("DELETE of the terminating namespace: %d %s", resp.Code, resp.Body)
	}
	runNamespaceController(t, s.Catalog, serverOptions{logOut: io.Discard})
	eventually(t, "namespace leaving gone", func() (bool, string) {
		resp := s.do(t, http.MethodGet, "/api/v1/namespaces/leaving", nil)
		return resp.Code == http.StatusNotFound, string(resp.Body)
	})
	if keys := s.storedKeys(t, "/registry/configmaps/leaving/"); len(keys) != 0 {
		t.Errorf("objects left: %v", keys)
	}
}

// TestNamespaceFinalize: PUT /api/v1/namespaces/{name}/finalize replaces
// spec.finalizers as kube's finalize subresource does (the status kept),
// conditionally; it is update only, and a namespace being deleted that it
// leaves without finalizers is deleted.
func TestNamespaceFinalize(t *testing.T) {
	s := startServer(t)
	s.namespace(t, "fin")
	const path = "/api/v1/namespaces/fin/finalize"
	get := func() corev1.Namespace {
		t.Helper()
		var ns corev1.Namespace
		resp := s.do(t, http.MethodGet, "/api/v1/namespaces/fin", nil)
		resp.decode(t, &ns)
		return ns
	}
	for _, tc := range []struct {
		name, method string
		body         func() any
		code         int
	}{
		{"GET", http.MethodGet, func() any { return nil }, http.StatusMethodNotAllowed},
		{"PATCH", http.MethodPatch, func() any { return `{}` }, http.StatusMethodNotAllowed},
		{"without a resourceVersion", http.MethodPut, func() any {
			ns := get()
			ns.ResourceVersion = ""
			return ns
		}, http.StatusPreconditionRequired},
		{"a finalizer without a domain", http.MethodPut, func() any {
			ns := get()
			ns.Spec.Finalizers = []corev1.FinalizerName{"mine"}
			return ns
		}, http.StatusUnprocessableEntity},
	} {
		if resp := s.do(t, tc.method, path, tc.body()); resp.Code != tc.code {
			t.Errorf("%s: %d %s; want %d", tc.name, resp.Code, resp.Body, tc.code)
		}
	}
	ns := get()
	ns.Spec.Finalizers = []corev1.FinalizerName{"example.com/mine"}
	ns.Status.Phase = corev1.NamespaceTerminating // not finalize's to change
	resp := s.do(t, http.MethodPut, path, ns)
	var got corev1.Namespace
	resp.decode(t, &got)
	if resp.Code != http.StatusOK || len(got.Spec.Finalizers) != 1 || got.Spec.Finalizers[0] != "example.com/mine" || got.Status.Phase != corev1.NamespaceActive {
		t.Fatalf("finalize: %d %s", resp.Code, resp.Body)
	}
	if resp := s.do(t, http.MethodDelete, "/api/v1/namespaces/fin", nil); resp.Code != http.StatusOK {
		t.Fatalf("DELETE: %d %s", resp.Code, resp.Body)
	}
	ns = get()
	ns.Spec.Finalizers = nil
	if resp := s.do(t, http.MethodPut, path, ns); resp.Code != http.StatusOK {
		t.Fatalf("finalize the terminating namespace: %d %s", resp.Code, resp.Body)
	}
	if resp := s.do(t, http.MethodGet, "/api/v1/namespaces/fin", nil); resp.Code != http.StatusNotFound {
		t.Errorf("GET after the last finalizer was removed: %d; want 404", resp.Code)
	}
}

func TestSecrets(t *testing.T) {
	s := startServer(t)
	const path = "/api/v1/namespaces/default/secrets"
	resp := s.do(t, http.MethodPost, path, `{"metadata":{"name":"db"},"data":{"user":"YWRtaW4="},"stringData":{"password":"s3cret","user":"root"}}`)
	var created corev1.Secret
	resp.decode(t, &created)
	want := map[string][]byte{"user": []byte("root"), "password": []byte("s3cret")}
	if resp.Code != http.StatusCreated || created.Type != corev1.SecretTypeOpaque || !cmp.Equal(created.Data, want) || created.StringData != nil {
		t.Fatalf("create: %d type %q data %q stringData %v; want Opaque, stringData merged over data", resp.Code, created.Type, created.Data, created.StringData)
	}
	stored := s.storedKeys(t, "/registry/secrets/default/db")["/registry/secrets/default/db"]
	var raw map[string]any
	if err := json.Unmarshal([]byte(stored), &raw); err != nil || raw["stringData"] != nil || raw["data"].(map[string]any)["password"] != "czNjcmV0" {
		t.Errorf("stored secret %s: want data in base64 and no stringData", stored)
	}
	created.Type = corev1.SecretTypeBasicAuth
	if resp := s.do(t, http.MethodPut, path+"/db", &created); resp.Code != http.StatusUnprocessableEntity {
		t.Errorf("changing the type: %d; want 422 (type is immutable)", resp.Code)
	}
	if resp := s.do(t, http.MethodPost, path, `{"metadata":{"name":"tls"},"type":"kubernetes.io/tls","data":{"tls.crt":"eA=="}}`); resp.Code != http.StatusUnprocessableEntity {
		t.Errorf("a TLS secret without tls.key: %d; want 422", resp.Code)
	}
	if resp := s.do(t, http.MethodPost, path, `{"metadata":{"name":"bad"},"data":{"k":"not base64!"}}`); resp.Code != http.StatusBadRequest {
		t.Errorf("data that is not base64: %d; want 400", resp.Code)
	}
}

func TestLeasesWithClientGo(t *testing.T) {
	s := startServer(t)
	client, err := kubernetes.NewForConfig(&rest.Config{Host: s.URL})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	leases := client.CoordinationV1().Leases("kube-system")
	holder, duration := "a", int32(15)
	lease, err := leases.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "lock"},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &duration}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create lease: %v", err)
	}
	stale := lease.DeepCopy()
	other := "b"
	lease.Spec.HolderIdentity = &other
	if _, err := leases.Update(ctx, lease, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("take over: %v", err)
	}
	if _, err := leases.Update(ctx, stale, metav1.UpdateOptions{}); !apierrors.IsConflict(err) {
		t.Errorf("stale take-over: %v; want Conflict", err)
	}
	zero := int32(0)
	bad := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "bad"}, Spec: coordinationv1.LeaseSpec{LeaseDurationSeconds: &zero}}
	if _, err := leases.Create(ctx, bad, metav1.CreateOptions{}); !apierrors.IsInvalid(err) {
		t.Errorf("leaseDurationSeconds 0: %v; want Invalid", err)
	}
}
