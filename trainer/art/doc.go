// Package art is grpo's client of OpenPipe ART's backend server (`art run`,
// port 7999 by default), the second trainer of DESIGN §5 (trainer.kind:
// art). Unlike the job API, ART has no job ids: it trains synchronously
// while streaming one line per gradient step, counts steps itself, and
// serves inference from its own vLLM.
//
// # Versions
//
// Supported: openpipe-art 0.4.0 to 0.5.0, the releases whose real `art
// run` app trains what grpo sends; .ci/art.sh serves each release's own app
// (a recording LocalBackend running the release's own tokenizer) and trains
// two steps through it. Check reads /openapi.json and tells the release
// from the paths and schemas (FastAPI's info.version is its own "0.1.0",
// not ART's), then asks /healthcheck:
//
//   - 0.4.0 to 0.4.3: no dev_config.scale_rewards.
//   - 0.4.4 to 0.4.7: scale_rewards; ART divides every advantage by the
//     batch's mean |advantage|.
//   - 0.4.8 to 0.5.0: also dev_config.scale_learning_rate_by_reward_std_dev,
//     added with the tokenizer that trains plain assistant messages too
//     (Protocol.TrainsMessages).
//
// Refused with a *VersionError naming what was found and the band:
// trajectories without additional_histories (0.3.x), Trajectory.auto_metrics
// (0.5.1 to 0.5.17, whose app keeps sampled choices as chat messages and
// fails with KeyError: 'role'), an /openapi.json answering 500 (0.5.9 to
// 0.5.18), and a server without an endpoint used here (0.5.18 has no
// /_train_model). testdata/openapi-*.json are captured from the real apps
// (.ci/art/harness.py --dump-openapi) but 0.3.11's, hand-built from its
// source.
//
// One `art run` serves one grpo run: ART kills its model-service processes
// when a new model name first trains, so Occupant looks for another model
// on ART's vLLM before a run registers.
//
// # Endpoints
//
//	Check              GET  /openapi.json, GET /healthcheck        retried (reads)
//	Register           POST /register                      body: the model itself
//	Prepare            POST /_prepare_backend_for_training {"model", "config"} -> [base_url, api_key]
//	Train              POST /_train_model                  {"model", "trajectory_groups", "config", "dev_config", "verbose"}
//	                                                         -> newline-delimited JSON, one object per gradient step
//	Step               POST /_get_step                     body: the model -> int    retried (a read)
//	Log                POST /_log                          {"model", "trajectory_groups", "split"}
//	DeleteCheckpoints  POST /_delete_checkpoints?benchmark=..&benchmark_smoothing=1, body: the model
//	Occupant           GET  <ART host>:<vLLM port>/v1/models
//
// The model is ART's TrainableModel as ART's own client sends it:
// name, project, config (null), base_model, trainable (true) and
// _internal_config {"init_args": {"max_lora_rank"}, "peft_args": {"r",
// "lora_alpha", "target_modules"}} (plus init_args.max_seq_length when
// set): ART's max_lora_rank defaults to 8, so it is sent as the rank. ART's server hands the JSON
// object to TrainableModel's __init__, which is how the private
// _internal_config arrives; ART builds its training service from the first
// call that needs one, so every call sends the whole model.
//
// Train's body: config {"learning_rate", "beta" (grpo's kl_beta)};
// dev_config {"epsilon", "epsilon_high", "scale_rewards": false when the
// server knows the key}. grpo's epochs must be 1 (ART makes one pass per
// call). Each stream line carries loss, grad_norm, policy_loss, entropy,
// kl_div (when beta > 0) and num_gradient_steps; the result's means are
// computed as ART logs them, over finite values: NaN and ±Infinity (which
// Python's json.dumps writes) are kept in Metrics.NonFinite and counted in
// TrainResult.NonFinite. "Nothing trainable" (no group with a reward
// spread) is an empty stream: TrainResult.NothingTrainable. A broken
// line, a stream cut inside a line or before the announced number of
// gradient steps, and a dropped connection are errors. Train is never
// retried.
//
// # Advantages
//
// ART recomputes advantages from rewards over each TrajectoryGroup: reward
// minus the group mean, divided by the population standard deviation plus
// 1e-6 unless dev_config.scale_rewards is false, and skips trajectories
// whose advantage is exactly 0. TrainGroups therefore sends, per grpo
// group, the scored trajectories (all philosophers of every non-failed
// episode) with grpo's advantage as ART's reward; the episode reward goes
// along as the metric grpo_reward, and group/episode/agent as metadata.
// Each group's advantages are centred first (centre): rounded to a common
// binary quantum so that they sum to exactly 0, which keeps ART's mean at
// exactly 0 and zero advantages at exactly 0. Sampled choices are sent
// byte for byte (raw JSON, no HTML escaping), logprobs, token_ids and
// prompt_token_ids included; a choice without logprobs, or with tokens not
// in vLLM's token_id:<n> form, is refused before sending, as ART would fail
// the whole step on it. Up to 0.4.7 each earlier sampled turn is sent as
// an additional history of its own (splitTurns).
//
//   - Servers with scale_rewards (0.4.4 on): Train sends scale_rewards
//     false, and zero-advantage trajectories are left out (ART skips them);
//     ART then divides every advantage by the batch's mean |advantage|, so
//     grpo sets each update's direction and ART its scale.
//   - Servers without it (0.4.0 to 0.4.3): ART divides each group by its
//     standard deviation, so zero-advantage trajectories are sent (they
//     count in it). grpo's default estimator (std_normalize: true, std:
//     population, baseline: mean) already has standard deviation
//     s/(s+1e-6) ≈ 1, so ART changes it by less than 1% for any reward
//     spread s above 1e-4: accepted. ValidateAdvantage refuses the others,
//     which ART would undo.
//
// Train checks each group before sending: mean 0, and, without
// scale_rewards, a population standard deviation within 1% of 1 (or all
// zero). A group that fails is refused rather than silently rescaled.
//
// # Steps, resume and checkpoints
//
// ART's step is the number of its latest checkpoint, 0 before training,
// and each Train that trains advances it by one. When nothing is trainable
// ART still advances in 0.4.12 (renaming the last checkpoint to the next
// step) but not in 0.4.0. ART has no idempotency key, so a grpo step
// whose Train started at ART step b (TrainResult.StepBefore) is done once
// Step returns more than b; cancelling Train does not stop ART, which may
// still finish the step.
//
// DeleteCheckpoints keeps the steps asked for plus ART's latest (ART needs
// it to go on training). ART keeps only its latest step and its own best
// by a logged metric, which grpo cannot steer; to never lose grpo's best
// checkpoint the request is sent only when every step to keep is the
// latest, otherwise nothing is deleted and a *KeepError (ErrCannotKeep)
// says so. ART keeps checkpoints under
// <art path>/<project>/models/<name>/checkpoints/<step, 4 digits>.
//
// # Inference
//
// Prepare starts ART's vLLM and returns its base URL and key; ART names
// its bind address (0.0.0.0 by default), so an unspecified or loopback
// host is replaced by the ART server's host. That endpoint is the run's
// only inference endpoint, started with ART's flags
// (--return-tokens-as-token-ids, hermes tool parser, auto tool choice).
// ART loads every new checkpoint there itself: the caller must not call
// vLLM's load/unload adapter endpoints. InferenceModel names the model to
// sample: "<name>", the latest checkpoint only, so evaluating an older
// step needs its checkpoint loaded elsewhere.
//
// # Wiring
//
// RunJob runs one grpo step given as a trainer.JobRequest and answers a
// trainer.Job, for a thin adapter behind the orchestrator's trainer seam.
// All HTTP lives in http.go; requests go through internal/httpx, the retry
// loop every HTTP client of grpo shares (reads retried by Options.Retry).
package art
