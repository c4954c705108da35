package server

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/grpo-dev/grpo/checkpoint"
	"github.com/grpo-dev/grpo/config"
	"github.com/grpo-dev/grpo/promote"
	"github.com/grpo-dev/grpo/run"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.yaml.in/yaml/v3"
)

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("POST /api/v1/runs", s.mutating(s.handleCreate))
	mux.HandleFunc("GET /api/v1/runs", s.handleList)
	mux.HandleFunc("GET /api/v1/runs/{id}", s.handleShow)
	mux.HandleFunc("GET /api/v1/runs/{id}/steps", s.handleSteps)
	mux.HandleFunc("GET /api/v1/runs/{id}/best", s.handleBest)
	mux.HandleFunc("GET /api/v1/runs/{id}/steps/{step}/transcripts", s.handleTranscripts)
	mux.Handle("POST /api/v1/runs/{id}/cancel", s.mutating(s.handleCancel))
	mux.Handle("POST /api/v1/runs/{id}/promote", s.mutating(s.handlePromote))
	mux.Handle("POST /api/v1/runs/{id}/resume", s.mutating(s.handleResume))
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.opts.Registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /ws", s.serveWS)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok\n") })
	mux.Handle("GET /", dashboard(dashboardSettings{GrafanaURL: s.opts.GrafanaURL}))
	return s.guardHost(s.hardened(apiFallback(mux)))
}

// hardened bounds the time to read each request, body included (a client
// trickling a body held its connection for as long as it liked), and to
// write its answer (a client that stopped reading held it too; the
// websocket stream keeps its own deadlines), and forbids framing the
// dashboard on another site's page (clickjacking its Cancel button) and
// sniffing answers' types.
func (s *Server) hardened(next http.Handler) http.Handler {
	readTimeout, writeTimeout := s.opts.BodyTimeout, s.opts.WriteTimeout
	if readTimeout <= 0 {
		readTimeout = DefaultBodyTimeout
	}
	if writeTimeout <= 0 {
		writeTimeout = DefaultWriteTimeout
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("X-Frame-Options", "DENY")
		h.Set("Content-Security-Policy", "frame-ancestors 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		if r.URL.Path != "/ws" { // the stream sets its own (net/http clears these after each request and on a hijack)
			rc := http.NewResponseController(w)
			now := time.Now()
			rc.SetReadDeadline(now.Add(readTimeout))
			rc.SetWriteDeadline(now.Add(writeTimeout))
		}
		next.ServeHTTP(w, r)
	})
}

// apiFallback answers, in JSON, a request under /api/ that no API
// endpoint takes: 405 naming the methods the path takes (a GET of
// .../cancel was the dashboard's 404 page, "GET /" being the only pattern
// its method matched), or 404.
func apiFallback(mux *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasPrefix(r.URL.Path, "/api/") || routed(mux, r, r.Method) {
			mux.ServeHTTP(w, r)
			return
		}
		var allow []string
		for _, m := range []string{http.MethodGet, http.MethodPost} {
			if routed(mux, r, m) {
				allow = append(allow, m)
			}
		}
		if len(allow) == 0 {
			writeError(w, http.StatusNotFound, "no API endpoint "+r.URL.Path+" (grpo serve --help lists them)")
			return
		}
		w.Header().Set("Allow", strings.Join(allow, ", "))
		writeError(w, http.StatusMethodNotAllowed, fmt.Sprintf("%s %s: method not allowed; use %s", r.Method, r.URL.Path, strings.Join(allow, " or ")))
	})
}

// routed reports whether an API endpoint of mux (not the dashboard) takes
// r's path with method.
func routed(mux *http.ServeMux, r *http.Request, method string) bool {
	probe := r.WithContext(r.Context())
	probe.Method = method
	_, pattern := mux.Handler(probe)
	return pattern != "" && pattern != "GET /"
}

// mutating guards an endpoint that changes state: a browser page of
// another origin is refused, the body must be JSON or YAML, and when the
// daemon has a token, the request must carry it as a bearer token.
func (s *Server) mutating(h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.allowedOrigin(r) {
			writeError(w, http.StatusForbidden, "Origin "+r.Header.Get("Origin")+" may not drive this daemon (start it with --allow-origin ORIGIN to allow a page)")
			return
		}
		if !checkContentType(w, r) {
			return
		}
		if s.opts.Token != "" {
			got, ok := bearerToken(r.Header.Get("Authorization"))
			if !ok || subtle.ConstantTimeCompare([]byte(got), []byte(s.opts.Token)) != 1 {
				w.Header().Set("WWW-Authenticate", `Bearer realm="grpo"`)
				writeError(w, http.StatusUnauthorized, "missing or wrong bearer token (Authorization: Bearer <token>)")
				return
			}
		}
		h(w, r)
	})
}

