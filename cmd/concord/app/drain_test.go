package app

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// TestDrainerKeepsInFlightRequests: over HTTP/2, a request being served
// when the shutdown starts gets its whole answer (the drainer closes
// connections only once nothing is in flight), and the shutdown then ends.
func TestDrainerKeepsInFlightRequests(t *testing.T) {
	d := newDrainer()
	started, release := make(chan struct{}), make(chan struct{})
	ts := httptest.NewUnstartedServer(d.handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			close(started)
			<-release
		}
		io.WriteString(w, "done "+r.Proto)
	})))
	ts.Config.ConnState = d.connState
	ts.EnableHTTP2 = true
	ts.StartTLS()
	defer ts.Close()
	client := ts.Client()

	if resp, err := client.Get(ts.URL + "/fast"); err != nil {
		t.Fatal(err)
	} else {
		resp.Body.Close() // an idle HTTP/2 connection stays in the pool
	}
	answer := make(chan string, 1)
	go func() {
		resp, err := client.Get(ts.URL + "/slow")
		if err != nil {
			answer <- err.Error()
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			answer <- err.Error()
			return
		}
		answer <- string(b)
	}()
	<-started
	shut := make(chan error, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	go func() { shut <- d.shutdown(ctx, ts.Config) }()
	time.Sleep(5 * drainQuiet) // well past the quiet time, the request still in flight
	close(release)
	if got := <-answer; got != "done HTTP/2.0" {
		t.Errorf("the request in flight at the shutdown got %q; want its answer, done HTTP/2.0", got)
	}
	if err := <-shut; err != nil {
		t.Errorf("shutdown: %v", err)
	}
}
