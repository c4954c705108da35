"""One GRPO update of a LoRA adapter: load or create the adapter on the base
model, run ``epochs`` passes of token-level PPO-clip over the job's sampled
turns, write the adapter atomically as a PEFT directory, with the AdamW state
beside it so the next job of the lineage continues the same optimizer.

The loop, in the order a reader meets it: build_sequences (data.py) turns
trajectories into (prompt, completion, old logprobs, advantage) per sampled
turn and pack_turns joins consecutive turns that share their tokens into one
sequence; each epoch is ``mini_batches`` AdamW steps over consecutive slices
of those sequences in their fixed order; each step accumulates the gradient of
sum(loss over completion tokens) / (completion tokens in the step) over
micro-batches, clips it to max_grad_norm, and steps at the lineage's
warmed-up learning rate."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import torch
from peft import LoraConfig, PeftModel, get_peft_model
from peft.utils import get_peft_model_state_dict, set_peft_model_state_dict
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from grpo_trainer.api import JobRequest, Metrics
from grpo_trainer.data import build_sequences, pack_turns
from grpo_trainer.loss import grpo_loss, token_logprobs_and_entropy

log = logging.getLogger("grpo_trainer.train")

# The file in an adapter directory that names the job that made it: a job
# replaces no adapter but its own (an earlier run of it, cut short by a
# restart, or trained again after its records were lost).
ADAPTER_JOB_FILE = "grpo_job.json"

# The file in an adapter directory that holds the AdamW state of the
# adapter's lineage (vLLM and PEFT read adapter_config.json and
# adapter_model.safetensors only): per trainable weight its moments and
# step count, and in the metadata the lineage's optimizer step count.
OPTIMIZER_FILE = "optimizer.safetensors"
OPTIMIZER_FORMAT = "grpo-adamw-1"


class JobError(Exception):
    """A job that cannot be trained as asked; the message is for the user."""


@dataclass
class TrainOptions:
    """Server-wide training settings (the job carries the rest)."""

    seed: int = 0
    micro_batch_size: int = 4  # sequences per forward pass
    max_grad_norm: float = 1.0
    weight_decay: float = 0.0
    gradient_checkpointing: bool = False
    # "raw": sampled logprobs are at temperature 1 (vLLM's default);
    # "processed": after the trajectory's sampling temperature (vLLM's
    # --logprobs-mode processed_logprobs), so logits are divided by it too.
    logprobs_mode: str = "raw"


@dataclass
class Batch:
    """Right-padded sequences. Loss positions cover tokens start+1..T-1 of
    input_ids, where start+1 is the earliest first completion token of the
    batch, so logits are computed only from position start on."""

    input_ids: torch.Tensor  # [B, T]
    attention_mask: torch.Tensor  # [B, T]
    keep: int  # logits kept: positions T-keep .. T-1
    mask: torch.Tensor  # [B, keep-1], 1 on completion tokens
    old: torch.Tensor  # [B, keep-1], sampled logprobs on completion tokens
    advantages: torch.Tensor  # [B]
    temperature: torch.Tensor | None = None  # [B], divides the logits when set


def adapter_seed(server_seed: int) -> int:
    """The seed of a fresh adapter's initialisation: the server seed alone,
    as in the Go reference. The job id is not mixed in: it carries the run's
    name and store id, and a run's results must not depend on them (DESIGN
    §11). A job re-run after a restart still trains the same way."""
    h = hashlib.sha256(f"{server_seed}\x00fresh-adapter".encode()).digest()
    return int.from_bytes(h[:8], "big") & 0x7FFF_FFFF_FFFF_FFFF


class Trainable(Protocol):
    """A sequence to train on: a sampled turn (data.Sequence) or several
    turns packed into one (data.Packed). old_logprobs are those of the
    completion tokens of spans, in order."""

    @property
    def input_ids(self) -> list[int]: ...
    @property
    def spans(self) -> list[tuple[int, int]]: ...
    @property
    def old_logprobs(self) -> list[float]: ...
    @property
    def advantage(self) -> float: ...
    @property
    def temperature(self) -> float: ...


def make_batch(
    seqs: list[Trainable], pad_id: int, device: torch.device, temperature: bool = False
) -> Batch:
    T = max(len(s.input_ids) for s in seqs)
    start = min(s.spans[0][0] for s in seqs) - 1
    keep = T - start
    B = len(seqs)
    ids = torch.full((B, T), pad_id, dtype=torch.long)
    attn = torch.zeros((B, T), dtype=torch.long)
    mask = torch.zeros((B, keep - 1), dtype=torch.float64)
    old = torch.zeros((B, keep - 1), dtype=torch.float64)
    for b, s in enumerate(seqs):
        n = len(s.input_ids)
        ids[b, :n] = torch.tensor(s.input_ids, dtype=torch.long)
        attn[b, :n] = 1
        olds = s.old_logprobs
        k = 0
        for lo, hi in s.spans:
            # Token t of input_ids sits at column t - (start + 1).
            c = lo - start - 1
            mask[b, c : c + hi - lo] = 1.0
            old[b, c : c + hi - lo] = torch.tensor(olds[k : k + hi - lo], dtype=torch.float64)
            k += hi - lo
    adv = torch.tensor([s.advantage for s in seqs], dtype=torch.float64)
    temp = None
    if temperature:
        temp = torch.tensor([s.temperature for s in seqs], dtype=torch.float64).to(device)
    return Batch(
        ids.to(device), attn.to(device), keep, mask.to(device), old.to(device), adv.to(device), temp
    )


def completion_logprobs(model: Any, batch: Batch) -> torch.Tensor:
    """Log-probabilities of the batch's tokens on its loss positions."""
    return completion_logprobs_and_entropy(model, batch, entropy=False)[0]


