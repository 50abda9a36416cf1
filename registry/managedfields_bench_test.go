package registry

import (
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// BenchmarkTrackUpdate is what managedFields cost a replace of a 1 KiB
// ConfigMap or custom object: its field manager's Update of the stored
// object (one entry) and the new one.
//
//	go test ./registry -run '^$' -bench BenchmarkTrackUpdate
func BenchmarkTrackUpdate(b *testing.B) {
	value := strings.Repeat("x", 1024)
	b.Run("configmap", func(b *testing.B) {
		live := &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
			ObjectMeta: metav1.ObjectMeta{Name: "cm", Namespace: "ns", UID: "u", ResourceVersion: "5"}, Data: map[string]string{"v": value}}
		benchTrackUpdate(b, ConfigMaps, live, func(i int) Object {
			next := live.DeepCopy()
			next.Data["i"] = strconv.Itoa(i)
			return next
		})
	})
	b.Run("widget", func(b *testing.B) {
		live := widget(b, `{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"w","namespace":"ns","uid":"u","resourceVersion":"5"},
			"spec":{"size":"small","replicas":1,"maxReplicas":10,"extra":{"note":"`+value+`"}}}`)
		benchTrackUpdate(b, widgetResource(b, "v1"), live, func(i int) Object {
			next := live.DeepCopy()
			if err := unstructured.SetNestedField(next.Object, int64(i%10), "spec", "replicas"); err != nil {
				b.Fatal(err)
			}
			return next
		})
	})
}

func benchTrackUpdate(b *testing.B, res *Resource, live Object, next func(i int) Object) {
	m, err := newFieldManagers(res)
	if err != nil {
		b.Fatal(err)
	}
	s := &Store{Resource: res, fields: func() (*fieldManagers, error) { return m, nil }}
	created, err := s.trackUpdate(nil, copyObject(live), WriteOptions{FieldManager: "creator"})
	if err != nil {
		b.Fatal(err)
	}
	live.SetManagedFields(created.GetManagedFields())
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		obj := next(i)
		obj.SetManagedFields(nil)
		if _, err := s.trackUpdate(live, obj, WriteOptions{FieldManager: "updater"}); err != nil {
			b.Fatal(err)
		}
	}
}
