package registry

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// TestNamespaceDeletion: as kube's namespace store, a DELETE marks the
// namespace and answers it (again at a second DELETE), keeps it while
// spec.finalizers remain, even through other updates, and the finalize
// write that removes the last one deletes it.
func TestNamespaceDeletion(t *testing.T) {
	f := newCatalogFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	namespaces, _ := f.catalog.Lookup("", "v1", "namespaces")
	created, err := namespaces.Create(ctx, "", &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team"}}, WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ns := created.(*corev1.Namespace); len(ns.Spec.Finalizers) != 1 || ns.Spec.Finalizers[0] != corev1.FinalizerKubernetes {
		t.Fatalf("spec.finalizers of a new namespace: %v; want [kubernetes]", ns.Spec.Finalizers)
	}
	stored := func() *corev1.Namespace {
		t.Helper()
		obj, err := namespaces.GetFromStorage(ctx, "", "team")
		if err != nil {
			t.Fatalf("get team: %v", err)
		}
		return obj.(*corev1.Namespace)
	}
	wrongUID := types.UID("not-it")
	for _, tc := range []struct {
		name string
		opts *metav1.DeleteOptions
		dry  bool
		want func(error) bool
	}{
		{"uid precondition", &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &wrongUID}}, false, apierrors.IsConflict},
		{"dry run", &metav1.DeleteOptions{}, true, func(err error) bool { return err == nil }},
	} {
		if _, err := namespaces.Delete(ctx, "", "team", tc.opts, WriteOptions{DryRun: tc.dry}); !tc.want(err) {
			t.Errorf("%s: %v", tc.name, err)
		}
		if stored().DeletionTimestamp != nil {
			t.Fatalf("%s marked the namespace", tc.name)
		}
	}

	orphan := metav1.DeletePropagationOrphan
	out, err := namespaces.Delete(ctx, "", "team", &metav1.DeleteOptions{PropagationPolicy: &orphan}, WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	marked, ok := out.(*corev1.Namespace)
	if !ok || marked.DeletionTimestamp == nil || marked.Status.Phase != corev1.NamespaceTerminating ||
		len(marked.Finalizers) != 1 || marked.Finalizers[0] != metav1.FinalizerOrphanDependents {
		t.Fatalf("DELETE answered %#v; want the namespace Terminating with the orphan finalizer", out)
	}
	if got := stored(); got.ResourceVersion != marked.ResourceVersion {
		t.Errorf("stored at %s; the answer says %s", got.ResourceVersion, marked.ResourceVersion)
	}
	again, err := namespaces.Delete(ctx, "", "team", &metav1.DeleteOptions{}, WriteOptions{})
	if err != nil || again.(*corev1.Namespace).ResourceVersion != marked.ResourceVersion {
		t.Fatalf("second DELETE: %v %#v; want the namespace unchanged", err, again)
	}

	// An update that removes the metadata finalizer leaves it held by
	// spec.finalizers.
	next := stored().DeepCopy()
	next.Finalizers = nil
	if _, _, err := namespaces.Update(ctx, "", "team", next, WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := stored(); len(got.Spec.Finalizers) != 1 || len(got.Finalizers) != 0 {
		t.Fatalf("after the update: %+v", got.ObjectMeta)
	}

	for _, tc := range []struct {
		name  string
		edit  func(ns *corev1.Namespace)
		conds WriteOptions
		want  func(error) bool
	}{
		{"without a resourceVersion", func(ns *corev1.Namespace) { ns.ResourceVersion = "" }, WriteOptions{}, isPreconditionRequired},
		{"a stale resourceVersion", func(ns *corev1.Namespace) { ns.ResourceVersion = "1" }, WriteOptions{}, apierrors.IsConflict},
		{"a finalizer name without a domain", func(ns *corev1.Namespace) { ns.Spec.Finalizers = []corev1.FinalizerName{"mine"} }, WriteOptions{}, apierrors.IsInvalid},
		{"another name", func(ns *corev1.Namespace) { ns.Name = "other" }, WriteOptions{}, apierrors.IsBadRequest},
		{"dry run", func(ns *corev1.Namespace) { ns.Spec.Finalizers = nil }, WriteOptions{DryRun: true}, func(err error) bool { return err == nil }},
	} {
		ns := stored().DeepCopy()
		tc.edit(ns)
		if _, err := namespaces.Finalize(ctx, "team", ns, tc.conds); !tc.want(err) {
			t.Errorf("finalize with %s: %v", tc.name, err)
		}
		if got := stored(); len(got.Spec.Finalizers) != 1 {
			t.Fatalf("finalize with %s changed spec.finalizers: %v", tc.name, got.Spec.Finalizers)
		}
	}
	configMaps, _ := f.catalog.Lookup("", "v1", "configmaps")
	if _, err := configMaps.Finalize(ctx, "x", &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x"}}, WriteOptions{}); !apierrors.IsMethodNotSupported(err) {
		t.Errorf("finalize a ConfigMap: %v; want 405", err)
	}

	ns := stored().DeepCopy()
	ns.Spec.Finalizers = nil
	ns.Status.Phase = corev1.NamespaceActive // the status is not finalize's
	if _, err := namespaces.Finalize(ctx, "team", ns, WriteOptions{FieldManager: "test"}); err != nil {
		t.Fatalf("finalize: %v", err)
	}
	if _, err := namespaces.GetFromStorage(ctx, "", "team"); !apierrors.IsNotFound(err) {
		t.Errorf("get team after it was finalized: %v; want NotFound", err)
	}
}

// TestFinalizedNamespaceDeletion: a namespace whose spec.finalizers were
// removed before it was deleted is marked by a first DELETE and deleted by
// the next, as kube does.
func TestFinalizedNamespaceDeletion(t *testing.T) {
	f := newCatalogFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	namespaces, _ := f.catalog.Lookup("", "v1", "namespaces")
	created, err := namespaces.Create(ctx, "", &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "bare"}}, WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ns := created.(*corev1.Namespace)
	ns.Spec.Finalizers = nil
	finalized, err := namespaces.Finalize(ctx, "bare", ns, WriteOptions{})
	if err != nil {
		t.Fatalf("finalize: %v", err)
	}
	if got := finalized.(*corev1.Namespace); len(got.Spec.Finalizers) != 0 || got.Status.Phase != corev1.NamespaceActive {
		t.Fatalf("finalized namespace: %+v", got)
	}
	if out, err := namespaces.Delete(ctx, "", "bare", &metav1.DeleteOptions{}, WriteOptions{}); err != nil || out.(*corev1.Namespace).DeletionTimestamp == nil {
		t.Fatalf("first DELETE: %v %#v; want the namespace marked", err, out)
	}
	out, err := namespaces.Delete(ctx, "", "bare", &metav1.DeleteOptions{}, WriteOptions{})
	if st, ok := out.(*metav1.Status); err != nil || !ok || st.Status != metav1.StatusSuccess {
		t.Fatalf("second DELETE: %v %#v; want Success", err, out)
	}
	if _, err := namespaces.GetFromStorage(ctx, "", "bare"); !apierrors.IsNotFound(err) {
		t.Errorf("get bare: %v; want NotFound", err)
	}
}

func isPreconditionRequired(err error) bool {
	var st apierrors.APIStatus
	return errors.As(err, &st) && st.Status().Code == http.StatusPreconditionRequired
}
