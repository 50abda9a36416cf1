package admission

import (
	"context"
	"slices"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// TestConfigInformerReopened: when the watch opens again, a configuration
// deleted while none ran is dropped at Synced and its deletion told to
// the handlers, as an informer's relist does; the others are updates.
func TestConfigInformerReopened(t *testing.T) {
	i := newConfigInformer()
	var told []string
	if _, err := i.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { told = append(told, "add "+obj.(metav1.Object).GetName()) },
		UpdateFunc: func(_, obj any) { told = append(told, "update "+obj.(metav1.Object).GetName()) },
		DeleteFunc: func(obj any) { told = append(told, "delete "+obj.(metav1.Object).GetName()) },
	}); err != nil {
		t.Fatal(err)
	}
	config := func(name string) *admissionregistrationv1.ValidatingWebhookConfiguration {
		return &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: name}}
	}
	ctx := context.Background()
	step := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	step(i.opened(ctx))
	step(i.event(watch.Added, config("a")))
	step(i.event(watch.Added, config("b")))
	if i.HasSynced() {
		t.Fatal("synced before Synced")
	}
	step(i.resynced(ctx, 1))
	if !i.HasSynced() {
		t.Fatal("not synced after Synced")
	}
	step(i.opened(ctx))
	step(i.event(watch.Added, config("a")))
	step(i.resynced(ctx, 2))
	if want := []string{"add a", "add b", "update a", "delete b"}; !slices.Equal(told, want) {
		t.Fatalf("handlers told %q; want %q", told, want)
	}
	if keys := i.indexer.ListKeys(); !slices.Equal(keys, []string{"a"}) {
		t.Fatalf("holds %q; want [a]", keys)
	}
}
