package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"
)

// ServeLLM serves LLMHandler's fake inference server — the same answers
// on the same paths — on a loopback listener until ctx ends, with a
// minimal HTTP/1.1 loop on raw connections instead of net/http: the
// rollout measurements need a server that costs almost no CPU, and
// net/http's server spends about as much CPU per call as the client it
// answers (docs/PERFORMANCE.md), which on a shared machine is CPU the
// client does not get. It reads requests with a Content-Length (what
// every OpenAI client sends), keeps connections alive, and answers
// anything else with 400 or 404 and, for a malformed request, closes the
// connection. ready receives the address once it accepts connections.
// One route of its own, GET /bench/cpu, answers the process's CPU time
// so far in nanoseconds (user + system), so that the bench can say what
// the server cost per call (serverCPU).
func ServeLLM(ctx context.Context, service time.Duration, ready func(addr string)) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("listen on loopback: %w", err)
	}
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	ready(ln.Addr().String())
	s := &leanServer{service: service, done: ctx.Done()}
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, syscall.EMFILE) {
				time.Sleep(10 * time.Millisecond) // out of descriptors: wait for some to close
				continue
			}
			return fmt.Errorf("accept: %w", err)
		}
		go s.serve(c)
	}
}

type leanServer struct {
	service time.Duration
	done    <-chan struct{}
	calls   atomic.Uint64
}

// leanAnswers are the whole answers, head and body, by route; "400" and
// "404" answer what has none.
var leanAnswers = map[string][]byte{
	"GET /v1/models":               full(200, "application/json", modelsJSON),
	"POST /v1/load_lora_adapter":   full(200, "text/plain", "ok"),
	"POST /v1/unload_lora_adapter": full(200, "text/plain", "ok"),
	"GET /health":                  full(200, "text/plain", "ok"),
	"GET /metrics":                 full(200, "text/plain", metricsText),
	"404":                          full(404, "text/plain", "404 page not found\n"),
	"400":                          full(400, "text/plain", "400 Bad Request\n"),
}

// cpuRoute answers the server process's CPU time (ServeLLM).
const cpuRoute = "GET /bench/cpu"

// leanCompletions are the answers to chat completions, in turn.
var leanCompletions = func() [][]byte {
	out := make([][]byte, len(answers))
	for i, a := range answers {
		out[i] = full(200, "application/json", string(a))
	}
	return out
}()

func full(code int, contentType, body string) []byte {
	return fmt.Appendf(nil, "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n%s",
		code, statusText(code), contentType, len(body), body)
}

func statusText(code int) string {
	switch code {
	case 200:
		return "OK"
	case 404:
		return "Not Found"
	}
	return "Bad Request"
}

// serve answers c's requests in turn until it closes or sends something
// malformed.
func (s *leanServer) serve(c net.Conn) {
	defer c.Close()
	br := bufio.NewReaderSize(c, 4096)
	for {
		route, length, keep, ok := readLeanRequest(br)
		if !ok {
			c.Write(leanAnswers["400"])
			return
		}
		if _, err := br.Discard(length); err != nil {
			return
		}
		answer := leanAnswers[route]
		if route == "POST /v1/chat/completions" {
			answer = leanCompletions[s.calls.Add(1)%uint64(len(leanCompletions))]
			t := time.NewTimer(s.service)
			select {
			case <-t.C:
			case <-s.done:
				t.Stop()
				return
			}
		} else if route == cpuRoute {
			answer = full(200, "text/plain", strconv.FormatInt(cpuTime().Nanoseconds(), 10))
		} else if answer == nil {
			answer = leanAnswers["404"]
		}
		if _, err := c.Write(answer); err != nil || !keep {
			return
		}
	}
}

// readLeanRequest reads a request's head: its method and path (without
// the query) as the route, its Content-Length and whether the connection
// stays open after the answer. ok is false for a connection that ended
// or a head that is malformed, too long (a header line over the buffer)
// or announces a body of unknown length.
func readLeanRequest(br *bufio.Reader) (route string, length int, keep, ok bool) {
	line, err := br.ReadSlice('\n')
	if err != nil {
		return "", 0, false, false
	}
	method, rest, ok1 := bytes.Cut(bytes.TrimRight(line, "\r\n"), []byte(" "))
	target, proto, ok2 := bytes.Cut(rest, []byte(" "))
	if !ok1 || !ok2 || len(method) == 0 || len(target) == 0 || target[0] != '/' {
		return "", 0, false, false
	}
	if i := bytes.IndexByte(target, '?'); i >= 0 {
		target = target[:i]
	}
	keep = string(proto) == "HTTP/1.1"
	if !keep && string(proto) != "HTTP/1.0" {
		return "", 0, false, false
	}
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			return "", 0, false, false
		}
		line = bytes.TrimRight(line, "\r\n")
		if len(line) == 0 {
			break
		}
		name, value, found := bytes.Cut(line, []byte(":"))
		if !found {
			return "", 0, false, false
		}
		value = bytes.TrimSpace(value)
		switch {
		case bytes.EqualFold(name, []byte("Content-Length")):
			n, err := strconv.Atoi(string(value))
			if err != nil || n < 0 {
				return "", 0, false, false
			}
			length = n
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			return "", 0, false, false
		case bytes.EqualFold(name, []byte("Connection")):
			if bytes.EqualFold(value, []byte("close")) {
				keep = false
			} else if bytes.EqualFold(value, []byte("keep-alive")) {
				keep = true
			}
		}
	}
	return string(method) + " " + string(target), length, keep, true
}
