package registry

import (
	"bufio"
	"bytes"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestWithResourceVersion(t *testing.T) {
	tests := []struct{ in, want string }{
		{`{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a"},"data":{"k":"v"}}` + "\n",
			`{"kind":"ConfigMap","apiVersion":"v1","metadata":{"resourceVersion":"7","name":"a"},"data":{"k":"v"}}`},
		{`{"metadata":{}}`, `{"metadata":{"resourceVersion":"7"}}`},
		// A value or a nested key named metadata is not the object's.
		{`{"kind":"metadata","data":{"metadata":{"x":"\"metadata\":{"}},"metadata":{"name":"b"}}`,
			`{"kind":"metadata","data":{"metadata":{"x":"\"metadata\":{"}},"metadata":{"resourceVersion":"7","name":"b"}}`},
	}
	for _, tc := range tests {
		got, err := withResourceVersion([]byte(tc.in), 7)
		if err != nil || string(got) != tc.want {
			t.Errorf("withResourceVersion(%s) = %s, %v; want %s", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{`{"data":{"metadata":{}}}`, `[]`, `{"metadata":"x"}`} {
		if _, err := withResourceVersion([]byte(bad), 7); err == nil {
			t.Errorf("withResourceVersion(%s): no error; want one (no top-level metadata object)", bad)
		}
	}
}

// TestJSONItemWithoutTypeMeta: a built-in list's item is written without
// the kind and apiVersion its stored JSON starts with; a value that does
// not start with exactly them is not cut.
func TestJSONItemWithoutTypeMeta(t *testing.T) {
	prefix := typeMetaPrefix(schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"})
	item, err := newJSONItem([]byte(`{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a"},"data":{"k":"v"}}`+"\n"), 7)
	if err != nil {
		t.Fatal(err)
	}
	item, ok := item.withoutTypeMeta(prefix)
	const want = `{"metadata":{"resourceVersion":"7","name":"a"},"data":{"k":"v"}}`
	var written bytes.Buffer
	w := bufio.NewWriter(&written)
	if err := item.WriteJSON(w); err != nil || w.Flush() != nil {
		t.Fatal(err)
	}
	if !ok || written.String() != want || string(item.appendJSON(nil)) != want {
		t.Errorf("without type meta: %v, WriteJSON %s, appendJSON %s; want %s", ok, written.String(), item.appendJSON(nil), want)
	}
	for _, other := range []string{
		`{"apiVersion":"v1","kind":"ConfigMap","metadata":{}}`,
		`{"kind":"ConfigMapList","apiVersion":"v1","metadata":{}}`,
		`{"kind":"ConfigMap","apiVersion":"v1beta1","metadata":{}}`,
		`{"metadata":{},"kind":"ConfigMap","apiVersion":"v1","x":1}`,
	} {
		item, err := newJSONItem([]byte(other), 7)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := item.withoutTypeMeta(prefix); ok {
			t.Errorf("withoutTypeMeta(%s): cut; want it left as it is", other)
		}
	}
}
