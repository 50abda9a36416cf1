package apiserver_test

import (
	"net/http"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// kubectlTableAccept is what kubectl get sends.
const kubectlTableAccept = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"

func TestTablesHaveKubesColumns(t *testing.T) {
	s := startServer(t)
	s.create(t, "default", "a", nil)
	if resp := s.do(t, http.MethodPost, "/api/v1/namespaces/default/secrets", `{"metadata":{"name":"s"},"type":"example.com/x","stringData":{"a":"1","b":"2"}}`); resp.Code != http.StatusCreated {
		t.Fatalf("create secret: %d", resp.Code)
	}
	if resp := s.do(t, http.MethodPost, "/api/v1/namespaces/default/serviceaccounts", `{"metadata":{"name":"app"},"secrets":[{"name":"s"}]}`); resp.Code != http.StatusCreated {
		t.Fatalf("create serviceaccount: %d", resp.Code)
	}
	tests := []struct {
		path    string
		columns []string
		cells   []any // the first row without Age
	}{
		{nsPath, []string{"Name", "Data", "Age"}, []any{"a", float64(1)}},
		{nsPath + "/a", []string{"Name", "Data", "Age"}, []any{"a", float64(1)}},
		{"/api/v1/namespaces/default/secrets", []string{"Name", "Type", "Data", "Age"}, []any{"s", "example.com/x", float64(2)}},
		{"/api/v1/namespaces", []string{"Name", "Status", "Age"}, []any{"default", "Active"}},
		{"/apis/coordination.k8s.io/v1/namespaces/default/leases", []string{"Name", "Holder", "Age"}, nil},
		// kube 1.37 dropped Secrets.
		{"/api/v1/namespaces/default/serviceaccounts", []string{"Name", "Age"}, []any{"app"}},
	}
	for _, tc := range tests {
		resp := s.do(t, http.MethodGet, tc.path, nil, "Accept", kubectlTableAccept)
		var table metav1.Table
		resp.decode(t, &table)
		if resp.Code != http.StatusOK || table.Kind != "Table" || table.APIVersion != "meta.k8s.io/v1" || resp.Header.Get("Content-Type") != "application/json;as=Table;v=v1;g=meta.k8s.io" {
			t.Errorf("%s: %d %s %s, Content-Type %q; want a meta.k8s.io/v1 Table", tc.path, resp.Code, table.Kind, table.APIVersion, resp.Header.Get("Content-Type"))
			continue
		}
		var columns []string
		for _, c := range table.ColumnDefinitions {
			columns = append(columns, c.Name)
		}
		if diff := cmp.Diff(columns, tc.columns); diff != "" {
			t.Errorf("%s columns (-got +want):\n%s", tc.path, diff)
		}
		if tc.cells == nil {
			if len(table.Rows) != 0 {
				t.Errorf("%s: %d rows; want none", tc.path, len(table.Rows))
			}
			continue
		}
		if len(table.Rows) == 0 {
			t.Errorf("%s: no rows", tc.path)
			continue
		}
		row := table.Rows[0]
		if diff := cmp.Diff(row.Cells[:len(row.Cells)-1], tc.cells); diff != "" || row.Cells[len(row.Cells)-1] == "" {
			t.Errorf("%s first row (-got +want):\n%s (age %v)", tc.path, diff, row.Cells[len(row.Cells)-1])
		}
		if len(row.Object.Raw) == 0 {
			t.Errorf("%s: row without its object's metadata", tc.path)
		}
	}
	// includeObject=None leaves the objects out; without as=Table it is JSON.
	var table metav1.Table
	s.do(t, http.MethodGet, nsPath+"?includeObject=None", nil, "Accept", kubectlTableAccept).decode(t, &table)
	if len(table.Rows) != 1 || len(table.Rows[0].Object.Raw) != 0 {
		t.Errorf("includeObject=None: %+v; want one row without its object", table.Rows)
	}
	if resp := s.do(t, http.MethodGet, nsPath, nil, "Accept", "application/json"); resp.Header.Get("Content-Type") != "application/json" {
		t.Errorf("plain Accept: Content-Type %q; want application/json", resp.Header.Get("Content-Type"))
	}
}
