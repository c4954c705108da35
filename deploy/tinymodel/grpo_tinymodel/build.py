"""Build the tiny model: tokenizer, Qwen3 config, supervised warm start, save.

Everything follows from the seed and the BuildConfig: the scripted corpus,
the tokenizer's merges, the initial weights and the SFT batches. A finished
build lives under the cache directory, named by a content hash of this
package's source, the seed, the config and the pinned library versions, and is
reused when present.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import random
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from .prompts import tools
from .template import CHAT_TEMPLATE, SPECIAL_TOKENS, TAG_TOKENS
from .transcripts import corpus

MODEL_NAME = "tiny-qwen3"

# What the pre-tokenizer keeps as pieces (every character is in one).
PIECES = r"\n|[^\n.;,{]+[.;,{]? ?|[.;,{] ?"


@dataclass(frozen=True)
class BuildConfig:
    episodes: int = 1200  # scripted episodes; two conversations are kept from each
    vocab_size: int = 1536
    hidden_size: int = 192
    intermediate_size: int = 512
    layers: int = 3
    heads: int = 6
    kv_heads: int = 2
    head_dim: int = 32
    max_position_embeddings: int = 4096
    sft_steps: int = 240
    batch_size: int = 8
    learning_rate: float = 3e-3
    warmup: int = 20
    weight_decay: float = 0.01
    # One thread: on a shared 2-core machine two OpenMP threads spin against
    # other processes and run several times slower; one is also deterministic.
    threads: int = 1


SMALL = BuildConfig(
    episodes=20,
    vocab_size=400,
    hidden_size=64,
    intermediate_size=128,
    layers=2,
    heads=2,
    kv_heads=1,
    head_dim=32,
    sft_steps=3,
    batch_size=4,
    warmup=1,
)


def _log(msg: str) -> None:
    print(f"[tinymodel] {msg}", file=sys.stderr, flush=True)


def cache_key(seed: int, cfg: BuildConfig) -> str:
    """Content hash of the builder's source, the seed, the config and versions."""
    import tokenizers
    import torch
    import transformers

    h = hashlib.sha256()
    pkg = Path(__file__).resolve().parent
    for p in sorted(pkg.glob("*.py")):
        h.update(p.name.encode())
        h.update(p.read_bytes())
    h.update(json.dumps({"seed": seed, "cfg": dataclasses.asdict(cfg)}, sort_keys=True).encode())
    h.update(
        f"torch={torch.__version__} transformers={transformers.__version__} "
        f"tokenizers={tokenizers.__version__}".encode()
    )
    return h.hexdigest()[:16]


