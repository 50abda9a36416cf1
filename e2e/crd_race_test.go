package e2e

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
)

// TestCustomObjectIncrementsAcrossReplicas: 4 client-go writers, two on
// each of two replicas, each add 1 to a custom object's counter 25 times
// with read-modify-write and RetryOnConflict: no increment is lost (the
// counter ends at 100, its generation at 101), and every conflict was a
// 409 the writer retried, never a silent overwrite.
func TestCustomObjectIncrementsAcrossReplicas(t *testing.T) {
	t.Parallel()
	replicas := startReplicas(t, 2)
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	createWidgetsCRD(t, ctx, &rest.Config{Host: replicas[0].url})
	clients := make([]dynamic.NamespaceableResourceInterface, len(replicas))
	for i, r := range replicas {
		c, err := dynamic.NewForConfig(&rest.Config{Host: r.url, QPS: -1}) // no client-side rate limit
		if err != nil {
			t.Fatal(err)
		}
		clients[i] = c.Resource(widgetsGVR)
	}
	// Created through B once B serves the CRD (a 404 or 503 before that).
	if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := clients[1].Namespace("default").Create(ctx, widget("counter", map[string]any{"color": "0"}), metav1.CreateOptions{})
		return err == nil, nil
	}); err != nil {
		t.Fatalf("create the counter through B: %v", err)
	}

	const writers, increments = 4, 25
	backoff := wait.Backoff{Steps: 200, Duration: time.Millisecond, Factor: 1.2, Jitter: 1, Cap: 50 * time.Millisecond}
	var mu sync.Mutex
	conflicts := 0
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		widgets := clients[w%len(clients)].Namespace("default")
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range increments {
				err := retry.OnError(backoff, apierrors.IsConflict, func() error {
					obj, err := widgets.Get(ctx, "counter", metav1.GetOptions{})
					if err != nil {
						return err
					}
					spec := obj.Object["spec"].(map[string]any)
					n, err := strconv.Atoi(spec["color"].(string))
					if err != nil {
						return err
					}
					spec["color"] = strconv.Itoa(n + 1)
					_, err = widgets.Update(ctx, obj, metav1.UpdateOptions{})
					if apierrors.IsConflict(err) {
						mu.Lock()
						conflicts++
						mu.Unlock()
					}
					return err
				})
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("a writer failed: %v", err)
	}
	final, err := clients[0].Namespace("default").Get(ctx, "counter", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := final.Object["spec"].(map[string]any)["color"]; got != strconv.Itoa(writers*increments) || final.GetGeneration() != writers*increments+1 {
		t.Errorf("counter %v at generation %d after %d×%d increments; want %d at %d", got, final.GetGeneration(), writers, increments, writers*increments, writers*increments+1)
	}
	t.Logf("%d increments, %d conflicts retried", writers*increments, conflicts)
}
