package apiserver_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
)

// TestHTTP11WatchEndsItsChunkedBody: an HTTP/1.1 watch, served on the
// connection it took over from net/http, is a well-formed chunked response
// that says the connection closes, and at its timeout it ends the body
// (the terminating chunk) before the connection closes.
func TestHTTP11WatchEndsItsChunkedBody(t *testing.T) {
	s := startServer(t)
	c := s.create(t, "default", "a", nil)
	s.create(t, "default", "b", nil) // after a: the watch from a sends it
	conn, err := net.Dial("tcp", strings.TrimPrefix(s.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(30 * time.Second)); err != nil {
		t.Fatal(err)
	}
	q := url.Values{"watch": {"1"}, "resourceVersion": {c.ResourceVersion}, "timeoutSeconds": {"1"}}
	fmt.Fprintf(conn, "GET %s?%s HTTP/1.1\r\nHost: concord\r\nAccept: application/json\r\n\r\n", nsPath, q.Encode())
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("read the response: %v", err)
	}
	if resp.StatusCode != http.StatusOK || len(resp.TransferEncoding) != 1 || resp.TransferEncoding[0] != "chunked" || !resp.Close {
		t.Fatalf("got %d, Transfer-Encoding %q, Connection close %v; want 200, chunked, close", resp.StatusCode, resp.TransferEncoding, resp.Close)
	}
	if resp.Header.Get("Audit-Id") == "" || resp.Header.Get("Content-Type") != "application/json" {
		t.Errorf("headers %v; want an Audit-Id and Content-Type application/json", resp.Header)
	}
	body, err := io.ReadAll(resp.Body) // fails on a body cut off without its last chunk
	if err != nil {
		t.Fatalf("read the body: %v (got %q)", err, body)
	}
	if !strings.Contains(string(body), `"type":"ADDED"`) {
		t.Errorf("body %q; want the ADDED event of b", body)
	}
	if n, err := br.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("after the body: read %d bytes, %v; want EOF, the connection closed", n, err)
	}
}

// TestWaitWatchesWaitsForDetachedWatches: http.Server.Shutdown does not
// know a watch that took its connection over; WaitWatches does.
func TestWaitWatchesWaitsForDetachedWatches(t *testing.T) {
	s := startServer(t)
	s.watch(t, nsPath, url.Values{"watch": {"1"}}).quiet(t)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := s.Handler.WaitWatches(ctx); err == nil {
		t.Fatal("WaitWatches returned with a watch open; want it to wait")
	}
	for _, st := range s.Stores {
		st.StopWatches()
	}
	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Handler.WaitWatches(ctx); err != nil {
		t.Fatalf("WaitWatches after StopWatches: %v", err)
	}
}
