"""The Python mirror of the Go prompts says exactly what the Go side says.
go_transcripts.json holds conversations that `grpo eval --out` wrote: the tiny
model served by vLLM (n=5, simultaneous; with invalid outputs and meals) and
the embedded backend in sequential mode. Their system, user and tool messages
are kept; the sampled assistant turns are left out."""

import json
from pathlib import Path

import pytest

from grpo_tinymodel.prompts import INVALID_RESULT, EnvConfig, State, observation, result_text, system_prompt

FIXTURE = json.loads((Path(__file__).parent / "go_transcripts.json").read_text())


def _state(line: str) -> State:
    obj = json.loads(line[len("state: ") :])
    last = obj["last"]
    return State(
        round=obj["round"],
        rounds=obj["rounds"],
        id=obj["id"],
        n=obj["n"],
        holding=(obj["holding"]["left"], obj["holding"]["right"]),
        free=(obj["free"]["left"], obj["free"]["right"]),
        meals=obj["meals"],
        table_meals=obj["table_meals"],
        last=None if last is None else (last["action"], last["ok"]),
    )


@pytest.mark.parametrize("tr", FIXTURE, ids=lambda t: f"{t['env']['mode']}-n{t['env']['n']}-a{t['agent']}")
def test_texts_match_go(tr):
    cfg = EnvConfig(**tr["env"])
    msgs = tr["messages"]
    assert msgs[0]["role"] == "system"
    assert msgs[0]["content"] == system_prompt(cfg, tr["agent"])
    users = [m["content"] for m in msgs if m["role"] == "user"]
    assert users
    for text in users:
        line = text.rsplit("\n", 1)[1]
        s = _state(line)
        assert s.line() == line
        assert observation(s) == text
    for m in msgs:
        if m["role"] == "tool":
            c = m["content"]
            if c == INVALID_RESULT:
                continue
            action = c.split(": ", 1)[1].split(" ", 1)[0]
            assert c in (result_text(action, True), result_text(action, False))