// apiError is the body of every error answer.
type apiError struct {
	Error string `json:"error"`
}

func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, apiError{Error: msg})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

// storeError answers a store read that failed.
func storeError(w http.ResponseWriter, err error) {
	if errors.Is(err, checkpoint.ErrRunNotFound) || errors.Is(err, checkpoint.ErrNoDatabase) {
		writeError(w, http.StatusNotFound, err.Error())
		return
	}
	writeError(w, http.StatusInternalServerError, err.Error())
}

// handleCreate launches a run from a YAML or JSON config body. Everything
// a posted config could abuse is checked before the run is stored: size,
// aliases, file paths, peers and credentials, limits, the number of runs.
func (s *Server) handleCreate(w http.ResponseWriter, r *http.Request) {
	limit := s.opts.MaxBodyBytes
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("config body is larger than %d bytes (a limit of this daemon: grpo serve --max-body)", limit))
			return
		}
		writeError(w, http.StatusBadRequest, fmt.Sprintf("read config body: %v", err))
		return
	}
	// An empty body is a request sent without its config (curl -XPOST
	// without --data), not a wish for the default run, which {} asks for.
	if len(bytes.TrimSpace(body)) == 0 {
		writeError(w, http.StatusBadRequest, "empty config body: send the run's config as YAML or JSON ({} launches the default run)")
		return
	}
	// Aliases are measured, never expanded, before anything walks the tree.
	if err := config.CheckAliases(body); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if key, err := pathKey(body); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	} else if key != "" {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("config key %s chooses a file path; the daemon owns its store and data directories: remove it", key))
		return
	}
	cfg, err := config.Parse(body, config.WithEmbedded(run.ConfigDefaults()))
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if err := config.ResolvePeers(&cfg, s.opts.Peers, config.ResolveOptions{PeersOnly: s.opts.PeersOnly}); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if err := s.opts.Limits.Check(cfg); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	cfg.Run.DB = s.opts.Store.Path()
	if cfg.Run.Name == "" {
		hosted := s.hostedRuns()
		taken := func(name string) bool { return hosted[name] }
		if cfg.Run.Name, err = run.Name(r.Context(), s.opts.Store, cfg, taken); err != nil {
			writeError(w, http.StatusInternalServerError, err.Error())
			return
		}
	}
	// Validate applies checkpoint.ValidateRunName, the rule that makes a
	// name safe as a directory under the daemon's data directory.
	if err := cfg.Validate(); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if _, err := s.opts.Store.GetRun(r.Context(), cfg.Run.Name); err == nil {
		writeError(w, http.StatusConflict, fmt.Sprintf("run %s already exists in the store", cfg.Run.Name))
		return
	}
	if _, err := s.launch(r.Context(), cfg); err != nil {
		hostError(w, err)
		return
	}
	// One path segment: run names may hold '/' (exp/arm/1 -> exp%2Farm%2F1).
	w.Header().Set("Location", "/api/v1/runs/"+url.PathEscape(cfg.Run.Name))
	s.writeRun(w, r, http.StatusCreated, cfg.Run.Name)
}

// MaxListLimit is the most runs one page of GET /api/v1/runs holds, and
// the page's size when ?limit is not given.
const MaxListLimit = 1000

// handleList answers a page of runs' summaries in name order:
// ?limit=N (1 to MaxListLimit) runs from the first name after ?after=NAME.
// When more follow, a Link header (rel="next") gives the next page's URL.
func (s *Server) handleList(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit := MaxListLimit
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxListLimit {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("limit %q: accepted: a whole number from 1 to %d", v, MaxListLimit))
			return
		}
		limit = n
	}
	list, next, err := s.opts.Store.ListRunsPage(r.Context(), q.Get("after"), limit)
	if err != nil && !errors.Is(err, checkpoint.ErrNoDatabase) {
		storeError(w, err)
		return
	}
	if next != "" {
		w.Header().Set("Link", fmt.Sprintf(`</api/v1/runs?limit=%d&after=%s>; rel="next"`, limit, url.QueryEscape(next)))
	}
	hosted := s.hostedRuns()
	out := make([]RunListItem, 0, len(list))
	for _, r := range list {
		out = append(out, RunListItem{RunSummary: r, Hosted: hosted[r.Name]})
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) handleShow(w http.ResponseWriter, r *http.Request) {
	s.writeRun(w, r, http.StatusOK, r.PathValue("id"))
}

