"""The optimizer state travels with the adapter (DESIGN §5): a lineage of
jobs is one AdamW run, bit for bit; warm-up continues across jobs; a base
job, reset_optimizer and a parent without a state start fresh; a killed job
re-runs from the same parent state; and the diagnostics a job reports."""

import logging
import shutil

import pytest
import torch
from conftest import job_body, load, make_trajectory
from safetensors.torch import load_file

from grpo_trainer.api import JobRequest
from grpo_trainer.data import build_sequences
from grpo_trainer.train import (
    OPTIMIZER_FILE,
    Control,
    TrainOptions,
    attach_lora,
    completion_logprobs,
    make_batch,
    run_job,
    warmup_lr,
)

LR = 1e-2


@pytest.fixture(scope="module")
def setup(model_dir):
    """The tiny model (float32), its tokenizer and two data sets D1 and D2
    of one two-turn trajectory each (two sequences each)."""
    model, tok = load(model_dir)
    d1 = [make_trajectory(model, tok, 1.0, seed=201)]
    d2 = [make_trajectory(model, tok, -1.0, seed=202)]
    return model, tok, d1, d2


def _req(trajs, job, parent=None, **hp):
    hp = {"learning_rate": LR, **hp}
    kw = {"id": f"run/{job}", "output_adapter": f"run-{job}", "hyperparameters": hp}
    if parent is not None:
        kw["parent_adapter"] = {"name": parent.name, "path": str(parent)}
    return JobRequest.model_validate(job_body(trajs, **kw))


def _run(setup, adapters, trajs, job, parent=None, ctl=None, **hp):
    model, tok, _, _ = setup
    m, path = run_job(
        _req(trajs, job, parent, **hp), model, tok, adapters, TrainOptions(), ctl or Control()
    )
    return m, path


def _tensors(path, file):
    return load_file(str(path / file))


def _assert_equal_files(a, b, file):
    ta, tb = _tensors(a, file), _tensors(b, file)
    assert ta.keys() == tb.keys()
    for k in ta:
        assert torch.equal(ta[k], tb[k]), (file, k)


def test_two_one_step_jobs_equal_one_two_step_job(setup, tmp_path):
    _, _, d1, d2 = setup
    # Job A steps on D1 from the base, job B on D2 from A; the reference is
    # one job over D1 + D2 in two optimizer steps (mini_batches 2 slices
    # its four sequences into D1's two, then D2's two). Warm-up over two
    # steps: the second step is at the full rate in both.
    ma, a = _run(setup, tmp_path, d1, "a", warmup_steps=2)
    mb, b = _run(setup, tmp_path, d2, "b", parent=a, warmup_steps=2)
    mr, r = _run(setup, tmp_path, d1 + d2, "ref", mini_batches=2, warmup_steps=2)
    assert (ma.optimizer_step, mb.optimizer_step, mr.optimizer_step) == (1, 2, 2)
    assert mr.steps == 2
    _assert_equal_files(b, r, "adapter_model.safetensors")
    _assert_equal_files(b, r, OPTIMIZER_FILE)
    assert {k.partition("/")[0] for k in _tensors(b, OPTIMIZER_FILE)} == {
        "step",
        "exp_avg",
        "exp_avg_sq",
    }

    # Not vacuous: B with a fresh optimizer ends elsewhere.
    _, fresh = _run(setup, tmp_path, d2, "b-fresh", parent=a, warmup_steps=2, reset_optimizer=True)
    got = _tensors(fresh, "adapter_model.safetensors")
    want = _tensors(r, "adapter_model.safetensors")
    assert any(not torch.equal(got[k], want[k]) for k in got)


def _fresh_moments(path):
    """Whether the optimizer state in path is that of one AdamW step from
    nothing: step 1, and with m = (1 - 0.9) g and v = (1 - 0.999) g^2,
    v = 0.1 m^2 for every element."""
    t = _tensors(path, OPTIMIZER_FILE)
    names = [k.partition("/")[2] for k in t if k.startswith("step/")]
    steps = {float(t[f"step/{n}"]) for n in names}
    fresh = all(
        torch.allclose(t[f"exp_avg_sq/{n}"], 0.1 * t[f"exp_avg/{n}"] ** 2, rtol=1e-4, atol=1e-30)
        for n in names
    )
    return steps, fresh


def test_optimizer_step_grows_along_a_lineage_and_reset_restarts_it(setup, tmp_path, caplog):
    _, _, d1, d2 = setup
    m1, a = _run(setup, tmp_path, d1, "s1")
    m2, b = _run(setup, tmp_path, d2, "s2", parent=a)
    m3, c = _run(setup, tmp_path, d1, "s3", parent=b)
    assert [m.optimizer_step for m in (m1, m2, m3)] == [1, 2, 3]
    assert _fresh_moments(a) == ({1.0}, True)
    assert _fresh_moments(c) == ({3.0}, False)

    # A job from the base starts at 0 whatever it trains: 2 epochs of
    # 2 steps are steps 1 to 4.
    m, _ = _run(setup, tmp_path, d1 + d2, "base", mini_batches=2, epochs=2)
    assert m.optimizer_step == 4 and m.steps == 4

    # reset_optimizer keeps the parent's weights and restarts the count
    # and the moments.
    mr, r = _run(setup, tmp_path, d2, "reset", parent=c, reset_optimizer=True)
    assert mr.optimizer_step == 1
    assert _fresh_moments(r) == ({1.0}, True)

    # A parent saved without a state (an older adapter) starts fresh too,
    # and says so; it trains as a reset does.
    old = tmp_path / "older"
    shutil.copytree(c, old)
    (old / OPTIMIZER_FILE).unlink()
    with caplog.at_level(logging.INFO, logger="grpo_trainer.train"):
        mo, o = _run(setup, tmp_path / "other", d2, "reset", parent=old)
    assert mo.optimizer_step == 1
    assert f"parent adapter older has no {OPTIMIZER_FILE}: the optimizer starts fresh" in (
        caplog.text
    )
    _assert_equal_files(o, r, "adapter_model.safetensors")
    _assert_equal_files(o, r, OPTIMIZER_FILE)


