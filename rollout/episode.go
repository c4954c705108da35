package rollout

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"
)

// Sampling holds the request parameters every call of an episode uses.
type Sampling struct {
	Temperature        float32        `json:"temperature"`
	TopP               float32        `json:"top_p,omitempty"` // 0 sends 1, the servers' default
	MaxTokens          int            `json:"max_tokens,omitempty"`
	ToolChoice         string         `json:"tool_choice,omitempty"` // auto (default), required, none
	TopLogprobs        int            `json:"top_logprobs,omitempty"`
	ChatTemplateKwargs map[string]any `json:"chat_template_kwargs,omitempty"`
}

// EffectiveTopP is the top_p requests carry: TopP, or 1 when unset.
func (s Sampling) EffectiveTopP() float32 {
	if s.TopP <= 0 {
		return 1
	}
	return s.TopP
}

// EpisodeSpec is everything that determines one episode.
type EpisodeSpec struct {
	ID       string       `json:"id"`
	Group    string       `json:"group,omitempty"`
	Model    string       `json:"model"`
	Env      EnvConfig    `json:"env"`
	Reward   RewardConfig `json:"reward"`
	Sampling Sampling     `json:"sampling"`
	// SampleSeed derives each request's seed, so that an episode against a
	// server that honours seeds is reproducible. Episodes of one group share
	// Env.Seed and differ in SampleSeed.
	SampleSeed int64 `json:"sample_seed"`
	// KeepRounds asks for the episode's round-by-round replay
	// (Episode.Rounds).
	KeepRounds bool `json:"-"`
	// NoTranscripts leaves Episode.Transcripts empty, for callers that only
	// score episodes (`grpo eval` without --out): the sampled turns as the
	// server returned them (logprobs, token ids) are then not kept.
	NoTranscripts bool `json:"-"`
}

// Transcript is one philosopher's conversation: OpenAI messages, and each
// sampled assistant turn as the raw choice object the server returned.
type Transcript struct {
	Agent              int               `json:"agent"`
	MessagesAndChoices []json.RawMessage `json:"messages_and_choices"`
}

// Episode is the outcome of one episode. An errored episode (a call failed
// after the client's retries) carries no reward: it must be excluded from
// reward statistics and from training.
type Episode struct {
	Spec        EpisodeSpec  `json:"spec"`
	Metrics     Metrics      `json:"metrics"`
	Reward      float64      `json:"reward"`
	Terms       Terms        `json:"terms"`
	Errored     bool         `json:"errored"`
	Error       string       `json:"error,omitempty"`
	Seconds     float64      `json:"seconds"`
	Transcripts []Transcript `json:"transcripts"`
	// Replays is how many times the episode was played again from its
	// seeds after a call failed for good (Runner.Replays).
	Replays int `json:"replays,omitempty"`
	// Rounds is the episode round by round, when its spec kept them.
	Rounds []Round `json:"rounds,omitempty"`
}

// Runner plays episodes against a Completer. Limit, when set, bounds the
// requests in flight across every episode that shares it.
type Runner struct {
	Client Completer
	Limit  *Limiter
	// OnCall, when set, is called after every LLM call with its outcome
	// (for metrics); it must be cheap and safe for concurrent use.
	OnCall func(action string, d time.Duration, err error)
	// MaxAnswerBytes caps what one answer may add to a conversation
	// (content, reasoning, tool names and arguments); a longer answer is an
	// invalid output, counted in Metrics.Oversized, and is kept only as a
	// short note (default DefaultMaxAnswerBytes).
	MaxAnswerBytes int
	// Replays is how many times an episode whose call still fails after
	// the client's retries is played again from the start. Its table seed
	// and per-call sampling seeds are the same, so a replay is the episode
	// the faults interrupted, and no episode is dropped for a transient
	// outage (dropping is not neutral: long episodes fail more). Only after
	// the last replay fails is the episode errored.
	Replays int
}

