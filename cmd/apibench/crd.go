package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"time"
)

// What apibench asks of an API about CRDs, over the target's connections.

const (
	crdsPath = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
	// aggregatedDiscovery is the Accept of kubectl's and client-go's
	// discovery: every group, version and resource in one answer.
	aggregatedDiscovery = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
	// crdWait bounds the wait for a CRD to be established and served.
	crdWait = 2 * time.Minute
)

// fetch GETs path with the given Accept and reads the answer to its end,
// into a pooled buffer the caller returns with bufPool.Put (nil when it
// passes keep false). Any status code is an answer; err is for requests
// that got none.
func (b *httpBackend) fetch(ctx context.Context, path, accept string, keep bool) (code, n int, body *bytes.Buffer, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.base+path, nil)
	if err != nil {
		return 0, 0, nil, err
	}
	req.Header.Set("Accept", accept)
	resp, err := b.client.Do(req)
	if err != nil {
		return 0, 0, nil, err
	}
	defer resp.Body.Close()
	buf := bufPool.Get().(*bytes.Buffer)
	buf.Reset()
	if _, err := buf.ReadFrom(resp.Body); err != nil {
		bufPool.Put(buf)
		return resp.StatusCode, 0, nil, fmt.Errorf("GET %s: read the answer: %w", path, err)
	}
	n = buf.Len()
	if !keep {
		bufPool.Put(buf)
		buf = nil
	}
	return resp.StatusCode, n, buf, nil
}

