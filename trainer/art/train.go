package art

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"

	"github.com/grpo-dev/grpo/internal/quote"
	"github.com/grpo-dev/grpo/trainer"
)

// TrainConfig is one training call's settings: ART's TrainConfig
// (learning_rate, beta) and the dev config's PPO clip range.
type TrainConfig struct {
	LearningRate float64
	Beta         float64 // KL coefficient against the base model
	Epsilon      float64 // lower clip; ART's default 0.2 when 0
	EpsilonHigh  float64 // upper clip; ART uses Epsilon when 0
}

// TrainConfigFrom maps grpo's hyperparameters. ART makes one pass over the
// packed sequences per call, so only epochs 0 or 1 are accepted.
func TrainConfigFrom(h trainer.Hyperparameters) (TrainConfig, error) {
	if h.Epochs > 1 {
		return TrainConfig{}, fmt.Errorf("trainer.hyperparameters.epochs: %d is not accepted with trainer.kind: art (ART trains one pass per step); accepted: 1", h.Epochs)
	}
	if h.LearningRate <= 0 {
		return TrainConfig{}, fmt.Errorf("trainer.hyperparameters.learning_rate: %v: must be positive", h.LearningRate)
	}
	return TrainConfig{LearningRate: h.LearningRate, Beta: h.KLBeta, Epsilon: h.Epsilon, EpsilonHigh: h.EpsilonHigh}, nil
}

// Metrics is one line of the training stream: one gradient step.
type Metrics struct {
	GradientStep  int // 1-based index of this line
	GradientSteps int // the number of gradient steps ART announced
	Loss          float64
	GradNorm      float64
	PolicyLoss    float64
	Entropy       float64
	KL            float64 // ART's kl_div, reported only when beta > 0
	// Values holds every finite numeric key of the line as ART sent it.
	Values map[string]float64
	// NonFinite holds the keys ART sent as NaN, Infinity or -Infinity
	// (Python's json.dumps writes them for a diverged loss or gradient
	// norm); they are kept out of Values and of the means, which grpo
	// stores as JSON.
	NonFinite map[string]float64
}

// TrainResult is a finished training call.
type TrainResult struct {
	GradientSteps int
	// Mean is the mean of each key over the stream's lines, as ART logs it.
	Mean map[string]float64
	// Metrics summarises Mean in the job API's terms.
	Metrics trainer.Metrics
	// NonFinite counts, per key, the lines that carried it as NaN or
	// ±Infinity; those lines still count as gradient steps.
	NonFinite map[string]int
	// NothingTrainable: no group had a reward spread (or no choice had
	// logprobs), so ART trained nothing: the stream is empty. 0.4.12
	// still advances its step (renaming the last checkpoint); 0.4.0 does
	// not.
	NothingTrainable bool
	// StepBefore and StepAfter are ART's step around the call.
	StepBefore, StepAfter int
}

// Advanced reports whether ART's step moved: the grpo step this call
// trained is done.
func (r TrainResult) Advanced() bool { return r.StepAfter > r.StepBefore }

// maxLine bounds one line of the training stream; lines are a few hundred
// bytes of metrics.
const maxLine = 1 << 20

// Train trains m on groups (POST /_train_model) and reads the stream of
// gradient steps, calling onProgress (if not nil) for each. groups are
// checked first: each group's advantages (sent as rewards) must be trained
// as sent (see ValidateAdvantage). A line that is not JSON, a stream that
// ends inside a line or before the announced number of gradient steps, and
// a broken connection are errors; so is ctx ending, though ART may still
// finish the step: on resume, compare Step with StepBefore.
//
// Train is never retried: ART has no idempotency key, and a second call
// would train a second step.
func (c *Client) Train(ctx context.Context, m Model, groups []TrajectoryGroup, cfg TrainConfig, onProgress func(Metrics)) (TrainResult, error) {
	if err := m.Validate(); err != nil {
		return TrainResult{}, err
	}
	p, err := c.protocol(ctx)
	if err != nil {
		return TrainResult{}, err
	}
	if err := checkAdvantages(groups, p); err != nil {
		return TrainResult{}, err
	}
	var res TrainResult
	if res.StepBefore, err = c.Step(ctx, m); err != nil {
		return res, err
	}
	resp, err := c.openStream(ctx, "/_train_model", trainBody(m, groups, cfg, p))
	if err != nil {
		return res, fmt.Errorf("ART train %s: %w", m.Name, err)
	}
	defer resp.Body.Close()

	lines, err := readStream(resp.Body, onProgress)
	if err != nil {
		if ctx.Err() != nil {
			return res, fmt.Errorf("ART train %s: %w", m.Name, ctx.Err())
		}
		return res, fmt.Errorf("ART train %s: %w", m.Name, err)
	}
	summarise(&res, lines)
	if res.StepAfter, err = c.Step(ctx, m); err != nil {
		return res, err
	}
	return res, nil
}

