"""The chat template renders tools and hermes-style calls that vLLM's hermes
parser reads back (its regex, reproduced here), and round-trips a sampled
reply byte for byte."""

import json
import re

from transformers.utils.chat_template_utils import render_jinja_template

from grpo_tinymodel.prompts import EnvConfig, State, observation, system_prompt, tools
from grpo_tinymodel.template import CHAT_TEMPLATE

# vLLM's Hermes2ProToolParser: a JSON object between the tags, or after an
# unclosed opening tag.
HERMES = re.compile(r"<tool_call>(.*?)</tool_call>|<tool_call>(.*)", re.DOTALL)


def render(messages, add_generation_prompt=False):
    out, _ = render_jinja_template(
        conversations=[messages],
        tools=tools(),
        chat_template=CHAT_TEMPLATE,
        add_generation_prompt=add_generation_prompt,
    )
    return out[0]


def conversation():
    cfg = EnvConfig()
    s = State(
        round=1, rounds=5, id=2, n=5, holding=(False, False), free=(True, True), meals=0, table_meals=0, last=None
    )
    return [
        {"role": "system", "content": system_prompt(cfg, 2)},
        {"role": "user", "content": observation(s)},
    ]


def test_generation_prompt_lists_tools_and_ends_with_assistant():
    text = render(conversation(), add_generation_prompt=True)
    assert text.startswith("<|im_start|>system\nYou are philosopher 2")
    for t in tools():
        assert json.dumps(t["function"]["name"]) in text
    assert text.endswith("<|im_end|>\n<|im_start|>assistant\n")


def test_tool_call_renders_as_hermes_block_the_parser_reads():
    msgs = conversation() + [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "eat", "arguments": "{}"}}],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "failed: eat had no effect"},
    ]
    text = render(msgs)
    prefix = render(conversation(), add_generation_prompt=True)
    assert text.startswith(prefix)
    reply = text[len(prefix) :].split("<|im_end|>", 1)[0]
    assert reply == '<tool_call>\n{"name": "eat", "arguments": {}}\n</tool_call>'
    calls = [json.loads(a or b) for a, b in HERMES.findall(reply)]
    assert calls == [{"name": "eat", "arguments": {}}]
    assert "<tool_response>\nfailed: eat had no effect\n</tool_response>" in text


def test_arguments_as_object_render_the_same_as_a_string():
    as_str = {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "c", "type": "function", "function": {"name": "think", "arguments": "{}"}}],
    }
    as_obj = {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "c", "type": "function", "function": {"name": "think", "arguments": {}}}],
    }
    assert render(conversation() + [as_str]) == render(conversation() + [as_obj])


def test_two_calls_and_text_replies():
    two = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "eat", "arguments": "{}"}},
            {"id": "b", "type": "function", "function": {"name": "think", "arguments": "{}"}},
        ],
    }
    text = render(
        conversation()
        + [
            two,
            {"role": "tool", "tool_call_id": "a", "content": "x"},
            {"role": "tool", "tool_call_id": "b", "content": "y"},
        ]
    )
    reply = text.split("<|im_start|>assistant\n", 1)[1].split("<|im_end|>", 1)[0]
    assert [json.loads(a or b)["name"] for a, b in HERMES.findall(reply)] == ["eat", "think"]
    # consecutive tool results share one user turn
    assert (
        "<|im_start|>user\n<tool_response>\nx\n</tool_response>\n<tool_response>\ny\n</tool_response><|im_end|>" in text
    )
    plain = render(conversation() + [{"role": "assistant", "content": "I will think."}])
    assert plain.endswith("<|im_start|>assistant\nI will think.<|im_end|>\n")
