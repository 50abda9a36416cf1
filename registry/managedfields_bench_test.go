package registry

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// BenchmarkTrackUpdate is what managedFields cost a replace of a 1 KiB
// ConfigMap: its field manager's Update of the stored object (one entry)
// and the new one.
//
//	go test ./registry -run '^$' -bench BenchmarkTrackUpdate
func BenchmarkTrackUpdate(b *testing.B) {
	s := &Store{Resource: ConfigMaps}
	s.fields = func() (*fieldManagers, error) { return newFieldManagers(ConfigMaps) }
	m, err := s.fields()
	if err != nil {
		b.Fatal(err)
	}
	s.fields = func() (*fieldManagers, error) { return m, nil }
	value := strings.Repeat("x", 1024)
	live := &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Name: "cm", Namespace: "ns", UID: "u", ResourceVersion: "5"}, Data: map[string]string{"v": value}}
	created, err := s.trackUpdate(nil, live.DeepCopy(), WriteOptions{FieldManager: "creator"})
	if err != nil {
		b.Fatal(err)
	}
	live.ManagedFields = created.GetManagedFields()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		next := live.DeepCopy()
		next.ManagedFields = nil
		next.Data = map[string]string{"v": value, "i": string(rune('a' + i%26))}
		if _, err := s.trackUpdate(live, next, WriteOptions{FieldManager: "updater"}); err != nil {
			b.Fatal(err)
		}
	}
}
