package httpx

import (
	"context"
	"errors"
	"golang.org/x/sys/unix"
	"io"
	"net"
	"net/netip"
	"os"
	"syscall"
	"time"
)

// dialSocket connects to key, an IP address and port, with the few system
// calls a connection needs: socket, the options net.Dialer sets (no Nagle,
// keep-alive probes after 15 s), connect, and the wait for the handshake.
// net.Dialer adds a dozen steps to each dial (resolution, a context per
// attempt, reading back both addresses, a finalizer) that cost a third of
// a loopback dial's CPU; a run's first round dials one connection per
// agent, thousands at once (docs/PERFORMANCE.md). ok is false when key is
// not an IP address (or has a zone): net.Dialer dials it.
//
// Errors are those net.Dialer returns: *net.OpError with Op "dial",
// wrapping the system call's error (syscall.ECONNREFUSED, ...),
// os.ErrDeadlineExceeded when deadline passes, or the context's error
// when it ends first.
func dialSocket(ctx context.Context, deadline time.Time, key string) (c net.Conn, ok bool, err error) {
	ap, perr := netip.ParseAddrPort(key)
	if perr != nil || ap.Addr().Zone() != "" || !ap.Addr().IsValid() {
		return nil, false, nil
	}
	raddr := net.TCPAddrFromAddrPort(ap)
	fail := func(err error) (net.Conn, bool, error) {
		return nil, true, &net.OpError{Op: "dial", Net: "tcp", Addr: raddr, Err: err}
	}
	if err := ctx.Err(); err != nil {
		return fail(err)
	}
	var sa syscall.Sockaddr
	family := syscall.AF_INET
	if a := ap.Addr().Unmap(); a.Is4() {
		sa = &syscall.SockaddrInet4{Port: int(ap.Port()), Addr: a.As4()}
	} else {
		family = syscall.AF_INET6
		sa = &syscall.SockaddrInet6{Port: int(ap.Port()), Addr: a.As16()}
	}
	fd, err := syscall.Socket(family, syscall.SOCK_STREAM|syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC, syscall.IPPROTO_TCP)
	if err != nil {
		return fail(os.NewSyscallError("socket", err))
	}
	if err := setSocketOptions(fd); err != nil {
		syscall.Close(fd)
		return fail(err)
	}
	inProgress := false
	switch err := syscall.Connect(fd, sa); err {
	case nil, syscall.EISCONN:
	case syscall.EINPROGRESS, syscall.EALREADY, syscall.EINTR:
		inProgress = true
	default:
		syscall.Close(fd)
		return fail(os.NewSyscallError("connect", err))
	}
	// A non-blocking descriptor given to os.NewFile joins the runtime's
	// poller: reads, writes and deadlines behave as a net.Conn's.
	f := os.NewFile(uintptr(fd), "tcp")
	sc := &sockConn{f: f, raddr: raddr}
	if inProgress && !connected(fd) {
		if err := sc.awaitConnect(ctx, deadline); err != nil {
			f.Close()
			return fail(err)
		}
	}
	return sc, true, nil
}

// connected reports whether the socket's handshake has ended: it has a
// peer. On loopback it usually has by the time connect returns.
func connected(fd int) bool {
	_, err := syscall.Getpeername(fd)
	return err == nil
}

// setSocketOptions sets what net.Dialer sets on a TCP connection.
func setSocketOptions(fd int) error {
	for _, o := range [...]struct{ level, name, value int }{
		{syscall.IPPROTO_TCP, syscall.TCP_NODELAY, 1},
		{syscall.SOL_SOCKET, syscall.SO_KEEPALIVE, 1},
		{syscall.IPPROTO_TCP, syscall.TCP_KEEPIDLE, 15},
		{syscall.IPPROTO_TCP, syscall.TCP_KEEPINTVL, 15},
		{syscall.IPPROTO_TCP, syscall.TCP_KEEPCNT, 9},
	} {
		if err := syscall.SetsockoptInt(fd, o.level, o.name, o.value); err != nil {
			return os.NewSyscallError("setsockopt", err)
		}
	}
	return nil
}

