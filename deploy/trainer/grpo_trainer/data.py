"""From trajectories to training sequences.

Each sampled assistant turn of a trajectory becomes one sequence: the prompt
it was sampled from followed by the sampled completion, with the completion's
sampled logprobs (the old policy) and the trajectory's advantage. Loss falls on
the completion tokens only, so system, user, tool and earlier assistant
tokens carry none.

With vLLM's token ids (``prompt_token_ids`` and ``token_ids``) the sequence is
exactly what was sampled. Without them the prompt is rendered with the
tokenizer's chat template and the completion is read from the logprobs'
``token_id:<n>`` entries, or tokenised from the assistant's content and
checked against the logprob tokens. Any disagreement fails the job: training
on misaligned ratios would be silently wrong.

Consecutive turns of a trajectory usually share their tokens: turn k+1's
prompt is turn k's prompt and completion followed by the tool results and
user messages since. pack_turns trains such turns as one sequence (the last
turn's prompt and completion, with loss on every turn's completion), so the
shared prefix is encoded once instead of once per turn. A causal model
computes each position from the tokens before it only, so the logprobs, and
with them the loss and its gradient, are those of the turns one by one."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from grpo_trainer.api import Trajectory

TOKEN_ID_PREFIX = "token_id:"


class TrajectoryError(ValueError):
    """A trajectory the trainer cannot train on. ``turn`` counts the sampled
    turns of the trajectory; ``item`` indexes messages_and_choices."""

    def __init__(self, index: int, msg: str, turn: int | None = None, item: int | None = None):
        self.index, self.turn, self.item, self.msg = index, turn, item, msg
        where = f"trajectory {index}"
        if turn is not None:
            where += f", turn {turn}"
        if item is not None:
            where += f" (messages_and_choices[{item}])"
        super().__init__(f"{where}: {msg}")


@dataclass(frozen=True)
class Sequence:
    """One sampled turn, ready to train on."""

    prompt_ids: list[int]
    completion_ids: list[int]
    old_logprobs: list[float]
    advantage: float
    trajectory: int
    turn: int
    temperature: float = 1.0  # the trajectory's sampling temperature (0 or unset: 1)

    @property
    def input_ids(self) -> list[int]:
        return self.prompt_ids + self.completion_ids

    @property
    def spans(self) -> list[tuple[int, int]]:
        """Where the completion is in input_ids: [(start, end)]."""
        return [(len(self.prompt_ids), len(self.prompt_ids) + len(self.completion_ids))]


@dataclass(frozen=True)
class Packed:
    """Consecutive sampled turns of one trajectory, each turn's input_ids a
    prefix of the next turn's prompt_ids, trained as one sequence: the last
    turn's input_ids, with loss on each turn's completion tokens."""

    turns: tuple[Sequence, ...]

    @property
    def input_ids(self) -> list[int]:
        return self.turns[-1].input_ids

    @property
    def spans(self) -> list[tuple[int, int]]:
        """Where each turn's completion is in input_ids, in turn order."""
        return [s.spans[0] for s in self.turns]

    @property
    def old_logprobs(self) -> list[float]:
        return [lp for s in self.turns for lp in s.old_logprobs]

    @property
    def advantage(self) -> float:
        return self.turns[0].advantage

    @property
    def temperature(self) -> float:
        return self.turns[0].temperature


def pack_turns(seqs: list[Sequence]) -> list[Packed]:
    """Groups seqs (in build_sequences' order) into packed sequences: a turn
    joins the one before it when both are of the same trajectory and the
    earlier turn's prompt and completion are, token for token, the start of
    its prompt. Otherwise (a template that re-renders an earlier turn
    differently, say) it starts a new packed sequence: a turn is never
    trained in a context other than the one it was sampled in."""
    out: list[Packed] = []
    group: list[Sequence] = []
    for s in seqs:
        if group:
            prev = group[-1].input_ids
            if s.trajectory != group[-1].trajectory or s.prompt_ids[: len(prev)] != prev:
                out.append(Packed(tuple(group)))
                group = []
        group.append(s)
    if group:
        out.append(Packed(tuple(group)))
    return out


