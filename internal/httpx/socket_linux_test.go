package httpx

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"
)

// serveOnce listens on addr and hands the first connection to handle; it
// returns the listener's address, or "" when addr cannot be listened on.
func serveOnce(t *testing.T, addr string, handle func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return ""
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		if c, err := ln.Accept(); err == nil {
			handle(c)
		}
	}()
	return ln.Addr().String()
}

// sayAndClose writes msg and closes the connection in order.
func sayAndClose(msg string) func(net.Conn) {
	return func(c net.Conn) {
		c.Write([]byte(msg))
		c.Close()
	}
}

// TestDialSocketManyAtOnce: hundreds of loopback dials at once, most of
// whose handshakes end inside connect, all connect before their deadline
// and carry bytes both ways. (A dial that cleared the poller's readiness
// after the handshake had ended waited for its deadline and failed: about
// one in a hundred did at 2,000 at once.) The deadline is a minute and no
// bound on the wall time is asserted: a loaded CI machine may take
// seconds over the dials, which a shorter bound would fail.
func TestDialSocketManyAtOnce(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { // echo
				defer c.Close()
				io.Copy(c, c)
			}()
		}
	}()
	const n = 200
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, ok, err := dialSocket(context.Background(), time.Now().Add(time.Minute), ln.Addr().String())
			if !ok || err != nil {
				errs <- err
				return
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(time.Minute))
			if _, err := c.Write([]byte("ping")); err != nil {
				errs <- err
				return
			}
			var b [4]byte
			if _, err := io.ReadFull(c, b[:]); err != nil || string(b[:]) != "ping" {
				errs <- errors.Join(err, errors.New("echo: "+string(b[:])))
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestAwaitConnectAfterHandshake: waiting for a handshake that ended
// before the wait began returns at once. The poller has seen the
// socket writable by then, and that record is cleared when the wait
// begins: a wait for the next signal would last until the deadline.
func TestAwaitConnectAfterHandshake(t *testing.T) {
	addr := serveOnce(t, "127.0.0.1:0", func(c net.Conn) { io.Copy(io.Discard, c); c.Close() })
	c, _, err := dialSocket(context.Background(), time.Time{}, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	time.Sleep(50 * time.Millisecond) // the poller takes the writable signal
	// A wait for the next signal fails at the deadline: no wall-clock
	// bound is asserted, which a loaded machine could overrun.
	start := time.Now()
	if err := c.(*sockConn).awaitConnect(context.Background(), time.Now().Add(time.Minute)); err != nil {
		t.Fatalf("awaitConnect on a connected socket: %v after %v", err, time.Since(start))
	}
}

// TestDialSocketErrors: a refused dial, a dial past its deadline and one
// whose context ends fail as net.Dialer's do; a name is left to
// net.Dialer.
func TestDialSocketErrors(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	_, ok, err := dialSocket(context.Background(), time.Time{}, closed)
	var oe *net.OpError
	if !ok || !errors.As(err, &oe) || oe.Op != "dial" || !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial to a closed port: ok %v, err %#v, want a dial *net.OpError with ECONNREFUSED", ok, err)
	}

	full := fullListener(t)
	_, _, err = dialSocket(context.Background(), time.Now().Add(100*time.Millisecond), full)
	if !errors.As(err, &oe) || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("dial past its deadline: %v, want os.ErrDeadlineExceeded in a *net.OpError", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	_, _, err = dialSocket(ctx, time.Time{}, full)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("dial whose context is cancelled: %v, want context.Canceled", err)
	}
	_, _, err = dialSocket(ctx, time.Time{}, closed)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("dial with an ended context: %v, want context.Canceled", err)
	}

	for _, key := range []string{"localhost:80", "example.invalid:80", "[fe80::1%lo]:80"} {
		if _, ok, _ := dialSocket(context.Background(), time.Time{}, key); ok {
			t.Errorf("dialSocket(%q) dialled: names and zones are net.Dialer's", key)
		}
	}
}

// TestSockConnErrors: a dialled connection's errors are *net.OpError as a
// net.TCPConn's are: a reset, a deadline, use after Close.
func TestSockConnErrors(t *testing.T) {
	accepted := make(chan net.Conn, 1)
	addr := serveOnce(t, "127.0.0.1:0", func(c net.Conn) { accepted <- c })
	c, _, err := dialSocket(context.Background(), time.Time{}, addr)
	if err != nil {
		t.Fatal(err)
	}
	srv := <-accepted
	if c.RemoteAddr().String() != addr || c.LocalAddr().String() != srv.RemoteAddr().String() {
		t.Errorf("addresses: local %v remote %v, server sees %v at %v", c.LocalAddr(), c.RemoteAddr(), srv.RemoteAddr(), addr)
	}

	c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	var b [8]byte
	_, err = c.Read(b[:])
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("read past its deadline: %v, want a timeout net.Error", err)
	}
	c.SetReadDeadline(time.Time{})

	srv.(*net.TCPConn).SetLinger(0)
	srv.Close() // a reset
	_, err = c.Read(b[:])
	var oe *net.OpError
	if !errors.As(err, &oe) || oe.Op != "read" || !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("read after the server reset: %#v, want a read *net.OpError with ECONNRESET", err)
	}
	c.Close()
	if _, err := c.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
		t.Errorf("write after Close: %v, want net.ErrClosed", err)
	}
	if _, err := c.Read(b[:]); !errors.Is(err, net.ErrClosed) {
		t.Errorf("read after Close: %v, want net.ErrClosed", err)
	}
}

// TestSockConnEOF: a server's orderly close is io.EOF itself.
func TestSockConnEOF(t *testing.T) {
	addr := serveOnce(t, "127.0.0.1:0", sayAndClose("bye"))
	c, _, err := dialSocket(context.Background(), time.Time{}, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	b, err := io.ReadAll(c)
	if err != nil || string(b) != "bye" {
		t.Fatalf("read to the end: %q, %v", b, err)
	}
	if n, err := c.Read(make([]byte, 4)); n != 0 || err != io.EOF {
		t.Fatalf("read after the end: %d, %v, want 0, io.EOF", n, err)
	}
}

// TestDialSocketIPv6: an IPv6 address is dialled too (skipped where the
// machine has no IPv6 loopback).
func TestDialSocketIPv6(t *testing.T) {
	addr := serveOnce(t, "[::1]:0", sayAndClose("v6"))
	if addr == "" {
		t.Skip("no IPv6 loopback here")
	}
	c, ok, err := dialSocket(context.Background(), time.Time{}, addr)
	if !ok || err != nil {
		t.Fatalf("dial %s: ok %v, %v", addr, ok, err)
	}
	defer c.Close()
	if b, err := io.ReadAll(c); err != nil || string(b) != "v6" {
		t.Fatalf("read: %q, %v", b, err)
	}
}
