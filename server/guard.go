package server

import (
	"mime"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
)

// Content types a mutating endpoint accepts. A browser page can send a
// cross-origin POST without asking first only as text/plain, a form or
// multipart; refusing those keeps other sites' pages from driving the daemon
// even where Origin is missing.
var mutatingTypes = []string{"application/json", "application/yaml"}

// checkContentType answers 415 unless r's body is JSON or YAML. It reports
// whether the request may go on.
func checkContentType(w http.ResponseWriter, r *http.Request) bool {
	ct := r.Header.Get("Content-Type")
	mt, _, err := mime.ParseMediaType(ct)
	if err == nil && slices.Contains(mutatingTypes, strings.ToLower(mt)) {
		return true
	}
	if ct == "" {
		ct = "none"
	}
	w.Header().Set("Accept-Post", strings.Join(mutatingTypes, ", "))
	writeError(w, http.StatusUnsupportedMediaType, "Content-Type "+ct+" is not accepted; send application/json or application/yaml")
	return false
}

// allowedOrigin reports whether a request's Origin (if any) may drive the
// daemon: none (not a browser: the CLI, curl), the daemon's own host, or an
// origin allowed with --allow-origin.
func (s *Server) allowedOrigin(r *http.Request) bool {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return true
	}
	if slices.Contains(s.opts.AllowedOrigins, strings.TrimRight(origin, "/")) {
		return true
	}
	u, err := url.Parse(origin)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return false // includes "null": sandboxed frames, file:// pages
	}
	return strings.EqualFold(u.Host, r.Host) && s.allowedHost(r.Host)
}

// allowedHost reports whether host (a Host header) names this daemon: on
// loopback, the bound address or localhost/127.0.0.1/[::1] with its port,
// or a name allowed with --allow-host. A page on an attacker's domain
// that resolves to 127.0.0.1 (DNS rebinding) sends its own name and is
// refused. Off loopback the token guards the daemon and Host is checked
// only when --allow-host names the accepted hosts.
func (s *Server) allowedHost(host string) bool {
	s.mu.Lock()
	bound := s.boundAddr
	s.mu.Unlock()
	h, port, err := net.SplitHostPort(host)
	if err != nil {
		h, port = host, ""
	}
	h = strings.ToLower(strings.TrimSuffix(h, "."))
	for _, a := range s.opts.AllowedHosts {
		ah, ap, err := net.SplitHostPort(a)
		if err != nil {
			ah, ap = a, ""
		}
		if strings.EqualFold(ah, h) && (ap == "" || ap == port) {
			return true
		}
	}
	if bound == "" {
		return true // not listening (handler used directly)
	}
	bh, bport, _ := net.SplitHostPort(bound)
	if !Loopback(bound) {
		return len(s.opts.AllowedHosts) == 0 || strings.EqualFold(h, bh) && port == bport
	}
	if port != bport {
		return false
	}
	switch h {
	case "localhost", "127.0.0.1", "[::1]", "::1", strings.ToLower(bh):
		return true
	}
	return false
}

// guardHost refuses any request whose Host does not name this daemon.
func (s *Server) guardHost(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.allowedHost(r.Host) {
			writeError(w, http.StatusMisdirectedRequest, "Host "+r.Host+" does not name this daemon; use its address (or start it with --allow-host NAME)")
			return
		}
		next.ServeHTTP(w, r)
	})
}
