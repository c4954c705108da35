//go:build linux

package httpx

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"strconv"
	"strings"
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

// TestSlowDialWarned: a connection whose handshake the server's kernel
// dropped (its accept queue full), completed when the kernel sends it
// again, is warned of once, naming the address; a fast one is not.
func TestSlowDialWarned(t *testing.T) {
	addr, fd := fullListenerFD(t)
	var log bytes.Buffer // written by the dial, on this goroutine
	tr := &Transport{Logger: slog.New(slog.NewTextHandler(&log, nil)), slowDialAfter: 500 * time.Millisecond}
	// Room in the queue shortly after the dial starts: the handshake sent
	// again a second later completes.
	time.AfterFunc(200*time.Millisecond, func() {
		syscall.SetNonblock(fd, true)
		for {
			nfd, _, err := syscall.Accept(fd)
			if err != nil {
				return
			}
			syscall.Close(nfd)
		}
	})
	start := time.Now()
	c, err := tr.dialConn(context.Background(), time.Now().Add(20*time.Second), addr)
	if err != nil {
		t.Fatalf("dial once the queue had room: %v", err)
	}
	c.Close()
	if took := time.Since(start); took < 500*time.Millisecond {
		t.Skipf("the dial took %v: the kernel did not drop the handshake", took)
	}
	got := log.String()
	if strings.Count(got, "slow TCP connect: the server completed the handshake late") != 1 || !strings.Contains(got, "addr="+addr) || !strings.Contains(got, "raise its backlog") {
		t.Fatalf("log %q: want one slow-connect warning naming %s and the backlog", got, addr)
	}
	// Once a minute per address; nothing for a fast dial.
	tr.noteDial(addr, time.Second, true)
	tr.noteDial("127.0.0.1:1", time.Millisecond, true)
	if n := strings.Count(log.String(), "slow TCP connect"); n != 1 {
		t.Fatalf("%d warnings after a second slow dial within the minute and a fast one, want 1", n)
	}
	tr.noteDial("127.0.0.1:2", time.Second, true)
	if n := strings.Count(log.String(), "slow TCP connect"); n != 2 {
		t.Fatalf("%d warnings after a slow dial to another address, want 2", n)
	}
}

// TestSlowDialNotDropped: a dial that took long though the server's
// kernel answered its first handshake (here: any dial, with the threshold
// at a nanosecond) is warned of as time spent on this side, without the
// backlog advice, which would send the user to the wrong server setting.
func TestSlowDialNotDropped(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var log bytes.Buffer
	tr := &Transport{Logger: slog.New(slog.NewTextHandler(&log, nil)), slowDialAfter: time.Nanosecond}
	c, err := tr.dialConn(context.Background(), time.Now().Add(time.Minute), ln.Addr().String())
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	c.Close()
	got := log.String()
	if strings.Count(got, "slow TCP connect: no handshake was sent again, so the time went on this side") != 1 || strings.Contains(got, "raise its backlog") {
		t.Fatalf("log %q: want one warning that the time went on this side, without the backlog advice", got)
	}
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
