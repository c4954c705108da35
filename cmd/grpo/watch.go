package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/gorilla/websocket"
	"github.com/grpo-dev/grpo/checkpoint"
	"github.com/grpo-dev/grpo/internal/httpx"
	"github.com/grpo-dev/grpo/orchestrator"
	"github.com/grpo-dev/grpo/server"
)

const watchSynopsis = `Usage: grpo watch [RUN] [--addr HOST:PORT|URL] [--episodes] [--json]

Connects to a daemon's event stream (/ws) and prints the events of RUN
(default: every run) as they happen: one line per step (train reward,
validation reward with its 95% CI, deadlock rate, trainer loss, best step),
a line when an inference endpoint of the run is drained (why, when it is
probed again) or readmitted, a progress line each time a step passes a
quarter of its episodes (12/24 episodes), or instead one line per episode
with --episodes. Lines come in the order of
the events, each naming its step: with the asynchronous pipeline
(grpo.max_off_policy_steps > 0) later steps' episodes play while a step
trains and validates, so their lines come before that step's line.

With RUN, watch first asks the daemon about it: an unknown run is an error
("no such run"), a run that has already finished is printed as its end
line (on stderr with --json, whose stdout carries events only) and watch
exits; otherwise watch exits when the run finishes. The exit status is 0
when the run succeeded, 1 when it failed or was cancelled. When the daemon
goes away (a restart), watch reconnects until interrupted; with RUN it
then prints the steps the run committed meanwhile, marked "(while
reconnecting)" (not with --json: events sent while watch was away are not
replayed; GET /api/v1/runs/RUN/steps has every step).

--addr takes the daemon's address as serve --addr does (127.0.0.1:8080)
or its URL (http://127.0.0.1:8080).
`

// watchCommand is 'grpo watch': what its flags ask for.
type watchCommand struct {
	base     *url.URL // the daemon's http(s) URL
	run      string
	episodes bool
	json     bool
	retry    time.Duration // first reconnection delay; doubles up to 16x (httpx.Backoff)
	// pause waits a reconnection delay, or until ctx ends; nil:
	// httpx.Sleep. A test holds a reconnection with it.
	pause func(ctx context.Context, d time.Duration) error

	end      io.Writer // where a finished run's end line goes
	endState string    // the state c.run ended in, once it has
}

func (m *Main) watch(ctx context.Context, args []string) error {
	fs := m.newFlags("watch", watchSynopsis)
	addr := fs.String("addr", server.DefaultAddr, "daemon address HOST:PORT, or its URL http://HOST:PORT")
	c := watchCommand{retry: 250 * time.Millisecond}
	fs.BoolVar(&c.episodes, "episodes", false, "also print one line per episode")
	fs.BoolVar(&c.json, "json", false, "print every event as JSON, unfiltered")
	if err := parse(fs, args); err != nil {
		return err
	}
	switch fs.NArg() {
	case 0:
	case 1:
		c.run = fs.Arg(0)
	default:
		return usagef("unexpected argument %q (want at most one run name)", fs.Arg(1))
	}
	var err error
	if c.base, err = daemonURL(*addr); err != nil {
		return err
	}
	return c.watch(ctx, m.Stdout, m.Stderr)
}

// daemonURL reads --addr: HOST:PORT as serve --addr takes it, or an
// http(s) URL.
func daemonURL(addr string) (*url.URL, error) {
	bad := usagef("--addr %q: want the daemon's HOST:PORT (e.g. %s) or its URL (e.g. http://%s)", addr, server.DefaultAddr, server.DefaultAddr)
	if addr == "" {
		return nil, bad
	}
	hostPort := !strings.Contains(addr, "://")
	if hostPort {
		addr = "http://" + addr
	}
	u, err := url.Parse(addr)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || hostPort && (u.Port() == "" || u.Path != "") {
		return nil, bad
	}
	u.Path = strings.TrimRight(u.Path, "/")
	return u, nil
}

// goneError is the daemon unreachable, or closing or dropping the
// stream: once watch has been connected, it reconnects.
type goneError struct{ error }

