package apiserver_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestWatchAsTable: kubectl get -w watches with a Table Accept header; each
// event is then a one-row Table, with column definitions only in the first.
func TestWatchAsTable(t *testing.T) {
	s := startServer(t)
	c := s.create(t, "default", "a", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.URL+nsPath+"?watch=1&resourceVersion="+c.ResourceVersion, nil)
	req.Header.Set("Accept", kubectlTableAccept)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	s.create(t, "default", "b", nil)
	s.create(t, "default", "c", nil)
	dec := json.NewDecoder(resp.Body)
	for i, want := range []string{"b", "c"} {
		var ev struct {
			Type   string       `json:"type"`
			Object metav1.Table `json:"object"`
		}
		if err := dec.Decode(&ev); err != nil {
			t.Fatal(err)
		}
		if ev.Type != "ADDED" || ev.Object.Kind != "Table" || len(ev.Object.Rows) != 1 || ev.Object.Rows[0].Cells[0] != want {
			t.Fatalf("event %d: %s %s %+v; want ADDED as a one-row Table of %s", i, ev.Type, ev.Object.Kind, ev.Object.Rows, want)
		}
		if wantHeaders := i == 0; (len(ev.Object.ColumnDefinitions) > 0) != wantHeaders {
			t.Errorf("event %d: %d column definitions; want them only in the first event", i, len(ev.Object.ColumnDefinitions))
		}
	}
}
