package server

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// TestAnswerWriteIsBounded: a client that asks for an answer and stops
// reading it holds its connection (and its place under MaxConns) only
// until the write deadline, when the handler's write fails.
func TestAnswerWriteIsBounded(t *testing.T) {
	written := make(chan error, 1)
	big := bytes.Repeat([]byte("x"), 1<<20)
	s := &Server{opts: Options{WriteTimeout: 200 * time.Millisecond}}
	srv := httptest.NewServer(s.hardened(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var err error
		for i := 0; i < 256 && err == nil; i++ { // 256 MB: more than any socket buffers hold
			_, err = w.Write(big)
		}
		written <- err
	})))
	defer srv.Close()
	c, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "GET /big HTTP/1.1\r\nHost: %s\r\n\r\n", srv.Listener.Addr())
	// The client reads nothing.
	select {
	case err := <-written:
		if err == nil {
			t.Fatal("256 MB written to a client that read none of it")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the answer's write still blocked 10 s after its 200 ms deadline")
	}
}
