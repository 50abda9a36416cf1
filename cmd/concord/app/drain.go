package app

import (
	"context"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// drainer ends a graceful shutdown as soon as nothing is being served. An
// HTTP/2 connection that received the server's GOAWAY is kept open by
// net/http for a second after its last stream ends, in case the client is
// still reading; client-go's connections (idle, pooled) sit out that whole
// second, which was most of the time `envtest.Environment.Stop()` took. Once
// no request has been in flight for drainQuiet, after the GOAWAYs went out,
// the drainer closes what is left.
type drainer struct {
	inFlight atomic.Int64

	mu    sync.Mutex
	conns map[net.Conn]struct{}
}

// drainQuiet is how long nothing must be in flight before the remaining
// connections are closed: a request the client sent before it read the
// GOAWAY has reached its handler by then.
const drainQuiet = 50 * time.Millisecond

func newDrainer() *drainer { return &drainer{conns: map[net.Conn]struct{}{}} }

// handler counts the requests being served by h.
func (d *drainer) handler(h http.Handler) http.Handler { return &counted{d: d, h: h} }

// counted is a type of its own, not an http.HandlerFunc, so that no frame
// of HandlerFunc.ServeHTTP sits under a parked watch (apiserver.Handler).
type counted struct {
	d *drainer
	h http.Handler
}

func (c *counted) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c.d.inFlight.Add(1)
	defer c.d.inFlight.Add(-1)
	c.h.ServeHTTP(w, r)
}

// connState is the server's ConnState: it knows every connection net/http
// still owns (a hijacked one, a watch over HTTP/1.1, is the watch's).
func (d *drainer) connState(c net.Conn, s http.ConnState) {
	d.mu.Lock()
	defer d.mu.Unlock()
	switch s {
	case http.StateNew:
		d.conns[c] = struct{}{}
	case http.StateHijacked, http.StateClosed:
		delete(d.conns, c)
	}
}

// shutdown is srv.Shutdown(ctx), with the remaining connections closed once
// no request has been in flight for drainQuiet.
func (d *drainer) shutdown(ctx context.Context, srv *http.Server) error {
	done := make(chan error, 1)
	go func() { done <- srv.Shutdown(ctx) }()
	tick := time.NewTicker(drainQuiet / 5)
	defer tick.Stop()
	var quietSince time.Time
	for {
		select {
		case err := <-done:
			return err
		case now := <-tick.C:
			switch {
			case d.inFlight.Load() > 0:
				quietSince = time.Time{}
			case quietSince.IsZero():
				quietSince = now
			case now.Sub(quietSince) >= drainQuiet:
				d.closeAll()
			}
		}
	}
}

func (d *drainer) closeAll() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for c := range d.conns {
		c.Close()
		delete(d.conns, c)
	}
}
