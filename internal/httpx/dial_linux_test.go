//go:build linux

package httpx

import (
	"context"
	"errors"
	"net"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// fullListener is a loopback listener that never accepts and whose
// accept queue is full, so the kernel drops new handshakes: a dial to it
// hangs as one to a host that has gone away does.
func fullListener(t *testing.T) string {
	t.Helper()
	addr, _ := fullListenerFD(t)
	return addr
}

// fullListenerFD is fullListener and its socket, whose queue the caller
// may empty with accept.
func fullListenerFD(t *testing.T) (string, int) {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	addr := "127.0.0.1:" + strconv.Itoa(sa.(*syscall.SockaddrInet4).Port)
	// Fill the queue: connections that complete their handshake and wait
	// to be accepted, until one does not complete. (A loopback handshake
	// ends inside connect; a second is long enough that a loaded machine
	// does not make a dial that completed look like one that did not.)
	for i := 0; i < 8; i++ {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return addr, fd
		}
		t.Cleanup(func() { c.Close() })
	}
	t.Skip("the kernel completed every handshake: cannot make a dial hang here")
	return "", 0
}

// TestDialHeldToTheAttempt: a dial that hangs fails the attempt at its
// timeout, as a TimeoutError, and at the caller's deadline with the
// caller's error.
func TestDialHeldToTheAttempt(t *testing.T) {
	addr := fullListener(t)
	timeout := 300 * time.Millisecond
	start := time.Now()
	_, _, err := New(Options{Timeout: timeout}).Do(context.Background(), &Request{Method: "POST", URL: "http://" + addr + "/x", Body: []byte(`{}`)})
	var te *TimeoutError
	if !errors.As(err, &te) || time.Since(start) > 20*time.Second {
		t.Fatalf("dial to a full queue: err %v after %v, want a TimeoutError after %v", err, time.Since(start), timeout)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, _, err = New(Options{Timeout: time.Minute}).Do(ctx, &Request{Method: "POST", URL: "http://" + addr + "/x", Body: []byte(`{}`)})
	if errors.As(err, &te) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("dial under the caller's deadline: err %v, want context.DeadlineExceeded", err)
	}
}