// installCRD creates the CRD name of the JSON body. One that exists is
// used as it is (created false), unless it is being deleted: then it is
// created anew once it is gone.
func (b *httpBackend) installCRD(ctx context.Context, name string, body []byte) (created bool, err error) {
	deadline := time.Now().Add(crdWait)
	for {
		created, err := b.createCRD(ctx, body)
		if err != nil || created {
			return created, err
		}
		buf, err := b.do(ctx, http.MethodGet, b.base+crdsPath+"/"+url.PathEscape(name), nil)
		if errors.Is(err, errNotFound) {
			continue // gone since
		}
		if err != nil {
			return false, fmt.Errorf("read CRD %s: %w", name, err)
		}
		var c crdState
		err = json.Unmarshal(buf.Bytes(), &c)
		bufPool.Put(buf)
		if err != nil {
			return false, fmt.Errorf("decode CRD %s: %w", name, err)
		}
		if c.Metadata.DeletionTimestamp == "" {
			return false, nil
		}
		if time.Now().After(deadline) {
			return false, fmt.Errorf("CRD %s: still being deleted after %s", name, crdWait)
		}
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// createCRD creates the CRD of the JSON body; created is false when it
// existed already.
func (b *httpBackend) createCRD(ctx context.Context, body []byte) (created bool, err error) {
	buf, err := b.do(ctx, http.MethodPost, b.base+crdsPath, body)
	switch {
	case err == nil:
		bufPool.Put(buf)
		return true, nil
	case errors.Is(err, errExists):
		return false, nil
	}
	return false, err
}

// crdState is what apibench reads of a CRD.
type crdState struct {
	Metadata struct {
		Name              string `json:"name"`
		ResourceVersion   string `json:"resourceVersion"`
		DeletionTimestamp string `json:"deletionTimestamp"`
	} `json:"metadata"`
	Spec struct {
		Group string `json:"group"`
	} `json:"spec"`
	Status struct {
		Conditions []struct {
			Type   string `json:"type"`
			Status string `json:"status"`
		} `json:"conditions"`
	} `json:"status"`
}

func (c *crdState) established() bool {
	for _, cond := range c.Status.Conditions {
		if cond.Type == "Established" {
			return cond.Status == "True"
		}
	}
	return false
}

// waitCRD waits until the CRD name is Established and res's objects are
// served (a create of one is accepted), polling; it returns how long each
// took from start.
func (b *httpBackend) waitCRD(ctx context.Context, name string, res resource, start time.Time) (established, served time.Duration, err error) {
	ctx, cancel := context.WithTimeout(ctx, crdWait)
	defer cancel()
	poll := func(done func() (bool, error)) error {
		for {
			ok, err := done()
			if ok || err != nil {
				return err
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("CRD %s: not established and served after %s", name, crdWait)
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	err = poll(func() (bool, error) {
		buf, err := b.do(ctx, http.MethodGet, b.base+crdsPath+"/"+url.PathEscape(name), nil)
		if err != nil {
			return false, fmt.Errorf("read CRD %s: %w", name, err)
		}
		defer bufPool.Put(buf)
		var c crdState
		if err := json.Unmarshal(buf.Bytes(), &c); err != nil {
			return false, fmt.Errorf("decode CRD %s: %w", name, err)
		}
		return c.established(), nil
	})
	if err != nil {
		return 0, 0, err
	}
	established = time.Since(start)
	// Served: a create is accepted (404: not served yet; 503: this
	// replica has not caught up with the CRD yet, "send it again"). The
	// probe goes to namespace default and is deleted.
	probe := b.withResource(res)
	name = "apibench-probe-" + newRunID()
	err = poll(func() (bool, error) {
		_, err := probe.create(ctx, "default", name, map[string]string{"probe": "1"})
		if err == nil {
			return true, nil
		}
		var st *statusError
		if errors.Is(err, errNotFound) || (errors.As(err, &st) && st.code == http.StatusServiceUnavailable) {
			return false, nil
		}
		return false, fmt.Errorf("create a %s: %w", res.Kind, err)
	})
	if err != nil {
		return 0, 0, err
	}
	served = time.Since(start)
	return established, served, probe.deleteAll(ctx, "default", []string{name}, nil)
}

// deleteCRDs deletes the named CRDs (missing ones are fine); Concord then
// deletes their objects and, once it has, the CRDs.
func deleteCRDs(ctx context.Context, b *httpBackend, names []string, workers int, p *progress) error {
	if b == nil || len(names) == 0 {
		return nil
	}
	label := fmt.Sprintf("clean-up: delete %d CRD(s)", len(names))
	var done atomic.Int64
	p.status(label, &done, time.Now())
	err := parallel(ctx, len(names), workers, func(d int) { done.Store(int64(d)) }, func(ctx context.Context, i int) error {
		buf, err := b.do(ctx, http.MethodDelete, b.base+crdsPath+"/"+url.PathEscape(names[i]), nil)
		if err == nil {
			bufPool.Put(buf)
		}
		if errors.Is(err, errNotFound) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("delete CRD %s: %w", names[i], err)
		}
		return nil
	})
	p.done(fmt.Sprintf("%s: %d deleted", label, done.Load()))
	return err
}

// listCRDs lists the CRDs of a label selector.
func (b *httpBackend) listCRDs(ctx context.Context, selector string) (items []crdState, rv string, err error) {
	buf, err := b.do(ctx, http.MethodGet, b.base+crdsPath+"?labelSelector="+url.QueryEscape(selector), nil)
	if err != nil {
		return nil, "", fmt.Errorf("list CRDs %s: %w", selector, err)
	}
	defer bufPool.Put(buf)
	var list struct {
		Metadata struct {
			ResourceVersion string `json:"resourceVersion"`
		} `json:"metadata"`
		Items []crdState `json:"items"`
	}
	if err := json.Unmarshal(buf.Bytes(), &list); err != nil {
		return nil, "", fmt.Errorf("list CRDs %s: decode: %w", selector, err)
	}
	return list.Items, list.Metadata.ResourceVersion, nil
}

// watchEstablished calls established (from one goroutine) when each CRD of
// the label selector is first seen Established, until ctx ends. It lists
// them, then watches from the list's resourceVersion, and lists again
// whenever the watch ends. ready is closed once the first watch is open.
func (b *httpBackend) watchEstablished(ctx context.Context, selector string, ready chan<- struct{}, established func(name string, at time.Time)) error {
	seen := map[string]bool{}
	check := func(c *crdState, at time.Time) {
		if !seen[c.Metadata.Name] && c.established() {
			seen[c.Metadata.Name] = true
			established(c.Metadata.Name, at)
		}
	}
	first := true
	for ctx.Err() == nil {
		items, rv, err := b.listCRDs(ctx, selector)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		now := time.Now()
		for i := range items {
			check(&items[i], now)
		}
		u := b.base + crdsPath + "?watch=1&labelSelector=" + url.QueryEscape(selector) + "&resourceVersion=" + url.QueryEscape(rv)
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err != nil {
			return err
		}
		req.Header.Set("Accept", "application/json")
		resp, err := b.stream.Do(req)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("watch CRDs %s: %w", selector, err)
		}
		if resp.StatusCode != http.StatusOK {
			msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
			resp.Body.Close()
			return fmt.Errorf("watch CRDs %s: %s: %s", selector, resp.Status, bytes.TrimSpace(msg))
		}
		if first {
			close(ready)
			first = false
		}
		stop := context.AfterFunc(ctx, func() { resp.Body.Close() })
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 64<<10), 16<<20)
		for sc.Scan() {
			now := time.Now()
			var ev struct {
				Type   string   `json:"type"`
				Object crdState `json:"object"`
			}
			if err := json.Unmarshal(sc.Bytes(), &ev); err != nil || ev.Type == "ERROR" {
				break // list and watch again
			}
			if ev.Type == "ADDED" || ev.Type == "MODIFIED" {
				check(&ev.Object, now)
			}
		}
		stop()
		resp.Body.Close()
	}
	return nil
}

// discoveryGroups is the names of the groups in the API's aggregated
// discovery, and the answer's length.
func (b *httpBackend) discoveryGroups(ctx context.Context) ([]string, int, error) {
	code, n, buf, err := b.fetch(ctx, "/apis", aggregatedDiscovery, true)
	if err != nil {
		return nil, 0, err
	}
	defer bufPool.Put(buf)
	if code != http.StatusOK {
		return nil, n, fmt.Errorf("aggregated discovery: %d %.200s", code, buf.Bytes())
	}
	var list struct {
		Items []struct {
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
		} `json:"items"`
	}
	if err := json.Unmarshal(buf.Bytes(), &list); err != nil {
		return nil, n, fmt.Errorf("aggregated discovery: decode: %w", err)
	}
	groups := make([]string, len(list.Items))
	for i, g := range list.Items {
		groups[i] = g.Metadata.Name
	}
	return groups, n, nil
}

// countSuffix counts the names ending in suffix.
func countSuffix(names []string, suffix string) int {
	n := 0
	for _, name := range names {
		if strings.HasSuffix(name, suffix) {
			n++
		}
	}
	return n
}
