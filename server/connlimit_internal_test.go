package server

import (
	"io"
	"log/slog"
	"net"
	"testing"
	"time"
)

// TestLimitConnCloseWrite: a connection from the limited listener still
// half-closes (net/http sends its answer so, then waits, before closing a
// connection whose body it refused): the peer reads the answer and EOF
// while the connection still holds its place, which Close then frees.
func TestLimitConnCloseWrite(t *testing.T) {
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := newLimitListener(tcp, 1, slog.New(slog.DiscardHandler))
	defer ln.Close()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	c, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	cw, ok := c.(interface{ CloseWrite() error })
	if !ok {
		t.Fatal("the listener's connection has no CloseWrite")
	}
	c.Write([]byte("answer"))
	if err := cw.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	client.SetReadDeadline(time.Now().Add(5 * time.Second))
	if b, err := io.ReadAll(client); string(b) != "answer" || err != nil {
		t.Fatalf("client read %q, %v; want the answer and EOF", b, err)
	}
	if len(ln.slots) != 1 {
		t.Fatalf("%d places held after CloseWrite, want 1", len(ln.slots))
	}
	c.Close()
	c.Close() // a second Close frees nothing more
	if len(ln.slots) != 0 {
		t.Fatalf("%d places held after Close, want 0", len(ln.slots))
	}
}
