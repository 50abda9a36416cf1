// Package retryclient is an example client for Concord's conditional
// requests: a read-modify-write of one ConfigMap that never loses a
// concurrent update. It uses only net/http and encoding/json (plus the
// Kubernetes API types); see docs/retrying-client.md.
package retryclient

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// GaveUpError is returned by Edit when every one of its conditional writes
// was refused with 412 because other clients kept changing the object.
type GaveUpError struct {
	Attempts int          // PUTs sent, all refused
	Last     *StatusError // the last 412
}

func (e *GaveUpError) Error() string {
	return fmt.Sprintf("gave up after %d attempts: the object changed before each write (last: %v)", e.Attempts, e.Last)
}

// StatusError is a non-2xx answer. Concord answers every error with a
// Kubernetes Status, whose reason (NotFound, PreconditionFailed, …) says what
// happened; Status is empty if the body was not one (say, from a proxy).
type StatusError struct {
	Method, URL string
	Code        int
	Status      metav1.Status
	Body        string // the body, when it was not a Status
}

func (e *StatusError) Error() string {
	reason, msg := string(e.Status.Reason), e.Status.Message
	if e.Status.Kind != "Status" {
		reason, msg = http.StatusText(e.Code), e.Body
	}
	return fmt.Sprintf("%s %s: %d %s: %s", e.Method, e.URL, e.Code, reason, msg)
}

// Edit applies edit to the ConfigMap at url (…/namespaces/{ns}/configmaps/{name})
// and writes it back with If-Match, so that nothing another client wrote in
// between is overwritten. On 412 it reads the object again and applies edit
// to that fresh copy; it sends at most maxAttempts PUTs.
//
// edit must be idempotent: applied to a copy that already contains its
// change, it must give the same result. A 412 means another write landed
// between our read and our write, and that write may already contain our
// change: another copy of this program making the same edit, or an earlier
// Edit whose PUT the server applied but whose answer was lost, which the
// caller is now repeating. Setting keys is idempotent; "append a line" or
// "add 1" is not, unless the edit first checks whether its change is there.
//
// An error from edit is returned as it is and nothing is written.
func Edit(ctx context.Context, client *http.Client, url string, edit func(*corev1.ConfigMap) error, maxAttempts int) (*corev1.ConfigMap, error) {
	if maxAttempts < 1 {
		return nil, fmt.Errorf("maxAttempts is %d; it must be at least 1", maxAttempts)
	}
	var last *StatusError
	for range maxAttempts {
		// Always start from what the server has now: a retry that resent the
		// body of the refused PUT would overwrite the write that beat it.
		cm, etag, err := get(ctx, client, url)
		if err != nil {
			return nil, err
		}
		if err := edit(cm); err != nil {
			return nil, err
		}
		// The ETag is the precondition. A resourceVersion in the body would be
		// a second one (answered 409 instead of 412), so leave it out.
		cm.ResourceVersion = ""
		updated, err := put(ctx, client, url, etag, cm)
		var status *StatusError
		if errors.As(err, &status) && status.Code == http.StatusPreconditionFailed {
			last = status
			continue // nothing was written: read again
		}
		if err != nil {
			return nil, err
		}
		return updated, nil
	}
	return nil, &GaveUpError{Attempts: maxAttempts, Last: last}
}

// get reads the object and the ETag of the version it is.
func get(ctx context.Context, client *http.Client, url string) (*corev1.ConfigMap, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, "", err
	}
	cm, header, err := do(client, req)
	if err != nil {
		return nil, "", err
	}
	etag := header.Get("ETag")
	if etag == "" {
		// Without it there is no safe way to write: refuse rather than
		// overwrite blindly.
		return nil, "", fmt.Errorf("GET %s: the response has no ETag header", url)
	}
	return cm, etag, nil
}

// put replaces the object if it is still at etag.
func put(ctx context.Context, client *http.Client, url, etag string, cm *corev1.ConfigMap) (*corev1.ConfigMap, error) {
	body, err := json.Marshal(cm)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("If-Match", etag) // sent back exactly as received, quotes included
	updated, _, err := do(client, req)
	return updated, err
}

// do sends req and decodes a 2xx body as a ConfigMap, anything else as a
// *StatusError.
func do(client *http.Client, req *http.Request) (*corev1.ConfigMap, http.Header, error) {
	req.Header.Set("Accept", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		e := &StatusError{Method: req.Method, URL: req.URL.String(), Code: resp.StatusCode}
		if json.Unmarshal(data, &e.Status) != nil || e.Status.Kind != "Status" {
			e.Status = metav1.Status{}
			e.Body = strings.TrimSpace(string(data))
		}
		return nil, nil, e
	}
	var cm corev1.ConfigMap
	if err := json.NewDecoder(resp.Body).Decode(&cm); err != nil {
		return nil, nil, fmt.Errorf("%s %s: decode the ConfigMap: %w", req.Method, req.URL, err)
	}
	return &cm, resp.Header, nil
}
