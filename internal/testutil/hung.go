package testutil

import (
	"net"
	"sync"
	"testing"
)

// HungServer accepts TCP connections on 127.0.0.1 and never answers them:
// a replica whose server is wedged. It returns its base URL
// ("http://127.0.0.1:PORT"); the listener and every connection it took
// are closed when the test ends.
func HungServer(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return "http://" + ln.Addr().String()
}
