//go:build !race

// The race detector doubles every stack's guard, so stack sizes are only
// meaningful without it; .ci/run runs this file's test on its own.

package inference

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime/debug"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/grpo-dev/grpo/internal/httpx"
	"github.com/grpo-dev/grpo/rollout"
	"github.com/sashabaranov/go-openai"
)

// benchAnswer is the bench's fake answer: one tool call, three sampled
// tokens with logprobs, eight prompt token ids.
const benchAnswer = `{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"chatcmpl-tool-1","type":"function","function":{"name":"think","arguments":"{}"}}]},"logprobs":{"content":[{"token":"token_id:151657","logprob":-0.1,"bytes":[60],"top_logprobs":[]},{"token":"token_id:5","logprob":-0.2,"bytes":[116],"top_logprobs":[]},{"token":"token_id:151658","logprob":-0.01,"bytes":[62],"top_logprobs":[]}]},"finish_reason":"tool_calls","stop_reason":null,"token_ids":[151657,5,151658]}],"usage":{"prompt_tokens":700,"completion_tokens":3,"total_tokens":703},"prompt_token_ids":[1,2,3,4,5,6,7,8]}`

// TestCallFitsA4KBStack: a call through the fleet, the chat client and the
// HTTP transport — dialling its connection or reusing one, waiting for
// the answer, decoding it — fits in a 4 KB goroutine stack below the
// test's frames, which are about 400 bytes deeper than a run's callers
// (withFrames), for most callers: the runtime's own slow paths (a span
// refilled while allocating, a timer heap grown) grow a few, 2-7 of 40
// here, where a frame too many on the path grows all 40. A
// run's callers, thousands at once, then keep 4 KB stacks; a path 8 KB
// deep doubles them (8 MB more at 2,000 agents) and costs a stack copy
// per caller (docs/PERFORMANCE.md, stacks).
//
// A goroutine's stack moves when it grows, and with the collector off
// nothing else moves it, so the address of a local taken before and
// after the call says whether the call grew it.
//
// Answers come in one piece with a length; with the head apart from the
// body, as uvicorn (vLLM, SGLang) writes them; and chunked, the last chunk
// apart, as Go net/http servers send a body they flushed.
func TestCallFitsA4KBStack(t *testing.T) {
	for _, form := range []answerForm{whole, headApart, chunked} {
		t.Run(form.String(), func(t *testing.T) { callFitsA4KBStack(t, form) })
	}
}

// answerForm is how the test's server sends an answer.
type answerForm int

const (
	whole     answerForm = iota // head and body in one write, with a length
	headApart                   // the head, then the body, with a length
	chunked                     // head and a chunk, then the last chunk
)

func (f answerForm) String() string {
	return [...]string{"whole", "head apart", "chunked"}[f]
}

func callFitsA4KBStack(t *testing.T, form answerForm) {
	const callers, rounds = 40, 2
	var mu sync.Mutex
	arrived, round, hold := 0, make(chan struct{}), false
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		// Each round's answers wait for all its requests, so the first
		// round dials a connection per caller and the second reuses them.
		mu.Lock()
		wait := round
		if !hold {
			wait = nil
		} else if arrived++; arrived == callers {
			arrived, round = 0, make(chan struct{})
			close(wait)
		}
		mu.Unlock()
		if wait != nil {
			<-wait
		}
		w.Header().Set("Content-Type", "application/json")
		switch form {
		case headApart:
			w.Header().Set("Content-Length", fmt.Sprint(len(benchAnswer)))
			w.WriteHeader(http.StatusOK)
			w.(http.Flusher).Flush()
			time.Sleep(time.Millisecond) // apart on the wire too
		case chunked:
			defer time.Sleep(time.Millisecond)
			defer w.(http.Flusher).Flush()
		}
		io.WriteString(w, benchAnswer)
	}))
	defer srv.Close()
	hc := httpx.NewHTTPClient(callers, nil)
	fleet := NewFleet([]Replica{{Chat: NewChatClient(srv.URL+"/v1", ChatOptions{HTTPClient: hc}), Admin: NewAdminClient(srv.URL+"/v1", AdminOptions{})}}, FleetOptions{})
	req := stackTestRequest(t)
	// A client's first call encodes and keeps its tools (encoding/json,
	// deep, once); the run's other callers find them kept.
	if _, err := fleet.Complete(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	hc.CloseIdleConnections()
	mu.Lock()
	hold = true
	mu.Unlock()

	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	grew := make([][]int, callers)
	var wg sync.WaitGroup
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			grew[i] = callsGrow(t, rounds, 384, func() error {
				_, err := fleet.Complete(context.Background(), req)
				return err
			})
		}()
	}
	wg.Wait()
	// The runtime's own slow paths (a span refilled while allocating, a
	// timer heap grown) are deep and hit a few callers at random; a frame
	// too many on the path itself grows every caller.
	var grown []string
	for i, g := range grew {
		switch {
		case g == nil:
			t.Skip("goroutines do not start with a 2 KB stack here: the test cannot tell")
		case len(g) > 0:
			grown = append(grown, fmt.Sprintf("caller %d in calls %v", i, g))
		}
	}
	t.Logf("%d of %d callers grew their stacks: %s", len(grown), callers, strings.Join(grown, ", "))
	if len(grown) > callers/2 {
		t.Fatalf("%d of %d callers grew their 4 KB stacks in %d calls each (the first dials): %s", len(grown), callers, rounds, strings.Join(grown, ", "))
	}

	// The check itself: the same call with 2 KB more above it grows it.
	for range callers - 1 { // the server's round needs every caller
		go fleet.Complete(context.Background(), req)
	}
	control := make(chan []int)
	go func() {
		control <- callsGrow(t, 1, 2048, func() error {
			_, err := fleet.Complete(context.Background(), req)
			return err
		})
	}()
	if g := <-control; len(g) != 1 {
		t.Fatalf("a call with 2 KB more above it grew the stack in calls %v, want [1]: the test cannot see growth", g)
	}
}