// awaitConnect waits for the handshake of a connect in progress, until
// deadline (when not zero) or until ctx ends.
func (c *sockConn) awaitConnect(ctx context.Context, deadline time.Time) error {
	if err := c.f.SetWriteDeadline(deadline); err != nil {
		return err
	}
	stop := context.AfterFunc(ctx, func() { c.f.SetWriteDeadline(longAgo) })
	defer stop()
	rc, err := c.f.SyscallConn()
	if err != nil {
		return err
	}
	// Write calls the function after clearing the poller's record of
	// readiness, so the state is read there first: a handshake that ended
	// before (on loopback, usually within connect itself) will not signal
	// again.
	var connErr error
	werr := rc.Write(func(fd uintptr) bool {
		if connected(int(fd)) {
			return true
		}
		n, err := syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_ERROR)
		if err != nil {
			connErr = os.NewSyscallError("getsockopt", err)
			return true
		}
		switch e := syscall.Errno(n); e {
		case 0, syscall.EINPROGRESS, syscall.EALREADY, syscall.EINTR:
			return false // not yet: wait for the poller
		default:
			connErr = os.NewSyscallError("connect", e)
			return true
		}
	})
	if werr != nil && ctx.Err() != nil {
		return ctx.Err() // as net.Dialer reports it
	}
	if werr != nil {
		var pe *os.PathError
		if errors.As(werr, &pe) {
			werr = pe.Err
		}
		return werr
	}
	if connErr != nil {
		return connErr
	}
	return c.f.SetWriteDeadline(time.Time{})
}

// sockConn is a connection dialled by dialSocket: its errors are
// *net.OpError, as a net.TCPConn's are.
type sockConn struct {
	f     *os.File
	raddr *net.TCPAddr
}

func (c *sockConn) Read(p []byte) (int, error) {
	n, err := c.f.Read(p)
	return n, c.opError("read", err)
}

func (c *sockConn) Write(p []byte) (int, error) {
	n, err := c.f.Write(p)
	return n, c.opError("write", err)
}

func (c *sockConn) Close() error { return c.opError("close", c.f.Close()) }

// LocalAddr asks the system: it is not needed to send a request.
func (c *sockConn) LocalAddr() net.Addr {
	rc, err := c.f.SyscallConn()
	if err != nil {
		return nil
	}
	var la net.Addr
	rc.Control(func(fd uintptr) {
		switch sa, _ := syscall.Getsockname(int(fd)); sa := sa.(type) {
		case *syscall.SockaddrInet4:
			la = &net.TCPAddr{IP: sa.Addr[:], Port: sa.Port}
		case *syscall.SockaddrInet6:
			la = &net.TCPAddr{IP: sa.Addr[:], Port: sa.Port}
		}
	})
	return la
}

func (c *sockConn) RemoteAddr() net.Addr                  { return c.raddr }
func (c *sockConn) SetDeadline(t time.Time) error         { return c.f.SetDeadline(t) }
func (c *sockConn) SetReadDeadline(t time.Time) error     { return c.f.SetReadDeadline(t) }
func (c *sockConn) SetWriteDeadline(t time.Time) error    { return c.f.SetWriteDeadline(t) }
func (c *sockConn) SyscallConn() (syscall.RawConn, error) { return c.f.SyscallConn() }

// opError turns an *os.File's error into the *net.OpError a net.TCPConn
// returns (io.EOF stays as it is; a closed file is net.ErrClosed).
func (c *sockConn) opError(op string, err error) error {
	if err == nil || err == io.EOF {
		return err
	}
	var pe *os.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	if errors.Is(err, os.ErrClosed) {
		err = net.ErrClosed
	}
	return &net.OpError{Op: op, Net: "tcp", Addr: c.raddr, Err: err}
}

// handshakeResent reports whether the kernel sent any of nc's segments
// again, its handshake included (TCP_INFO's total retransmits, read just
// after the connect): a dial that took long without one was slow on this
// side, not dropped by the server. known is false when nc is not a TCP
// socket or the kernel does not say.
func handshakeResent(nc net.Conn) (resent, known bool) {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return false, false
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return false, false
	}
	var info *unix.TCPInfo
	if err := raw.Control(func(fd uintptr) {
		info, err = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
	}); err != nil || info == nil {
		return false, false
	}
	return info.Total_retrans > 0, true
}
