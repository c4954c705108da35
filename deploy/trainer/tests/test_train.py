"""Training on the tiny model: ratio 1 when the policy is the sampler, the
direction of an update, a finite-difference check of the gradient, micro-
batch accumulation, determinism, parents and the PEFT round trip."""

import json

import pytest
import torch
from conftest import build_model, build_tokenizer, job_body, load, make_trajectory
from peft import PeftModel
from safetensors.torch import load_file

from grpo_trainer.api import JobRequest, Trajectory
from grpo_trainer.data import build_sequences
from grpo_trainer.loss import grpo_loss
from grpo_trainer.train import (
    Control,
    JobError,
    TrainOptions,
    attach_lora,
    completion_logprobs,
    make_batch,
    run_job,
    save_adapter,
    train,
)


def _req(trajs, **kw):
    return JobRequest.model_validate(job_body(trajs, **kw))


def _seqs(req, tok):
    return build_sequences(req.trajectories, tok)


def _sum_logprob(model, seqs, pad_id):
    with torch.no_grad():
        batch = make_batch(seqs, pad_id, torch.device("cpu"))
        return float((completion_logprobs(model, batch) * batch.mask).sum())


@pytest.fixture
def base64(model_dir):
    """A fresh float64 copy of the tiny model."""
    return load(model_dir, torch.float64)


def test_ratio_is_one_when_policy_is_sampler(base64):
    model, tok = base64
    trajs = [make_trajectory(model, tok, a, seed=s) for s, a in [(1, 1.0), (2, -0.5), (3, 0.2)]]
    req = _req(trajs, hyperparameters={"learning_rate": 1e-3, "epochs": 1})
    seqs = _seqs(req, tok)
    peft_model = attach_lora(model, req, server_seed=0)
    try:
        batch = make_batch(seqs, tok.pad_token_id, torch.device("cpu"))
        with torch.no_grad():
            logp = completion_logprobs(peft_model, batch)
        diff = ((logp - batch.old) * batch.mask).abs().max().item()
        assert diff < 1e-12
        m, _ = train(peft_model, seqs, req, TrainOptions(micro_batch_size=2), Control(), 0)
        assert m.ratio_mean == pytest.approx(1.0, abs=1e-12)
        assert m.clip_fraction == 0.0
        assert m.tokens == sum(len(s.completion_ids) for s in seqs) == 36
    finally:
        peft_model.unload()


@pytest.mark.parametrize("advantage", [1.0, -1.0])
def test_update_moves_logprobs_with_advantage(base64, advantage):
    model, tok = base64
    req = _req(
        [make_trajectory(model, tok, advantage, seed=11)],
        hyperparameters={"learning_rate": 1e-3, "epochs": 1},
    )
    seqs = _seqs(req, tok)
    before = _sum_logprob(model, seqs, 0)
    peft_model = attach_lora(model, req, server_seed=0)
    try:
        train(peft_model, seqs, req, TrainOptions(), Control(), 0)
        after = _sum_logprob(peft_model, seqs, 0)
    finally:
        peft_model.unload()
    assert (after - before) * advantage > 1e-4, (before, after)


def test_opposite_advantages_in_one_batch(base64):
    model, tok = base64
    up, down = make_trajectory(model, tok, 1.0, seed=21), make_trajectory(model, tok, -1.0, seed=22)
    req = _req([up, down], hyperparameters={"learning_rate": 1e-3})
    seqs = _seqs(req, tok)
    s_up, s_down = [s for s in seqs if s.trajectory == 0], [s for s in seqs if s.trajectory == 1]
    before = _sum_logprob(model, s_up, 0), _sum_logprob(model, s_down, 0)
    peft_model = attach_lora(model, req, server_seed=0)
    try:
        train(peft_model, seqs, req, TrainOptions(), Control(), 0)
        after = _sum_logprob(peft_model, s_up, 0), _sum_logprob(peft_model, s_down, 0)
    finally:
        peft_model.unload()
    assert after[0] > before[0] and after[1] < before[1], (before, after)


def _rms_norm_in_own_dtype(self, x):
    var = x.pow(2).mean(-1, keepdim=True)
    return self.weight * (x * torch.rsqrt(var + self.variance_epsilon))


