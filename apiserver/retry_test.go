package apiserver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// doRaw sends one JSON request and returns only the status code (-1 on a
// transport error); safe to call from any goroutine.
func doRaw(method, url string, body []byte) int {
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		return -1
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return -1
	}
	return resp.StatusCode
}

// incrementLoop adds 1 to data.counter n times with read-modify-write and
// retry on 409, giving up after maxAttempts requests in all.
func incrementLoop(ctx context.Context, url string, n, maxAttempts int, conflicts *int) error {
	attempts := 0
	for done := 0; done < n; {
		if attempts++; attempts > maxAttempts {
			return fmt.Errorf("gave up after %d attempts with %d of %d increments done", maxAttempts, done, n)
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		var cm corev1.ConfigMap
		err = json.NewDecoder(resp.Body).Decode(&cm)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET: code %d, %v", resp.StatusCode, err)
		}
		value, err := strconv.Atoi(cm.Data["counter"])
		if err != nil {
			return fmt.Errorf("counter %q: %w", cm.Data["counter"], err)
		}
		cm.Data["counter"] = strconv.Itoa(value + 1)
		body, err := json.Marshal(&cm)
		if err != nil {
			return err
		}
		switch code := doRaw(http.MethodPut, url, body); code {
		case http.StatusOK:
			done++
		case http.StatusConflict:
			*conflicts++
		default:
			return fmt.Errorf("PUT: code %d; want 200 or 409", code)
		}
	}
	return nil
}

func mustAtoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatalf("%q is not a number: %v", s, err)
	}
	return n
}

func stringsReader(s string) io.Reader { return bytes.NewBufferString(s) }