def is_choice(item: dict[str, Any]) -> bool:
    """A choice object has a message and no role of its own."""
    return "role" not in item and "message" in item


def build_sequences(
    trajectories: list[Trajectory], tokenizer: Any = None, vocab_size: int | None = None
) -> list[Sequence]:
    """Turns every sampled turn of every trajectory into a Sequence, in
    trajectory then turn order. tokenizer is needed only for turns that
    lack token ids; vocab_size, when given, bounds every id."""
    out: list[Sequence] = []
    for i, traj in enumerate(trajectories):
        if not math.isfinite(traj.advantage):
            raise TrajectoryError(i, "advantage is not a finite number")
        seqs = _trajectory_sequences(i, traj, tokenizer)
        if not seqs:
            raise TrajectoryError(i, "no sampled choices (no item with a message and logprobs)")
        for s in seqs:
            if vocab_size is not None:
                bad = [t for t in s.input_ids if not 0 <= t < vocab_size]
                if bad:
                    raise TrajectoryError(
                        i,
                        f"token id {bad[0]} is outside the model's vocabulary "
                        f"(0 to {vocab_size - 1})",
                        turn=s.turn,
                    )
        out.extend(seqs)
    return out


def _trajectory_sequences(i: int, traj: Trajectory, tokenizer: Any) -> list[Sequence]:
    history: list[dict[str, Any]] = []
    out: list[Sequence] = []
    turn = 0
    for j, item in enumerate(traj.messages_and_choices):
        if not is_choice(item):
            if not isinstance(item.get("role"), str):
                raise TrajectoryError(
                    i, 'neither a message (no "role") nor a choice (no "message")', item=j
                )
            history.append(item)
            continue
        message = item.get("message")
        if not isinstance(message, dict):
            raise TrajectoryError(i, "choice.message is not an object", turn=turn, item=j)
        seq = _turn_sequence(i, turn, j, item, history, traj, tokenizer)
        out.append(seq)
        history.append(_as_history_message(message))
        turn += 1
    return out


def _as_history_message(message: dict[str, Any]) -> dict[str, Any]:
    m = {k: v for k, v in message.items() if v is not None}
    m.setdefault("role", "assistant")
    return m


def _turn_sequence(
    i: int,
    turn: int,
    j: int,
    choice: dict[str, Any],
    history: list[dict[str, Any]],
    traj: Trajectory,
    tokenizer: Any,
) -> Sequence:
    def fail(msg: str) -> TrajectoryError:
        return TrajectoryError(i, msg, turn=turn, item=j)

    entries = _logprob_entries(choice, fail)
    old = []
    for k, e in enumerate(entries):
        lp = e.get("logprob")
        if not isinstance(lp, (int, float)) or isinstance(lp, bool) or not math.isfinite(lp):
            raise fail(f"logprobs.content[{k}].logprob {lp!r} is not a finite number")
        if lp > 0:
            raise fail(f"logprobs.content[{k}].logprob {lp} is positive")
        old.append(float(lp))
    tokens = [e.get("token") for e in entries]
    lp_ids = _token_id_form(tokens)

    completion = choice.get("token_ids")
    if completion is not None:
        completion = _id_list(completion, "token_ids", fail)
        if len(completion) != len(old):
            raise fail(
                f"token_ids has {len(completion)} tokens but logprobs.content has {len(old)}"
            )
        if lp_ids is not None and lp_ids != completion:
            k = next(k for k, (a, b) in enumerate(zip(lp_ids, completion, strict=True)) if a != b)
            raise fail(
                f"token mismatch at completion token {k}: logprobs has token_id:{lp_ids[k]}, "
                f"token_ids has {completion[k]}"
            )
    elif lp_ids is not None:
        completion = lp_ids
    else:
        completion = _retokenise_completion(choice, tokens, tokenizer, fail)

    prompt = choice.get("prompt_token_ids")
    if prompt is not None:
        prompt = _id_list(prompt, "prompt_token_ids", fail)
    else:
        prompt = _render_prompt(history, traj, tokenizer, fail)
    if not prompt:
        raise fail("the prompt is empty")
    if not completion:
        raise fail("the completion is empty")
    temp = traj.sampling.temperature if traj.sampling is not None else None
    return Sequence(prompt, completion, old, traj.advantage, i, turn, temp or 1.0)


