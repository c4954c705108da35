package server

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/gorilla/websocket"
)

const (
	wsWriteWait  = 10 * time.Second
	wsPingPeriod = 30 * time.Second
	wsPongWait   = 2 * wsPingPeriod
)

// serveWS streams run events as JSON text messages, one event per
// message; ?run=NAME keeps only that run's events. The client is
// subscribed before the handshake is answered, so that it misses no event
// published once it holds the answer.
func (s *Server) serveWS(w http.ResponseWriter, r *http.Request) {
	c, err := s.hub.subscribe(r.URL.Query().Get("run"))
	if errors.Is(err, errHubFull) {
		writeError(w, http.StatusServiceUnavailable, fmt.Sprintf("this daemon streams events to at most %d clients at once (grpo serve --max-streams); close a dashboard or a watch", s.opts.MaxStreams))
		return
	}
	if c != nil {
		defer s.hub.unsubscribe(c)
	}
	up := websocket.Upgrader{CheckOrigin: s.checkOrigin}
	conn, err := up.Upgrade(w, r, nil)
	if err != nil {
		return // the upgrader has answered
	}
	defer conn.Close()
	if c == nil { // the daemon is closing
		conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseGoingAway, reasonShutdown), time.Now().Add(wsWriteWait))
		return
	}

	// The reader notices the peer going away and answers pings; clients
	// send nothing else.
	readerDone := make(chan struct{})
	conn.SetReadLimit(4096)
	conn.SetReadDeadline(time.Now().Add(wsPongWait))
	conn.SetPongHandler(func(string) error { return conn.SetReadDeadline(time.Now().Add(wsPongWait)) })
	go func() {
		defer close(readerDone)
		for {
			if _, _, err := conn.ReadMessage(); err != nil {
				return
			}
		}
	}()

	ping := time.NewTicker(wsPingPeriod)
	defer ping.Stop()
	for {
		select {
		case b := <-c.send:
			conn.SetWriteDeadline(time.Now().Add(wsWriteWait))
			if err := conn.WriteMessage(websocket.TextMessage, b); err != nil {
				return
			}
		case <-c.gone:
			code := websocket.ClosePolicyViolation
			if c.reason == reasonShutdown {
				code = websocket.CloseGoingAway
			}
			conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, c.reason), time.Now().Add(wsWriteWait))
			return
		case <-ping.C:
			if err := conn.WriteControl(websocket.PingMessage, nil, time.Now().Add(wsWriteWait)); err != nil {
				return
			}
		case <-readerDone:
			return
		}
	}
}

// checkOrigin accepts requests without an Origin header (not a browser:
// grpo watch, curl), from a page served by this host, or from an allowed
// origin.
func (s *Server) checkOrigin(r *http.Request) bool { return s.allowedOrigin(r) }
