package serviceaccount_test

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/concord-dev/concord/etcdstore"
	"github.com/concord-dev/concord/etcdstore/etcdtest"
	"github.com/concord-dev/concord/registry"
	sacontroller "github.com/concord-dev/concord/registry/controller/serviceaccount"
)

// TestDefaultServiceAccounts: over a real etcd, the controller creates the
// default ServiceAccount of the namespaces that exist when it starts and of
// new ones, creates it again when it is deleted, and writes nothing to a
// terminating namespace.
func TestDefaultServiceAccounts(t *testing.T) {
	e := etcdtest.Start(t)
	stores := registry.NewStores(etcdstore.New(e.Client, "/registry"), registry.DefaultWatchConfig())
	catalog := registry.NewCatalog(stores) // wires the namespace guard of creates
	store := func(res *registry.Resource) *registry.Store {
		s, ok := catalog.Lookup(res.GroupVersion.Group, res.GroupVersion.Version, res.Plural)
		if !ok {
			t.Fatalf("no store of %s", res.Plural)
		}
		return s
	}
	namespaces, sas := store(registry.Namespaces), store(registry.ServiceAccounts)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := registry.EnsureSystemNamespaces(ctx, stores); err != nil {
		t.Fatal(err)
	}
	createNamespace := func(name string) {
		t.Helper()
		if _, err := namespaces.Create(ctx, "", &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, registry.WriteOptions{}); err != nil {
			t.Fatalf("create namespace %s: %v", name, err)
		}
	}
	createNamespace("before")
	// A namespace that started terminating, as a deletion leaves it when
	// it is interrupted.
	terminating := `{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"terminating","uid":"u1","deletionTimestamp":"2026-01-01T00:00:00Z"},"status":{"phase":"Terminating"}}`
	if _, err := e.Client.Put(ctx, "/registry/namespaces/terminating", terminating); err != nil {
		t.Fatal(err)
	}

	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		sacontroller.New(namespaces, sas, slog.New(slog.NewTextHandler(io.Discard, nil))).Run(runCtx)
	}()
	defer func() {
		stop()
		wg.Wait()
	}()

	waitDefault := func(ns string) *corev1.ServiceAccount {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			obj, err := sas.Get(ctx, ns, sacontroller.DefaultName)
			if err == nil {
				return obj.(*corev1.ServiceAccount)
			}
			if !apierrors.IsNotFound(err) || time.Now().After(deadline) {
				t.Fatalf("the default ServiceAccount of %s: %v", ns, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	for _, ns := range append(registry.SystemNamespaces, "before") {
		waitDefault(ns)
	}
	createNamespace("after")
	first := waitDefault("after")
	if _, err := sas.Delete(ctx, "after", sacontroller.DefaultName, &metav1.DeleteOptions{}, registry.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	if again := waitDefault("after"); again.UID == first.UID {
		t.Errorf("the default ServiceAccount of after has the deleted one's uid %s; want a new one", again.UID)
	}
	// By now the terminating namespace was seen (the watch's initial
	// events) long ago: it has no ServiceAccount.
	resp, err := e.Client.Get(ctx, "/registry/serviceaccounts/terminating/default")
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 0 {
		t.Errorf("a ServiceAccount was written to the terminating namespace: %s", resp.Kvs[0].Value)
	}
}