// callsGrow grows the calling goroutine's stack from its starting 2 KB to
// 4 KB, then makes n calls of call, each below pad bytes of frames, and
// returns which of them (1..n) grew the stack further; nil if the stack
// did not start at 2 KB.
func callsGrow(t *testing.T, n, pad int, call func() error) []int {
	var anchor byte
	at := func() uintptr { return uintptr(unsafe.Pointer(&anchor)) }
	before := at()
	useStack3K()
	if at() == before {
		return nil
	}
	grew := []int{}
	for i := range n {
		before = at()
		if err := withFrames(pad, call); err != nil {
			t.Error(err)
		}
		if at() != before {
			grew = append(grew, i+1)
		}
	}
	return grew
}

// useStack3K uses about 2.5 KB of stack: more than a 2 KB stack holds,
// less than 4 KB.
//
//go:noinline
func useStack3K() byte {
	var b [2400]byte
	return touch(b[:])
}

// withFrames calls call below pad bytes of frames (384 or 2048) besides
// callsGrow's and the goroutine's own: about 700 bytes in all above the
// fleet with 384, where a run's callers have about 280 (rollout's caller
// and complete).
//
//go:noinline
func withFrames(pad int, call func() error) error {
	if pad > 384 {
		return with2K(call)
	}
	return withCallerFrames(call)
}

//go:noinline
func withCallerFrames(call func() error) error {
	var b [384 - 64]byte
	touch(b[:])
	return call()
}

//go:noinline
func with2K(call func() error) error {
	var b [2048 - 64]byte
	touch(b[:])
	return call()
}

//go:noinline
func touch(b []byte) byte {
	b[len(b)-1] = 1
	return b[0]
}

// stackTestRequest is a round-3 request of a philosopher's conversation
// as a run sends it: messages encoded once, the tools, logprobs.
func stackTestRequest(t *testing.T) *rollout.Request {
	t.Helper()
	msgs := []openai.ChatCompletionMessage{
		{Role: openai.ChatMessageRoleSystem, Content: "You are philosopher 0 at a table of 5."},
		{Role: openai.ChatMessageRoleUser, Content: `{"round":1,"holding":[],"hungry":true}`},
		{Role: openai.ChatMessageRoleAssistant, ToolCalls: []openai.ToolCall{{ID: "c1", Type: "function", Function: openai.FunctionCall{Name: "pick_up_left", Arguments: "{}"}}}},
		{Role: openai.ChatMessageRoleTool, ToolCallID: "c1", Content: "ok"},
		{Role: openai.ChatMessageRoleUser, Content: `{"round":2,"holding":["left"],"hungry":true}`},
	}
	enc := make([]json.RawMessage, len(msgs))
	for i := range msgs {
		b, err := json.Marshal(msgs[i])
		if err != nil {
			t.Fatal(err)
		}
		enc[i] = b
	}
	seed := 7
	return &rollout.Request{EncodedMessages: enc, ChatCompletionRequest: openai.ChatCompletionRequest{
		Model: "m", Tools: rollout.Tools(), ToolChoice: "auto", Temperature: 1, LogProbs: true, Seed: &seed,
	}}
}
