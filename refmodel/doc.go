// Package refmodel is the embedded reference backend (DESIGN §8): a small
// learnable policy for the Dining Philosophers game, served through the same
// two HTTP interfaces a real deployment uses — vLLM's OpenAI-compatible
// server and the trainer job API of DESIGN §5 — so that a run trains for real
// on a machine with no GPU.
//
// # Policy
//
// The policy reads the "state:" line of the last user message, turns it into
// a short feature vector (FeaturesOf), and scores seven outputs: the six
// tools in rollout.ToolNames order and a plain-text reply with no tool call
// (an invalid output). Its logits are (W0 + (alpha/rank) B A) x, where W0 is
// a hand-set base that coordinates badly on purpose and B A is a LoRA adapter
// that training updates from the advantages it is sent; it knows nothing of
// the reward. How badly W0 coordinates is a knob (NewBase,
// Options.BaseCoordination, -1 to 1, 0 the default): it moves W0 along a
// fixed direction (coordinationDelta) and nothing else; the served base and
// the trainer share it, and adapters record it
// (refmodel_base_coordination in adapter_config.json, left out at 0).
//
// # Inference server
//
// Each output is one token, reported as "token_id:<n>" (TokenID) with its
// logprob, log softmax(logits/temperature) over the outputs the request
// allows. With a request seed the sampled output is a pure function of the
// weights, the messages, the temperature and the seed. Usage counts
// completion_tokens = 1 and estimates prompt_tokens as the request body's
// bytes / 4. With "return_token_ids": true each choice carries token_ids
// (its one output token) and the answer prompt_token_ids: one stand-in id
// per 4 bytes of the request body (promptTokenIDs), as many as
// prompt_tokens.
//
// By default the server is lenient where vLLM is not. Options.Strict (grpo
// refmodel serve --strict) makes it behave like vLLM where the difference
// can break a run or spoil it in silence — auto tool choice refused without
// vLLM's flags, load_inplace ignored, tiny temperatures raised to 0.01,
// seeded unparsed, multiple and truncated tool calls: see Strict.
//
// # Trainer
//
// A job turns each sampled choice into a Sample (SamplesOf; a choice whose
// token_ids disagree with its logprobs token fails the job) and runs
// PPO-clip (Train): each epoch is DefaultSteps full-batch gradient steps.
// Jobs run one at a time; their records and adapters live under
// Options.DataDir. A job replaces no adapter but its own: each adapter
// directory holds AdapterJobFile naming the job that made it, and a job
// whose output_adapter another job made, or is to make, or a directory no
// job made, is refused with 409 (the Python trainer in deploy/trainer
// does the same); the same job trained again replaces its own, and any
// job the adapter of a job that ended cancelled or failed.
package refmodel
