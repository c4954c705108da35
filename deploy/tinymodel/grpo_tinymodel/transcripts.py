"""Conversations of scripted, noisy philosophers, in exactly the message format
the Go orchestrator sends to an OpenAI-compatible server (rollout/episode.go):
system prompt, then per round a user observation, the assistant's reply (one
tool call, or an invalid output), and a tool message per call."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass

from .prompts import INVALID_RESULT, TOOL_NAMES, EnvConfig, State, observation, result_text, system_prompt
from .table import Table

# Temperaments a philosopher is given for a whole episode, with their weights.
# Most are greedy (grab a fork, hold it, wait for the other): a table of them
# deadlocks often, which is the poor coordination the task starts from.
TEMPERAMENTS = (("left_first", 0.85), ("right_first", 0.05), ("random", 0.04), ("polite", 0.06))
NOISE = 0.04  # chance of a uniformly random tool instead of the temperament's
INVALID = 0.05  # chance of an invalid output


def _pick(rng: random.Random, weighted: list[tuple[str, float]]) -> str:
    total = sum(w for _, w in weighted)
    x = rng.random() * total
    for name, w in weighted:
        x -= w
        if x < 0:
            return name
    return weighted[-1][0]


def scripted_action(temperament: str, s: State, rng: random.Random) -> str:
    """One decision of a scripted philosopher, from its state."""
    if temperament == "random" or rng.random() < NOISE:
        return rng.choice(TOOL_NAMES)
    hl, hr = s.holding
    fl, fr = s.free
    first, second = ("left", "right") if temperament != "right_first" else ("right", "left")
    if temperament == "polite" and s.round == 1:
        return _pick(rng, [("think", 0.6), ("pick_up_left", 0.3), ("pick_up_right", 0.1)])
    if hl and hr:
        if temperament == "polite" and s.meals > 0:
            return _pick(rng, [("put_down_left", 0.45), ("put_down_right", 0.45), ("eat", 0.1)])
        return _pick(rng, [("eat", 0.6), ("put_down_left", 0.2), ("put_down_right", 0.2)])
    holds = {"left": hl, "right": hr}
    free = {"left": fl, "right": fr}
    for mine, other in ((first, second), (second, first)):
        if holds[mine]:
            if free[other]:
                return _pick(rng, [(f"pick_up_{other}", 0.85), ("think", 0.1), ("eat", 0.05)])
            if temperament == "polite":
                return _pick(rng, [(f"put_down_{mine}", 0.6), ("think", 0.4)])
            return _pick(rng, [("think", 0.45), (f"pick_up_{other}", 0.35), ("eat", 0.1), (f"put_down_{mine}", 0.1)])
    if free[first]:
        return _pick(rng, [(f"pick_up_{first}", 0.93), ("think", 0.05), (f"pick_up_{second}", 0.02)])
    if free[second]:
        return _pick(rng, [(f"pick_up_{second}", 0.5), ("think", 0.5)])
    return _pick(rng, [("think", 0.8), (f"pick_up_{first}", 0.2)])


def _call(name: str, arguments: str = "{}", k: int = 0) -> dict:
    return {"id": f"call_{k}", "type": "function", "function": {"name": name, "arguments": arguments}}


def invalid_reply(rng: random.Random, wanted: str) -> dict:
    """An invalid output, as the orchestrator echoes it back: text that vLLM's
    hermes parser does not turn into a call, an unknown tool, or two calls."""
    kind = rng.randrange(5)
    if kind == 0:
        return {"role": "assistant", "content": wanted.replace("_", " ")}
    if kind == 1:
        text = '<tool_call>\n{"name": "' + wanted + '", "arguments": {}\n</tool_call>'
        return {"role": "assistant", "content": text}
    if kind == 2:
        return {"role": "assistant", "content": "I will " + wanted.replace("_", " ") + "."}
    if kind == 3:
        bogus = rng.choice(["eat_both", "pick_up", "wait", "put_down", "pick_up_forks"])
        return {"role": "assistant", "content": None, "tool_calls": [_call(bogus)]}
    other = rng.choice(TOOL_NAMES)
    return {"role": "assistant", "content": None, "tool_calls": [_call(wanted, k=0), _call(other, k=1)]}


@dataclass
class Episode:
    cfg: EnvConfig
    conversations: list[list[dict]]
    deadlocked: bool
    invalid: int
    decisions: int
    meals: int


def play(cfg: EnvConfig, rng: random.Random) -> Episode:
    """Play one episode with scripted philosophers; return every conversation."""
    table = Table(cfg, rng)
    temperaments = [_pick(rng, list(TEMPERAMENTS)) for _ in range(cfg.n)]
    convs = [[{"role": "system", "content": system_prompt(cfg, i)}] for i in range(cfg.n)]
    invalid = decisions = 0

    def decide(i: int) -> tuple[str, dict]:
        s = table.observe(i)
        convs[i].append({"role": "user", "content": observation(s)})
        wanted = scripted_action(temperaments[i], s, rng)
        if rng.random() < INVALID:
            reply = invalid_reply(rng, wanted)
            return "invalid", reply
        return wanted, {"role": "assistant", "content": None, "tool_calls": [_call(wanted)]}

    def answer(i: int, action: str, reply: dict, ok: bool) -> None:
        convs[i].append(reply)
        text = INVALID_RESULT if action == "invalid" else result_text(action, ok)
        for tc in reply.get("tool_calls") or []:
            convs[i].append({"role": "tool", "tool_call_id": tc["id"], "content": text})

    while not table.done:
        if cfg.mode == "sequential":
            for i in range(cfg.n):
                action, reply = decide(i)
                answer(i, action, reply, table.act(i, action))
                invalid += action == "invalid"
                decisions += 1
            table.end_round()
        else:
            picks = [decide(i) for i in range(cfg.n)]
            oks = table.resolve([a for a, _ in picks])
            for i, ((action, reply), ok) in enumerate(zip(picks, oks, strict=True)):
                answer(i, action, reply, ok)
                invalid += action == "invalid"
                decisions += 1
    return Episode(cfg, convs, table.deadlocked, invalid, decisions, sum(table.meals))


def sample_config(rng: random.Random) -> EnvConfig:
    """Mostly the study's table (n=5, 5 rounds, simultaneous), some variety."""
    if rng.random() < 0.6:
        return EnvConfig()
    return EnvConfig(
        n=rng.choice([2, 3, 4, 5, 6, 7, 8, 10, 12, 15]),
        rounds=rng.choice([3, 4, 5, 6, 8, 10]),
        mode="sequential" if rng.random() < 0.25 else "simultaneous",
        deadlock_patience=rng.choice([1, 1, 1, 2, 3]),
    )


def corpus(episodes: int, seed: int) -> list[tuple[list[dict], EnvConfig]]:
    """Conversations of `episodes` scripted episodes (two philosophers of each)."""
    rng = random.Random(seed)
    out: list[tuple[list[dict], EnvConfig]] = []
    for _ in range(episodes):
        cfg = sample_config(rng)
        ep = play(cfg, rng)
        for i in rng.sample(range(cfg.n), k=min(2, cfg.n)):
            out.append((ep.conversations[i], cfg))
    return out


def stats(episodes: int, seed: int, cfg: EnvConfig | None = None) -> dict:
    """Deadlock and invalid rates of the scripted mix on one table size."""
    rng = random.Random(seed)
    cfg = cfg or EnvConfig()
    eps = [play(cfg, rng) for _ in range(episodes)]
    return {
        "deadlock_rate": sum(e.deadlocked for e in eps) / len(eps),
        "invalid_rate": sum(e.invalid for e in eps) / max(1, sum(e.decisions for e in eps)),
        "meals": sum(e.meals for e in eps) / len(eps),
    }


if __name__ == "__main__":
    print(json.dumps(stats(2000, 1)))