// writeRun answers the run as grpo runs show --json prints it: its
// in_flight, validating and lease too (SetUnderway, read before the steps
// as GetUnderway says), and the daemon's own hosted, endpoints_down and
// warnings.
func (s *Server) writeRun(w http.ResponseWriter, r *http.Request, code int, name string) {
	u, err := s.opts.Store.GetUnderway(r.Context(), name)
	if err != nil {
		storeError(w, err)
		return
	}
	run, steps, evals, err := s.opts.Store.Snapshot(r.Context(), name)
	if err != nil {
		storeError(w, err)
		return
	}
	v := checkpoint.NewRunView(run, steps, evals)
	v.SetUnderway(u)
	v.Hosted = s.hostedRuns()[name]
	promote.MarkOnDisk(&v) // as grpo runs show --json: on the daemon's machine
	if v.Tests, err = s.opts.Store.TestEvaluations(r.Context(), name, checkpoint.SplitTest); err != nil {
		storeError(w, err)
		return
	}
	down, warnings := s.hostedEvents(name)
	writeJSON(w, code, RunDetail{RunView: v, EndpointsDown: down, Warnings: warnings})
}

func (s *Server) handleSteps(w http.ResponseWriter, r *http.Request) {
	run, steps, evals, err := s.opts.Store.Snapshot(r.Context(), r.PathValue("id"))
	if err != nil {
		storeError(w, err)
		return
	}
	v := checkpoint.NewRunView(run, steps, evals)
	promote.MarkOnDisk(&v)
	writeJSON(w, http.StatusOK, v.Steps)
}

func (s *Server) handleBest(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("id")
	run, steps, evals, err := s.opts.Store.Snapshot(r.Context(), name)
	if err != nil {
		storeError(w, err)
		return
	}
	sel, err := checkpoint.Select(run.Policy, run.Metric, run.EMA, steps, evals)
	if err != nil {
		writeError(w, http.StatusNotFound, fmt.Sprintf("run %s has no selectable step yet under %s: %v", name, run.Policy, err))
		return
	}
	writeJSON(w, http.StatusOK, checkpoint.BestView{Run: name, Selection: sel})
}

func (s *Server) handleCancel(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("id")
	ctx, cancel := context.WithTimeout(r.Context(), time.Minute)
	defer cancel()
	if err := s.cancelRun(ctx, name); errors.Is(err, ErrNotHosted) {
		run, gerr := s.opts.Store.GetRun(r.Context(), name)
		if gerr != nil {
			storeError(w, gerr)
			return
		}
		writeError(w, http.StatusConflict, fmt.Sprintf("run %s is %s and not playing in this daemon: nothing to cancel", name, run.State))
		return
	} else if err != nil {
		writeError(w, http.StatusGatewayTimeout, fmt.Sprintf("cancel run %s: %v", name, err))
		return
	}
	s.writeRun(w, r, http.StatusOK, name)
}

// bearerToken is the token of an "Authorization: Bearer <token>" header;
// the scheme's name is case-insensitive (RFC 9110 §11.1).
func bearerToken(h string) (string, bool) {
	scheme, token, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	return strings.TrimLeft(token, " "), true
}

// promoteRequest is the optional body of POST /api/v1/runs/{id}/promote.
type promoteRequest struct {
	As   string   `json:"as"`   // stable name; default <run>-best
	Step stepPick `json:"step"` // best (default) | last | a step number
}

// stepPick is the body's step: "best", "last", or a step number written as
// a number or a string.
type stepPick string

func (p *stepPick) UnmarshalJSON(b []byte) error {
	var n int
	if err := json.Unmarshal(b, &n); err == nil {
		*p = stepPick(strconv.Itoa(n))
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("step: want \"best\", \"last\" or a step number, got %s", b)
	}
	*p = stepPick(s)
	return nil
}

// readOptions reads the small optional body of an action (promote,
// resume) into req, which keeps its zero value when the body is empty. It
// answers the error itself, naming the action and the body's form
// (usage), and then reports false.
func readOptions(w http.ResponseWriter, r *http.Request, req any, action, usage string) bool {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<16))
	if err != nil {
		writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("read body: %v", err))
		return false
	}
	if len(strings.TrimSpace(string(body))) == 0 {
		return true
	}
	if err := decodeBody(r.Header.Get("Content-Type"), body, req); err != nil {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("%s body: %v (want %s)", action, err, usage))
		return false
	}
	return true
}

