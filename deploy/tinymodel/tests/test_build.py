"""Tokenizer and build: a real prompt round-trips, the build is a function of
the seed, the cache is reused, and transformers loads the result offline."""

import hashlib
import json
from pathlib import Path

import pytest

from grpo_tinymodel.build import SMALL, _render_corpus, build, build_tokenizer, cache_key

FIXTURE = json.loads((Path(__file__).parent / "go_transcripts.json").read_text())


def _sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    a = build(1, SMALL, cache_dir=tmp_path_factory.mktemp("a"))
    b = build(1, SMALL, cache_dir=tmp_path_factory.mktemp("b"))
    return a, b


def test_tokenizer_round_trips_a_real_prompt():
    from transformers.utils.chat_template_utils import render_jinja_template

    from grpo_tinymodel.prompts import tools
    from grpo_tinymodel.template import CHAT_TEMPLATE

    tok = build_tokenizer(_render_corpus(1, SMALL), SMALL)
    msgs = FIXTURE[0]["messages"]
    text, _ = render_jinja_template(
        conversations=[msgs], tools=tools(), chat_template=CHAT_TEMPLATE, add_generation_prompt=True
    )
    ids = tok(text[0], add_special_tokens=False)["input_ids"]
    assert tok.decode(ids, skip_special_tokens=False) == text[0]
    for t in ["<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>"]:
        assert len(tok(t, add_special_tokens=False)["input_ids"]) == 1
    # a tool call's tags are kept when special tokens are skipped (hermes needs them)
    call = '<tool_call>\n{"name": "eat", "arguments": {}}\n</tool_call><|im_end|>'
    out = tok.decode(tok(call, add_special_tokens=False)["input_ids"], skip_special_tokens=True)
    assert out == '<tool_call>\n{"name": "eat", "arguments": {}}\n</tool_call>'


def test_same_seed_same_model(built):
    a, b = built
    assert a.name == b.name == f"tinymodel-{cache_key(1, SMALL)}"
    for f in ["model.safetensors", "tokenizer.json", "tokenizer_config.json", "config.json"]:
        assert _sha(a / f) == _sha(b / f), f


def test_cache_is_reused(built, tmp_path):
    a, _ = built
    before = _sha(a / "model.safetensors")
    again = build(1, SMALL, cache_dir=a.parent)
    assert again == a and _sha(again / "model.safetensors") == before
    assert cache_key(2, SMALL) != cache_key(1, SMALL)
    out = build(1, SMALL, cache_dir=a.parent, out=tmp_path / "m")
    assert _sha(out / "model.safetensors") == before


def test_transformers_loads_it_offline(built):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    a, _ = built
    tok = AutoTokenizer.from_pretrained(a)
    model = AutoModelForCausalLM.from_pretrained(a)
    assert model.config.model_type == "qwen3"
    assert tok.chat_template
    ids = tok.apply_chat_template(
        [{"role": "user", "content": "Round 1 of 5. "}],
        add_generation_prompt=True,
        return_tensors="pt",
        return_dict=True,
    )["input_ids"]
    with torch.no_grad():
        out = model(input_ids=ids).logits
    assert out.shape[-1] == len(tok)
