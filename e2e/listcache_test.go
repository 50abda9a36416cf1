package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// etcdConfigMapLists reads, from a replica's /metrics, how many ranges of
// ConfigMaps it has read from etcd.
func etcdConfigMapLists(t *testing.T, base string) int {
	t.Helper()
	code, body := do(t, http.MethodGet, base+"/metrics", nil)
	if code != http.StatusOK {
		t.Fatalf("GET /metrics: %d", code)
	}
	m := regexp.MustCompile(`(?m)^etcd_request_duration_seconds_count\{group="",operation="list",resource="configmaps"\} (\d+)$`).FindSubmatch(body)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(string(m[1]))
	return n
}

// TestListFromCacheSeesEveryAcknowledgedWrite: replica B answers full lists
// from its cache. Writers on replica A create, replace and delete their own
// ConfigMaps and move etcd's revision with Secrets; right after each
// acknowledged write, a list through B must show it, at a resourceVersion
// no older than the write — without B reading the range from etcd.
func TestListFromCacheSeesEveryAcknowledgedWrite(t *testing.T) {
	t.Parallel()
	replicas := startReplicas(t, 2)
	a, b := replicas[0].url, replicas[1].url
	listB := func(t *testing.T) *corev1.ConfigMapList {
		code, body := do(t, http.MethodGet, configMapsURL(b), nil)
		if code != http.StatusOK {
			t.Fatalf("list through B: %d %s", code, body)
		}
		var list corev1.ConfigMapList
		if err := json.Unmarshal(body, &list); err != nil {
			t.Fatal(err)
		}
		return &list
	}
	// The first list starts B's cache; wait until B serves from it.
	deadline := time.Now().Add(10 * time.Second)
	for {
		before := etcdConfigMapLists(t, b)
		listB(t)
		if etcdConfigMapLists(t, b) == before {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("replica B still reads every list from etcd after 10s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	rangesBefore := etcdConfigMapLists(t, b)

	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	const writers, rounds = 4, 15
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- listWriter(ctx, t, a, b, w, rounds)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if n := etcdConfigMapLists(t, b) - rangesBefore; n != 0 {
		t.Errorf("replica B read ConfigMap ranges from etcd %d times during the run; want every list from its cache", n)
	}
}

// listWriter is one writer of TestListFromCacheSeesEveryAcknowledgedWrite.
func listWriter(ctx context.Context, t *testing.T, a, b string, w, rounds int) error {
	// check lists through B: the list must be at minRV or later, and name
	// listed at exactly rv, or absent.
	check := func(step, name string, minRV, rv int, present bool) error {
		code, body, err := request(ctx, http.MethodGet, configMapsURL(b), nil)
		if err != nil || code != http.StatusOK {
			return fmt.Errorf("%s: list through B: %d %v %s", step, code, err, body)
		}
		var list corev1.ConfigMapList
		if err := json.Unmarshal(body, &list); err != nil {
			return err
		}
		if listRV, _ := strconv.Atoi(list.ResourceVersion); listRV < minRV {
			return fmt.Errorf("%s: list through B at resourceVersion %s, older than the write at %d", step, list.ResourceVersion, minRV)
		}
		for _, cm := range list.Items {
			if cm.Name != name {
				continue
			}
			if !present {
				return fmt.Errorf("%s: %s deleted at %d, still listed at %s", step, name, rv, cm.ResourceVersion)
			}
			if got, _ := strconv.Atoi(cm.ResourceVersion); got != rv {
				return fmt.Errorf("%s: %s listed at %s; want the write's %d (only this writer writes it)", step, name, cm.ResourceVersion, rv)
			}
			return nil
		}
		if present {
			return fmt.Errorf("%s: %s written at %d, missing from the list at %s", step, name, rv, list.ResourceVersion)
		}
		return nil
	}
	rvOf := func(body []byte) int {
		var meta struct {
			Metadata struct{ ResourceVersion string } `json:"metadata"`
		}
		_ = json.Unmarshal(body, &meta)
		n, _ := strconv.Atoi(meta.Metadata.ResourceVersion)
		return n
	}
	for i := range rounds {
		name := fmt.Sprintf("w%d-%d", w, i)
		code, body, err := request(ctx, http.MethodPost, configMapsURL(a), newConfigMap(name, map[string]string{"i": "0"}))
		if err != nil || code != http.StatusCreated {
			return fmt.Errorf("create %s through A: %d %v %s", name, code, err, body)
		}
		created := rvOf(body)
		if err := check("after create", name, created, created, true); err != nil {
			return err
		}
		cm := newConfigMap(name, map[string]string{"i": "1"})
		cm.ResourceVersion = strconv.Itoa(created)
		code, body, err = request(ctx, http.MethodPut, configMapURL(a, name), cm)
		if err != nil || code != http.StatusOK {
			return fmt.Errorf("replace %s through A: %d %v %s", name, code, err, body)
		}
		replaced := rvOf(body)
		if err := check("after replace", name, replaced, replaced, true); err != nil {
			return err
		}
		// Another resource moves etcd's revision: B's cache of ConfigMaps
		// only learns that it is current from etcd's progress report.
		secret := map[string]any{"metadata": map[string]string{"name": name}, "stringData": map[string]string{"k": "v"}}
		code, body, err = request(ctx, http.MethodPost, a+"/api/v1/namespaces/default/secrets", secret)
		if err != nil || code != http.StatusCreated {
			return fmt.Errorf("create secret %s through A: %d %v %s", name, code, err, body)
		}
		if err := check("after a Secret", name, rvOf(body), replaced, true); err != nil {
			return err
		}
		secretRV := rvOf(body)
		code, body, err = request(ctx, http.MethodDelete, configMapURL(a, name), nil)
		if err != nil || code != http.StatusOK {
			return fmt.Errorf("delete %s through A: %d %v %s", name, code, err, body)
		}
		if err := check("after delete", name, secretRV+1, 0, false); err != nil {
			return err
		}
	}
	return nil
}
