package etcdtest

import (
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Proxy forwards TCP connections to an etcd member; frozen, it keeps every
// connection open and passes nothing either way, as a SIGSTOPped or
// partitioned member does. Several proxies of one etcd are several
// endpoints of the same data, each of which can be frozen on its own.
type Proxy struct {
	URL string
	ln  net.Listener

	// Chunks counts what it forwarded, either way.
	Chunks atomic.Int64
	// delay holds each chunk this long before forwarding it (SetDelay).
	delay atomic.Int64

	mu     sync.Mutex
	frozen bool
	thawed chan struct{} // closed by Thaw
	conns  []net.Conn
	wg     sync.WaitGroup
}

// StartProxy forwards to target (an etcd client URL) until the test ends.
func StartProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{URL: "http://" + ln.Addr().String(), ln: ln, thawed: make(chan struct{})}
	addr := strings.TrimPrefix(target, "http://")
	p.wg.Go(func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", addr)
			if err != nil {
				in.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, in, out)
			p.mu.Unlock()
			p.wg.Go(func() { p.pipe(out, in) })
			p.wg.Go(func() { p.pipe(in, out) })
		}
	})
	t.Cleanup(func() {
		p.Thaw()
		ln.Close()
		p.mu.Lock()
		for _, c := range p.conns {
			c.Close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
	return p
}

// pipe copies from src to dst, holding each chunk while the proxy is
// frozen.
func (p *Proxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.wait()
			time.Sleep(time.Duration(p.delay.Load()))
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
			p.Chunks.Add(1)
		}
		if err != nil {
			dst.Close()
			return
		}
	}
}

func (p *Proxy) wait() {
	p.mu.Lock()
	frozen, thawed := p.frozen, p.thawed
	p.mu.Unlock()
	if frozen {
		<-thawed
	}
}

// SetDelay holds every chunk d before forwarding it, as a slow member or
// a starved replica answers: late, but it answers.
func (p *Proxy) SetDelay(d time.Duration) { p.delay.Store(int64(d)) }

// Freeze stops forwarding, keeping the connections open.
func (p *Proxy) Freeze() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.frozen {
		p.frozen, p.thawed = true, make(chan struct{})
	}
}

// Thaw forwards again, what was held first.
func (p *Proxy) Thaw() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.frozen {
		p.frozen = false
		close(p.thawed)
	}
}
