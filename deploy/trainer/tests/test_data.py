"""Trajectories to sequences: exact token ids, re-tokenisation, masks of
prompt/tool/user tokens, and errors that name the trajectory and turn."""

import copy

import pytest
from conftest import TOOLS, choice, make_trajectory, render

from grpo_trainer.api import Trajectory
from grpo_trainer.data import TrajectoryError, build_sequences
from grpo_trainer.train import make_batch


def _trajs(raw):
    return [Trajectory.model_validate(t) for t in raw]


def test_token_ids_used_exactly(tiny):
    model, tok = tiny
    raw = make_trajectory(model, tok, 0.5, seed=1, turns=2)
    seqs = build_sequences(_trajs([raw]), tok, vocab_size=len(tok))
    choices = [it for it in raw["messages_and_choices"] if "message" in it]
    assert len(seqs) == 2
    for s, c in zip(seqs, choices, strict=True):
        assert s.prompt_ids == c["prompt_token_ids"]
        assert s.completion_ids == c["token_ids"]
        assert s.old_logprobs == [e["logprob"] for e in c["logprobs"]["content"]]
        assert s.advantage == 0.5
    assert [s.turn for s in seqs] == [0, 1]


def test_ids_trusted_over_template(tiny):
    # prompt_token_ids that the template would not produce are still used:
    # they are what was sampled.
    model, tok = tiny
    raw = make_trajectory(model, tok, 1.0, seed=2, turns=1)
    c = raw["messages_and_choices"][2]
    c["prompt_token_ids"] = [5, 6, 7]
    (s,) = build_sequences(_trajs([raw]), tok)
    assert s.prompt_ids == [5, 6, 7]


def test_retokenise_without_ids_matches_sampled_prompt(tiny):
    model, tok = tiny
    with_ids = make_trajectory(model, tok, 1.0, seed=3, turns=2, ids=True)
    without = copy.deepcopy(with_ids)
    for it in without["messages_and_choices"]:
        it.pop("token_ids", None)
        it.pop("prompt_token_ids", None)
    a = build_sequences(_trajs([with_ids]), tok)
    b = build_sequences(_trajs([without]), tok)
    assert [s.input_ids for s in a] == [s.input_ids for s in b]
    assert [s.old_logprobs for s in a] == [s.old_logprobs for s in b]


def test_chat_template_kwargs_from_sampling(tiny):
    model, tok = tiny
    raw = make_trajectory(model, tok, 1.0, seed=4, turns=1, ids=False)
    raw["sampling"]["chat_template_kwargs"] = {"enable_thinking": False}
    (s,) = build_sequences(_trajs([raw]), tok)
    history = raw["messages_and_choices"][:2]
    want = render(tok, history, TOOLS, enable_thinking=False)
    assert s.prompt_ids == want
    assert want != render(tok, history, TOOLS)


def test_text_logprob_tokens_retokenised(tiny):
    _, tok = tiny
    history = [{"role": "user", "content": "state: round 1"}]
    prompt = render(tok, history)
    comp = tok.encode("pick_left then eat", add_special_tokens=False)
    c = choice(tok, prompt, comp, [-1.0] * len(comp), ids=False, token_form="text")
    raw = {"messages_and_choices": [*history, c], "advantage": 1.0}
    (s,) = build_sequences(_trajs([raw]), tok)
    assert s.completion_ids == comp
    assert s.prompt_ids == prompt


def test_mismatch_token_ids_vs_logprobs_names_trajectory_and_turn(tiny):
    model, tok = tiny
    good = make_trajectory(model, tok, 1.0, seed=5, turns=2)
    bad = make_trajectory(model, tok, -1.0, seed=6, turns=2)
    second = [it for it in bad["messages_and_choices"] if "message" in it][1]
    second["token_ids"][2] = (second["token_ids"][2] + 1) % len(tok)
    with pytest.raises(TrajectoryError) as e:
        build_sequences(_trajs([good, bad]), tok)
    assert e.value.index == 1 and e.value.turn == 1
    msg = str(e.value)
    assert msg.startswith("trajectory 1, turn 1 (messages_and_choices[5])")
    assert "completion token 2" in msg


def test_mismatch_retokenised_content_names_trajectory_and_turn(tiny):
    _, tok = tiny
    history = [{"role": "user", "content": "state: round 1"}]
    prompt = render(tok, history)
    comp = tok.encode("pick_left then eat", add_special_tokens=False)
    c = choice(tok, prompt, comp, [-1.0] * len(comp), ids=False, token_form="text")
    c["message"]["content"] = "pick_right then eat"  # not what the logprobs say was sampled
    ok = {"messages_and_choices": [*history, choice(tok, prompt, comp, [-1.0] * len(comp))]}
    trajs = _trajs(
        [{**ok, "advantage": 1.0}, {"messages_and_choices": [*history, c], "advantage": 1}]
    )
    with pytest.raises(TrajectoryError, match=r"^trajectory 1, turn 0 .*token mismatch"):
        build_sequences(trajs, tok)


@pytest.mark.parametrize(
    ("mutate", "want"),
    [
        (lambda c: c.pop("logprobs"), "no logprobs"),
        (lambda c: c["logprobs"]["content"].pop(), "token_ids has 6 tokens but logprobs"),
        (lambda c: c["logprobs"]["content"][0].update(logprob=0.5), "is positive"),
        (lambda c: c.update(token_ids=["a"] * 6), "token_ids is not a list of integers"),
        (lambda c: c.update(token_ids=[10**6] * 6), "outside the model's vocabulary"),
    ],
)
def test_malformed_choice(tiny, mutate, want):
    model, tok = tiny
    raw = make_trajectory(model, tok, 1.0, seed=7, turns=1)
    c = raw["messages_and_choices"][2]
    mutate(c)
    if "logprobs" in c:
        for e in c["logprobs"]["content"]:
            e["token"] = "x"  # not token_id form, so only token_ids speak
    with pytest.raises(TrajectoryError, match=want) as e:
        build_sequences(_trajs([raw]), tok, vocab_size=len(tok))
    assert str(e.value).startswith("trajectory 0")


def test_trajectory_without_choices_fails():
    raw = {"messages_and_choices": [{"role": "user", "content": "hi"}], "advantage": 1.0}
    with pytest.raises(TrajectoryError, match=r"^trajectory 0: no sampled choices"):
        build_sequences(_trajs([raw]))


def test_item_neither_message_nor_choice():
    raw = {"messages_and_choices": [{"content": "hi"}], "advantage": 1.0}
    with pytest.raises(TrajectoryError, match=r"messages_and_choices\[0\]"):
        build_sequences(_trajs([raw]))


def test_batch_masks_only_completion_tokens(tiny):
    model, tok = tiny
    raw = make_trajectory(model, tok, 1.0, seed=8, turns=2)
    seqs = build_sequences(_trajs([raw]), tok)
    batch = make_batch(seqs, pad_id=tok.pad_token_id, device="cpu")
    T = batch.input_ids.shape[1]
    start = T - batch.keep  # mask column c is token start + 1 + c
    for b, s in enumerate(seqs):
        row = batch.mask[b].tolist()
        on = [start + 1 + c for c, v in enumerate(row) if v]
        # Exactly the completion positions: no prompt, tool, user or pad token.
        assert on == list(range(len(s.prompt_ids), len(s.input_ids)))
        olds = [batch.old[b, c - start - 1].item() for c in on]
        assert olds == s.old_logprobs
        assert batch.attention_mask[b].sum().item() == len(s.input_ids)