func (g goneError) Unwrap() error { return g.error }

func isGone(err error) bool { return errors.As(err, new(goneError)) }

func (c *watchCommand) watch(ctx context.Context, stdout, stderr io.Writer) error {
	p := &stepPrinter{w: stdout, episodes: c.episodes}
	// With --json stdout carries events only: a run's end line goes to
	// stderr.
	c.end = stdout
	if c.json {
		c.end = stderr
	}
	// Waits from c.retry doubling to 16 times it, started again by each
	// connection.
	backoff := httpx.Policy{BaseDelay: c.retry, MaxDelay: 16 * c.retry}.Backoff()
	connectedOnce := false
	for attempt := 0; ; attempt++ {
		if c.run != "" {
			done, err := c.checkRun(ctx, p, false)
			switch {
			case done:
				return c.ended()
			case err != nil && attempt == 0:
				return err
			}
			// A failed check after a restart: the daemon is not back
			// yet; the dial below fails too and we wait again.
		}
		err := c.stream(ctx, p, stdout, func() {
			backoff.Reset()
			if connectedOnce {
				fmt.Fprintf(stderr, "grpo watch: reconnected to %s\n", c.base)
			}
			connectedOnce = true
		})
		switch {
		case ctx.Err() != nil:
			p.flush()
			return nil
		case err == nil: // the run finished
			return c.ended()
		case !connectedOnce || !isGone(err):
			// Never reached the daemon, or it refused the stream.
			return err
		}
		p.flush()
		delay := backoff.Next(0)
		fmt.Fprintf(stderr, "grpo watch: %v; reconnecting in %s\n", err, delay)
		pause := c.pause
		if pause == nil {
			pause = httpx.Sleep
		}
		if pause(ctx, delay) != nil {
			return nil
		}
	}
}

// ended is watch's result once c.run has finished: an error (exit status
// 1) when it failed or was cancelled, so that 'grpo watch RUN && next'
// goes on only after a run that succeeded.
func (c *watchCommand) ended() error {
	switch c.endState {
	case checkpoint.StateFailed, checkpoint.StateCancelled:
		return fmt.Errorf("run %s %s", c.run, c.endState)
	}
	return nil
}

// checkRun asks the daemon about c.run. done: the run has already
// finished and its end was printed (to c.end). While it plays, the steps
// it committed that p has not printed (while watch reconnected) are
// printed now; polled (the quiet stream's poll, connected): only those
// already committed at the previous poll, whose events the stream has
// not brought since. A step's event comes just after its commit, later
// on a loaded machine: the poll must not take it for a missed one.
func (c *watchCommand) checkRun(ctx context.Context, p *stepPrinter, polled bool) (done bool, err error) {
	v, err := c.getRun(ctx, c.run)
	if err != nil {
		return false, err
	}
	playing := v.State == checkpoint.StateRunning || v.Hosted
	if !c.json {
		p.catchUp(v, polled && playing)
	}
	if playing {
		return false, nil
	}
	p.flush()
	fmt.Fprintln(c.end, endLine(v))
	c.endState = v.State
	return true, nil
}

// getRun asks the daemon about run name.
func (c *watchCommand) getRun(ctx context.Context, name string) (checkpoint.RunView, error) {
	var v checkpoint.RunView
	// The name is one path segment: exp/arm/1 is sent as exp%2Farm%2F1.
	u := c.base.JoinPath("api", "v1", "runs", url.PathEscape(name))
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return v, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return v, fmt.Errorf("ask the daemon at %s about run %s: %w", c.base, name, err)
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return v, fmt.Errorf("no such run %q on the daemon at %s (see GET %s)", name, c.base, c.base.JoinPath("api", "v1", "runs"))
	case resp.StatusCode != http.StatusOK:
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return v, fmt.Errorf("ask the daemon at %s about run %s: %s: %s", c.base, name, resp.Status, strings.TrimSpace(string(b)))
	}
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		return v, fmt.Errorf("decode run %s from %s: %w", name, u, err)
	}
	return v, nil
}