def test_gradient_matches_finite_differences(base64, monkeypatch):
    # Qwen3's RMSNorm computes in float32 even for a float64 model, which
    # puts ~1e-7 of noise into every finite difference; the same formula in
    # the input's dtype makes the whole forward float64.
    from transformers.models.qwen3 import modeling_qwen3

    monkeypatch.setattr(modeling_qwen3.Qwen3RMSNorm, "forward", _rms_norm_in_own_dtype)
    model, tok = base64
    trajs = [make_trajectory(model, tok, a, seed=s, turns=1) for s, a in [(31, 1.3), (32, -0.7)]]
    # Old logprobs off the policy: some tokens inside the clip range, some
    # far outside it (zero gradient there), none near a kink.
    for t in trajs:
        c = t["messages_and_choices"][2]
        for k, e in enumerate(c["logprobs"]["content"]):
            e["logprob"] -= [0.05, -0.04, 0.6, -0.5][k % 4] + 0.0
            e["logprob"] = min(e["logprob"], -1e-3)
    req = _req(trajs, lora={"rank": 2, "alpha": 4, "target_modules": ["q_proj", "down_proj"]})
    seqs = _seqs(req, tok)
    peft_model = attach_lora(model, req, server_seed=0)
    try:
        gen = torch.Generator().manual_seed(0)
        params = dict(peft_model.named_parameters())
        for name, p in params.items():
            if "lora_" in name:
                with torch.no_grad():
                    p.copy_(torch.randn(p.shape, generator=gen, dtype=p.dtype) * 0.3)
        batch = make_batch(seqs, 0, torch.device("cpu"))
        tokens = batch.mask.sum()

        def loss() -> torch.Tensor:
            with torch.no_grad(), peft_model.disable_adapter():
                ref = completion_logprobs(peft_model, batch)
            logp = completion_logprobs(peft_model, batch)
            parts = grpo_loss(logp, batch.old, batch.advantages, batch.mask, 0.2, 0.2, 0.1, ref)
            assert 0 < parts.clipped < parts.tokens
            return parts.loss_sum / tokens

        peft_model.zero_grad()
        loss().backward()
        checked = 0
        for name, idxs in (
            (
                "base_model.model.model.layers.0.self_attn.q_proj.lora_A.default.weight",
                [(0, 0), (1, 3)],
            ),
            (
                "base_model.model.model.layers.1.mlp.down_proj.lora_B.default.weight",
                [(0, 0), (7, 1)],
            ),
        ):
            p = params[name]
            for idx in idxs:
                h = 1e-6
                with torch.no_grad():
                    orig = p[idx].item()
                    p[idx] = orig + h
                    up = loss().item()
                    p[idx] = orig - h
                    down = loss().item()
                    p[idx] = orig
                fd = (up - down) / (2 * h)
                g = p.grad[idx].item()
                assert g == pytest.approx(fd, rel=1e-6, abs=1e-9), (name, idx, g, fd)
                checked += abs(g) > 1e-6
        assert checked >= 4  # the check is not vacuous
    finally:
        peft_model.unload()


def test_micro_batches_accumulate_to_the_full_batch_gradient(model_dir):
    adapters = []
    for mbs in (1, 8):
        model, tok = load(model_dir, torch.float64)
        trajs = [make_trajectory(model, tok, a, seed=s) for s, a in [(41, 1.0), (42, -0.3)]]
        req = _req(trajs)
        peft_model = attach_lora(model, req, server_seed=0)
        m, _ = train(
            peft_model, _seqs(req, tok), req, TrainOptions(micro_batch_size=mbs), Control(), 0
        )
        adapters.append(
            ({n: p.detach().clone() for n, p in peft_model.named_parameters() if "lora_" in n}, m)
        )
    (a, ma), (b, mb) = adapters
    assert ma.grad_norm == pytest.approx(mb.grad_norm, rel=1e-9)
    for n in a:
        assert torch.allclose(a[n], b[n], atol=1e-12), n