func trainBody(m Model, groups []TrajectoryGroup, cfg TrainConfig, p Protocol) any {
	dev := map[string]any{}
	if cfg.Epsilon > 0 {
		dev["epsilon"] = cfg.Epsilon
	}
	if cfg.EpsilonHigh > 0 {
		dev["epsilon_high"] = cfg.EpsilonHigh
	}
	if p.ScaleRewards {
		// The rewards are grpo's advantages: subtracting their mean (0)
		// leaves them as they are; dividing by their std would not.
		dev["scale_rewards"] = false
	}
	return struct {
		Model            Model             `json:"model"`
		TrajectoryGroups []TrajectoryGroup `json:"trajectory_groups"`
		Config           trainConfigWire   `json:"config"`
		DevConfig        map[string]any    `json:"dev_config"`
		Verbose          bool              `json:"verbose"`
	}{m, nonNil(groups), trainConfigWire{cfg.LearningRate, cfg.Beta}, dev, false}
}

type trainConfigWire struct {
	LearningRate float64 `json:"learning_rate"`
	Beta         float64 `json:"beta"`
}

// Python's json.dumps writes NaN, Infinity and -Infinity as bare words,
// which are not JSON. pythonJSON turns each one found outside a string into
// a string of its own, marked by an escaped NUL that ART's metrics never
// hold, and nonFinite maps those strings back.
var nonFinite = map[string]float64{
	`"\u0000NaN"`:       math.NaN(),
	`"\u0000Infinity"`:  math.Inf(1),
	`"\u0000-Infinity"`: math.Inf(-1),
}

func pythonJSON(line []byte) []byte {
	if !bytes.Contains(line, []byte("NaN")) && !bytes.Contains(line, []byte("Infinity")) {
		return line
	}
	out := make([]byte, 0, len(line)+16)
	inString, escaped := false, false
	for i := 0; i < len(line); i++ {
		c := line[i]
		if inString {
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
			out = append(out, c)
			continue
		}
		if c == '"' {
			inString = true
			out = append(out, c)
			continue
		}
		word := ""
		for _, w := range []string{"NaN", "Infinity", "-Infinity"} {
			if bytes.HasPrefix(line[i:], []byte(w)) {
				word = w
			}
		}
		if word == "" {
			out = append(out, c)
			continue
		}
		out = append(out, `"\u0000`+word+`"`...)
		i += len(word) - 1
	}
	return out
}

var errPartialLine = errors.New("stream ended inside a line")

// scanLines is bufio.ScanLines, except that data left without a final
// newline is an error: the server stopped mid-line.
func scanLines(data []byte, atEOF bool) (int, []byte, error) {
	if i := bytes.IndexByte(data, '\n'); i >= 0 {
		return i + 1, bytes.TrimSuffix(data[:i], []byte("\r")), nil
	}
	if atEOF && len(data) > 0 {
		return 0, nil, fmt.Errorf("%w: %s", errPartialLine, quote.Body(data))
	}
	return 0, nil, nil
}

// readStream parses newline-delimited JSON objects until the body ends.
func readStream(body io.Reader, onProgress func(Metrics)) ([]Metrics, error) {
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 0, 4096), maxLine)
	sc.Split(scanLines)
	var out []Metrics
	n := 0
	for sc.Scan() {
		n++
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var raw map[string]json.RawMessage
		if err := json.Unmarshal(pythonJSON(line), &raw); err != nil || raw == nil {
			if err == nil {
				err = errors.New("null")
			}
			return out, &StreamError{Line: n, Msg: "not a JSON object: " + quote.Body(line), Err: err}
		}
		m := Metrics{GradientStep: len(out) + 1, Values: map[string]float64{}}
		for k, v := range raw {
			var f float64
			if json.Unmarshal(v, &f) == nil {
				m.Values[k] = f
			} else if f, ok := nonFinite[string(v)]; ok {
				if m.NonFinite == nil {
					m.NonFinite = map[string]float64{}
				}
				m.NonFinite[k] = f
			}
		}
		m.GradientSteps = int(m.Values["num_gradient_steps"])
		m.Loss, m.GradNorm = m.Values["loss"], m.Values["grad_norm"]
		m.PolicyLoss, m.Entropy, m.KL = m.Values["policy_loss"], m.Values["entropy"], m.Values["kl_div"]
		out = append(out, m)
		if onProgress != nil {
			onProgress(m)
		}
	}
	if err := sc.Err(); err != nil {
		return out, &StreamError{Line: n + 1, Msg: "read", Err: err}
	}
	if len(out) > 0 {
		if want := out[0].GradientSteps; want > 0 && len(out) < want {
			return out, &StreamError{Msg: fmt.Sprintf("ended after %d of %d gradient steps", len(out), want)}
		}
	}
	return out, nil
}

func summarise(res *TrainResult, lines []Metrics) {
	res.Mean = map[string]float64{}
	if len(lines) == 0 || (len(lines) == 1 && lines[0].GradientSteps == 0) {
		res.NothingTrainable = true
		if len(lines) == 1 {
			res.Mean = lines[0].Values
		}
		return
	}
	count := map[string]int{}
	for _, l := range lines {
		for k := range l.NonFinite {
			if res.NonFinite == nil {
				res.NonFinite = map[string]int{}
			}
			res.NonFinite[k]++
		}
		for k, v := range l.Values {
			res.Mean[k] += v
			count[k]++
		}
	}
	for k := range res.Mean {
		res.Mean[k] /= float64(count[k])
	}
	res.GradientSteps = len(lines)
	res.Metrics = trainer.Metrics{Loss: res.Mean["loss"], KL: res.Mean["kl_div"], GradNorm: res.Mean["grad_norm"]}
}