def completion_logprobs_and_entropy(
    model: Any, batch: Batch, entropy: bool = True
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """completion_logprobs, and (when entropy) the policy's entropy at each
    loss position (no gradient)."""
    kw = {"input_ids": batch.input_ids, "attention_mask": batch.attention_mask, "use_cache": False}
    try:
        logits = model(**kw, logits_to_keep=batch.keep).logits
    except TypeError:  # a model without logits_to_keep computes them all
        logits = model(**kw).logits
    logits = logits[:, -batch.keep :]
    T = batch.input_ids.shape[1]
    # Kept logits are positions T-keep..T-1; prepend their own input ids so
    # token_logprobs' shift pairs position t's logits with token t+1.
    return token_logprobs_and_entropy(
        logits, batch.input_ids[:, T - batch.keep :], batch.temperature, entropy
    )


def attach_lora(base: Any, req: JobRequest, server_seed: int) -> PeftModel:
    """Wraps base with the job's fresh LoRA, or with its parent's weights
    (rank, alpha and target modules the job leaves at 0 are the parent's)."""
    rank, alpha, targets = req.lora.resolved()
    parent = req.parent_adapter
    if parent is not None:
        pcfg = _parent_config(parent.name, Path(parent.path))
        if req.lora.rank and pcfg.get("r") != rank:
            raise JobError(
                f"parent adapter {parent.name} has rank {pcfg.get('r')}, "
                f"the job asks for lora.rank {rank}"
            )
        rank = int(pcfg.get("r", rank))
        if not req.lora.alpha and isinstance(pcfg.get("lora_alpha"), (int, float)):
            alpha = pcfg["lora_alpha"]  # the parent's scale, as its sampler used it
        if not req.lora.target_modules and pcfg.get("target_modules"):
            targets = pcfg["target_modules"]
            targets = sorted(targets) if isinstance(targets, list) else targets
    config = LoraConfig(
        r=rank,
        lora_alpha=int(alpha) if float(alpha).is_integer() else alpha,
        target_modules=targets,
        lora_dropout=0.0,
        bias="none",
        task_type="CAUSAL_LM",
    )
    torch.manual_seed(adapter_seed(server_seed))
    try:
        model = get_peft_model(base, config)
    except ValueError as e:
        raise JobError(f"lora.target_modules {targets}: {e}") from e
    if parent is not None:
        try:
            _load_parent(model, parent.name, Path(parent.path))
        except BaseException:
            model.unload()
            raise
    return model


def _parent_config(name: str, path: Path) -> dict[str, Any]:
    try:
        cfg = json.loads((path / "adapter_config.json").read_text())
    except (OSError, ValueError) as e:
        raise JobError(f"parent adapter {name}: read {path / 'adapter_config.json'}: {e}") from e
    if cfg.get("peft_type", "LORA") != "LORA":
        raise JobError(f"parent adapter {name}: peft_type {cfg.get('peft_type')!r}, want LORA")
    return cfg


def _load_parent(model: PeftModel, name: str, path: Path) -> None:
    file = path / "adapter_model.safetensors"
    try:
        state = load_file(str(file))
    except Exception as e:  # a missing or corrupt file: the job cannot start from it
        raise JobError(f"parent adapter {name}: read {file}: {e}") from e
    want = get_peft_model_state_dict(model)
    if set(state) != set(want):
        extra = sorted(set(state) - set(want))
        missing = sorted(set(want) - set(state))
        raise JobError(
            f"parent adapter {name} does not fit the job's LoRA (rank, target_modules): "
            f"{len(extra)} unexpected weights {extra[:2]}, {len(missing)} missing {missing[:2]}"
        )
    for k, v in state.items():
        if v.shape != want[k].shape:
            raise JobError(
                f"parent adapter {name}: weight {k} has shape {tuple(v.shape)}, "
                f"the job's LoRA wants {tuple(want[k].shape)}"
            )
    set_peft_model_state_dict(model, state)


class Control:
    """How a running job hears about cancellation, reports progress and
    learns the state of other jobs."""

    def check(self) -> None:
        """Raises when the job must stop."""

    def progress(self, fraction: float) -> None:
        """Records the fraction of the job done."""

    def job_state(self, job_id: str) -> str:
        """The state of job job_id as its record says, "" for a job this
        trainer has no record of."""
        return ""


@dataclass
class OptimizerState:
    """The AdamW state of an adapter's lineage: step, the optimizer steps
    taken since the lineage started from the base (or was reset), and per
    trainable weight (by parameter name) its "step", "exp_avg" and
    "exp_avg_sq" tensors, as torch's AdamW keeps them."""

    step: int = 0
    weights: dict[str, dict[str, torch.Tensor]] = field(default_factory=dict)


ADAM_KEYS = ("step", "exp_avg", "exp_avg_sq")


def warmup_lr(lr: float, step: int, warmup_steps: int) -> float:
    """The learning rate of the lineage's optimizer step `step` (1 for its
    first): lr * step / warmup_steps over the first warmup_steps steps,
    then lr. The first step moves the adapter (a warm-up from 0 would waste
    it)."""
    if warmup_steps <= 0 or step >= warmup_steps:
        return lr
    return lr * step / warmup_steps


def _trainable(model: Any) -> list[tuple[str, torch.nn.Parameter]]:
    return [(n, p) for n, p in model.named_parameters() if p.requires_grad]


def _restore(opt: torch.optim.Optimizer, named: list[tuple[str, Any]], st: OptimizerState) -> None:
    """Loads st into opt, whose parameters are named (in opt's order).
    A state that does not fit the adapter is an error, not a fresh start:
    its weights fit (attach_lora checked them), so the file is damaged."""
    if set(st.weights) != {n for n, _ in named}:
        extra = sorted(set(st.weights) - {n for n, _ in named})
        missing = sorted({n for n, _ in named} - set(st.weights))
        raise JobError(
            f"optimizer state does not fit the adapter: {len(extra)} unexpected weights "
            f"{extra[:2]}, {len(missing)} missing {missing[:2]}"
        )
    state = {}
    for i, (n, p) in enumerate(named):
        w = st.weights[n]
        for k in ("exp_avg", "exp_avg_sq"):
            if w[k].shape != p.shape:
                raise JobError(
                    f"optimizer state of {n}: {k} has shape {tuple(w[k].shape)}, "
                    f"the weight has {tuple(p.shape)}"
                )
        state[i] = {k: w[k].clone() for k in ADAM_KEYS}
    sd = opt.state_dict()
    sd["state"] = state
    opt.load_state_dict(sd)


def _capture(opt: torch.optim.Optimizer, named: list[tuple[str, Any]], step: int) -> OptimizerState:
    weights = {}
    for n, p in named:
        st = opt.state.get(p)
        if st:  # every trainable weight steps, so only a job of no step lacks it
            weights[n] = {k: st[k].detach().to("cpu", copy=True) for k in ADAM_KEYS}
    return OptimizerState(step=step, weights=weights)


def step_slices(seqs: list[Any], mini_batches: int) -> list[list[Any]]:
    """The optimizer steps of an epoch: mini_batches consecutive slices of
    seqs in their order, as even as counts allow (at most one step per
    sequence, at least one step)."""
    n = max(1, min(mini_batches, len(seqs)))
    return [seqs[k * len(seqs) // n : (k + 1) * len(seqs) // n] for k in range(n)]


def train(
    model: PeftModel,
    seqs: list[Trainable],
    req: JobRequest,
    opts: TrainOptions,
    ctl: Control,
    pad_id: int,
    resume: OptimizerState | None = None,
) -> tuple[Metrics, OptimizerState]:
    """Runs the job's epochs over seqs (sampled turns, or turns packed by
    data.pack_turns) on model in place, continuing the optimizer state
    resume (None: a fresh AdamW), and returns the statistics and the
    optimizer state after the job."""
    hp = req.hyperparameters.resolved()
    device = next(p for p in model.parameters()).device
    named = _trainable(model)
    params = [p for _, p in named]
    opt = torch.optim.AdamW(params, lr=hp.learning_rate, weight_decay=opts.weight_decay)
    step = 0
    if resume is not None and resume.weights:
        _restore(opt, named, resume)
        step = resume.step
    first_step = step + 1
    before = [p.detach().clone() for p in params]
    model.train()  # no dropout (lora_dropout 0, the base's off: models.disable_dropout)

    slices = step_slices(seqs, hp.mini_batches)
    mbs = max(1, opts.micro_batch_size)
    total = hp.epochs * sum((len(s) + mbs - 1) // mbs for s in slices)
    done = 0

    loss_steps, kl_steps, norms = [], [], []
    clipped = ratio_sum = tokens_all = 0.0
    gap_sum = entropy_sum = first_tokens = 0.0
    for _epoch in range(hp.epochs):
        for part in slices:
            first = step + 1 == first_step  # the parent's policy: nothing updated yet
            step_tokens = float(sum(len(s.old_logprobs) for s in part))
            step_loss = step_kl = 0.0
            opt.zero_grad(set_to_none=True)
            for k in range(0, len(part), mbs):
                ctl.check()
                batch = make_batch(
                    part[k : k + mbs], pad_id, device, opts.logprobs_mode == "processed"
                )
                # The base's logprobs (adapter off, no gradient), for the
                # KL term when kl_beta > 0 and for the kl reported in any
                # case: one extra forward pass.
                with torch.no_grad(), model.disable_adapter():
                    logp_ref = completion_logprobs(model, batch)
                logp, entropy = completion_logprobs_and_entropy(model, batch, entropy=first)
                if entropy is not None:
                    gap = (logp.detach() - batch.old.to(logp.dtype)).abs()
                    gap_sum += float((gap * batch.mask).sum())
                    entropy_sum += float((entropy * batch.mask).sum())
                    first_tokens += float(batch.mask.sum())
                parts = grpo_loss(
                    logp,
                    batch.old,
                    batch.advantages,
                    batch.mask,
                    hp.epsilon,
                    hp.epsilon_high,
                    hp.kl_beta,
                    logp_ref,
                )
                (parts.loss_sum / step_tokens).backward()
                step_loss += float(parts.loss_sum.detach()) / step_tokens
                step_kl += parts.kl_sum / step_tokens
                clipped += parts.clipped
                ratio_sum += parts.ratio_sum
                tokens_all += parts.tokens
                done += 1
                ctl.progress(done / total)
            norm = torch.nn.utils.clip_grad_norm_(params, opts.max_grad_norm)
            if not torch.isfinite(norm):
                raise JobError(
                    f"gradient norm is {float(norm)}: the update would corrupt the adapter"
                )
            step += 1
            for group in opt.param_groups:
                group["lr"] = warmup_lr(hp.learning_rate, step, hp.warmup_steps)
            opt.step()
            loss_steps.append(step_loss)
            kl_steps.append(step_kl)
            norms.append(float(norm))
    opt.zero_grad(set_to_none=True)
    with torch.no_grad():
        moved = sum(
            float((p.detach() - b).double().pow(2).sum())
            for p, b in zip(params, before, strict=True)
        )
    metrics = Metrics(
        loss=sum(loss_steps) / len(loss_steps),
        kl=sum(kl_steps) / len(kl_steps),
        grad_norm=sum(norms) / len(norms),
        clip_fraction=clipped / tokens_all,
        tokens=sum(len(s.old_logprobs) for s in seqs),
        sequences=len(seqs),
        steps=len(norms),
        epochs=hp.epochs,
        ratio_mean=ratio_sum / tokens_all,
        optimizer_step=step,
        sampler_logprob_gap=gap_sum / first_tokens,
        entropy=entropy_sum / first_tokens,
        update_norm=moved**0.5,
    )
    return metrics, _capture(opt, named, step)


def write_optimizer_state(d: Path, st: OptimizerState) -> None:
    """Writes st as d/OPTIMIZER_FILE."""
    tensors = {f"{k}/{n}": w[k].contiguous() for n, w in st.weights.items() for k in ADAM_KEYS}
    meta = {"format": OPTIMIZER_FORMAT, "optimizer_step": str(st.step)}
    save_file(tensors, str(d / OPTIMIZER_FILE), metadata=meta)


def read_optimizer_state(d: Path) -> OptimizerState | None:
    """The optimizer state saved beside the adapter in d, None when there
    is none (an adapter written before the trainer saved it). It is only
    read: a job re-run after a kill starts from the same state."""
    file = d / OPTIMIZER_FILE
    if not file.exists():
        return None
    try:
        with safe_open(str(file), framework="pt") as f:
            meta = f.metadata() or {}
            if meta.get("format") != OPTIMIZER_FORMAT:
                raise ValueError(f"format {meta.get('format')!r}, want {OPTIMIZER_FORMAT!r}")
            st = OptimizerState(step=int(meta["optimizer_step"]))
            for key in f.keys():  # noqa: SIM118 (safe_open is not a mapping)
                kind, _, name = key.partition("/")
                if kind not in ADAM_KEYS or not name:
                    raise ValueError(f"unexpected tensor {key!r}")
                st.weights.setdefault(name, {})[kind] = f.get_tensor(key)
    except Exception as e:  # missing keys, a corrupt file: the lineage cannot continue
        raise JobError(f"read optimizer state {file}: {e}") from e
    for name, w in st.weights.items():
        if set(w) != set(ADAM_KEYS):
            raise JobError(f"read optimizer state {file}: {name} lacks {set(ADAM_KEYS) - set(w)}")
    return st


def adapter_job(dest: Path) -> str | None:
    """The id of the job that made the adapter directory dest: None when
    there is no such directory, "" when it does not say (ADAPTER_JOB_FILE
    missing or unreadable: not made by this trainer, or by an older one)."""
    if not dest.exists():
        return None
    try:
        job_id = json.loads((dest / ADAPTER_JOB_FILE).read_text())["job_id"]
    except (OSError, ValueError, KeyError, TypeError):
        return ""
    return job_id if isinstance(job_id, str) else ""


# The states of a job whose adapter another job may replace: such a job can
# end with its adapter written (cancelled while it saved), and no answer of
# the trainer points at that adapter.
REPLACEABLE_STATES = frozenset({"cancelled", "failed"})


def save_adapter(
    model: PeftModel,
    base_model: str,
    dest: Path,
    job_id: str,
    job_state: Callable[[str], str] = lambda job_id: "",
    optimizer: OptimizerState | None = None,
) -> None:
    """Writes model's adapter as a PEFT directory (adapter_config.json,
    adapter_model.safetensors, ADAPTER_JOB_FILE naming job_id, and
    OPTIMIZER_FILE when optimizer is given) at dest, atomically: into a
    temporary directory beside it, fsynced, then renamed into place. An
    adapter already at dest is replaced only when job_id made it, or the
    job that made it ended cancelled or failed (job_state gives a job's
    state)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.parent / f".tmp-{dest.name}-{uuid.uuid4().hex[:8]}"
    try:
        model.save_pretrained(str(tmp), safe_serialization=True)
        cfg_file = tmp / "adapter_config.json"
        cfg = json.loads(cfg_file.read_text())
        cfg["base_model_name_or_path"] = base_model
        cfg_file.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
        (tmp / ADAPTER_JOB_FILE).write_text(json.dumps({"job_id": job_id}) + "\n")
        if optimizer is not None:
            write_optimizer_state(tmp, optimizer)
        for f in tmp.iterdir():
            _fsync_path(f)
        _fsync_path(tmp)
        old = None
        if dest.exists():
            owner = adapter_job(dest) or ""
            state = job_state(owner) if owner else ""
            if owner == job_id:
                log.info("replacing adapter %s, made by an earlier run of job %s", dest, job_id)
            elif state in REPLACEABLE_STATES:
                log.info(
                    "replacing adapter %s with job %s's: job %s made it and ended %s",
                    dest,
                    job_id,
                    owner,
                    state,
                )
            else:
                raise JobError(adapter_taken(dest.name, owner, dest))
            old = dest.parent / f".old-{dest.name}-{uuid.uuid4().hex[:8]}"
            os.rename(dest, old)
        os.rename(tmp, dest)
        _fsync_path(dest.parent)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def adapter_taken(name: str, owner: str, path: Path | None, state: str = "") -> str:
    """The error of a job whose output_adapter name is another job's: job
    owner made it at path ("" when no job is known to have), or, in state
    (queued or running), is to make it."""
    if state:
        whose = f"job {owner!r} ({state}) is to make it"
    elif owner:
        whose = f"job {owner!r} made it ({path})"
    else:
        whose = f"{path} exists, made by no job this trainer has a record of"
    fix = "give this job another output_adapter" + ("" if owner else ", or remove that directory")
    return (
        f"output_adapter {name!r} is taken: {whose}; "
        f"a job does not replace another job's adapter: {fix}"
    )


# A temporary adapter directory untouched this long belongs to no save in
# progress (as in the Go reference).
ABANDONED_AFTER = 600.0


def remove_abandoned_saves(adapters_dir: Path) -> None:
    """Removes the temporary directories (.tmp-*) of adapter saves that a
    killed trainer left half-written, once untouched for ABANDONED_AFTER,
    and settles the replaced adapters (.old-<name>-<hex>) of saves killed
    between their two renames (called at start, before any job runs): one
    whose name holds an adapter again is removed; one whose name is empty
    (killed right between the renames) is put back, so the adapter is as
    before the save, which its job, run again, repeats."""
    now = time.time()
    for d in adapters_dir.glob(".tmp-*"):
        try:
            abandoned = now - d.stat().st_mtime > ABANDONED_AFTER
        except OSError:
            continue
        if abandoned:
            shutil.rmtree(d, ignore_errors=True)
    for d in adapters_dir.glob(".old-*"):
        name = d.name[len(".old-") :].rpartition("-")[0]
        dest = adapters_dir / name
        if name and not dest.exists():
            log.info("restoring adapter %s from %s, left by a save cut short", dest, d)
            os.rename(d, dest)
        else:
            log.info("removing %s, the adapter a save cut short had replaced", d)
            shutil.rmtree(d, ignore_errors=True)


def _fsync_path(p: Path) -> None:
    fd = os.open(p, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def parent_optimizer_state(req: JobRequest) -> OptimizerState | None:
    """The optimizer state a job continues: its parent adapter's, None
    (fresh) from the base, with reset_optimizer, or from a parent saved
    without one."""
    parent = req.parent_adapter
    if parent is None:
        return None
    if req.hyperparameters.reset_optimizer:
        log.info("job %s: reset_optimizer: the optimizer starts fresh on %s", req.id, parent.name)
        return None
    st = read_optimizer_state(Path(parent.path))
    if st is None:
        log.info(
            "job %s: parent adapter %s has no %s: the optimizer starts fresh",
            req.id,
            parent.name,
            OPTIMIZER_FILE,
        )
    return st


def run_job(
    req: JobRequest,
    base: Any,
    tokenizer: Any,
    adapters_dir: Path,
    opts: TrainOptions,
    ctl: Control,
) -> tuple[Metrics, Path]:
    """Trains req on base (left as it was found) and writes its adapter."""
    vocab = base.get_input_embeddings().num_embeddings
    seqs = pack_turns(build_sequences(req.trajectories, tokenizer, vocab_size=vocab))
    pad_id = (
        tokenizer.pad_token_id
        if tokenizer is not None and tokenizer.pad_token_id is not None
        else 0
    )
    model = attach_lora(base, req, opts.seed)
    try:
        resume = parent_optimizer_state(req)
        if opts.gradient_checkpointing:
            model.gradient_checkpointing_enable(
                gradient_checkpointing_kwargs={"use_reentrant": False}
            )
        metrics, optimizer = train(model, seqs, req, opts, ctl, pad_id, resume)
        ctl.check()
        dest = adapters_dir / req.output_adapter
        base_name = req.base_model or str(base.name_or_path)
        save_adapter(model, base_name, dest, req.id, ctl.job_state, optimizer)
        return metrics, dest.resolve()
    finally:
        model.unload()
        if opts.gradient_checkpointing:
            base.gradient_checkpointing_disable()
        base.eval()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()  # the optimizer state and activations are gone


def seed_everything(seed: int) -> None:
    """Seeds torch and asks for deterministic kernels where torch has them."""
    torch.manual_seed(seed)
    torch.use_deterministic_algorithms(True, warn_only=True)
