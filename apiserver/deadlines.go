package apiserver

import (
	"net/http"
	"time"
)

// writeDeadlineGrace is how long after the request's deadline its response
// may still be written: enough to send the 504 of a request that timed out,
// not to let a client that does not read hold the handler.
const writeDeadlineGrace = 5 * time.Second

// setDeadlines bounds the connection's reads of the request's body and
// writes of its response by the request's deadline (--request-timeout;
// watches have none), for every request, whether it is served, refused
// (401, 403, 429) or a probe: readBody, and the server's own reading of a
// body the handler left unread, stop there; writing to a client that does
// not read stops writeDeadlineGrace later. So a client that trickles its
// body or does not read the response cannot hold a handler, its in-flight
// slot or its connection longer. readBody lifts the read deadline once it
// has the whole body, so that it cannot fire while the server waits for
// the connection's next request.
func setDeadlines(w http.ResponseWriter, r *http.Request) {
	deadline, ok := r.Context().Deadline()
	if !ok {
		return
	}
	rc := http.NewResponseController(w)
	if r.ContentLength != 0 {
		if err := rc.SetReadDeadline(deadline); err != nil {
			logger(r).Debug("cannot bound the request body's read", "err", err)
		}
	}
	if err := rc.SetWriteDeadline(deadline.Add(writeDeadlineGrace)); err != nil {
		logger(r).Debug("cannot bound the response's write", "err", err)
	}
}
