package retryclient_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	apptesting "github.com/concord-dev/concord/cmd/concord/app/testing"
	"github.com/concord-dev/concord/docs/examples/retryclient"
	"github.com/concord-dev/concord/etcdstore/etcdtest"
)

const configMapsPath = "/api/v1/namespaces/default/configmaps"

// startServer runs a Concord server (cmd/concord/app) serving plain HTTP
// on loopback over a real embedded etcd, and returns its URL.
func startServer(t *testing.T) string {
	t.Helper()
	return apptesting.Run(t, apptesting.PlainConfig(t, etcdtest.Start(t).Endpoint)).URL()
}

// counter is a RoundTripper that counts the PUTs it sends and the 412s
// they get.
type counter struct {
	mu                 sync.Mutex
	puts, preconFailed int
}

func (c *counter) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(req)
	c.mu.Lock()
	defer c.mu.Unlock()
	if req.Method == http.MethodPut {
		c.puts++
	}
	if err == nil && resp.StatusCode == http.StatusPreconditionFailed {
		c.preconFailed++
	}
	return resp, err
}

func (c *counter) counts() (puts, preconFailed int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.puts, c.preconFailed
}

// send is a plain request outside the example: an error unless the answer
// is wantCode; the body is decoded into out (if not nil).
func send(method, url string, body any, header map[string]string, wantCode int, out any) error {
	var reader io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return err
		}
		reader = bytes.NewReader(data)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, url, reader)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != wantCode {
		return fmt.Errorf("%s %s: code %d, want %d: %s", method, url, resp.StatusCode, wantCode, data)
	}
	if out != nil {
		return json.Unmarshal(data, out)
	}
	return nil
}

func create(t *testing.T, base, name string, data map[string]string) {
	t.Helper()
	cm := corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Data:       data,
	}
	if err := send(http.MethodPost, base+configMapsPath, cm, nil, http.StatusCreated, nil); err != nil {
		t.Fatal(err)
	}
}

func read(t *testing.T, url string) *corev1.ConfigMap {
	t.Helper()
	var cm corev1.ConfigMap
	if err := send(http.MethodGet, url, nil, nil, http.StatusOK, &cm); err != nil {
		t.Fatal(err)
	}
	return &cm
}

// TestSixEditorsEveryEditSurvives: six clients edit one object at the same
// moment; with If-Match and re-read on 412, no edit overwrites another.
func TestSixEditorsEveryEditSurvives(t *testing.T) {
	base := startServer(t)
	create(t, base, "settings", map[string]string{"owner": "nobody"})
	url := base + configMapsPath + "/settings"

	counts := &counter{}
	client := &http.Client{Transport: counts}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	const editors = 6
	colors := []string{"red", "orange", "yellow", "green", "blue", "violet"}
	want := map[string]string{"owner": "nobody"}
	start := make(chan struct{})
	errs := make([]error, editors)
	var wg sync.WaitGroup
	for i := range editors {
		want[fmt.Sprintf("editor-%d", i)] = "done"
		want[fmt.Sprintf("color-%d", i)] = colors[i]
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			// Setting keys: idempotent, as Edit requires.
			_, errs[i] = retryclient.Edit(ctx, client, url, func(cm *corev1.ConfigMap) error {
				if cm.Data == nil {
					cm.Data = map[string]string{}
				}
				cm.Data[fmt.Sprintf("editor-%d", i)] = "done"
				cm.Data[fmt.Sprintf("color-%d", i)] = colors[i]
				return nil
			}, 50)
		}()
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("editor %d: %v", i, err)
		}
	}

	if diff := cmp.Diff(want, read(t, url).Data); diff != "" {
		t.Errorf("data after six editors (-want +got):\n%s", diff)
	}

	puts, retried := counts.counts()
	t.Logf("%d PUTs, %d refused with 412 and retried", puts, retried)
	if retried == 0 {
		t.Logf("no 412: all %d editors succeeded on their first attempt", editors)
	} else {
		t.Logf("at least one 412 happened: %d retries in all", retried)
	}
	// No editor gave up, so each 412 was followed by exactly one more PUT.
	if puts != editors+retried {
		t.Errorf("%d PUTs; want %d (one per editor, plus one per 412)", puts, editors+retried)
	}
}

