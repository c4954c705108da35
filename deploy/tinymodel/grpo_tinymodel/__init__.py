"""A tiny Qwen3-architecture model for the Dining Philosophers task, built here.

`python -m grpo_tinymodel build --out DIR --seed S` trains a tokenizer on
transcripts of scripted, noisy philosophers, then warm-starts a
few-million-parameter Qwen3ForCausalLM on them by supervised fine-tuning, and
saves a Hugging Face directory that vLLM and transformers load offline.
"""

__version__ = "0.1.0"