def test_deterministic_for_a_seed(model_dir, tmp_path):
    outs = []
    for run in range(2):
        model, tok = load(model_dir)
        trajs = [make_trajectory(model, tok, a, seed=s) for s, a in [(51, 1.0), (52, -1.0)]]
        req = _req(trajs, hyperparameters={"learning_rate": 1e-2, "epochs": 2})
        _, path = run_job(req, model, tok, tmp_path / str(run), TrainOptions(), Control())
        outs.append(load_file(str(path / "adapter_model.safetensors")))
    assert outs[0].keys() == outs[1].keys()
    for k in outs[0]:
        assert torch.equal(outs[0][k], outs[1][k]), k


def test_adapter_does_not_depend_on_the_job_id(model_dir, tmp_path):
    # DESIGN §11: a run's results depend on its config, not on its name or
    # its store; job ids carry both ("<run>.<random run id>/step-0000").
    model, tok = load(model_dir)
    trajs = [make_trajectory(model, tok, a, seed=s) for s, a in [(53, 1.0), (54, -1.0)]]
    outs = []
    for job_id in ("dp5.3f9a1c2b4d5e6f70/step-0000", "other.0123456789abcdef/step-0000"):
        req = _req(trajs, id=job_id, hyperparameters={"learning_rate": 1e-2})
        _, path = run_job(req, model, tok, tmp_path / str(len(outs)), TrainOptions(), Control())
        outs.append(load_file(str(path / "adapter_model.safetensors")))
    for k in outs[0]:
        assert torch.equal(outs[0][k], outs[1][k]), k


def test_adapter_round_trip_through_peft(model_dir, tmp_path):
    model, tok = load(model_dir)
    trajs = [make_trajectory(model, tok, a, seed=s) for s, a in [(61, 1.0), (62, -1.0)]]
    req = _req(trajs, hyperparameters={"learning_rate": 5e-2, "epochs": 2})
    seqs = _seqs(req, tok)
    ids = torch.tensor([seqs[0].input_ids])
    with torch.no_grad():
        base_logits = model(input_ids=ids).logits
    peft_model = attach_lora(model, req, server_seed=0)
    train(peft_model, seqs, req, TrainOptions(), Control(), 0)
    dest = tmp_path / "adapters" / req.output_adapter
    save_adapter(peft_model, "tiny", dest, "run/step-0001")
    # Saved again by its job it is replaced; by another job it is not (the
    # job fails, naming the job that made it).
    save_adapter(peft_model, "tiny", dest, "run/step-0001")
    made = (dest / "adapter_model.safetensors").read_bytes()
    with pytest.raises(
        JobError, match=r"output_adapter 'run-step-0001' is taken: job 'run/step-0001' made it"
    ):
        save_adapter(peft_model, "other", dest, "other/step-0001")
    assert (dest / "adapter_model.safetensors").read_bytes() == made
    with torch.no_grad():
        trained_logits = peft_model(input_ids=ids).logits
    peft_model.unload()

    assert sorted(p.name for p in dest.parent.iterdir()) == [req.output_adapter]  # no temp dirs
    cfg = json.loads((dest / "adapter_config.json").read_text())
    assert cfg["peft_type"] == "LORA" and cfg["r"] == 4 and cfg["lora_alpha"] == 8
    assert cfg["base_model_name_or_path"] == "tiny"
    assert json.loads((dest / "grpo_job.json").read_text()) == {"job_id": "run/step-0001"}
    assert sorted(cfg["target_modules"]) == ["down_proj", "q_proj", "v_proj"]
    keys = load_file(str(dest / "adapter_model.safetensors")).keys()
    assert "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight" in keys
    assert len(keys) == 2 * 3 * 2  # A and B, 3 modules, 2 layers

    fresh, _ = load(model_dir)
    loaded = PeftModel.from_pretrained(fresh, str(dest))
    with torch.no_grad():
        got = loaded(input_ids=ids).logits
    assert not torch.allclose(trained_logits, base_logits, atol=1e-4)  # the adapter does something
    assert torch.allclose(got, trained_logits, atol=1e-6)


