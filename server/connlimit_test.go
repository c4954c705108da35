package server_test

import (
	"bufio"
	"errors"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/grpo-dev/grpo/server"
)

// rawGet sends GET /healthz on c (keep-alive) and reads the answer's status
// within wait; ok is false when none came.
func rawGet(t *testing.T, c net.Conn, r *bufio.Reader, addr string, wait time.Duration) (ok bool) {
	t.Helper()
	if _, err := c.Write([]byte("GET /healthz HTTP/1.1\r\nHost: " + addr + "\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(wait))
	resp, err := http.ReadResponse(r, nil)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return false
	}
	if err != nil {
		t.Fatalf("GET /healthz: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /healthz: %d", resp.StatusCode)
	}
	return true
}

// TestConnectionsAreBounded: with MaxConns 3, a websocket stream and two
// keep-alive connections hold every place: a fourth connection is not
// served (its request waits, unanswered) until one of them closes; the
// stream's close frees a place as an HTTP connection's does. A daemon
// closes promptly with a connection waiting.
func TestConnectionsAreBounded(t *testing.T) {
	e := newEnv(t)
	s := e.MustStart(t, server.Options{MaxConns: 3, MaxStreams: 1})
	addr := strings.TrimPrefix(s.URL(), "http://")
	ws, _, err := websocket.DefaultDialer.Dial("ws://"+addr+"/ws", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	dial := func() (net.Conn, *bufio.Reader) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c, bufio.NewReader(c)
	}
	var held []net.Conn
	for range 2 {
		c, r := dial()
		if !rawGet(t, c, r, addr, 10*time.Second) {
			t.Fatal("a connection within MaxConns 3 was not served")
		}
		held = append(held, c)
	}
	fourth, r4 := dial()
	if rawGet(t, fourth, r4, addr, 500*time.Millisecond) {
		t.Fatal("a fourth connection was served while a stream and two connections held MaxConns 3")
	}
	// The request sent waits; closing the stream frees its place.
	ws.Close()
	fourth.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(r4, nil)
	if err != nil {
		t.Fatalf("the fourth connection after the stream closed: %v", err)
	}
	resp.Body.Close()
	// Now the fourth holds the stream's place: a fifth waits until an
	// HTTP connection closes.
	fifth, r5 := dial()
	if rawGet(t, fifth, r5, addr, 500*time.Millisecond) {
		t.Fatal("a fifth connection was served while three held MaxConns 3")
	}
	held[0].Close()
	fifth.SetReadDeadline(time.Now().Add(10 * time.Second))
	if resp, err = http.ReadResponse(r5, nil); err != nil {
		t.Fatalf("the fifth connection after one closed: %v", err)
	}
	resp.Body.Close()
	// Full again, with a sixth waiting: Close does not hang on it.
	dial()
	start := time.Now()
	s.Close()
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("Close took %v with a connection waiting", d)
	}
}

// TestConnectionTimeoutsFreePlaces: the daemon's timeouts still close the
// connections that hold its places: two clients that send a request's
// head and trickle nothing more hold MaxConns 2 only until
// Options.BodyTimeout; a third is then served without either closing.
func TestConnectionTimeoutsFreePlaces(t *testing.T) {
	e := newEnv(t)
	s := e.MustStart(t, server.Options{MaxConns: 2, MaxStreams: 1, BodyTimeout: 300 * time.Millisecond})
	addr := strings.TrimPrefix(s.URL(), "http://")
	for range 2 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := c.Write([]byte("POST /api/v1/runs HTTP/1.1\r\nHost: " + addr + "\r\nContent-Type: application/yaml\r\nContent-Length: 60000\r\n\r\nrun:")); err != nil {
			t.Fatal(err)
		}
	}
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	if !rawGet(t, c, bufio.NewReader(c), addr, 10*time.Second) {
		t.Fatal("a third connection was not served after the trickling ones passed BodyTimeout")
	}
	if d := time.Since(start); d < 200*time.Millisecond {
		t.Fatalf("a third connection was served after %v, while two trickling ones held MaxConns 2 (BodyTimeout 300 ms)", d)
	}
}

// TestMaxConnsAboveMaxStreams: a daemon whose websocket streams could hold
// every connection does not start.
func TestMaxConnsAboveMaxStreams(t *testing.T) {
	e := newEnv(t)
	s := server.New(server.Options{Store: e.store, DataDir: t.TempDir(), Addr: "127.0.0.1:0", MaxConns: 8, MaxStreams: 8})
	err := s.Start(t.Context())
	if err == nil {
		s.Close()
		t.Fatal("started with MaxConns 8 and MaxStreams 8")
	}
	if !strings.Contains(err.Error(), "at most 8 connections (grpo serve --max-conns) with up to 8 websocket streams (--max-streams)") || !strings.Contains(err.Error(), "raise --max-conns or lower --max-streams") {
		t.Fatalf("Start: %v", err)
	}
}