// DefaultMaxAnswerBytes is Runner.MaxAnswerBytes unless set: far more than
// any tool call, far less than a runaway generation.
const DefaultMaxAnswerBytes = 64 << 10

// answerBytes is what a message adds to a conversation.
func answerBytes(m Message) int {
	n := len(m.Content) + len(m.ReasoningContent) + len(m.Refusal)
	for _, p := range m.ContentParts {
		n += len(p.Text)
	}
	for _, tc := range m.ToolCalls {
		n += len(tc.ID) + len(tc.Function.Name) + len(tc.Function.Arguments)
	}
	return n
}

func (r *Runner) maxAnswer() int {
	if r.MaxAnswerBytes > 0 {
		return r.MaxAnswerBytes
	}
	return DefaultMaxAnswerBytes
}

// Limiter bounds concurrent requests.
type Limiter struct{ slots chan struct{} }

// NewLimiter allows n requests in flight (n < 1 means 1).
func NewLimiter(n int) *Limiter { return &Limiter{slots: make(chan struct{}, max(1, n))} }

func (l *Limiter) acquire(ctx context.Context) error {
	if l == nil {
		return nil
	}
	select {
	case l.slots <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (l *Limiter) release() {
	if l != nil {
		<-l.slots
	}
}

// toolsJSON is the tool list as it goes into requests and transcripts.
var (
	toolDefs  = Tools()
	toolsJSON = mustJSON(toolDefs)
)

// ToolsJSON returns the JSON tool list sent with every request.
func ToolsJSON() json.RawMessage { return toolsJSON }

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// agent is one philosopher's conversation.
type agent struct {
	id    int
	msgs  []Message
	enc   []json.RawMessage // JSON of each of msgs
	items []json.RawMessage // the transcript, unless noItems
	calls []string          // tool call ids of the latest sampled turn

	noItems bool // the spec's NoTranscripts
	noMsgs  bool // msgs not kept: the client is an EncodedReader
}

func (a *agent) add(m Message) {
	a.addEncoded(m, mustJSON(&m), nil)
}

// addEncoded appends m, its JSON j and its transcript item (j when nil).
func (a *agent) addEncoded(m Message, j, item json.RawMessage) {
	if !a.noMsgs {
		a.msgs = append(a.msgs, m)
	}
	a.enc = append(a.enc, j)
	if a.noItems {
		return
	}
	if item == nil {
		item = j
	}
	a.items = append(a.items, item)
}

// systemPrompts holds each seat's system message and its JSON: they depend
// on the table's rules and the seat, not on the seed, so the thousands of
// conversations of a run share a few of them instead of each holding its
// own copy in both forms.
var systemPrompts struct {
	mu sync.Mutex
	m  map[promptKey]systemPrompt
}

type promptKey struct {
	n, rounds, patience, id int
	mode                    Mode
}

type systemPrompt struct {
	msg Message
	enc json.RawMessage
}

// maxSystemPrompts bounds the cache (a run uses one table's rules).
const maxSystemPrompts = 4096

// systemMessage returns philosopher id's system message and its JSON;
// both are shared and must not be modified (the JSON's capacity is its
// length, so an append copies it).
func systemMessage(cfg EnvConfig, id int) (Message, json.RawMessage) {
	k := promptKey{n: cfg.N, rounds: cfg.Rounds, patience: cfg.DeadlockPatience, id: id, mode: cfg.Mode}
	systemPrompts.mu.Lock()
	p, ok := systemPrompts.m[k]
	systemPrompts.mu.Unlock()
	if ok {
		return p.msg, p.enc
	}
	p.msg = Message{Role: RoleSystem, Content: SystemPrompt(cfg, id)}
	enc := mustJSON(&p.msg)
	p.enc = enc[:len(enc):len(enc)]
	systemPrompts.mu.Lock()
	if systemPrompts.m == nil || len(systemPrompts.m) >= maxSystemPrompts {
		systemPrompts.m = map[promptKey]systemPrompt{}
	}
	systemPrompts.m[k] = p
	systemPrompts.mu.Unlock()
	return p.msg, p.enc
}

// episode is the bookkeeping of one Run.
type episode struct {
	spec    EpisodeSpec
	table   *Table
	agents  []*agent
	metrics Metrics
	calls   chan call // to the episode's callers (simultaneous mode)
	rounds  []Round   // when spec.KeepRounds
}

// observe appends this round's observation to a's conversation.
func (e *episode) observe(a *agent) {
	a.add(Message{Role: RoleUser, Content: Observation(e.table.Observe(a.id))})
}

// take appends a sampled turn to a's conversation and returns its action.
// An answer over maxAnswer bytes is not kept (nor sent again with every
// later request): a short assistant message stands in for it, in the
// conversation and in the transcript, where as a message rather than a
// sampled choice it is context and never trained on.
func (e *episode) take(a *agent, c *Completion, maxAnswer int) string {
	if n := answerBytes(c.Choice.Message); n > maxAnswer {
		stub := Message{Role: RoleAssistant,
			Content: fmt.Sprintf("[answer of %d bytes dropped: over the %d-byte cap]", n, maxAnswer)}
		a.addEncoded(stub, mustJSON(stub), nil)
		a.calls = a.calls[:0]
		e.metrics.LLMCalls++
		e.metrics.PromptTokens += c.Usage.PromptTokens
		e.metrics.OutputTokens += c.Usage.CompletionTokens
		e.metrics.Oversized++
		return Invalid
	}
	var item json.RawMessage
	if !a.noItems {
		item = c.Forwarded()
	}
	a.addEncoded(c.Choice.Message, mustJSON(&c.Choice.Message), item)
	a.calls = a.calls[:0]
	for _, tc := range c.Choice.Message.ToolCalls {
		a.calls = append(a.calls, tc.ID)
	}
	e.metrics.LLMCalls++
	e.metrics.PromptTokens += c.Usage.PromptTokens
	e.metrics.OutputTokens += c.Usage.CompletionTokens
	if c.Choice.FinishReason == FinishLength {
		e.metrics.Truncated++
	}
	action, _ := DecideChoice(&c.Choice)
	return action
}

// answer appends the tool result message for each call of the latest turn.
func (e *episode) answer(a *agent, action string, ok bool) {
	text := invalidResult
	if action != Invalid {
		text = ResultText(action, ok)
	}
	for _, id := range a.calls {
		a.add(Message{Role: RoleTool, ToolCallID: id, Content: text})
	}
}

// Run plays one episode, replaying it from its seeds up to r.Replays
// times when a call fails for good. It returns an errored Episode, never
// an error, when the server still fails; ctx cancellation also yields an
// errored episode (never replayed).
func (r *Runner) Run(ctx context.Context, spec EpisodeSpec) Episode {
	var ep Episode
	r.run(ctx, &spec, &ep)
	return ep
}

// run is Run into *out. It and play write the episode in place rather
// than return it: an Episode is large.
func (r *Runner) run(ctx context.Context, spec *EpisodeSpec, out *Episode) {
	callFailed := r.play(ctx, spec, out)
	for replays := 1; callFailed && replays <= r.Replays && ctx.Err() == nil; replays++ {
		callFailed = r.play(ctx, spec, out)
		out.Replays = replays
	}
}

// play plays one episode once; callFailed says a call failed (a replay
// may succeed), as opposed to a table that cannot be set. Its setup and
// its end are in newEpisode and finish.
func (r *Runner) play(ctx context.Context, spec *EpisodeSpec, out *Episode) (callFailed bool) {
	start := time.Now()
	e, err := newEpisode(spec, out, readsEncoded(r.Client))
	if err != nil {
		return false
	}
	var failure error
	if spec.Env.Mode != Sequential {
		e.calls = make(chan call)
		defer close(e.calls)
		for range e.agents {
			go r.caller(e.calls)
		}
	}
	for !e.table.Done() && failure == nil {
		if spec.Env.Mode == Sequential {
			failure = r.sequentialRound(ctx, e)
		} else {
			failure = r.simultaneousRound(ctx, e)
		}
	}
	return e.finish(out, start, failure)
}

// newEpisode resets *out to spec's episode and sets its table and
// conversations; a table that cannot be set errors out.
func newEpisode(spec *EpisodeSpec, out *Episode, encodedOnly bool) (*episode, error) {
	*out = Episode{} // in place: a composite literal would take a whole Episode in the frame
	out.Spec = *spec
	table, err := NewTable(spec.Env)
	if err != nil {
		out.Errored, out.Error = true, err.Error()
		return nil, err
	}
	e := &episode{spec: *spec, table: table, agents: make([]*agent, spec.Env.N)}
	for i := range e.agents {
		// Capacity for a typical episode; append grows it beyond.
		size := 1 + 3*min(spec.Env.Rounds, 64)
		a := &agent{id: i, enc: make([]json.RawMessage, 0, size), noItems: spec.NoTranscripts, noMsgs: encodedOnly}
		if !encodedOnly {
			a.msgs = make([]Message, 0, size)
		}
		sys, sysJSON := systemMessage(spec.Env, i)
		a.addEncoded(sys, sysJSON, nil)
		e.agents[i] = a
	}
	return e, nil
}

// finish writes the played episode's outcome into out; callFailed is
// whether failure (a call's) ended it.
func (e *episode) finish(out *Episode, start time.Time, failure error) (callFailed bool) {
	m := e.table.Metrics()
	m.LLMCalls, m.PromptTokens, m.OutputTokens = e.metrics.LLMCalls, e.metrics.PromptTokens, e.metrics.OutputTokens
	m.Truncated, m.Oversized = e.metrics.Truncated, e.metrics.Oversized
	out.Metrics = m
	if !e.spec.NoTranscripts {
		out.Transcripts = make([]Transcript, len(e.agents))
		for i, a := range e.agents {
			out.Transcripts[i] = Transcript{Agent: i, MessagesAndChoices: a.items}
		}
	}
	out.Rounds = e.rounds
	out.Seconds = time.Since(start).Seconds()
	if failure != nil {
		out.Errored, out.Error = true, failure.Error()
		out.Metrics.Errors = 1
		return true
	}
	out.Reward, out.Terms = Score(e.spec.Reward, out.Metrics)
	return false
}

func (r *Runner) sequentialRound(ctx context.Context, e *episode) error {
	round := e.table.Round()
	var actions, outputs []string
	var oks []bool
	for _, a := range e.agents {
		e.observe(a)
		c, err := r.complete(ctx, &e.spec, a, round)
		if err != nil {
			return err
		}
		action := e.take(a, c, r.maxAnswer())
		ok := e.table.Act(a.id, action)
		e.answer(a, action, ok)
		if e.spec.KeepRounds {
			actions, oks = append(actions, action), append(oks, ok)
			outputs = append(outputs, rawOutput(&c.Choice.Message, r.maxAnswer()))
		}
	}
	e.table.EndRound()
	e.recordRound(round, actions, oks, outputs)
	return nil
}

// simultaneousRound asks every philosopher concurrently on one snapshot;
// the first failure cancels the other calls.
func (r *Runner) simultaneousRound(ctx context.Context, e *episode) error {
	for _, a := range e.agents {
		e.observe(a)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	rd := &roundCalls{ctx: ctx, cancel: cancel, spec: &e.spec, round: e.table.Round(),
		done: make([]*Completion, len(e.agents))}
	rd.wg.Add(len(e.agents))
	for i, a := range e.agents {
		e.calls <- call{rd, i, a}
	}
	rd.wg.Wait()
	if rd.first != nil {
		return rd.first
	}
	r.endRound(e, rd)
	return nil
}

// endRound applies the round's answers.
func (r *Runner) endRound(e *episode, rd *roundCalls) {
	done := rd.done
	actions := make([]string, len(e.agents))
	for i, a := range e.agents {
		actions[i] = e.take(a, done[i], r.maxAnswer())
	}
	ok := e.table.Resolve(actions)
	for i, a := range e.agents {
		e.answer(a, actions[i], ok[i])
	}
	if e.spec.KeepRounds {
		outputs := make([]string, len(done))
		for i, c := range done {
			outputs[i] = rawOutput(&c.Choice.Message, r.maxAnswer())
		}
		e.recordRound(rd.round, actions, ok, outputs)
	}
}

// roundCalls is one simultaneous round's calls: their context (cancelled
// by the first failure) and results.
type roundCalls struct {
	ctx    context.Context
	cancel context.CancelFunc
	spec   *EpisodeSpec
	round  int
	done   []*Completion
	wg     sync.WaitGroup

	mu    sync.Mutex
	first error // the round's first failure in time: the cause, not a call it cancelled
}

// fail records err if it is the round's first failure and cancels the
// other calls. A call cancelled by it may fail with its own last error
// (a 500 after fewer attempts): that is not the cause.
func (rd *roundCalls) fail(err error) {
	rd.mu.Lock()
	if rd.first == nil {
		rd.first = err
	}
	rd.mu.Unlock()
	rd.cancel()
}

// call asks one agent's decision of a round.
type call struct {
	rd *roundCalls
	i  int
	a  *agent
}

// caller makes the calls it receives until calls is closed. An episode
// keeps one caller per philosopher for all its rounds: a goroutine per
// call would grow a fresh stack through the HTTP client every round.
func (r *Runner) caller(calls <-chan call) {
	for c := range calls {
		rd := c.rd
		var err error
		if rd.done[c.i], err = r.complete(rd.ctx, rd.spec, c.a, rd.round); err != nil {
			rd.fail(err)
		}
		rd.wg.Done()
	}
}

func (r *Runner) complete(ctx context.Context, spec *EpisodeSpec, a *agent, round int) (*Completion, error) {
	req := newRequest(spec, a, round)
	if err := r.Limit.acquire(ctx); err != nil {
		return nil, callError(a.id, round, err)
	}
	t0 := time.Now()
	c, err := r.Client.Complete(ctx, req)
	r.Limit.release()
	if r.OnCall != nil {
		r.report(c, err, t0)
	}
	if err != nil {
		return nil, callError(a.id, round, err)
	}
	return c, nil
}

// report tells OnCall a call's outcome.
func (r *Runner) report(c *Completion, err error, t0 time.Time) {
	action := ""
	if err == nil {
		action, _ = DecideChoice(&c.Choice)
	}
	r.OnCall(action, time.Since(t0), err)
}

func callError(id, round int, err error) error {
	return fmt.Errorf("philosopher %d round %d: %w", id, round, err)
}

// newRequest is a's request of the round.
func newRequest(spec *EpisodeSpec, a *agent, round int) *Request {
	req := &Request{
		Model:              spec.Model,
		Messages:           a.msgs,
		Tools:              toolDefs,
		ToolChoice:         spec.Sampling.ToolChoice,
		Temperature:        spec.Sampling.Temperature,
		TopP:               spec.Sampling.EffectiveTopP(),
		MaxTokens:          spec.Sampling.MaxTokens,
		LogProbs:           true,
		TopLogProbs:        spec.Sampling.TopLogprobs,
		ChatTemplateKwargs: spec.Sampling.ChatTemplateKwargs,
		EncodedMessages:    a.enc,
	}
	if req.ToolChoice == "" {
		req.ToolChoice = "auto"
	}
	seed := int(RequestSeed(spec.SampleSeed, a.id, round) & 0x7fffffff)
	req.Seed = &seed
	return req
}

// RequestSeed derives a request's sampling seed from the episode's sample
// seed, the philosopher and the round (splitmix64 mixing).
func RequestSeed(sample int64, id, round int) int64 {
	x := uint64(sample) ^ uint64(id)<<32 ^ uint64(round)<<48
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return int64(x ^ x>>31)
}
