"""Packed turns: consecutive turns of a trajectory whose tokens continue each
other are one sequence, split where they do not, and train exactly as the
turns one by one (loss, gradients, kl, clip fraction, gap, entropy, the
adapter after two steps)."""

import pytest
import torch
from conftest import TOOLS, choice, job_body, load, render, sample, sequence_logprobs

from grpo_trainer.api import JobRequest
from grpo_trainer.data import build_sequences, pack_turns
from grpo_trainer.loss import grpo_loss
from grpo_trainer.train import (
    Control,
    TrainOptions,
    attach_lora,
    completion_logprobs,
    make_batch,
    run_job,
    step_slices,
    train,
)

# Between two turns: the end of the assistant's turn, a tool result and the
# next generation prompt, as a chat template renders them.
BETWEEN = "<|im_end|>\n<|im_start|>tool\nok<|im_end|>\n<|im_start|>assistant\n"


def _rms_norm_in_own_dtype(self, x):
    var = x.pow(2).mean(-1, keepdim=True)
    return self.weight * (x * torch.rsqrt(var + self.variance_epsilon))


@pytest.fixture
def base64(model_dir, monkeypatch):
    """A fresh float64 copy of the tiny model, float64 throughout (Qwen3's
    RMSNorm computes in float32 otherwise)."""
    from transformers.models.qwen3 import modeling_qwen3

    monkeypatch.setattr(modeling_qwen3.Qwen3RMSNorm, "forward", _rms_norm_in_own_dtype)
    return load(model_dir, torch.float64)


def packable(model, tok, advantage, seed, turns=3, n_tokens=5, temperature=1.0, break_at=None):
    """A trajectory whose turn k+1 prompt is turn k's prompt and completion
    and BETWEEN, so all its turns pack into one sequence; with break_at=k,
    turn k's prompt has the first token of turn k-1's completion changed, so
    the turns split before k. Old logprobs are off the policy by up to 0.6
    so that some ratios are clipped."""
    gen = torch.Generator().manual_seed(seed)
    history = [
        {"role": "system", "content": "you are philosopher 2 at a table of five."},
        {"role": "user", "content": "state: round 1 left fork free right fork held"},
    ]
    items = list(history)
    between = tok.encode(BETWEEN, add_special_tokens=False)
    prompt = render(tok, history, TOOLS)
    for t in range(turns):
        if t == break_at:
            prompt = list(prompt)
            k = len(prompt) - len(between) - n_tokens
            prompt[k] = (prompt[k] + 1) % len(tok)
        comp = sample(model, prompt, n_tokens, gen, temperature)
        lps = sequence_logprobs(model, prompt, comp, temperature)
        lps = [min(lp - [0.05, -0.04, 0.6, -0.5][k % 4], -1e-3) for k, lp in enumerate(lps)]
        items.append(choice(tok, prompt, comp, lps))
        items.append({"role": "tool", "tool_call_id": f"call_{t}", "content": "ok"})
        prompt = prompt + comp + between
    return {
        "messages_and_choices": items,
        "tools": TOOLS,
        "reward": advantage,
        "advantage": advantage,
        "group": "g1",
        "episode": f"e{seed}",
        "agent": 2,
        "sampling": {"model": "tiny", "temperature": temperature, "top_p": 1.0},
    }


def _req(trajs, **hp):
    hp = {"learning_rate": 1e-2, "kl_beta": 0.1, **hp}
    return JobRequest.model_validate(job_body(trajs, hyperparameters=hp))


def test_turns_that_continue_each_other_pack_into_one(tiny):
    model, tok = tiny
    req = _req([packable(model, tok, 1.0, seed=1, turns=3)])
    turns = build_sequences(req.trajectories, tok)
    (p,) = pack_turns(turns)
    assert p.turns == tuple(turns)
    assert p.input_ids == turns[2].input_ids
    n = len(tok.encode(BETWEEN, add_special_tokens=False))
    p0 = len(turns[0].prompt_ids)
    assert p.spans == [(p0, p0 + 5), (p0 + 5 + n, p0 + 10 + n), (p0 + 10 + 2 * n, p0 + 15 + 2 * n)]
    assert p.old_logprobs == [lp for s in turns for lp in s.old_logprobs]
    assert len(p.input_ids) == p0 + 15 + 2 * n


def test_a_broken_prefix_starts_a_new_sequence(tiny):
    model, tok = tiny
    req = _req([packable(model, tok, 1.0, seed=2, turns=3, break_at=1)])
    turns = build_sequences(req.trajectories, tok)
    packed = pack_turns(turns)
    assert [p.turns for p in packed] == [(turns[0],), (turns[1], turns[2])]


def test_turns_of_different_trajectories_never_pack(tiny):
    # Trajectory 1's prompt continues trajectory 0's only turn token for
    # token; they are still two sequences.
    model, tok = tiny
    two = packable(model, tok, 1.0, seed=3, turns=2)
    items = two["messages_and_choices"]
    first = {**two, "messages_and_choices": items[:4]}
    second = {**two, "messages_and_choices": items[:2] + items[4:]}
    req = _req([first, second])
    turns = build_sequences(req.trajectories, tok)
    assert turns[1].prompt_ids[: len(turns[0].input_ids)] == turns[0].input_ids
    assert [p.turns for p in pack_turns(turns)] == [(turns[0],), (turns[1],)]


