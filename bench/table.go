// Package bench measures the orchestrator against fakes with known service
// times, so that the ideal is known: the client's CPU and allocations per
// LLM call, rollout throughput over the ideal at thousands of concurrent
// agents, step time with a synchronous and an asynchronous pipeline, the
// store, and memory per in-flight episode. `grpo bench` prints its table;
// docs/PERFORMANCE.md holds the figures of one machine.
package bench

import (
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
)

// Result is one measured figure of the table.
type Result struct {
	Row    string  `json:"row"`    // cpu, rollout, step, store, memory
	Case   string  `json:"case"`   // what was measured, e.g. "2000 agents"
	Metric string  `json:"metric"` // e.g. "ideal/actual"
	Value  float64 `json:"value"`
	Unit   string  `json:"unit,omitempty"` // e.g. "us", "MB"; empty for ratios and counts
}

// Rows names the table's rows in order.
var Rows = []string{"cpu", "rollout", "floor", "step", "store", "memory"}

// Print writes results as an aligned table with a header line.
func Print(w io.Writer, results []Result) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ROW\tCASE\tMETRIC\tVALUE\tUNIT")
	for _, r := range results {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.Row, r.Case, r.Metric, format(r.Value), r.Unit)
	}
	return tw.Flush()
}

func format(v float64) string {
	switch {
	case v == float64(int64(v)) && v < 1e12 && v > -1e12:
		return strconv.FormatInt(int64(v), 10)
	case v >= 100 || v <= -100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case v >= 1 || v <= -1:
		return strconv.FormatFloat(v, 'f', 2, 64)
	default:
		return strconv.FormatFloat(v, 'f', 3, 64)
	}
}

// rolloutResults turns a rollout measurement into table lines.
func rolloutResults(row string, t Throughput) []Result {
	c := fmt.Sprintf("%d agents (%d x n=%d x %d rounds)", t.Agents, t.Episodes, t.N, t.Rounds)
	if t.Episodes == 0 { // the floor: calls, no episodes
		c = fmt.Sprintf("%d agents (%d calls each)", t.Agents, t.Rounds)
	}
	if t.Warm {
		c += ", warm"
	}
	out := []Result{
		{row, c, "wall", t.Wall.Seconds(), "s"},
		{row, c, "ideal", t.Ideal.Seconds(), "s"},
		{row, c, "ideal/actual", t.Efficiency(), ""},
		{row, c, "cpu per call", float64(t.CPUPerCall.Nanoseconds()) / 1e3, "us"},
		{row, c, "kernel cpu per call", float64(t.SysPerCall.Nanoseconds()) / 1e3, "us"},
		{row, c, "allocs per call", t.AllocsPerCall, ""},
		{row, c, "bytes per call", t.BytesPerCall, "B"},
	}
	if t.ServerCPUPerCall > 0 {
		out = append(out, Result{row, c, "server cpu per call", float64(t.ServerCPUPerCall.Nanoseconds()) / 1e3, "us"})
	}
	if ceil := t.CPUCeiling(); ceil > 0 {
		out = append(out, Result{row, c, "cpu-bound ceiling", ceil, ""})
	}
	if t.PeakRSS > 0 {
		out = append(out, Result{row, c, "peak rss", float64(t.PeakRSS) / (1 << 20), "MB"})
	}
	if t.TimeWait >= 0 {
		out = append(out, Result{row, c, "time_wait after", float64(t.TimeWait), ""})
	}
	return out
}
