package apiserver_test

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// contentTypes records the Content-Type of every request client-go sends.
type contentTypes struct {
	mu   sync.Mutex
	seen map[string]string // "METHOD" → Content-Type
	next http.RoundTripper
}

func (c *contentTypes) RoundTrip(req *http.Request) (*http.Response, error) {
	c.mu.Lock()
	if ct := req.Header.Get("Content-Type"); ct != "" {
		c.seen[req.Method] = ct
	}
	c.mu.Unlock()
	return c.next.RoundTrip(req)
}

// TestClientGoTypedClientWithDefaults uses client-go's typed clientset with
// its default configuration, which sends protobuf bodies and never falls
// back to JSON.
func TestClientGoTypedClientWithDefaults(t *testing.T) {
	s := startServer(t)
	recorder := &contentTypes{seen: map[string]string{}}
	cfg := &rest.Config{Host: s.URL, WrapTransport: func(rt http.RoundTripper) http.RoundTripper {
		recorder.next = rt
		return recorder
	}}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cms := client.CoreV1().ConfigMaps("default")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	created, err := cms.Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "flags", Labels: map[string]string{"app": "demo"}},
		Data:       map[string]string{"mode": "blue"},
		BinaryData: map[string][]byte{"blob": {0, 1, 2}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	if created.ResourceVersion == "" || created.UID == "" || created.Namespace != "default" {
		t.Errorf("Create returned rv %q uid %q namespace %q; want all set", created.ResourceVersion, created.UID, created.Namespace)
	}
	if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "flags"}}, metav1.CreateOptions{}); !apierrors.IsAlreadyExists(err) {
		t.Errorf("second Create = %v; want AlreadyExists", err)
	}

	got, err := cms.Get(ctx, "flags", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	if diff := cmp.Diff(got, created); diff != "" {
		t.Errorf("Get differs from Create's answer (-got +want):\n%s", diff)
	}

	stale := got.DeepCopy()
	got.Data["mode"] = "green"
	updated, err := cms.Update(ctx, got, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("Update: %v", err)
	}
	if updated.ResourceVersion == created.ResourceVersion || updated.Data["mode"] != "green" {
		t.Errorf("Update returned rv %q mode %q; want a new rv and green", updated.ResourceVersion, updated.Data["mode"])
	}

	stale.Data["mode"] = "red"
	if _, err := cms.Update(ctx, stale, metav1.UpdateOptions{}); !apierrors.IsConflict(err) {
		t.Errorf("stale Update = %v; want Conflict", err)
	}
	if cur, err := cms.Get(ctx, "flags", metav1.GetOptions{}); err != nil || cur.Data["mode"] != "green" {
		t.Errorf("after stale Update: %v, mode %q; want green kept", err, cur.Data["mode"])
	}

	list, err := cms.List(ctx, metav1.ListOptions{})
	if err != nil || len(list.Items) != 1 || list.ResourceVersion != updated.ResourceVersion {
		t.Errorf("List = %v, %d items at rv %q; want 1 item at rv %s", err, len(list.Items), list.ResourceVersion, updated.ResourceVersion)
	}

	wrongUID := metav1.NewUIDPreconditions("00000000-0000-4000-8000-000000000000")
	if err := cms.Delete(ctx, "flags", metav1.DeleteOptions{Preconditions: wrongUID}); !apierrors.IsConflict(err) {
		t.Errorf("Delete with a wrong uid precondition = %v; want Conflict", err)
	}
	if err := cms.Delete(ctx, "flags", metav1.DeleteOptions{Preconditions: metav1.NewUIDPreconditions(string(created.UID))}); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if _, err := cms.Get(ctx, "flags", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("Get after Delete = %v; want NotFound", err)
	}

	recorder.mu.Lock()
	defer recorder.mu.Unlock()
	for _, method := range []string{http.MethodPost, http.MethodPut, http.MethodDelete} {
		if ct := recorder.seen[method]; ct != "application/vnd.kubernetes.protobuf" {
			t.Errorf("client-go sent %s with Content-Type %q; want protobuf (the default this test must cover)", method, ct)
		}
	}
}
