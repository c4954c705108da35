package server

import (
	"log/slog"
	"net"
	"sync"
	"time"
)

// DefaultMaxConns bounds the connections the daemon holds open at once
// (grpo serve --max-conns): far above what a few dashboards (a browser
// opens at most 6 connections to a host, and one websocket), grpo CLIs
// and a Prometheus scraper hold, and above DefaultMaxStreams, so that
// the websocket streams, which count too, leave 3,072 connections for
// the API however many are open.
const DefaultMaxConns = 4096

// limitListener accepts at most cap(slots) connections open at once. Past
// that Accept waits for one to close; the connections waiting meanwhile
// stay in the kernel's listen backlog, unanswered (not refused). A
// connection's slot is freed when it is closed, by the HTTP server (the
// existing timeouts: a header not sent within ReadHeaderTimeout, a body
// past Options.BodyTimeout, an answer not read by Options.WriteTimeout, a
// keep-alive connection idle for IdleTimeout)
// or by the websocket handler that hijacked it.
//
// It is not golang.org/x/net/netutil.LimitListener: that one waits at the
// limit without a sign (warn below is the operator's only clue that
// clients hang), and its connections hide CloseWrite, which net/http
// needs to deliver a 413 (limitConn.CloseWrite, TestLimitConnCloseWrite).
type limitListener struct {
	net.Listener
	slots  chan struct{}
	done   chan struct{} // closed by Close: a waiting Accept returns
	once   sync.Once
	logger *slog.Logger

	mu     sync.Mutex
	warned time.Time // when the last "at the limit" warning was logged
}

func newLimitListener(ln net.Listener, n int, logger *slog.Logger) *limitListener {
	return &limitListener{Listener: ln, slots: make(chan struct{}, n), done: make(chan struct{}), logger: logger}
}

// Accept waits for a free slot, then for a connection.
func (l *limitListener) Accept() (net.Conn, error) {
	select {
	case l.slots <- struct{}{}:
	default:
		l.warn()
		select {
		case l.slots <- struct{}{}:
		case <-l.done:
			return nil, net.ErrClosed
		}
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.slots
		return nil, err
	}
	return &limitConn{Conn: c, release: func() { <-l.slots }}, nil
}

// warn logs, at most once a minute, that new connections wait.
func (l *limitListener) warn() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if now := time.Now(); l.warned.IsZero() || now.Sub(l.warned) >= time.Minute {
		l.warned = now
		l.logger.Warn("connections at the limit: new ones wait until one closes (grpo serve --max-conns)", "limit", cap(l.slots))
	}
}

// Close stops listening; a waiting Accept returns net.ErrClosed.
func (l *limitListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return l.Listener.Close()
}

// limitConn frees its listener's slot when first closed.
type limitConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

// CloseWrite half-closes a TCP connection. net/http does it before closing
// a connection whose request it did not read to the end (a 413), so that
// the client reads the answer rather than a reset; the wrapper would hide
// it.
func (c *limitConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