def test_parent_adapter_is_the_starting_point(model_dir, tmp_path):
    model, tok = load(model_dir)
    trajs = [make_trajectory(model, tok, 1.0, seed=71)]
    req1 = _req(trajs, hyperparameters={"learning_rate": 5e-2})
    _, parent = run_job(req1, model, tok, tmp_path, TrainOptions(), Control())
    parent_sd = load_file(str(parent / "adapter_model.safetensors"))

    req2 = _req(
        trajs,
        id="run/step-0002",
        output_adapter="run-step-0002",
        parent_adapter={"name": "run-step-0001", "path": str(parent)},
    )
    peft_model = attach_lora(model, req2, server_seed=0)
    try:
        from peft.utils import get_peft_model_state_dict

        got = get_peft_model_state_dict(peft_model)
        assert got.keys() == parent_sd.keys()
        for k in got:
            assert torch.equal(got[k], parent_sd[k]), k
    finally:
        peft_model.unload()

    bad = _req(
        trajs,
        id="run/step-0003",
        lora={"rank": 8, "alpha": 16, "target_modules": ["q_proj", "v_proj", "down_proj"]},
        parent_adapter={"name": "run-step-0001", "path": str(parent)},
    )
    with pytest.raises(JobError, match="parent adapter run-step-0001 has rank 4, the job asks for"):
        attach_lora(model, bad, server_seed=0)
    missing = _req(trajs, parent_adapter={"name": "gone", "path": str(tmp_path / "nope")})
    with pytest.raises(JobError, match="parent adapter gone: read"):
        attach_lora(model, missing, server_seed=0)
    # The base model is left as it was found.
    assert type(model.model.layers[0].self_attn.q_proj) is torch.nn.Linear


def test_kl_is_reported_when_kl_beta_is_0(model_dir, tmp_path):
    # From a parent adapter the policy is not the base, so the kl reported
    # must not be 0 with kl_beta 0 (the KL is measured, not penalised): in
    # one step of one micro-batch it is the mean over loss tokens of k3
    # at the parent's policy, whatever kl_beta is.
    model, tok = load(model_dir, torch.float64)
    trajs = [make_trajectory(model, tok, a, seed=s) for s, a in [(81, 1.0), (82, -1.0)]]
    _, parent = run_job(
        _req(trajs, hyperparameters={"learning_rate": 5e-2}),
        model,
        tok,
        tmp_path,
        TrainOptions(),
        Control(),
    )
    opts = TrainOptions(micro_batch_size=len(trajs) * 10)

    def kl_of(kl_beta):
        req = _req(
            trajs,
            id="run/step-0002",
            output_adapter="run-step-0002",
            parent_adapter={"name": "run-step-0001", "path": str(parent)},
            hyperparameters={"learning_rate": 1e-3, "kl_beta": kl_beta},
        )
        seqs = _seqs(req, tok)
        peft_model = attach_lora(model, req, server_seed=0)
        try:
            batch = make_batch(seqs, tok.pad_token_id, torch.device("cpu"))
            with torch.no_grad():
                d = completion_logprobs(peft_model, batch)
                with peft_model.disable_adapter():
                    d = completion_logprobs(peft_model, batch) - d
            k3 = (torch.exp(d) - d - 1) * batch.mask
            want = float(k3.sum() / batch.mask.sum())
            m, _ = train(peft_model, seqs, req, opts, Control(), tok.pad_token_id)
            assert m.steps == 1
            return m.kl, want
        finally:
            peft_model.unload()

    got, want = kl_of(0.0)
    assert want > 1e-6
    assert got == pytest.approx(want, rel=1e-9)
    assert kl_of(0.1)[0] == pytest.approx(got, rel=1e-9)


def test_parent_alpha_is_kept_when_the_job_leaves_lora_unset(model_dir, tmp_path):
    # Zero lora values take the parent's shape, alpha included (as the Go
    # reference does): a parent of rank 4 and alpha 8 (scale 2) continued
    # with lora {} must start from the parent's policy, not from alpha 2 * 8
    # (scale 4), which would make the first ratios differ from 1.
    model, tok = load(model_dir, torch.float64)
    trajs = [make_trajectory(model, tok, 1.0, seed=72, turns=1)]
    req1 = _req(trajs, hyperparameters={"learning_rate": 5e-2})
    _, parent = run_job(req1, model, tok, tmp_path, TrainOptions(), Control())
    req2 = _req(
        trajs,
        id="run/step-0002",
        output_adapter="run-step-0002",
        lora={},
        parent_adapter={"name": "run-step-0001", "path": str(parent)},
    )
    seqs = _seqs(req2, tok)
    batch = make_batch(seqs, tok.pad_token_id, torch.device("cpu"))
    with torch.no_grad():
        sampler = PeftModel.from_pretrained(model, str(parent))
        want = completion_logprobs(sampler, batch)
        sampler.unload()
        peft_model = attach_lora(model, req2, server_seed=0)
        try:
            assert peft_model.peft_config["default"].lora_alpha == 8
            got = completion_logprobs(peft_model, batch)
        finally:
            peft_model.unload()
    assert ((got - want) * batch.mask).abs().max().item() < 1e-12


