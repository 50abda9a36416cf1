package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
)

// TestWatchOnOneReplicaSeesWritesThroughAnother: each replica fans out
// etcd's own watch, so a watcher on B sees, in order, what clients write
// through A.
func TestWatchOnOneReplicaSeesWritesThroughAnother(t *testing.T) {
	t.Parallel()
	replicas := startReplicas(t, 2)
	a, b := replicas[0], replicas[1]
	seed := doConfigMap(t, http.MethodPost, configMapsURL(a.url), newConfigMap("seed", map[string]string{"n": "0"}), http.StatusCreated)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, configMapsURL(b.url)+"?watch=1&resourceVersion="+seed.ResourceVersion, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("watch through B: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("watch through B: %d; want 200", resp.StatusCode)
	}

	var want []string
	created := doConfigMap(t, http.MethodPost, configMapsURL(a.url), newConfigMap("flags", map[string]string{"mode": "blue"}), http.StatusCreated)
	want = append(want, "ADDED flags@"+created.ResourceVersion)
	created.Data["mode"] = "green"
	updated := doConfigMap(t, http.MethodPut, configMapURL(a.url, "flags"), created, http.StatusOK)
	want = append(want, "MODIFIED flags@"+updated.ResourceVersion)
	if code, body := do(t, http.MethodDelete, configMapURL(a.url, "flags"), nil); code != http.StatusOK {
		t.Fatalf("DELETE through A: %d %s", code, body)
	}
	want = append(want, "DELETED flags")

	var got []string
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for len(got) < len(want) && sc.Scan() {
		var ev struct {
			Type   string           `json:"type"`
			Object corev1.ConfigMap `json:"object"`
		}
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("watch line %q: %v", sc.Text(), err)
		}
		line := ev.Type + " " + ev.Object.Name
		if ev.Type != "DELETED" {
			line += "@" + ev.Object.ResourceVersion
		}
		got = append(got, line)
	}
	if diff := cmp.Diff(got, want); diff != "" {
		t.Errorf("events on B for writes through A (-got +want):\n%s", diff)
	}
}