// TestGivesUpAfterMaxAttempts: another client writes between every read and
// write of Edit, so each PUT is refused; Edit stops after maxAttempts and
// none of its change is written.
func TestGivesUpAfterMaxAttempts(t *testing.T) {
	base := startServer(t)
	create(t, base, "settings", map[string]string{"owner": "nobody"})
	url := base + configMapsPath + "/settings"

	counts := &counter{}
	client := &http.Client{Transport: counts}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	interruptions := 0
	_, err := retryclient.Edit(ctx, client, url, func(cm *corev1.ConfigMap) error {
		// The conflicting write, through a plain client: read the object
		// afresh (Edit's copy is ours to change), then PUT with its ETag.
		interruptions++
		var current corev1.ConfigMap
		if err := send(http.MethodGet, url, nil, nil, http.StatusOK, &current); err != nil {
			return err
		}
		etag := `"` + current.ResourceVersion + `"`
		current.ResourceVersion = ""
		current.Data["intruder"] = fmt.Sprint(interruptions)
		if err := send(http.MethodPut, url, current, map[string]string{"If-Match": etag}, http.StatusOK, nil); err != nil {
			return err
		}
		cm.Data["mine"] = "yes"
		return nil
	}, 3)

	var gaveUp *retryclient.GaveUpError
	if !errors.As(err, &gaveUp) {
		t.Fatalf("Edit returned %v; want a *GaveUpError", err)
	}
	t.Logf("Edit: %v", err)
	if gaveUp.Attempts != 3 || !strings.Contains(err.Error(), "3 attempts") {
		t.Errorf("GaveUpError.Attempts = %d, message %q; want 3 and a message saying so", gaveUp.Attempts, err)
	}
	if gaveUp.Last == nil || gaveUp.Last.Status.Reason != "PreconditionFailed" {
		t.Errorf("GaveUpError.Last = %v; want the last 412 with reason PreconditionFailed", gaveUp.Last)
	}
	if puts, refused := counts.counts(); puts != 3 || refused != 3 {
		t.Errorf("Edit sent %d PUTs, %d refused with 412; want 3 and 3", puts, refused)
	}
	if interruptions != 3 {
		t.Errorf("edit was called %d times; want 3 (once per attempt)", interruptions)
	}
	want := map[string]string{"owner": "nobody", "intruder": "3"}
	if diff := cmp.Diff(want, read(t, url).Data); diff != "" {
		t.Errorf("data: only the other client's writes should be there (-want +got):\n%s", diff)
	}
}

// TestMissingObjectIsAnError: the GET's 404 is returned, with its Status,
// before anything is edited or written.
func TestMissingObjectIsAnError(t *testing.T) {
	base := startServer(t)
	counts := &counter{}
	client := &http.Client{Transport: counts}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	called := false
	_, err := retryclient.Edit(ctx, client, base+configMapsPath+"/missing", func(*corev1.ConfigMap) error {
		called = true
		return nil
	}, 5)
	if err == nil {
		t.Fatal("Edit of a missing object succeeded")
	}
	t.Logf("Edit: %v", err)
	var status *retryclient.StatusError
	if !errors.As(err, &status) || status.Code != http.StatusNotFound || status.Status.Reason != metav1.StatusReasonNotFound {
		t.Errorf("Edit returned %v; want a *StatusError with code 404 and reason NotFound", err)
	}
	if msg := err.Error(); !strings.Contains(msg, "404") || !strings.Contains(msg, "NotFound") {
		t.Errorf("error %q does not mention 404 and NotFound", msg)
	}
	if called {
		t.Error("the edit function was called for a missing object")
	}
	if puts, _ := counts.counts(); puts != 0 {
		t.Errorf("Edit sent %d PUTs; want none", puts)
	}
}
