"""A tiny Qwen3 model and byte-level BPE tokenizer built here (nothing is
downloaded), and a sampler that plays vLLM: it samples from the model and
returns OpenAI choice objects with logprobs, token_ids and prompt_token_ids."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import pytest
import torch

os.environ["HF_HUB_OFFLINE"] = "1"

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    PreTrainedTokenizerFast,
    Qwen3Config,
    Qwen3ForCausalLM,
)

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>"]

CHAT_TEMPLATE = (
    "{%- if tools %}<|im_start|>system\ntools:"
    "{% for t in tools %} {{ t.function.name }}{% endfor %}<|im_end|>\n{% endif %}"
    "{%- for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content or '' }}"
    "{%- if m.tool_calls %}{% for tc in m.tool_calls %}<tool_call>{{ tc.function.name }}"
    "</tool_call>{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n"
    "{%- if enable_thinking is defined and not enable_thinking %}<think></think>{% endif %}"
    "{%- endif %}"
)

CORPUS = [
    "you are philosopher 2 at a table of five. state: round 1 left fork free right fork held",
    "pick_left pick_right put_left put_right eat think wait",
    "the philosopher picks up the left fork and then the right fork and eats",
    "ok failed invalid tool result state: round 2",
]

TOOLS = [
    {"type": "function", "function": {"name": n, "parameters": {"type": "object"}}}
    for n in ("pick_left", "pick_right", "eat", "think")
]


def build_tokenizer() -> PreTrainedTokenizerFast:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(CORPUS * 20, trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=SPECIALS[3:],
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def build_model(vocab: int, seed: int = 0) -> Qwen3ForCausalLM:
    cfg = Qwen3Config(
        vocab_size=vocab,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        max_position_embeddings=512,
        tie_word_embeddings=False,
        eos_token_id=2,
        pad_token_id=0,
    )
    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(cfg)
    # Larger weights than the default init make the distribution peaked
    # enough that one training step visibly moves it.
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.normal_(0.0, 0.2)
    return model


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("tiny-qwen3")
    tok = build_tokenizer()
    model = build_model(len(tok))
    model.save_pretrained(d)
    tok.save_pretrained(d)
    return d


def load(model_dir: Path, dtype: torch.dtype = torch.float32) -> tuple[Any, Any]:
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype, local_files_only=True)
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    tok = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    return model, tok


@pytest.fixture(scope="session")
def tiny(model_dir: Path) -> tuple[Any, Any]:
    """The tiny model in float32 and its tokenizer (do not modify)."""
    return load(model_dir)


def render(tok: Any, history: list[dict[str, Any]], tools: Any = None, **kw: Any) -> list[int]:
    ids = tok.apply_chat_template(
        history, tools=tools, add_generation_prompt=True, tokenize=True, return_dict=False, **kw
    )
    return list(ids)


@torch.no_grad()
def sequence_logprobs(
    model: Any, prompt: list[int], completion: list[int], temperature: float = 1.0
) -> list[float]:
    """log p(completion | prompt) per token at a temperature, one unpadded
    forward pass."""
    ids = torch.tensor([prompt + completion])
    logits = model(input_ids=ids).logits[0, :-1].double() / temperature
    logp = torch.log_softmax(logits, dim=-1)
    tgt = ids[0, 1:]
    lp = logp.gather(-1, tgt.unsqueeze(-1)).squeeze(-1)
    return [float(x) for x in lp[len(prompt) - 1 :]]


@torch.no_grad()
def sample(
    model: Any, prompt: list[int], n: int, gen: torch.Generator, temperature: float = 1.0
) -> list[int]:
    ids = list(prompt)
    for _ in range(n):
        logits = model(input_ids=torch.tensor([ids])).logits[0, -1].double() / temperature
        ids.append(int(torch.multinomial(torch.softmax(logits, -1), 1, generator=gen)))
    return ids[len(prompt) :]


def choice(
    tok: Any,
    prompt: list[int],
    completion: list[int],
    logprobs: list[float],
    ids: bool = True,
    token_form: str = "token_id",
) -> dict[str, Any]:
    """An OpenAI choice as vLLM returns it (with return_token_ids), plus
    prompt_token_ids as the orchestrator adds it. ids=False drops both id
    lists; token_form "text" gives logprob tokens as text pieces."""
    if token_form == "token_id":
        toks = [f"token_id:{t}" for t in completion]
    else:
        toks = [tok.decode([t]) for t in completion]
    c: dict[str, Any] = {
        "index": 0,
        "message": {"role": "assistant", "content": tok.decode(completion)},
        "logprobs": {
            "content": [
                {"token": t, "logprob": lp, "bytes": None, "top_logprobs": []}
                for t, lp in zip(toks, logprobs, strict=True)
            ]
        },
        "finish_reason": "length",
    }
    if ids:
        c["token_ids"] = list(completion)
        c["prompt_token_ids"] = list(prompt)
    return c


def make_trajectory(
    model: Any,
    tok: Any,
    advantage: float,
    seed: int,
    turns: int = 2,
    n_tokens: int = 6,
    ids: bool = True,
    temperature: float = 1.0,
) -> dict[str, Any]:
    """A conversation of `turns` sampled turns with tool results and user
    messages between them, sampled from model as vLLM would; logprobs are
    at the sampling temperature (what vLLM reports with processed logprobs,
    the same as raw ones at temperature 1)."""
    gen = torch.Generator().manual_seed(seed)
    history: list[dict[str, Any]] = [
        {"role": "system", "content": "you are philosopher 2 at a table of five."},
        {"role": "user", "content": "state: round 1 left fork free right fork held"},
    ]
    items: list[dict[str, Any]] = list(history)
    for t in range(turns):
        prompt = render(tok, history, TOOLS)
        comp = sample(model, prompt, n_tokens, gen, temperature)
        lps = sequence_logprobs(model, prompt, comp, temperature)
        c = choice(tok, prompt, comp, lps, ids=ids)
        items.append(c)
        history.append(c["message"])
        for m in (
            {"role": "tool", "tool_call_id": f"call_{t}", "content": "ok"},
            {"role": "user", "content": f"state: round {t + 2}"},
        ):
            items.append(m)
            history.append(m)
    return {
        "messages_and_choices": items,
        "tools": TOOLS,
        "reward": advantage,
        "advantage": advantage,
        "group": "g1",
        "episode": f"e{seed}",
        "agent": 2,
        "sampling": {
            "model": "tiny",
            "temperature": temperature,
            "top_p": 1.0,
            "max_tokens": n_tokens,
        },
    }


def job_body(trajectories: list[dict[str, Any]], **kw: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": "run/step-0001",
        "base_model": "tiny",
        "parent_adapter": None,
        "output_adapter": "run-step-0001",
        "lora": {"rank": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj", "down_proj"]},
        "hyperparameters": {
            "learning_rate": 1e-2,
            "epsilon": 0.2,
            "epsilon_high": 0.2,
            "kl_beta": 0.0,
            "epochs": 1,
        },
        "trajectories": trajectories,
    }
    body.update(kw)
    return body


def finite(x: float) -> bool:
    return math.isfinite(x)