def test_unknown_target_module_fails_clearly(tiny):
    model, tok = tiny
    req = _req(
        [make_trajectory(model, tok, 1.0, seed=81, turns=1)],
        lora={"rank": 4, "alpha": 8, "target_modules": ["c_attn"]},
    )
    with pytest.raises(JobError, match=r"lora.target_modules \['c_attn'\]"):
        attach_lora(model, req, server_seed=0)


def test_sequences_validate_as_wire_trajectories(tiny):
    model, tok = tiny
    t = Trajectory.model_validate(make_trajectory(model, tok, 1.0, seed=91, turns=1))
    assert t.sampling is not None and t.sampling.model == "tiny"


def test_gradient_checkpointing_trains_the_same_adapter(model_dir, tmp_path):
    outs = []
    for gc in (False, True):
        model, tok = load(model_dir)
        req = _req([make_trajectory(model, tok, 1.0, seed=95)])
        opts = TrainOptions(gradient_checkpointing=gc)
        _, path = run_job(req, model, tok, tmp_path / str(gc), opts, Control())
        outs.append(load_file(str(path / "adapter_model.safetensors")))
        assert not model.is_gradient_checkpointing
    for k in outs[0]:
        assert torch.allclose(outs[0][k], outs[1][k], atol=1e-6), k


def test_processed_logprobs_are_at_the_sampling_temperature(base64):
    model, tok = base64
    req = _req([make_trajectory(model, tok, 1.0, seed=97, temperature=0.7)])
    seqs = _seqs(req, tok)
    assert {s.temperature for s in seqs} == {0.7}
    cpu = torch.device("cpu")
    with torch.no_grad():
        scaled = make_batch(seqs, 0, cpu, temperature=True)
        raw = make_batch(seqs, 0, cpu, temperature=False)
        d_scaled = ((completion_logprobs(model, scaled) - scaled.old) * scaled.mask).abs().max()
        d_raw = ((completion_logprobs(model, raw) - raw.old) * raw.mask).abs().max()
    assert d_scaled < 1e-12
    assert d_raw > 1e-2  # at temperature 1 the same tokens are not the sampler's
    peft_model = attach_lora(model, req, server_seed=0)
    try:
        opts = TrainOptions(logprobs_mode="processed")
        m, _ = train(peft_model, seqs, req, opts, Control(), 0)
    finally:
        peft_model.unload()
    assert m.ratio_mean == pytest.approx(1.0, abs=1e-12)


def test_dropout_is_off_in_training(tmp_path):
    """A base model with dropout (attention_dropout 0.5 here) trains the
    policy vLLM sampled: its forward pass in training mode is the one
    without dropout, so an on-policy token's ratio is 1."""
    from transformers import AutoModelForCausalLM

    from grpo_trainer.models import load_model

    tok = build_tokenizer()
    model = build_model(len(tok))
    model.config.attention_dropout = 0.5
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    ids = torch.tensor([list(range(3, 40))])

    raw = AutoModelForCausalLM.from_pretrained(tmp_path, local_files_only=True)
    raw.train()
    with torch.no_grad():
        a, b = raw(ids).logits, raw(ids).logits
    assert not torch.equal(a, b), "the test model has no dropout to turn off"

    loaded, _ = load_model(tmp_path, torch.device("cpu"), torch.float32)
    with torch.no_grad():
        want = loaded(ids).logits  # eval mode
        loaded.train()
        a, b = loaded(ids).logits, loaded(ids).logits
    assert torch.equal(a, b)
    assert torch.allclose(a, want)
