package bench

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"slices"
	"time"

	"github.com/grpo-dev/grpo/config"
)

// AgentsBound bounds each count of grpo bench --agents. The rollout and
// floor rows play at least one table of 5 (rollout.go's N), and each agent
// holds its own connection to the one fake server, so its own local port:
// a TCP client has at most 65,535 per server address (port 0 is never
// used; Linux's default range 32768-60999 gives 28,232). More agents than
// that cannot be connected at once.
var AgentsBound = config.Bound[int]{
	Min: 5, Max: 65535,
	Low:  "need at least 5 (one table of 5)",
	High: "agents (each holds a connection to the one fake server from its own local port, and a client has at most 65535 ports per server address, 28232 in Linux's default range)",
}

// Options choose the rows and sizes of a bench run. Zero values take the
// defaults of `grpo bench`.
type Options struct {
	Rows      []string      // subset of Rows; empty: all
	Agents    []int         // concurrent agents of the rollout and floor rows
	Service   time.Duration // the fake server's service time per call
	TrainTime time.Duration // the fake trainer's job duration (step row)
	Steps     int           // training steps per run of the step row
	Curve     int           // steps in the curve the store row reads
	Quick     bool          // small sizes: checks the table, not the speed
	// LLMURL is a running fake inference server (LLMHandler, with /v1),
	// e.g. in a child process; empty starts one in this process, whose
	// CPU then counts in the rollout row's CPU figures.
	LLMURL string
	// Progress, when set, is told each row as it starts.
	Progress func(row string)
}

// Defaults fills the zero values with the defaults, and shrinks every size
// when Quick is set.
func (o *Options) Defaults() {
	if len(o.Rows) == 0 {
		o.Rows = Rows
	}
	if len(o.Agents) == 0 {
		o.Agents = []int{1000, 2000, 10000}
	}
	if o.Service <= 0 {
		o.Service = 200 * time.Millisecond
	}
	if o.TrainTime <= 0 {
		o.TrainTime = 2 * time.Second
	}
	if o.Steps <= 0 {
		o.Steps = 4
	}
	if o.Curve <= 0 {
		o.Curve = 10000
	}
	if o.Quick {
		o.Agents = []int{10}
		o.Service = 5 * time.Millisecond
		o.TrainTime = 20 * time.Millisecond
		o.Steps = 2
		o.Curve = 20
	}
}

// Run measures the chosen rows in order and returns their results; on an
// error it returns the rows measured so far.
func Run(ctx context.Context, o Options) ([]Result, error) {
	o.Defaults()
	llm := o.LLMURL
	if llm == "" && (slices.Contains(o.Rows, "rollout") || slices.Contains(o.Rows, "floor") || slices.Contains(o.Rows, "memory")) {
		url, stop, err := startLocal(ctx, LLMHandler(o.Service))
		if err != nil {
			return nil, err
		}
		defer stop()
		llm = url + "/v1"
	}
	var out []Result
	for _, row := range Rows {
		if !slices.Contains(o.Rows, row) {
			continue
		}
		if o.Progress != nil {
			o.Progress(row)
		}
		var (
			rs  []Result
			err error
		)
		switch row {
		case "cpu":
			rs, err = cpuRow(ctx, o)
		case "rollout", "floor":
			measure := MeasureRollout
			if row == "floor" {
				measure = MeasureFloor
			}
		agents:
			for _, a := range o.Agents {
				for _, warm := range []bool{false, true} {
					t, e := measure(ctx, RolloutOptions{BaseURL: llm, Service: o.Service, Agents: a, Warm: warm})
					if e != nil {
						err = e
						break agents
					}
					rs = append(rs, rolloutResults(row, t)...)
				}
			}
		case "step":
			rs, err = stepRow(ctx, o)
		case "store":
			rs, err = storeRow(ctx, o)
		case "memory":
			rs, err = memoryRow(ctx, o, llm)
		}
		out = append(out, rs...)
		if err != nil {
			return out, fmt.Errorf("bench %s: %w", row, err)
		}
	}
	return out, nil
}

// startLocal serves h on a loopback port in this process.
func startLocal(ctx context.Context, h http.Handler) (string, func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, fmt.Errorf("listen on loopback: %w", err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	return "http://" + ln.Addr().String(), func() { srv.Close() }, nil
}
