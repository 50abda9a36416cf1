//go:build linux

package apiserver

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"sync"
	"syscall"
)

// On Linux, one epoll set and one goroutine notice every detached watch's
// client hanging up (the peer's FIN, a reset, a keep-alive timeout),
// instead of a goroutine per watch blocked in a read: that goroutine's
// stack and runtime state were a sixth of what a watcher cost.

// hangUpPoller calls the cancel func registered for a connection when its
// epoll event comes. Events are one-shot: each comes at most once.
type hangUpPoller struct {
	epfd int

	mu      sync.Mutex
	next    uint64
	cancels map[uint64]context.CancelFunc
	broken  bool
}

var (
	hangUpsOnce sync.Once
	hangUps     *hangUpPoller // nil if epoll is not available
)

func theHangUpPoller() *hangUpPoller {
	hangUpsOnce.Do(func() {
		epfd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
		if err != nil {
			return
		}
		hangUps = &hangUpPoller{epfd: epfd, cancels: map[uint64]context.CancelFunc{}}
		go hangUps.run()
	})
	return hangUps
}

// watchHangUp calls cancel once the client of conn hangs up; stop, to be
// called before conn is closed, forgets conn.
func watchHangUp(conn net.Conn, cancel context.CancelFunc) (stop func()) {
	if p := theHangUpPoller(); p != nil {
		if raw, ok := rawConn(conn); ok {
			if stop, err := p.add(raw, cancel); err == nil {
				return stop
			}
		}
	}
	go cancelOnHangUp(conn, cancel)
	return func() {}
}

// rawConn is conn's file descriptor (under TLS, the TCP connection's).
func rawConn(conn net.Conn) (syscall.RawConn, bool) {
	if tc, ok := conn.(*tls.Conn); ok {
		conn = tc.NetConn()
	}
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return nil, false
	}
	raw, err := sc.SyscallConn()
	return raw, err == nil
}

var errPollerBroken = errors.New("hang-up poller stopped")

func (p *hangUpPoller) add(raw syscall.RawConn, cancel context.CancelFunc) (stop func(), err error) {
	p.mu.Lock()
	if p.broken {
		p.mu.Unlock()
		return nil, errPollerBroken
	}
	p.next++
	id := p.next
	p.cancels[id] = cancel // before the event can come
	p.mu.Unlock()
	ev := syscall.EpollEvent{Events: syscall.EPOLLRDHUP | syscall.EPOLLONESHOT, Fd: int32(uint32(id)), Pad: int32(uint32(id >> 32))}
	cerr := raw.Control(func(fd uintptr) {
		err = syscall.EpollCtl(p.epfd, syscall.EPOLL_CTL_ADD, int(fd), &ev)
	})
	if err = errors.Join(cerr, err); err != nil {
		p.forget(id)
		return nil, err
	}
	return func() {
		p.forget(id)
		_ = raw.Control(func(fd uintptr) {
			_ = syscall.EpollCtl(p.epfd, syscall.EPOLL_CTL_DEL, int(fd), nil) // closing it would also
		})
	}, nil
}

// forget removes id and returns its cancel func, nil if it was gone.
func (p *hangUpPoller) forget(id uint64) context.CancelFunc {
	p.mu.Lock()
	defer p.mu.Unlock()
	cancel := p.cancels[id]
	delete(p.cancels, id)
	return cancel
}

// run waits for events for good; if epoll fails, it ends every watch it
// knows (their clients watch again) and later ones use a goroutine each.
func (p *hangUpPoller) run() {
	events := make([]syscall.EpollEvent, 128)
	for {
		n, err := syscall.EpollWait(p.epfd, events, -1)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			p.fail()
			return
		}
		for _, ev := range events[:n] {
			if cancel := p.forget(uint64(uint32(ev.Fd)) | uint64(uint32(ev.Pad))<<32); cancel != nil {
				cancel()
			}
		}
	}
}

func (p *hangUpPoller) fail() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.broken = true
	for id, cancel := range p.cancels {
		delete(p.cancels, id)
		cancel()
	}
}