def test_packed_batch_masks_every_turns_completion(tiny):
    model, tok = tiny
    req = _req([packable(model, tok, 1.0, seed=4, turns=3)])
    (p,) = pack_turns(build_sequences(req.trajectories, tok))
    batch = make_batch([p], pad_id=tok.pad_token_id, device="cpu")
    start = batch.input_ids.shape[1] - batch.keep  # mask column c is token start + 1 + c
    on = [start + 1 + c for c, v in enumerate(batch.mask[0].tolist()) if v]
    assert on == [t for lo, hi in p.spans for t in range(lo, hi)]
    assert [batch.old[0, t - start - 1].item() for t in on] == p.old_logprobs


def _grads(peft_model, items, req):
    """The gradient of the first step's loss (sum over loss tokens / loss
    tokens), by parameter name, and the summed loss."""
    hp = req.hyperparameters.resolved()
    peft_model.zero_grad(set_to_none=True)
    tokens = sum(len(s.old_logprobs) for s in items)
    total = 0.0
    for k in range(0, len(items), 2):
        batch = make_batch(items[k : k + 2], 0, torch.device("cpu"))
        with torch.no_grad(), peft_model.disable_adapter():
            ref = completion_logprobs(peft_model, batch)
        logp = completion_logprobs(peft_model, batch)
        parts = grpo_loss(
            logp, batch.old, batch.advantages, batch.mask, hp.epsilon, hp.epsilon_high, 0.1, ref
        )
        (parts.loss_sum / tokens).backward()
        total += float(parts.loss_sum.detach())
    grads = {n: p.grad.clone() for n, p in peft_model.named_parameters() if p.requires_grad}
    peft_model.zero_grad(set_to_none=True)
    return grads, total / tokens


def _perturb_lora(peft_model):
    # B = 0 would make the policy the base's: kl 0. Random LoRA weights
    # make kl, its gradient and the ratios nontrivial.
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for n, p in peft_model.named_parameters():
            if "lora_" in n:
                p.copy_(torch.randn(p.shape, generator=gen, dtype=p.dtype) * 0.3)


@pytest.mark.parametrize("mode", ["raw", "processed"])
def test_packed_trains_as_the_turns_one_by_one(base64, mode):
    model, tok = base64
    temperature = 0.7 if mode == "processed" else 1.0
    trajs = [
        packable(model, tok, 1.3, seed=11, temperature=temperature),
        packable(model, tok, -0.7, seed=12, temperature=temperature),
    ]
    # mini_batches 2: the turns' steps are [0:3] and [3:6], the packed
    # sequences' [0:1] and [1:2]: the same partition, by trajectory.
    req = _req(trajs, mini_batches=2)
    turns = build_sequences(req.trajectories, tok)
    packed = pack_turns(turns)
    assert len(turns) == 6 and len(packed) == 2
    opts = TrainOptions(micro_batch_size=2, logprobs_mode=mode)
    results = []
    for items in (turns, packed):
        peft_model = attach_lora(model, req, server_seed=0)
        try:
            _perturb_lora(peft_model)
            grads, loss = _grads(peft_model, items, req)
            m, _ = train(peft_model, items, req, opts, Control(), 0)
            weights = {
                n: p.detach().clone() for n, p in peft_model.named_parameters() if p.requires_grad
            }
        finally:
            peft_model.unload()
        results.append((grads, loss, m, weights))
    (g1, l1, m1, w1), (g2, l2, m2, w2) = results
    assert l1 == pytest.approx(l2, abs=1e-12)
    for n in g1:
        torch.testing.assert_close(g2[n], g1[n], rtol=1e-9, atol=1e-12)
    assert sum(float(g.abs().sum()) for g in g1.values()) > 1e-3  # not a vacuous match
    for f in ("loss", "kl", "grad_norm", "clip_fraction", "ratio_mean"):
        assert getattr(m2, f) == pytest.approx(getattr(m1, f), abs=1e-9), f
    for f in ("sampler_logprob_gap", "entropy", "update_norm"):
        assert getattr(m2, f) == pytest.approx(getattr(m1, f), abs=1e-9), f
    assert m1.kl > 1e-4 and m1.clip_fraction > 0.05 and m1.entropy > 0.1
    assert m1.tokens == m2.tokens == 30
    assert (m1.sequences, m2.sequences) == (6, 2)
    assert m1.steps == m2.steps == 2
    for n in w1:
        torch.testing.assert_close(w2[n], w1[n], rtol=1e-9, atol=1e-12)


def test_step_slices_partition_in_order():
    items = list("abcde")
    assert step_slices(items, 4) == [["a"], ["b"], ["c"], ["d", "e"]]
    assert step_slices(items, 2) == [["a", "b"], ["c", "d", "e"]]
    assert step_slices(items, 9) == [["a"], ["b"], ["c"], ["d"], ["e"]]  # one step per sequence
    assert step_slices(items, 0) == [items]


def test_job_metrics_count_packed_sequences(tiny, tmp_path):
    model, tok = tiny
    trajs = [
        packable(model, tok, 1.0, seed=21, turns=3),
        packable(model, tok, -1.0, seed=22, turns=3, break_at=1),
    ]
    req = _req(trajs, mini_batches=4)
    m, _ = run_job(req, model, tok, tmp_path, TrainOptions(), Control())
    assert m.sequences == 3  # [t0 turns 0-2], [t1 turn 0], [t1 turns 1-2]
    assert m.tokens == 6 * 5
    assert m.steps == 3  # mini_batches 4, but one step per sequence at most
