package e2e

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/concord-dev/concord/etcdstore/etcdtest"
)

// TestHTTP2WatchesWaitOnSmallStacks: client-go's watches (HTTP/2 over TLS)
// on the real binary get every event, in order, and wait on 4 KiB stacks:
// an HTTP/2 watch waits on its handler's goroutine, whose stack the
// runtime halves only while less than a quarter of it is in use; with the
// request's frames still under the wait it stayed at 8 KiB.
func TestHTTP2WatchesWaitOnSmallStacks(t *testing.T) {
	t.Parallel()
	etcd := etcdtest.Start(t)
	dir := t.TempDir()
	args := append(append([]string{}, rbacFlags...), "--etcd-servers", etcd.Endpoint, "--cert-dir", filepath.Join(dir, "tls"),
		"--write-kubeconfig", filepath.Join(dir, "admin.kubeconfig"))
	p := startConcord(t, "concord", dir, args...)
	cfg, err := clientcmd.BuildConfigFromFlags("", p.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Timeout = 0 // watches; each call below has its own deadline
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	if proto := protoOf(t, ctx, cfg); proto != 2 {
		t.Fatalf("client-go talks HTTP/%d to the server; want HTTP/2", proto)
	}
	// The server's stacks in use after three collections: a stack is
	// halved at most once per collection (16 → 8 → 4 KiB).
	stacks := func() float64 {
		t.Helper()
		for range 3 {
			if _, err := client.CoreV1().RESTClient().Get().AbsPath("/debug/pprof/heap").Param("gc", "1").DoRaw(ctx); err != nil {
				t.Fatalf("collect garbage: %v", err)
			}
		}
		return metricValue(t, ctx, client, "go_memstats_stack_inuse_bytes")
	}

	cms := client.CoreV1().ConfigMaps("default")
	list, err := cms.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	before := stacks()
	const watchers, writes = 200, 20
	results := make([]<-chan watch.Event, watchers)
	for i := range results {
		w, err := cms.Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
		if err != nil {
			t.Fatalf("watch %d: %v", i, err)
		}
		defer w.Stop()
		results[i] = w.ResultChan()
	}
	const most = 6 << 10 // 4 KiB each, and some room for the rest
	if per := (stacks() - before) / watchers; per > most {
		t.Errorf("stacks in use per idle watcher: %.0f bytes; want at most %d", per, most)
	}

	for i := range writes {
		if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%02d", i)}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for i, events := range results {
		last := int64(0)
		for j := range writes {
			var ev watch.Event
			select {
			case ev = <-events:
			case <-ctx.Done():
				t.Fatalf("watcher %d: event %d never came", i, j)
			}
			cm, ok := ev.Object.(*corev1.ConfigMap)
			if !ok || ev.Type != watch.Added || cm.Name != fmt.Sprintf("cm-%02d", j) {
				t.Fatalf("watcher %d, event %d: %s %#v; want ADDED cm-%02d", i, j, ev.Type, ev.Object, j)
			}
			rv, err := strconv.ParseInt(cm.ResourceVersion, 10, 64)
			if err != nil || rv <= last {
				t.Fatalf("watcher %d, event %d: resourceVersion %q after %d", i, j, cm.ResourceVersion, last)
			}
			last = rv
		}
	}
	// The stacks grew to send; waiting again, they shrink again.
	if per := (stacks() - before) / watchers; per > most {
		t.Errorf("stacks in use per watcher after the events: %.0f bytes; want at most %d", per, most)
	}
}

// protoOf is the HTTP major version of cfg's transport to the server.
func protoOf(t *testing.T, ctx context.Context, cfg *rest.Config) int {
	t.Helper()
	rt, err := rest.TransportFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, cfg.Host+"/version", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := rt.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.ProtoMajor
}

// metricValue reads an unlabelled metric from the server's /metrics.
func metricValue(t *testing.T, ctx context.Context, client kubernetes.Interface, name string) float64 {
	t.Helper()
	body, err := client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		t.Fatalf("/metrics: %v", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		if value, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			v, err := strconv.ParseFloat(value, 64)
			if err != nil {
				t.Fatalf("%s: %v", sc.Text(), err)
			}
			return v
		}
	}
	t.Fatalf("/metrics has no %s", name)
	return 0
}
