package apiserver

import (
	"fmt"
	"net/http"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// requestTimeout is how long a request that is not a watch may run, as
// kube-apiserver's WithRequestDeadline works it out: max, or the request's
// ?timeout when that is shorter (0 means max). A timeout that is not a Go
// duration is kube's 400, which watches (long-running: their timeout is
// timeoutSeconds) are not checked for.
func requestTimeout(r *http.Request, max time.Duration) (time.Duration, error) {
	value := r.URL.Query().Get("timeout")
	if value == "" {
		return max, nil
	}
	timeout, err := time.ParseDuration(value)
	if err != nil {
		return max, apierrors.NewBadRequest(fmt.Sprintf("invalid timeout specified in the request URL - %v", err))
	}
	if timeout > 0 && timeout < max {
		return timeout, nil
	}
	return max, nil
}

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