def default_cache_dir() -> Path:
    base = os.environ.get("GRPO_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "grpo")
    return Path(base)


def _render_corpus(seed: int, cfg: BuildConfig) -> list[str]:
    """The scripted conversations rendered with the chat template."""
    from transformers.utils.chat_template_utils import render_jinja_template

    convs = [messages for messages, _ in corpus(cfg.episodes, seed)]
    rendered, _ = render_jinja_template(
        conversations=convs, tools=tools(), chat_template=CHAT_TEMPLATE, add_generation_prompt=False
    )
    return list(rendered)


def build_tokenizer(texts: list[str], cfg: BuildConfig):
    """A byte-level BPE trained on the transcripts. Text is pre-split into
    pieces that end at a line break, or after one of `.;,{` (and one space), so
    a merge never crosses a clause of the prose or a key of the state line;
    within a piece BPE may merge everything, so frequent clauses ("Your left
    fork is free. "), keys of the state line ('"left":true,') and a tool
    call's name ('"name": "eat", ') become single tokens, and a 5-round
    conversation stays a few hundred tokens long."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(PIECES), behavior="isolated", invert=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=cfg.vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    # The trainer must never see the tags as text: strip them out first.
    cleaned = []
    for t in texts:
        for s in SPECIAL_TOKENS + TAG_TOKENS:
            t = t.replace(s, "\n")
        cleaned.append(t)
    tok.train_from_iterator(cleaned, trainer)
    # The tags are added tokens that are not special, as in Qwen's tokenizers:
    # they survive skip_special_tokens, so the hermes parser sees them.
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in TAG_TOKENS])
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=None,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token=None,
        clean_up_tokenization_spaces=False,
        model_max_length=cfg.max_position_embeddings,
    )
    fast.add_special_tokens({"additional_special_tokens": ["<|im_start|>"]})
    fast.chat_template = CHAT_TEMPLATE
    return fast


def _examples(tokenizer, texts: list[str]) -> list[tuple[list[int], list[int]]]:
    """Token ids and labels: the loss is on each assistant reply, up to and
    including its <|im_end|>, and nowhere else."""
    start, end = "<|im_start|>assistant\n", "<|im_end|>"
    out = []
    for text in texts:
        enc = tokenizer(text, return_offsets_mapping=True, add_special_tokens=False)
        spans = []
        pos = 0
        while True:
            i = text.find(start, pos)
            if i < 0:
                break
            j = text.find(end, i + len(start))
            spans.append((i + len(start), j + len(end)))
            pos = j
        labels = []
        for tid, (a, b) in zip(enc["input_ids"], enc["offset_mapping"], strict=True):
            inside = any(s <= a and b <= e for s, e in spans)
            labels.append(tid if inside else -100)
        out.append((enc["input_ids"], labels))
    return out


def train(seed: int, cfg: BuildConfig, out: Path) -> dict:
    """Build the model into `out` (which must not exist yet)."""
    import torch
    from transformers import GenerationConfig, Qwen3Config, Qwen3ForCausalLM

    t0 = time.time()
    random.seed(seed)
    torch.manual_seed(seed)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(cfg.threads)

    texts = _render_corpus(seed, cfg)
    tokenizer = build_tokenizer(texts, cfg)
    examples = _examples(tokenizer, texts)
    lengths = [len(ids) for ids, _ in examples]
    _log(
        f"corpus: {len(examples)} conversations, tokens mean {sum(lengths) / len(lengths):.0f} "
        f"max {max(lengths)}, vocab {len(tokenizer)}, {time.time() - t0:.1f}s"
    )

    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    eot = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    mcfg = Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=cfg.hidden_size,
        intermediate_size=cfg.intermediate_size,
        num_hidden_layers=cfg.layers,
        num_attention_heads=cfg.heads,
        num_key_value_heads=cfg.kv_heads,
        head_dim=cfg.head_dim,
        max_position_embeddings=cfg.max_position_embeddings,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=im_end,
        pad_token_id=eot,
        rope_theta=10000.0,
    )
    model = Qwen3ForCausalLM(mcfg)
    params = sum(p.numel() for p in model.parameters())
    _log(f"model: {params / 1e6:.2f}M parameters")

    opt = torch.optim.AdamW(model.parameters(), lr=cfg.learning_rate, weight_decay=cfg.weight_decay, betas=(0.9, 0.98))
    # Batches of conversations of similar length (less padding), in a shuffled
    # order that is drawn again each pass over the corpus.
    by_len = sorted(range(len(examples)), key=lambda i: (lengths[i], i))
    batches = [by_len[i : i + cfg.batch_size] for i in range(0, len(by_len), cfg.batch_size)]
    rng = random.Random(seed + 1)
    order: list[list[int]] = []
    model.train()
    loss_log = []
    for step in range(cfg.sft_steps):
        lr = cfg.learning_rate * min(1.0, (step + 1) / cfg.warmup)
        lr *= 0.5 * (1 + math.cos(math.pi * step / cfg.sft_steps)) * 0.9 + 0.1
        for g in opt.param_groups:
            g["lr"] = lr
        if not order:
            order = list(batches)
            rng.shuffle(order)
        batch = [examples[i] for i in order.pop()]
        width = max(len(ids) for ids, _ in batch)
        ids = torch.full((len(batch), width), eot, dtype=torch.long)
        labels = torch.full((len(batch), width), -100, dtype=torch.long)
        mask = torch.zeros((len(batch), width), dtype=torch.long)
        for k, (x, y) in enumerate(batch):
            ids[k, : len(x)] = torch.tensor(x)
            labels[k, : len(y)] = torch.tensor(y)
            mask[k, : len(x)] = 1
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        loss_log.append(loss.item())
        if step % 25 == 0 or step == cfg.sft_steps - 1:
            _log(f"sft step {step}/{cfg.sft_steps} loss {loss.item():.4f} lr {lr:.2e} {time.time() - t0:.0f}s")

    model.eval()
    model.generation_config = GenerationConfig(
        bos_token_id=None, eos_token_id=[im_end, eot], pad_token_id=eot, do_sample=True, temperature=1.0, top_p=1.0
    )
    out.mkdir(parents=True)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    info = {
        "name": MODEL_NAME,
        "seed": seed,
        "config": dataclasses.asdict(cfg),
        "parameters": params,
        "final_loss": loss_log[-1] if loss_log else None,
        "seconds": round(time.time() - t0, 1),
        "max_conversation_tokens": max(lengths),
    }
    (out / "tinymodel.json").write_text(json.dumps(info, indent=2) + "\n")
    return info


def build(seed: int, cfg: BuildConfig = BuildConfig(), cache_dir: Path | None = None, out: Path | None = None) -> Path:
    """The model for (seed, cfg): from the cache when built before, else built
    into a temporary directory and renamed into place. With `out`, the files
    are also copied there (atomically). Returns the directory to serve."""
    cache_dir = cache_dir or default_cache_dir()
    cache_dir.mkdir(parents=True, exist_ok=True)
    final = cache_dir / f"tinymodel-{cache_key(seed, cfg)}"
    if (final / "tinymodel.json").exists():
        _log(f"reusing {final}")
    else:
        tmp = Path(tempfile.mkdtemp(prefix=".tinymodel-", dir=cache_dir))
        try:
            info = train(seed, cfg, tmp / "m")
            _fsync_tree(tmp / "m")
            if final.exists():
                shutil.rmtree(final)
            os.replace(tmp / "m", final)
            _log(f"built {final} in {info['seconds']}s")
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    if out is None:
        return final
    out = out.resolve()
    tmp = Path(tempfile.mkdtemp(prefix=".tinymodel-", dir=out.parent))
    try:
        shutil.copytree(final, tmp / "m")
        _fsync_tree(tmp / "m")
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp / "m", out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def _fsync_tree(d: Path) -> None:
    for p in d.iterdir():
        if p.is_file():
            with open(p, "rb") as f:
                os.fsync(f.fileno())