// decodeBody decodes an action's body, JSON or (by its content type)
// YAML, refusing unknown fields.
func decodeBody(contentType string, body []byte, req any) error {
	if mt, _, _ := mime.ParseMediaType(contentType); strings.EqualFold(mt, "application/yaml") {
		var v any
		if err := yaml.Unmarshal(body, &v); err != nil {
			return err
		}
		j, err := json.Marshal(v)
		if err != nil {
			return err
		}
		body = j
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	return dec.Decode(req)
}

// handlePromote loads a run's selected adapter into the inference
// endpoints of its config under one stable name, as `grpo promote` does.
// It answers the promote.Result: 200 when every endpoint took it, 502
// when some did not (the result says which), 409 when there is nothing to
// load or no endpoint to load into (the embedded backend).
func (s *Server) handlePromote(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("id")
	var req promoteRequest
	if !readOptions(w, r, &req, "promote", `{"as": NAME, "step": "best"|"last"|N}, both optional`) {
		return
	}
	pick, err := promote.ParsePick(string(req.Step))
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if req.As == "" {
		req.As = promote.DefaultName(name)
	}
	if err := promote.ValidateName(req.As); err != nil {
		writeError(w, http.StatusBadRequest, "as: "+err.Error())
		return
	}
	cp, err := promote.Resolve(r.Context(), s.opts.Store, name, pick)
	if errors.Is(err, checkpoint.ErrRunNotFound) || errors.Is(err, checkpoint.ErrNoDatabase) {
		storeError(w, err)
		return
	} else if err != nil {
		writeError(w, http.StatusConflict, err.Error())
		return
	}
	if err := promote.CheckName(req.As, cp.Config); err != nil {
		writeError(w, http.StatusBadRequest, "as: "+err.Error())
		return
	}
	clients, err := run.Admins(cp.Config, s.opts.Getenv, nil, "")
	if err != nil {
		writeError(w, http.StatusConflict, err.Error())
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Minute)
	defer cancel()
	res, err := promote.Promote(ctx, clients, req.As, cp)
	switch {
	case errors.Is(err, promote.ErrNoAdapter):
		writeError(w, http.StatusConflict, err.Error())
	case err != nil:
		writeJSON(w, http.StatusBadGateway, promoteAnswer{Result: res, Error: err.Error()})
	default:
		s.logger.Info("promoted", "run", name, "name", req.As, "step", res.Step, "endpoints", len(res.Endpoints))
		writeJSON(w, http.StatusOK, promoteAnswer{Result: res})
	}
}

// promoteAnswer is a promote.Result, with the error when some endpoint
// failed.
type promoteAnswer struct {
	promote.Result
	Error string `json:"error,omitempty"`
}

// resumeRequest is the optional body of POST /api/v1/runs/{id}/resume.
type resumeRequest struct {
	// RetryJob: when the step's trainer job had ended failed or
	// cancelled, submit it again under a new id (grpo run --retry-job).
	RetryJob bool `json:"retry_job"`
}

// handleResume plays again, in this daemon, a stored run that is not
// playing here: one that failed or was cancelled (grpo run --resume
// does the same from a shell), or one another process left running. It
// continues from the last committed step, as every resume does, and
// answers the run as GET does. A run playing here or elsewhere (leased)
// is 409, as is a run that succeeded.
func (s *Server) handleResume(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("id")
	var req resumeRequest
	if !readOptions(w, r, &req, "resume", `{"retry_job": true|false}, optional`) {
		return
	}
	if s.hostedRuns()[name] {
		writeError(w, http.StatusConflict, fmt.Sprintf("run %s is playing in this daemon already", name))
		return
	}
	rec, err := s.opts.Store.GetRun(r.Context(), name)
	if err != nil {
		storeError(w, err)
		return
	}
	if rec.State == checkpoint.StateSucceeded {
		writeError(w, http.StatusConflict, fmt.Sprintf("run %s succeeded: nothing to resume", name))
		return
	}
	// A user resuming a run by hand starts the crash-loop guard's count
	// afresh (Options.MaxFailedStarts), as grpo run --resume does.
	if err := s.opts.Store.ResetStarts(r.Context(), name); err != nil {
		storeError(w, err)
		return
	}
	if err := s.resume(r.Context(), name, &req); err != nil {
		hostError(w, err)
		return
	}
	s.writeRun(w, r, http.StatusOK, name)
}

// hostError answers a run this daemon could not start playing: 409 when
// it plays already (here, or in another process: its lease), 503 while
// the daemon closes, 429 at its limit of runs, 502 otherwise (a peer
// that does not answer as the run needs).
func hostError(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, checkpoint.ErrRunExists), errors.Is(err, checkpoint.ErrLeased):
		writeError(w, http.StatusConflict, err.Error())
	case errors.Is(err, ErrClosing):
		writeError(w, http.StatusServiceUnavailable, err.Error())
	case errors.Is(err, ErrTooManyRuns):
		writeError(w, http.StatusTooManyRequests, err.Error())
	default:
		writeError(w, http.StatusBadGateway, err.Error())
	}
}
