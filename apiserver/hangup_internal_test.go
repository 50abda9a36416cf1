package apiserver

import (
	"context"
	"net"
	"testing"
	"time"
)

// tcpPair is a loopback connection: the server's end and the client's.
func tcpPair(t *testing.T) (server, client net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server, err = ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		client.Close()
		server.Close()
	})
	return server, client
}

// TestWatchHangUp: the client closing its end ends the watch's context;
// the client sending data does not; after stop, nothing does.
func TestWatchHangUp(t *testing.T) {
	server, client := tcpPair(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stop := watchHangUp(server, cancel)
	defer stop()
	if _, err := client.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ctx.Done():
		t.Fatal("cancelled after the client sent a byte; want only a hang-up to cancel")
	case <-time.After(200 * time.Millisecond):
	}
	client.Close()
	select {
	case <-ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("not cancelled 10s after the client hung up")
	}

	server, client = tcpPair(t)
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	watchHangUp(server, cancel)()
	client.Close()
	select {
	case <-ctx.Done():
		t.Fatal("cancelled after stop")
	case <-time.After(200 * time.Millisecond):
	}
}

// TestWatchHangUpMany: every one of many connections is told apart.
func TestWatchHangUpMany(t *testing.T) {
	const n = 50
	ctxs := make([]context.Context, n)
	clients := make([]net.Conn, n)
	for i := range n {
		server, client := tcpPair(t)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		defer watchHangUp(server, cancel)()
		ctxs[i], clients[i] = ctx, client
	}
	for i := 0; i < n; i += 2 {
		clients[i].Close()
	}
	for i := 0; i < n; i += 2 {
		select {
		case <-ctxs[i].Done():
		case <-time.After(10 * time.Second):
			t.Fatalf("connection %d: not cancelled 10s after its client hung up", i)
		}
	}
	for i := 1; i < n; i += 2 {
		if ctxs[i].Err() != nil {
			t.Errorf("connection %d cancelled; its client is still there", i)
		}
	}
}