def _logprob_entries(choice: dict[str, Any], fail: Any) -> list[dict[str, Any]]:
    lp = choice.get("logprobs")
    if not isinstance(lp, dict):
        raise fail('choice has no logprobs (the request must set "logprobs": true)')
    content = lp.get("content")
    if not isinstance(content, list) or not content:
        raise fail("choice.logprobs.content is missing or empty")
    for k, e in enumerate(content):
        if not isinstance(e, dict):
            raise fail(f"logprobs.content[{k}] is not an object")
    return content


def _token_id_form(tokens: list[Any]) -> list[int] | None:
    """The ids of vLLM's "token_id:<n>" logprob tokens, or None when the
    tokens are text."""
    ids = []
    for t in tokens:
        if not isinstance(t, str) or not t.startswith(TOKEN_ID_PREFIX):
            return None
        num = t[len(TOKEN_ID_PREFIX) :]
        if not num.isdigit():
            return None
        ids.append(int(num))
    return ids


def _id_list(v: Any, field: str, fail: Any) -> list[int]:
    if not isinstance(v, list) or not all(
        isinstance(t, int) and not isinstance(t, bool) for t in v
    ):
        raise fail(f"{field} is not a list of integers")
    return list(v)


def _render_prompt(
    history: list[dict[str, Any]], traj: Trajectory, tokenizer: Any, fail: Any
) -> list[int]:
    if tokenizer is None:
        raise fail("no prompt_token_ids and no tokenizer to render the prompt with")
    kwargs = {}
    if traj.sampling is not None and traj.sampling.chat_template_kwargs:
        kwargs = dict(traj.sampling.chat_template_kwargs)
    try:
        ids = tokenizer.apply_chat_template(
            history,
            tools=traj.tools or None,
            add_generation_prompt=True,
            tokenize=True,
            return_dict=False,
            **kwargs,
        )
    except Exception as e:  # a template error names what it could not render
        raise fail(f"render the prompt with the chat template: {e}") from e
    if isinstance(ids, dict):  # some tokenizers return a BatchEncoding regardless
        ids = ids["input_ids"]
    return [int(t) for t in ids]


def _retokenise_completion(
    choice: dict[str, Any], tokens: list[Any], tokenizer: Any, fail: Any
) -> list[int]:
    """Tokenises the assistant's content and checks that it decodes, token by
    token, to the sampled logprob tokens. An end-of-turn token the content
    does not show may close the logprobs."""
    if tokenizer is None:
        raise fail("no token ids and no tokenizer to re-tokenise the completion with")
    content = choice["message"].get("content")
    if not isinstance(content, str):
        raise fail(
            "no token_ids, the logprob tokens are not token_id:<n>, and message.content is not "
            "text: cannot recover the sampled tokens"
        )
    ids = list(tokenizer.encode(content, add_special_tokens=False))
    pieces = [tokenizer.decode([t]) for t in ids]
    if len(tokens) == len(ids) + 1 and isinstance(tokens[-1], str):
        end = tokenizer.convert_tokens_to_ids(tokens[-1])
        if end is not None and end != tokenizer.unk_token_id and end in tokenizer.all_special_ids:
            ids.append(end)
            pieces.append(tokens[-1])
    if pieces != tokens:
        k = next(
            (k for k, (a, b) in enumerate(zip(pieces, tokens, strict=False)) if a != b),
            min(len(pieces), len(tokens)),
        )
        got = pieces[k] if k < len(pieces) else "<end>"
        want = tokens[k] if k < len(tokens) else "<end>"
        raise fail(
            f"token mismatch at completion token {k}: re-tokenised content gives {got!r} "
            f"({len(pieces)} tokens), the sampled logprobs have {want!r} ({len(tokens)} tokens)"
        )
    return ids
