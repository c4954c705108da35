"""grpo_trainer is the reference LoRA trainer of grpo: the DESIGN §5 job API
over HTTP, token-level GRPO / PPO-clip on the sampled tokens, PEFT adapters
that vLLM loads."""

__version__ = "0.1.0"
