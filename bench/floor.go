package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// floorRequestBytes is the body size of the floor's requests: the mean of
// what grpo sends in the bench's episodes (2.6 KB in round 1 to 5.1 KB in
// round 5).
const floorRequestBytes = 3800

// MeasureFloor measures what the rollout measurement costs a client of
// the same stack that does nothing but the calls: Agents agents at once,
// each making Rounds calls in turn to the same server through one shared
// net/http client (a connection per agent kept alive), each call a chat
// completion request of grpo's mean size encoded by encoding/json from a
// typed struct, its answer read whole and decoded into one. No episodes,
// no retries or deadlines: what the rollout row costs over it is grpo's
// own work, and what it costs is this machine's and the stack's.
func MeasureFloor(ctx context.Context, o RolloutOptions) (Throughput, error) {
	if o.Rounds == 0 {
		o.Rounds = 5
	}
	u, err := url.Parse(o.BaseURL)
	if err != nil || u.Host == "" {
		return Throughput{}, fmt.Errorf("floor bench: base URL %q: want http://host:port/v1", o.BaseURL)
	}
	hc := &http.Client{Transport: &http.Transport{
		MaxIdleConns: o.Agents, MaxIdleConnsPerHost: o.Agents, DisableCompression: true,
	}}
	defer hc.CloseIdleConnections()
	f := &floorClient{hc: hc, url: strings.TrimRight(o.BaseURL, "/") + "/chat/completions"}
	var (
		wg    sync.WaitGroup
		calls atomic.Int64
		first error
		once  sync.Once
		gate  *floorGate
	)
	var m *meter
	if o.Warm {
		gate = &floorGate{start: make(chan struct{})}
		gate.ready.Add(o.Agents)
	} else {
		m = startMeter(o.BaseURL)
	}
	for i := range o.Agents {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n, err := f.agent(ctx, floorRequest(i), o.Rounds, gate)
			calls.Add(int64(n))
			if err != nil {
				once.Do(func() { first = err })
			}
		}()
	}
	if gate != nil {
		gate.ready.Wait()
		m = startMeter(o.BaseURL)
		close(gate.start)
	}
	wg.Wait()
	m.stop()
	if first != nil {
		return Throughput{}, fmt.Errorf("floor bench: %w", first)
	}
	t := Throughput{Agents: o.Agents, Rounds: o.Rounds, Calls: int(calls.Load()),
		Ideal: time.Duration(o.Rounds) * o.Service, Warm: o.Warm}
	m.fill(&t)
	return t, nil
}

// floorReq is the floor's chat completion request.
type floorReq struct {
	Model       string      `json:"model"`
	Messages    []floorMsg  `json:"messages"`
	Temperature float32     `json:"temperature"`
	Seed        int         `json:"seed"`
	Tools       []floorTool `json:"tools"`
	ToolChoice  string      `json:"tool_choice"`
}

type floorMsg struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

type floorTool struct {
	Type     string `json:"type"`
	Function struct {
		Name       string          `json:"name"`
		Parameters json.RawMessage `json:"parameters"`
	} `json:"function"`
}

// floorAnswer is what the floor reads of an answer.
type floorAnswer struct {
	Choices []struct {
		Message struct {
			Role      string `json:"role"`
			Content   string `json:"content"`
			ToolCalls []struct {
				ID       string `json:"id"`
				Type     string `json:"type"`
				Function struct {
					Name      string `json:"name"`
					Arguments string `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"message"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
	Usage struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
		TotalTokens      int `json:"total_tokens"`
	} `json:"usage"`
}

// floorRequest is agent i's request: a system prompt, an observation and
// six tools, floorRequestBytes long encoded.
func floorRequest(i int) *floorReq {
	r := &floorReq{Model: "m", Temperature: 1, Seed: i, ToolChoice: "auto"}
	for _, name := range []string{"pick_up_left", "pick_up_right", "put_down_left", "put_down_right", "eat", "think"} {
		var t floorTool
		t.Type, t.Function.Name, t.Function.Parameters = "function", name, json.RawMessage(`{"type":"object","properties":{}}`)
		r.Tools = append(r.Tools, t)
	}
	r.Messages = []floorMsg{{Role: "system", Content: "You are a philosopher."}, {Role: "user", Content: `state: {"round":1}`}}
	b, _ := json.Marshal(r)
	r.Messages[0].Content += strings.Repeat("x", max(0, floorRequestBytes-len(b)))
	return r
}

type floorClient struct {
	hc  *http.Client
	url string
}

// floorGate holds the agents of a warm measurement after their
// untimed first call until start is closed.
type floorGate struct {
	ready sync.WaitGroup // one Done per agent, after its first call
	start chan struct{}
}

// agent makes rounds calls and returns how many were answered. With a
// gate, it first makes one call that is not counted, says so, and waits
// for the start.
func (f *floorClient) agent(ctx context.Context, req *floorReq, rounds int, gate *floorGate) (int, error) {
	if gate != nil {
		err := f.call(ctx, req)
		gate.ready.Done()
		if err != nil {
			return 0, err
		}
		select {
		case <-gate.start:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	for i := range rounds {
		if err := f.call(ctx, req); err != nil {
			return i, err
		}
	}
	return rounds, nil
}

// call sends req and decodes its answer.
func (f *floorClient) call(ctx context.Context, req *floorReq) error {
	body, err := json.Marshal(req)
	if err != nil {
		return err
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, f.url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	hreq.Header.Set("Content-Type", "application/json")
	resp, err := f.hc.Do(hreq)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s answered %s", f.url, resp.Status)
	}
	var a floorAnswer
	if err := json.Unmarshal(b, &a); err != nil || len(a.Choices) != 1 {
		return fmt.Errorf("%s answered %.80q, not one choice (%v)", f.url, b, err)
	}
	return nil
}
