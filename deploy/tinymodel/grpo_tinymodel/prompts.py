"""The texts a philosopher sees, mirrored from the Go side (rollout/prompt.go,
rollout/tools.go, rollout/state.go). The tests compare them with a transcript
that `grpo eval` wrote."""

from __future__ import annotations

import json
from dataclasses import dataclass

TOOL_NAMES = ("pick_up_left", "pick_up_right", "put_down_left", "put_down_right", "eat", "think")
INVALID = "invalid"

TOOL_DESCRIPTIONS = (
    "Pick up the fork on your left (fork i). Fails if someone holds it or you already hold it.",
    "Pick up the fork on your right (fork (i+1) mod n). Fails if someone holds it or you already hold it.",
    "Put down the fork on your left. Fails if you do not hold it.",
    "Put down the fork on your right. Fails if you do not hold it.",
    "Eat one meal. Succeeds only if you hold both forks.",
    "Think: do nothing this round.",
)

INVALID_RESULT = "invalid: call exactly one of the six tools with no arguments; nothing happened this round"


def tools() -> list[dict]:
    """The OpenAI tool definitions the orchestrator sends with every request."""
    return [
        {
            "type": "function",
            "function": {
                "name": name,
                "description": desc,
                "parameters": {"type": "object", "properties": {}},
            },
        }
        for name, desc in zip(TOOL_NAMES, TOOL_DESCRIPTIONS, strict=True)
    ]


@dataclass(frozen=True)
class EnvConfig:
    n: int = 5
    rounds: int = 5
    mode: str = "simultaneous"
    deadlock_patience: int = 1


def system_prompt(cfg: EnvConfig, pid: int) -> str:
    parts = [
        f"You are philosopher {pid} at a round table of {cfg.n} philosophers (ids 0 to {cfg.n - 1}). ",
        f"Fork {pid} is on your left and fork {(pid + 1) % cfg.n} on your right; "
        "each fork is shared with a neighbour. ",
        f"The dinner lasts {cfg.rounds} rounds. ",
    ]
    if cfg.mode == "sequential":
        parts.append(
            "Each round the philosophers act one at a time in id order, and each action takes effect at once. "
        )
    else:
        parts.append(
            "Each round all philosophers decide at the same time on the same view of the table; "
            "put-downs happen first, then eating, then pick-ups (if two neighbours reach for the same free fork, "
            "one of them gets it at random). "
        )
    parts.append(
        "Every round you must call exactly one tool: pick_up_left, pick_up_right, put_down_left, put_down_right, "
        "eat or think. Eating needs both of your forks; you keep them after eating. "
    )
    parts.append(
        "If every fork is held and nobody holds two, the table is deadlocked and the dinner ends after "
        f"{cfg.deadlock_patience} such round(s). "
    )
    parts.append(
        "Goals, shared by the whole table: never deadlock, eat as many meals as possible in total, "
        "and share meals fairly."
    )
    return "".join(parts)


@dataclass
class State:
    round: int
    rounds: int
    id: int
    n: int
    holding: tuple[bool, bool]
    free: tuple[bool, bool]
    meals: int
    table_meals: int
    last: tuple[str, bool] | None

    def line(self) -> str:
        """The `state: {JSON}` line, byte for byte as Go's json.Marshal writes it."""
        obj = {
            "round": self.round,
            "rounds": self.rounds,
            "id": self.id,
            "n": self.n,
            "holding": {"left": self.holding[0], "right": self.holding[1]},
            "free": {"left": self.free[0], "right": self.free[1]},
            "meals": self.meals,
            "table_meals": self.table_meals,
            "last": None if self.last is None else {"action": self.last[0], "ok": self.last[1]},
        }
        return "state: " + json.dumps(obj, separators=(",", ":"))


def _fork_sentence(side: str, holding: bool, free: bool) -> str:
    if holding:
        return f"You hold your {side} fork. "
    if free:
        return f"Your {side} fork is free. "
    return f"Your {side} fork is held by a neighbour. "


def observation(s: State) -> str:
    out = [f"Round {s.round} of {s.rounds}. "]
    if s.last is not None:
        if s.last[0] == INVALID:
            out.append("Your last reply was not a single valid tool call, so nothing happened. ")
        else:
            out.append(f"Your last action {s.last[0]} {'succeeded' if s.last[1] else 'failed'}. ")
    out.append(_fork_sentence("left", s.holding[0], s.free[0]))
    out.append(_fork_sentence("right", s.holding[1], s.free[1]))
    out.append(f"You have eaten {s.meals} meal(s); the table {s.table_meals}. Choose one tool.\n")
    out.append(s.line())
    return "".join(out)


def result_text(action: str, ok: bool) -> str:
    return f"ok: {action} succeeded" if ok else f"failed: {action} had no effect"
