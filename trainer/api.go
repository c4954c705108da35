// Package trainer speaks to LoRA trainers. This file holds the wire types of
// the trainer job API (DESIGN §5); the reference backend serves the same
// types, so there is one definition of the protocol.
package trainer

import "encoding/json"

// Job states.
const (
	StateQueued    = "queued"
	StateRunning   = "running"
	StateSucceeded = "succeeded"
	StateFailed    = "failed"
	StateCancelled = "cancelled"
)

// Terminal reports whether a job in state s will not change again.
func Terminal(s string) bool {
	return s == StateSucceeded || s == StateFailed || s == StateCancelled
}

// Adapter names a LoRA adapter and the directory that holds it.
type Adapter struct {
	Name string `json:"name"`
	Path string `json:"path"`
}

// LoRA is the adapter's shape.
type LoRA struct {
	Rank          int      `json:"rank"`
	Alpha         float64  `json:"alpha"`
	TargetModules []string `json:"target_modules"`
}

// Hyperparameters of one update.
type Hyperparameters struct {
	LearningRate float64 `json:"learning_rate"`
	Epsilon      float64 `json:"epsilon"`
	EpsilonHigh  float64 `json:"epsilon_high"`
	KLBeta       float64 `json:"kl_beta"`
	Epochs       int     `json:"epochs"`
	// MiniBatches is the optimizer steps per epoch over the job's
	// trajectories; 0 (a request stored before the key existed) is left
	// out, and the trainer takes its default, 1.
	MiniBatches int `json:"mini_batches,omitempty"`
	// WarmupSteps is the linear warm-up over the first optimizer steps of
	// the adapter's lineage.
	WarmupSteps int `json:"warmup_steps"`
	// ResetOptimizer starts the optimizer state fresh instead of restoring
	// the parent adapter's.
	ResetOptimizer bool `json:"reset_optimizer"`
}

// Trajectory is one philosopher's conversation. MessagesAndChoices holds
// OpenAI messages (objects with "role") and, for each sampled assistant turn,
// the full OpenAI choice object (with "message", "finish_reason",
// "logprobs" and, from vLLM, "token_ids") exactly as the inference server
// returned it, plus one added key, "prompt_token_ids", copied from the
// answer's top level when the server sent it.
//
// Sampling says how its turns were sampled; PolicyStep, when set, is the
// step of the adapter that sampled them (an asynchronous pipeline samples
// with an older policy than the one being trained).
type Trajectory struct {
	MessagesAndChoices []json.RawMessage `json:"messages_and_choices"`
	Tools              json.RawMessage   `json:"tools,omitempty"`
	Reward             float64           `json:"reward"`
	Advantage          float64           `json:"advantage"`
	Group              string            `json:"group"`
	Episode            string            `json:"episode"`
	Agent              int               `json:"agent"`
	Sampling           *Sampling         `json:"sampling,omitempty"`
	PolicyStep         *int              `json:"policy_step,omitempty"`
}

// Sampling is the settings a trajectory's turns were sampled with (DESIGN
// §5): the served model name (the base model or an adapter) and the
// request parameters as sent.
type Sampling struct {
	Model              string         `json:"model"`
	Temperature        float64        `json:"temperature"`
	TopP               float64        `json:"top_p"`
	MaxTokens          int            `json:"max_tokens,omitempty"`
	ChatTemplateKwargs map[string]any `json:"chat_template_kwargs,omitempty"`
}

// JobRequest is the body of POST /v1/jobs. ID is the idempotency key.
type JobRequest struct {
	ID              string          `json:"id"`
	BaseModel       string          `json:"base_model"`
	ParentAdapter   *Adapter        `json:"parent_adapter"`
	OutputAdapter   string          `json:"output_adapter"`
	LoRA            LoRA            `json:"lora"`
	Hyperparameters Hyperparameters `json:"hyperparameters"`
	Trajectories    []Trajectory    `json:"trajectories"`
}

// Metrics are the training statistics a job reports. The diagnostics of
// DESIGN §5's "Optimizer state and diagnostics" are pointers: nil is a
// trainer that does not report them, told apart from a reported 0 (a
// sampler logprob gap of 0 is the good news).
type Metrics struct {
	Loss         float64 `json:"loss"`
	KL           float64 `json:"kl"`
	GradNorm     float64 `json:"grad_norm"`
	ClipFraction float64 `json:"clip_fraction"`
	// OptimizerStep is the optimizer steps taken along the adapter's
	// lineage, this job's included. A number, not an int, so that a
	// trainer writing it as 3.0 is still read.
	OptimizerStep *float64 `json:"optimizer_step,omitempty"`
	// SamplerLogprobGap is the mean |trainer logprob - sampler logprob|
	// over the sampled tokens, before the first update: near 0 when the
	// trainer scores what the inference server sampled.
	SamplerLogprobGap *float64 `json:"sampler_logprob_gap,omitempty"`
	// Entropy is the policy's mean entropy over the sampled tokens.
	Entropy *float64 `json:"entropy,omitempty"`
	// UpdateNorm is the L2 norm of the adapter weights' change in the job.
	UpdateNorm *float64 `json:"update_norm,omitempty"`
}

// Map is m as the store and the events keep it: a key per metric
// reported, so a diagnostic the trainer did not send has no key.
func (m Metrics) Map() map[string]float64 {
	out := map[string]float64{"loss": m.Loss, "kl": m.KL, "grad_norm": m.GradNorm, "clip_fraction": m.ClipFraction}
	for key, v := range map[string]*float64{
		"optimizer_step": m.OptimizerStep, "sampler_logprob_gap": m.SamplerLogprobGap,
		"entropy": m.Entropy, "update_norm": m.UpdateNorm,
	} {
		if v != nil {
			out[key] = *v
		}
	}
	return out
}

// Job is the body of GET /v1/jobs/{id}.
type Job struct {
	ID       string   `json:"id"`
	State    string   `json:"state"`
	Progress float64  `json:"progress"`
	Metrics  *Metrics `json:"metrics,omitempty"`
	Adapter  *Adapter `json:"adapter,omitempty"`
	Error    string   `json:"error,omitempty"`
}
