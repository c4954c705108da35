//go:build unix

package httpx

import (
	"errors"
	"syscall"
)

// openCheck is a connection's means of open, made at its first reuse and
// kept: the raw connection and the function it runs (a fresh closure per
// check would cost an allocation for every reused connection).
type openCheck struct {
	raw   syscall.RawConn
	probe func(fd uintptr) bool
	open  bool
	one   [1]byte
}

// open reports whether an idle connection is still usable: one
// non-blocking read finds nothing to read (EAGAIN). A server that closed
// the connection while it was idle (end of file) or sent something
// unasked is not written to: net/http's reader goroutine notices the same
// before a request is sent on a closed connection.
func (c *pconn) open() bool {
	if c.br.Buffered() > 0 {
		return false
	}
	k := &c.check
	if k.probe == nil {
		sc, ok := c.Conn.(syscall.Conn)
		if !ok {
			return true
		}
		rc, err := sc.SyscallConn()
		if err != nil {
			return false
		}
		k.raw = rc
		k.probe = func(fd uintptr) bool {
			_, err := syscall.Read(int(fd), k.one[:])
			k.open = errors.Is(err, syscall.EAGAIN)
			return true // do not wait
		}
	}
	k.open = false
	if k.raw.Read(k.probe) != nil {
		return false
	}
	return k.open
}
