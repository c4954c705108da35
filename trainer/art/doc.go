// Package art is grpo's client of OpenPipe ART's backend server (`art run`,
// port 7999 by default), the second trainer of DESIGN §5 (trainer.kind:
// art). Unlike the job API, ART has no job ids: it trains synchronously
// while streaming one line per gradient step, counts steps itself, and
// serves inference from its own vLLM.
//
// # Versions
//
// Supported: openpipe-art 0.4.0 to 0.5.17. Check reads /openapi.json and
// tells the release from the paths and schemas (FastAPI's info.version is
// its own "0.1.0", not ART's), then asks /healthcheck:
//
//   - 0.4.0 to 0.5.7: /_log and /_delete_checkpoints (keeps the latest step
//     and the best by a logged metric); one adapter named after the model,
//     replaced in place after each step.
//   - 0.5.9 to 0.5.17: /_delete_checkpoint_files with steps_to_keep, no
//     /_log; each checkpoint served as "<name>@<step>".
//   - dev_config.scale_rewards is detected from the schemas (present in
//     0.4.12, absent in 0.4.0).
//
// Refused with a *VersionError naming what was found and this range:
// trajectories without additional_histories (0.3.x; 0.3.11 checked), a
// server without /_train_model (0.5.18, which no longer trains through
// `art run`), anything else that lacks an endpoint used here.
//
// Read for this package (the published wheels, and 0.3.11 from the
// OpenPipe/ART repository, src/art/...):
//
//   - 0.4.0: art/cli.py, art/backend.py (ART's own HTTP client: the bodies
//     and query parameters it sends), art/model.py, art/trajectories.py,
//     art/types.py, art/dev/train.py, art/dev/model.py,
//     art/dev/openai_server.py, art/local/backend.py, art/local/tokenize.py.
//   - 0.4.12: art/dev/train.py, art/dev/model.py (InternalModelConfig,
//     PeftArgs), art/dev/openai_server.py, art/local/backend.py,
//     art/preprocessing/tokenize.py, art/unsloth/train.py (stream keys).
//   - 0.5.3: art/model.py, art/types.py, art/dev/train.py,
//     art/local/backend.py, art/local/checkpoints.py.
//   - 0.5.10: art/cli.py, art/backend.py, art/model.py, art/trajectories.py,
//     art/types.py, art/dev/train.py, art/dev/openai_server.py,
//     art/local/backend.py, art/preprocessing/tokenize.py,
//     art/unsloth/service.py, art/unsloth/train.py.
//   - 0.5.16: art/cli.py, art/model.py, art/trajectories.py, art/types.py,
//     art/dev/train.py, art/local/backend.py, art/preprocessing/tokenize.py.
//   - 0.5.7 and 0.5.9: art/cli.py and the nothing-trainable branch of
//     art/local/backend.py; 0.5.9 also art/dev/openai_server.py.
//   - 0.5.0, 0.5.4, 0.5.11, 0.5.18: art/cli.py (the endpoints).
//   - 0.3.11: src/art/cli.py, trajectories.py, types.py, dev/*.py.
//
// Releases 0.4.1 to 0.4.11, 0.5.1, 0.5.2, 0.5.5, 0.5.6 and 0.5.12 to 0.5.15
// were not read; detection does not depend on version numbers, only on what
// the server exposes. testdata/openapi-*.json are hand-built from those
// sources in FastAPI's shape, not captured from running servers.
//
// # Endpoints
//
//	Check              GET  /openapi.json, GET /healthcheck        retried (reads)
//	Register           POST /register                      body: the model itself
//	Prepare            POST /_prepare_backend_for_training {"model", "config"} -> [base_url, api_key]
//	Train              POST /_train_model                  {"model", "trajectory_groups", "config", "dev_config", "verbose"}
//	                                                         -> newline-delimited JSON, one object per gradient step
//	Step               POST /_get_step                     body: the model -> int    retried (a read)
//	Log                POST /_log                          {"model", "trajectory_groups", "split"} (0.4.0-0.5.7)
//	DeleteCheckpoints  POST /_delete_checkpoint_files      {"model", "steps_to_keep"} (0.5.9 on)
//	                   POST /_delete_checkpoints?benchmark=..&benchmark_smoothing=1, body: the model (before)
//
// The model is ART's TrainableModel as ART's own client sends it:
// name, project, config (null), base_model, trainable (true) and
// _internal_config {"peft_args": {"r", "lora_alpha", "target_modules"}}
// (plus init_args.max_seq_length when set). ART's server hands the JSON
// object to TrainableModel's __init__, which is how the private
// _internal_config arrives; ART builds its training service from the first
// call that needs one, so every call sends the whole model.
//
// Train's body: config {"learning_rate", "beta" (grpo's kl_beta)};
// dev_config {"epsilon", "epsilon_high", "scale_rewards": false when the
// server knows the key}. grpo's epochs must be 1 (ART makes one pass per
// call). Each stream line carries loss, grad_norm, policy_loss, entropy,
// kl_div (when beta > 0) and num_gradient_steps; the result's means are
// computed as ART logs them. "Nothing trainable" (no group with a reward
// spread) is an empty stream up to 0.5.7 and a single line with
// num_gradient_steps 0 from 0.5.9: TrainResult.NothingTrainable. A broken
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
// group, every scored trajectory (all philosophers of every non-failed
// episode) with grpo's advantage as ART's reward; the episode reward goes
// along as the metric grpo_reward, and group/episode/agent as metadata.
// Trajectories with advantage 0 must be included: they count in ART's
// standard deviation. Sampled choices are sent byte for byte (raw JSON,
// no HTML escaping), logprobs, token_ids and prompt_token_ids included;
// a choice without logprobs, or with tokens not in vLLM's token_id:<n>
// form, is refused before sending, as ART would fail the whole step on it.
//
// grpo's advantages have mean 0 in each group, so ART's subtraction leaves
// them unchanged. Then:
//
//   - Servers with scale_rewards (0.4.12 on): Train sends scale_rewards
//     false and ART trains on grpo's advantages as sent, whatever
//     grpo.advantage says (up to rounding: ART subtracts their float mean,
//     about 1e-17, so zero-advantage trajectories carry about 1e-17 instead
//     of being skipped).
//   - Servers without it (0.4.0): ART divides each group by its standard
//     deviation. grpo's default estimator (std_normalize: true, std:
//     population, baseline: mean) already has standard deviation
//     s/(s+1e-6) ≈ 1, so ART changes it by less than 1% for any reward
//     spread s above 1e-4: accepted. ValidateAdvantage refuses the others,
//     which ART would undo: std_normalize: false (Dr. GRPO would become
//     GRPO), std: unbiased (its sqrt(n/(n-1)) factor would be divided out),
//     baseline: leave-one-out (its n/(n-1) factor would be divided out).
//
// Train checks each group before sending: mean 0, and, without
// scale_rewards, a population standard deviation within 1% of 1 (or all
// zero). A group that fails (another estimator, or zero-advantage
// trajectories left out) is refused rather than silently rescaled.
//
// # Steps, resume and checkpoints
//
// ART's step is the number of its latest checkpoint, 0 before training,
// and each Train that trains advances it by one. When nothing is trainable
// ART still advances from 0.4.12 on (renaming the last checkpoint to the
// next step up to 0.5.9, copying it from 0.5.10) but not in 0.4.0. ART has no idempotency key, so a grpo step
// whose Train started at ART step b (TrainResult.StepBefore) is done once
// Step returns more than b; cancelling Train does not stop ART, which may
// still finish the step.
//
// DeleteCheckpoints keeps the steps asked for plus ART's latest (ART needs
// it to go on training). From 0.5.9 the list is sent as is. Before,
// ART keeps only its latest step and its own best by a logged metric,
// which grpo cannot steer; to never lose grpo's best checkpoint the request
// is sent only when every step to keep is the latest, otherwise nothing is
// deleted and a *KeepError (ErrCannotKeep) says so. From 0.4.12 to 0.5.9 a
// step that trains nothing renames the latest checkpoint to the next step,
// so a best step equal to the latest one moves with it (same weights, next
// step number). ART keeps checkpoints under
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
// sample: "<name>" up to 0.5.7, "<name>@<step>" from 0.5.9. Up to 0.5.7
// only the latest checkpoint is served, so evaluating an older step needs
// its checkpoint loaded elsewhere.
//
// # Wiring
//
// RunJob runs one grpo step given as a trainer.JobRequest and answers a
// trainer.Job, for a thin adapter behind the orchestrator's trainer seam.
// All HTTP lives in http.go; requests go through internal/httpx, the retry
// loop every HTTP client of grpo shares (reads retried by Options.Retry).
package art
