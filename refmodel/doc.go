// Package refmodel is the embedded reference backend (DESIGN §8): a small
// learnable policy for the Dining Philosophers game, served through the same
// two HTTP interfaces a real deployment uses — vLLM's OpenAI-compatible
// server and the trainer job API of DESIGN §5 — so that a run trains for real
// on a machine with no GPU.
//
// The policy reads the "state:" line of the latest user message, turns it
// into a short feature vector, and scores seven outputs: the six tools in
// rollout.ToolNames order and a plain-text reply with no tool call (an
// invalid output). Its logits are (W0 + (alpha/rank) B A) x, where W0 is a
// hand-set base that coordinates badly on purpose and B A is a LoRA adapter
// that training updates with PPO-clip from the advantages it is sent.
package refmodel
