package apiserver

import (
	"context"
	"net"
	"net/http"
	"strconv"
	"sync"
)

// A watch over HTTP/1.1 takes its connection over from net/http once its
// response headers are out, and its handler returns: net/http's connection
// goroutine (whose stack has grown with every call the request made), its
// read goroutine, its 4 KiB read and write buffers and the response's own
// buffer would otherwise stay for the whole watch. What remains is one
// goroutine sending the events and the connection; the client hanging up
// is noticed by watchHangUp. HTTP/2 streams share their connection and cannot be taken
// over; they are served as before.

// detachable reports whether the watch of r can take over its connection:
// HTTP/1.1 or later on net/http's own ResponseWriter, in a request that
// withRequestContext will finish.
func detachable(w http.ResponseWriter, r *http.Request) bool {
	if r.ProtoMajor != 1 || r.ProtoMinor < 1 {
		return false // HTTP/1.0 has no chunked bodies; HTTP/2 no hijacking
	}
	if _, ok := r.Context().Value(requestInfoKey{}).(*requestInfo); !ok {
		return false
	}
	for {
		switch rw := w.(type) {
		case http.Hijacker:
			return true
		case interface{ Unwrap() http.ResponseWriter }:
			w = rw.Unwrap()
		default:
			return false
		}
	}
}

// runDetached sends the watch on conn, net/http's response headers already
// written, and closes conn. cancel ends ctx, the watch's: when the client
// hangs up, or when the watch is over, so that nothing is left behind.
func (ws *watchStream) runDetached(ctx context.Context, cancel context.CancelFunc, conn net.Conn) {
	defer cancel()
	body := &chunkedBody{conn: conn}
	stop := watchHangUp(conn, cancel)
	defer func() {
		stop()
		if p := recover(); p != nil {
			// Cut off, not ended: the client must not take a half-sent
			// event for the end of the stream (net/http does the same).
			_ = conn.Close()
			panic(p)
		}
		body.end()
	}()
	ws.setOutput(body, body.Flush)
	ws.run(ctx, cancel)
}

// cancelOnHangUp calls cancel when conn's read side fails: the client hung
// up, or the connection was closed. A watch client sends nothing more;
// anything it does send is ignored.
func cancelOnHangUp(conn net.Conn, cancel context.CancelFunc) {
	defer cancel()
	var b [1]byte
	for {
		if _, err := conn.Read(b[:]); err != nil {
			return
		}
	}
}

// chunkedBody writes an HTTP/1.1 chunked body on a connection taken over
// from net/http. The writes of one event are gathered in a pooled buffer
// and sent as one chunk, in one write, by Flush: a watcher keeps no buffer
// while it waits.
type chunkedBody struct {
	conn net.Conn
	buf  *[]byte // the pending chunk, after chunkHeadroom bytes; nil when none
}

// chunkHeadroom leaves room before the data for the chunk's size line:
// at most 16 hex digits and CRLF.
const chunkHeadroom = 18

// maxPooledChunk keeps the buffers of very large events out of the pool.
const maxPooledChunk = 64 << 10

var chunkPool = sync.Pool{New: func() any {
	b := make([]byte, 0, 4<<10)
	return &b
}}

func (c *chunkedBody) Write(p []byte) (int, error) {
	if c.buf == nil {
		c.buf = chunkPool.Get().(*[]byte)
		*c.buf = (*c.buf)[:chunkHeadroom]
	}
	*c.buf = append(*c.buf, p...)
	return len(p), nil
}

// Flush sends what was written since the last Flush as one chunk.
func (c *chunkedBody) Flush() error {
	if c.buf == nil {
		return nil
	}
	b := *c.buf
	if len(b) == chunkHeadroom {
		return nil // an empty chunk would end the body
	}
	var line [chunkHeadroom]byte
	head := append(strconv.AppendInt(line[:0], int64(len(b)-chunkHeadroom), 16), '\r', '\n')
	start := chunkHeadroom - len(head)
	copy(b[start:], head)
	b = append(b, '\r', '\n')
	_, err := c.conn.Write(b[start:])
	if cap(b) <= maxPooledChunk {
		*c.buf = b[:0]
		chunkPool.Put(c.buf)
	}
	c.buf = nil
	return err
}

// end ends the body, as net/http ends a response, and closes the
// connection.
func (c *chunkedBody) end() {
	if err := c.Flush(); err == nil {
		_, _ = c.conn.Write([]byte("0\r\n\r\n")) // the client may be gone
	}
	_ = c.conn.Close()
}