@pytest.mark.parametrize(
    ("step", "warmup", "want"),
    [
        (1, 0, 1e-2),
        (1, 4, 2.5e-3),
        (2, 4, 5e-3),
        (3, 4, 7.5e-3),
        (4, 4, 1e-2),
        (9, 4, 1e-2),
        (1, 1, 1e-2),
    ],
)
def test_warmup_lr_hand_computed(step, warmup, want):
    assert warmup_lr(1e-2, step, warmup) == pytest.approx(want, rel=1e-15)


def test_warmup_continues_across_jobs(setup, tmp_path, monkeypatch):
    _, _, d1, d2 = setup
    used = []
    step = torch.optim.AdamW.step

    def recording(self, *a, **kw):
        used.append(self.param_groups[0]["lr"])
        return step(self, *a, **kw)

    monkeypatch.setattr(torch.optim.AdamW, "step", recording)
    _, a = _run(setup, tmp_path, d1, "w1", mini_batches=2, warmup_steps=4)
    assert used == pytest.approx([2.5e-3, 5e-3], rel=1e-15)
    used.clear()
    _, b = _run(setup, tmp_path, d1 + d2, "w2", parent=a, mini_batches=3, warmup_steps=4)
    assert used == pytest.approx([7.5e-3, 1e-2, 1e-2], rel=1e-15)
    used.clear()
    _run(setup, tmp_path, d2, "w3", parent=b, warmup_steps=4, reset_optimizer=True)
    assert used == pytest.approx([2.5e-3], rel=1e-15)


class Killed(BaseException):
    """A kill: no handler of the trainer's catches it."""


class _KillAt(Control):
    """Stops the job at its n-th check, as a kill between micro-batches."""

    def __init__(self, n):
        self.n = n

    def check(self):
        self.n -= 1
        if self.n == 0:
            raise Killed


def test_a_killed_job_reruns_from_the_same_parent_state(setup, tmp_path):
    _, _, d1, d2 = setup
    _, a = _run(setup, tmp_path, d1, "k1")
    before = {f.name: (f.read_bytes(), f.stat().st_mtime_ns) for f in a.iterdir()}
    # Killed after its first optimizer step (the second step's check).
    with pytest.raises(Killed):
        _run(setup, tmp_path, d1 + d2, "k2", parent=a, mini_batches=2, ctl=_KillAt(2))
    assert not (tmp_path / "run-k2").exists()
    assert {f.name: (f.read_bytes(), f.stat().st_mtime_ns) for f in a.iterdir()} == before
    m, rerun = _run(setup, tmp_path, d1 + d2, "k2", parent=a, mini_batches=2)
    assert m.optimizer_step == 3
    _, clean = _run(setup, tmp_path / "clean", d1 + d2, "k2", parent=a, mini_batches=2)
    _assert_equal_files(rerun, clean, "adapter_model.safetensors")
    _assert_equal_files(rerun, clean, OPTIMIZER_FILE)
    assert {f.name: (f.read_bytes(), f.stat().st_mtime_ns) for f in a.iterdir()} == before


def test_diagnostics(model_dir, tmp_path):
    model, tok = load(model_dir, torch.float64)
    d = [make_trajectory(model, tok, a, seed=s) for s, a in [(211, 1.0), (212, -1.0)]]
    opts = TrainOptions(micro_batch_size=8)
    # From the base (B = 0) the trainer is the sampler: no gap.
    ma, a = run_job(_req(d, "g1"), model, tok, tmp_path, opts, Control())
    assert ma.sampler_logprob_gap < 1e-12

    # From a parent, the data sampled from the base: the gap is the mean
    # |parent logprob - sampled logprob|, the entropy the parent policy's,
    # both over all tokens before the update (one step here), and the
    # update norm the distance between the two adapters' weights.
    req = _req(d, "g2", parent=a)
    mb, b = run_job(req, model, tok, tmp_path, opts, Control())
    seqs = build_sequences(req.trajectories, tok)
    batch = make_batch(seqs, tok.pad_token_id, torch.device("cpu"))
    peft = attach_lora(model, _req(d, "g3", parent=a), server_seed=0)
    try:
        with torch.no_grad():
            logp = completion_logprobs(peft, batch)
            gap = ((logp - batch.old).abs() * batch.mask).sum() / batch.mask.sum()
            entropies = []
            for s in seqs:
                ids = torch.tensor([s.input_ids])
                logits = peft(input_ids=ids).logits[0, len(s.prompt_ids) - 1 : -1].double()
                p = torch.log_softmax(logits, -1)
                entropies += (-(p.exp() * p).sum(-1)).tolist()
    finally:
        peft.unload()
    assert float(gap) > 1e-3  # the parent is not the sampler
    assert mb.sampler_logprob_gap == pytest.approx(float(gap), rel=1e-9)
    assert len(entropies) == mb.tokens
    assert mb.entropy == pytest.approx(sum(entropies) / len(entropies), rel=1e-9)
    wa, wb = _tensors(a, "adapter_model.safetensors"), _tensors(b, "adapter_model.safetensors")
    moved = sum(float((wb[k] - wa[k]).pow(2).sum()) for k in wa) ** 0.5
    assert moved > 0
    assert mb.update_norm == pytest.approx(moved, rel=1e-9)
