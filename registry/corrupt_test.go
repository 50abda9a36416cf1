package registry

import (
	"context"
	"errors"
	"net/http"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// putRaw writes value at a ConfigMap's key straight into etcd.
func (f *cacheFixture) putRaw(t *testing.T, namespace, name, value string) int64 {
	t.Helper()
	resp, err := f.etcd.Client.Put(context.Background(), "/registry/configmaps/"+namespace+"/"+name, value)
	if err != nil {
		t.Fatalf("put %s/%s: %v", namespace, name, err)
	}
	return resp.Header.Revision
}

// TestReadCacheServesAroundACorruptValue: values that do not decode, loaded
// with the cache or arriving on its watch, fail only the reads that include
// them; the cache keeps serving, and keeps applying, everything else.
func TestReadCacheServesAroundACorruptValue(t *testing.T) {
	f := newCacheFixture(t)
	f.put(t, "a", "x", "0")
	f.put(t, "b", "y", "0")
	f.putRaw(t, "b", "loaded", "k8s\x00not an object")
	f.warm(t)
	ctx := context.Background()
	lists, gets := f.counted.lists.Load(), f.counted.gets.Load()

	check := func(when string) {
		t.Helper()
		if _, err := f.cached.Get(ctx, "a", "x"); err != nil {
			t.Errorf("%s: get a/x: %v", when, err)
		}
		if _, _, err := f.cached.GetJSON(ctx, "b", "y"); err != nil {
			t.Errorf("%s: get b/y as JSON: %v", when, err)
		}
		if got, _ := jsonList(t, f.cached, "a"); got == "" {
			t.Errorf("%s: list of a is empty", when)
		}
		if _, err := f.cached.List(ctx, "a", &metainternalversion.ListOptions{}); err != nil {
			t.Errorf("%s: decoded list of a: %v", when, err)
		}
		for _, ns := range []string{"b", ""} {
			_, err := f.cached.List(ctx, ns, &metainternalversion.ListOptions{})
			var status apierrors.APIStatus
			if !errors.As(err, &status) || status.Status().Code != http.StatusInternalServerError || status.Status().Reason != metav1.StatusReasonStoreReadError {
				t.Errorf("%s: list of %q: %v; want 500 StorageReadError", when, ns, err)
			}
		}
		_, err := f.cached.Get(ctx, "b", "loaded")
		var status apierrors.APIStatus
		if !errors.As(err, &status) || status.Status().Code != http.StatusInternalServerError || status.Status().Reason != metav1.StatusReasonInternalError {
			t.Errorf("%s: get b/loaded: %v; want 500 InternalError", when, err)
		}
	}
	check("loaded with the cache")
	// One more on the cache's watch, then a change after it.
	f.putRaw(t, "b", "watched", "{not json")
	f.put(t, "a", "x", "1")
	check("after one on the watch")
	obj, err := f.cached.Get(ctx, "a", "x")
	if err != nil || obj.GetLabels()["v"] != "1" {
		t.Errorf("get a/x after the change: %v, %v; want the change (v=1)", obj, err)
	}
	if n, m := f.counted.lists.Load()-lists, f.counted.gets.Load()-gets; n != 0 || m != 0 {
		t.Errorf("the cached store read etcd's ranges %d times and keys %d times; want 0 and 0 (all from the cache)", n, m)
	}
}