// storedValidation is step's validation as the daemon stored it, nil when
// the step has none or the daemon cannot say.
func (c *watchCommand) storedValidation(ctx context.Context, run string, step int) *orchestrator.ValidationDone {
	v, err := c.getRun(ctx, run)
	if err != nil {
		return nil
	}
	for _, s := range v.Steps {
		if s.Step == step {
			_, val := storedStep(run, s)
			return val
		}
	}
	return nil
}

// endLine sums up a run that has finished.
func endLine(v checkpoint.RunView) string {
	s := fmt.Sprintf("run %s %s before any step", v.Run, v.State)
	if len(v.Steps) > 0 {
		s = fmt.Sprintf("run %s %s after step %d", v.Run, v.State, v.Steps[len(v.Steps)-1].Step)
	}
	if b := v.Best; b != nil {
		s += fmt.Sprintf("; best step %d (%s %.3f)", b.Step, b.Policy, b.Value)
	}
	if v.Error != "" {
		s += ": " + v.Error
	}
	return s
}

// stream reads events until the run finishes (nil), ctx ends, or the
// connection fails (a goneError when the daemon went away).
func (c *watchCommand) stream(ctx context.Context, p *stepPrinter, stdout io.Writer, connected func()) error {
	u := *c.base
	u.Scheme = strings.Replace(u.Scheme, "http", "ws", 1)
	u.Path += "/ws"
	if c.run != "" {
		u.RawQuery = url.Values{"run": {c.run}}.Encode()
	}
	conn, _, err := websocket.DefaultDialer.DialContext(ctx, u.String(), nil)
	if err != nil {
		return goneError{fmt.Errorf("connect to %s: %w", u.String(), err)}
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	connected()
	p.connected(func(run string, step int) *orchestrator.ValidationDone { return c.storedValidation(ctx, run, step) })
	type message struct {
		b   []byte
		err error
	}
	msgs := make(chan message)
	go func() {
		for {
			_, b, err := conn.ReadMessage()
			select {
			case msgs <- message{b, err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	// The daemon subscribes a stream after its handshake, so a run may end
	// unseen just then: with RUN, watch also asks about the run now and
	// while the stream is quiet.
	var poll <-chan time.Time
	if c.run != "" {
		t := time.NewTicker(2 * time.Second)
		defer t.Stop()
		poll = t.C
		if done, _ := c.checkRun(ctx, p, false); done {
			return nil
		}
	}
	for {
		var msg message
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-poll:
			if done, _ := c.checkRun(ctx, p, true); done {
				return nil
			}
			continue
		case msg = <-msgs:
		}
		if err := msg.err; err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			var ce *websocket.CloseError
			if errors.As(err, &ce) && ce.Code != websocket.CloseGoingAway && ce.Code != websocket.CloseAbnormalClosure {
				return fmt.Errorf("daemon closed the stream: %s", ce.Text)
			}
			return goneError{fmt.Errorf("daemon went away: %w", err)}
		}
		var e orchestrator.Event
		if err := json.Unmarshal(msg.b, &e); err != nil {
			return fmt.Errorf("decode event: %w", err)
		}
		if c.json {
			fmt.Fprintln(stdout, string(msg.b))
		} else {
			p.event(e)
		}
		if c.run != "" && e.Type == orchestrator.EventRunFinished {
			if e.RunFinished != nil && e.RunFinished.State == checkpoint.StateRunning {
				// The daemon stopped the run to resume it on its next start.
				continue
			}
			if e.RunFinished != nil {
				c.endState = e.RunFinished.State
			}
			p.flush()
			return nil
		}
	}
}

// stepPrinter prints one line per step: a step's validation and trainer
// results arrive before its commit and its best change after, so the
// line is held until the step is over, or until another line of the run
// is printed: lines come in the order of the events that make them.
type stepPrinter struct {
	w        io.Writer
	episodes bool
	pending  map[string]*stepLine // by run
	// early is, by run, the step whose line was printed before its
	// best change could come (another line came first): that change,
	// when it comes, gets a line of its own.
	early map[string]int
	// last is, by run, the last step printed, or the last committed
	// when watch first asked about the run: a step at or before it is
	// not printed again.
	last map[string]int
	// polled is, by run, the newest step committed when the daemon was
	// last asked: a poll prints a missed step only if it was committed
	// then (catchUp).
	polled map[string]int
	// streamed holds the runs with a step committed on this connection:
	// a run's first committed step may have validated before the stream
	// began (with an asynchronous pipeline, a whole training step before
	// its commit), so its validation is read from the daemon (stored).
	streamed map[string]bool
	stored   func(run string, step int) *orchestrator.ValidationDone
	// counts is, by run and step, the episodes a step has finished of
	// those its step_started announced, for the progress lines printed
	// without --episodes.
	counts map[string]map[int]*episodeCount
}

// episodeCount is a step's progress: episodes finished of total, and the
// quarters of total passed when a progress line was last printed.
type episodeCount struct{ done, total, quarters int }

// started notes the episodes step e announces (training and validation).
func (p *stepPrinter) started(e orchestrator.Event) {
	total := e.StepStarted.Episodes + e.StepStarted.Validation
	if total == 0 {
		return
	}
	if p.counts == nil {
		p.counts = map[string]map[int]*episodeCount{}
	}
	if p.counts[e.Run] == nil {
		p.counts[e.Run] = map[int]*episodeCount{}
	}
	p.counts[e.Run][e.Step] = &episodeCount{total: total}
}

// finished counts episode e, and prints a progress line when the count
// passes a quarter of its step's episodes: a long step shows it moves.
// The last episode prints none: the step's own line comes next.
func (p *stepPrinter) finished(e orchestrator.Event) {
	c := p.counts[e.Run][e.Step]
	if c == nil {
		return // sampled ahead, before its step_started: no total known
	}
	c.done++
	if q := 4 * c.done / c.total; q > c.quarters && c.done < c.total {
		c.quarters = q
		p.say(e.Run, fmt.Sprintf("%s %-12s step %2d %-17s %d/%d episodes", e.Time.Local().Format("15:04:05.000"), e.Run, e.Step, "progress", c.done, c.total))
	}
}

// connected starts a new connection's stream; stored reads a committed
// step's validation from the daemon.
func (p *stepPrinter) connected(stored func(run string, step int) *orchestrator.ValidationDone) {
	p.streamed, p.stored = map[string]bool{}, stored
}

// catchUp prints v's committed steps after the last one printed: those
// committed while watch was reconnecting. The first time it sees a run
// it only notes where the run is (watch shows what happens from then on).
// graced (a poll while connected): only the steps that were committed
// when the daemon was last asked; the events of newer ones may be on
// their way.
func (p *stepPrinter) catchUp(v checkpoint.RunView, graced bool) {
	if len(v.Steps) == 0 {
		return
	}
	if p.last == nil {
		p.last = map[string]int{}
	}
	if p.polled == nil {
		p.polled = map[string]int{}
	}
	newest := v.Steps[len(v.Steps)-1].Step
	upTo := newest
	if prev, ok := p.polled[v.Run]; graced && ok {
		upTo = prev
	} else if graced {
		upTo = -1
	}
	p.polled[v.Run] = newest
	last, seen := p.last[v.Run]
	if !seen {
		p.last[v.Run] = newest
		return
	}
	for _, s := range v.Steps {
		if s.Step <= last {
			continue
		}
		if s.Step > upTo {
			break
		}
		if sl := p.pending[v.Run]; sl != nil && sl.step == s.Step {
			if sl.line != "" {
				// Its commit arrived on the stream, the line only
				// waits for the next step's events: print it as seen.
				p.flushRun(v.Run)
				continue
			}
			delete(p.pending, v.Run) // its events arrived in part; the stored step is whole
		}
		p.flushRun(v.Run)
		e, val := storedStep(v.Run, s)
		fmt.Fprintln(p.w, stepSummary(e, val)+"  (while reconnecting)")
		p.last[v.Run] = s.Step
	}
}

// storedStep is a stored step as the events that print its line.
func storedStep(run string, s checkpoint.StepView) (orchestrator.Event, *orchestrator.ValidationDone) {
	e := orchestrator.Event{Run: run, Step: s.Step, Time: time.Now(), StepCommitted: &orchestrator.StepCommitted{Step: s.Step, N: s.N}}
	if t := s.Train; t != nil {
		e.StepCommitted.Train = &orchestrator.TrainSummary{RewardMean: t.RewardMean}
	}
	if j := s.Job; j != nil {
		e.StepCommitted.Job = &checkpoint.Job{ID: j.ID, State: j.State, Metrics: j.Metrics}
		if !j.Finished.IsZero() {
			e.Time = j.Finished
		}
	}
	var val *orchestrator.ValidationDone
	if ev := s.Validation; ev != nil {
		val = &orchestrator.ValidationDone{RewardMean: ev.RewardMean, RewardCI95: ev.RewardCI95, DeadlockRate: ev.DeadlockRate, MealsMean: ev.MealsMean}
	}
	return e, val
}

type stepLine struct {
	step int
	val  *orchestrator.ValidationDone
	line string // set once committed
}

func (p *stepPrinter) get(e orchestrator.Event) *stepLine {
	if p.pending == nil {
		p.pending = map[string]*stepLine{}
	}
	sl := p.pending[e.Run]
	if sl != nil && sl.step != e.Step {
		p.flushRun(e.Run)
		sl = nil
	}
	if sl == nil {
		sl = &stepLine{step: e.Step}
		p.pending[e.Run] = sl
	}
	return sl
}

func (p *stepPrinter) flushRun(run string) {
	if sl := p.pending[run]; sl != nil && sl.line != "" {
		if last, seen := p.last[run]; !seen || sl.step > last {
			fmt.Fprintln(p.w, sl.line)
			if p.last == nil {
				p.last = map[string]int{}
			}
			p.last[run] = sl.step
			if p.early == nil {
				p.early = map[string]int{}
			}
			p.early[run] = sl.step
		}
	}
	delete(p.pending, run)
}

// say prints line, an event of run, after the step line the run holds:
// that step's commit came first.
func (p *stepPrinter) say(run, line string) {
	if sl := p.pending[run]; sl != nil && sl.line != "" {
		p.flushRun(run)
	}
	fmt.Fprintln(p.w, line)
}

func (p *stepPrinter) flush() {
	for run := range p.pending {
		p.flushRun(run)
	}
}

func (p *stepPrinter) event(e orchestrator.Event) {
	switch {
	case e.StepStarted != nil:
		p.started(e)
	case e.EpisodeFinished != nil:
		if p.episodes {
			p.say(e.Run, eventLine(e))
		} else {
			p.finished(e)
		}
	case e.ValidationDone != nil:
		p.get(e).val = e.ValidationDone
	case e.StepCommitted != nil:
		delete(p.counts[e.Run], e.Step)
		sl := p.get(e)
		if sl.val == nil && !p.streamed[e.Run] && p.stored != nil {
			sl.val = p.stored(e.Run, e.Step)
		}
		if p.streamed != nil {
			p.streamed[e.Run] = true
		}
		sl.line = stepSummary(e, sl.val)
	case e.BestChanged != nil:
		if s, ok := p.early[e.Run]; ok && s == e.Step {
			// Its step's line is out already.
			delete(p.early, e.Run)
			p.say(e.Run, eventLine(e))
			return
		}
		sl := p.get(e)
		if sl.line == "" {
			sl.line = eventLine(e)
		} else {
			sl.line += fmt.Sprintf("  best %d (%.3f)", e.BestChanged.Step, e.BestChanged.Value)
		}
		p.flushRun(e.Run)
	case e.RunStarted != nil, e.RunFinished != nil:
		delete(p.counts, e.Run)
		p.flushRun(e.Run)
		fmt.Fprintln(p.w, eventLine(e))
	case e.JobState != nil && e.JobState.State == "failed":
		p.say(e.Run, eventLine(e))
	case e.EndpointState != nil, e.Warning != nil:
		p.say(e.Run, eventLine(e))
	}
}

// stepSummary is the one line of a committed step.
func stepSummary(e orchestrator.Event, val *orchestrator.ValidationDone) string {
	s := e.StepCommitted
	line := fmt.Sprintf("%s %-12s step %2d n=%d", e.Time.Local().Format("15:04:05.000"), e.Run, e.Step, s.N)
	if t := s.Train; t != nil {
		line += fmt.Sprintf("  train %.3f", t.RewardMean)
	}
	if val != nil {
		line += fmt.Sprintf("  validation %.3f [%.3f, %.3f] deadlock %.2f meals %.2f",
			val.RewardMean, val.RewardCI95[0], val.RewardCI95[1], val.DeadlockRate, val.MealsMean)
	}
	switch j := s.Job; {
	case j != nil && len(j.Metrics) > 0:
		line += fmt.Sprintf("  loss %.4g kl %.3g", j.Metrics["loss"], j.Metrics["kl"])
		// Only a trainer that reports it: a gap well above 0 says it
		// is not scoring what the inference server sampled.
		if g, ok := j.Metrics["sampler_logprob_gap"]; ok {
			line += fmt.Sprintf(" logprob gap %.3g", g)
		}
	case j == nil && e.Step > 0:
		line += "  (no signal: no job)"
	}
	return line
}

// eventLine formats one event for a terminal.
func eventLine(e orchestrator.Event) string {
	head := fmt.Sprintf("%s %-12s step %2d %-17s", e.Time.Local().Format("15:04:05.000"), e.Run, e.Step, e.Type)
	var tail string
	switch {
	case e.RunStarted != nil:
		d := e.RunStarted
		tail = fmt.Sprintf("steps %d from %d resumed %v", d.Steps, d.From, d.Resumed)
	case e.StepStarted != nil:
		d := e.StepStarted
		tail = fmt.Sprintf("n=%d train episodes %d validation %d", d.N, d.Episodes, d.Validation)
	case e.EpisodeFinished != nil:
		d := e.EpisodeFinished
		tail = fmt.Sprintf("%s %s reward %.3f meals %d deadlocked %v invalid %d", d.Split, d.ID, d.Reward, d.Meals, d.Deadlock, d.Invalid)
	case e.JobState != nil:
		d := e.JobState
		tail = fmt.Sprintf("job %s %s %.0f%%", d.ID, d.State, 100*d.Progress)
		if d.Error != "" {
			tail += ": " + d.Error
		}
	case e.AdapterLoaded != nil:
		tail = fmt.Sprintf("adapter %s", e.AdapterLoaded.Name)
	case e.ValidationDone != nil:
		d := e.ValidationDone
		tail = fmt.Sprintf("reward %.3f deadlock rate %.2f meals %.2f", d.RewardMean, d.DeadlockRate, d.MealsMean)
	case e.BestChanged != nil:
		tail = fmt.Sprintf("best step %d (%.3f)", e.BestChanged.Step, e.BestChanged.Value)
	case e.StepCommitted != nil:
		if t := e.StepCommitted.Train; t != nil {
			tail = fmt.Sprintf("train reward %.3f", t.RewardMean)
		}
	case e.EndpointState != nil:
		tail = endpointLine(*e.EndpointState)
	case e.Warning != nil:
		tail = e.Warning.Message
	case e.RunFinished != nil:
		tail = e.RunFinished.State
		if msg := e.RunFinished.Error; msg != "" {
			tail += ": " + msg
		}
	}
	return strings.TrimRight(head+" "+tail, " ")
}

// endpointLine says an inference endpoint is down (why, and when it is
// probed again) or back.
func endpointLine(d orchestrator.EndpointState) string {
	if d.Up {
		return "inference endpoint " + d.Endpoint + " answers again: readmitted"
	}
	line := "inference endpoint " + d.Endpoint + " down"
	if d.Error != "" {
		line += ": " + d.Error
	}
	if d.ProbeIn > 0 {
		line += fmt.Sprintf(" (probed again in %.0f s)", d.ProbeIn)
	}
	return line
}
