//go:build !linux

package apiserver

import (
	"context"
	"net"
)

// watchHangUp calls cancel once the client of conn hangs up; stop, to be
// called before conn is closed, forgets conn.
func watchHangUp(conn net.Conn, cancel context.CancelFunc) (stop func()) {
	go cancelOnHangUp(conn, cancel)
	return func() {}
}
