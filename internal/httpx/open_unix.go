//go:build unix

package httpx

import (
	"errors"
	"syscall"
)

// open reports whether an idle connection is still usable: one
// non-blocking read finds nothing to read (EAGAIN). A server that closed
// the connection while it was idle (end of file) or sent something
// unasked is not written to: net/http's reader goroutine notices the same
// before a request is sent on a closed connection.
func (c *pconn) open() bool {
	if c.br.Buffered() > 0 {
		return false
	}
	sc, ok := c.Conn.(syscall.Conn)
	if !ok {
		return true
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	open := false
	var b [1]byte
	rc.Read(func(fd uintptr) bool {
		_, err := syscall.Read(int(fd), b[:])
		open = errors.Is(err, syscall.EAGAIN)
		return true // do not wait
	})
	return open
}
