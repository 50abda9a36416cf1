package registry

import "testing"

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
