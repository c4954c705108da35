"""One GRPO update of a LoRA adapter: load or create the adapter on the base
model, run ``epochs`` passes of token-level PPO-clip over the job's sampled
turns, write the adapter atomically as a PEFT directory.

The loop, in the order a reader meets it: build_sequences (data.py) turns
trajectories into (prompt, completion, old logprobs, advantage); each epoch is
``steps_per_epoch`` AdamW steps over consecutive slices of those sequences in
their fixed order; each step accumulates the gradient of
sum(loss over completion tokens) / (completion tokens in the step) over
micro-batches, clips it to max_grad_norm, and steps."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from peft import LoraConfig, PeftModel, get_peft_model
from peft.utils import get_peft_model_state_dict, set_peft_model_state_dict
from safetensors.torch import load_file

from grpo_trainer.api import JobRequest, Metrics
from grpo_trainer.data import Sequence, build_sequences
from grpo_trainer.loss import grpo_loss, token_logprobs

log = logging.getLogger("grpo_trainer.train")

# The file in an adapter directory that names the job that made it: a job
# replaces no adapter but its own (an earlier run of it, cut short by a
# restart, or trained again after its records were lost).
ADAPTER_JOB_FILE = "grpo_job.json"


class JobError(Exception):
    """A job that cannot be trained as asked; the message is for the user."""


@dataclass
class TrainOptions:
    """Server-wide training settings (the job carries the rest)."""

    seed: int = 0
    micro_batch_size: int = 4  # sequences per forward pass
    steps_per_epoch: int = 1  # optimizer steps per pass over the job's sequences
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
    input_ids, where start+1 is the first completion token of the shortest
    prompt, so logits are computed only from position start on."""

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


def make_batch(
    seqs: list[Sequence], pad_id: int, device: torch.device, temperature: bool = False
) -> Batch:
    T = max(len(s.input_ids) for s in seqs)
    start = min(len(s.prompt_ids) for s in seqs) - 1
    keep = T - start
    B = len(seqs)
    ids = torch.full((B, T), pad_id, dtype=torch.long)
    attn = torch.zeros((B, T), dtype=torch.long)
    mask = torch.zeros((B, keep - 1), dtype=torch.float64)
    old = torch.zeros((B, keep - 1), dtype=torch.float64)
    for b, s in enumerate(seqs):
        n, p = len(s.input_ids), len(s.prompt_ids)
        ids[b, :n] = torch.tensor(s.input_ids, dtype=torch.long)
        attn[b, :n] = 1
        # Token t of input_ids sits at column t - (start + 1).
        lo, hi = p - start - 1, n - start - 1
        mask[b, lo:hi] = 1.0
        old[b, lo:hi] = torch.tensor(s.old_logprobs, dtype=torch.float64)
    adv = torch.tensor([s.advantage for s in seqs], dtype=torch.float64)
    temp = None
    if temperature:
        temp = torch.tensor([s.temperature for s in seqs], dtype=torch.float64).to(device)
    return Batch(
        ids.to(device), attn.to(device), keep, mask.to(device), old.to(device), adv.to(device), temp
    )


def completion_logprobs(model: Any, batch: Batch) -> torch.Tensor:
    """Log-probabilities of the batch's tokens on its loss positions."""
    kw = {"input_ids": batch.input_ids, "attention_mask": batch.attention_mask, "use_cache": False}
    try:
        logits = model(**kw, logits_to_keep=batch.keep).logits
    except TypeError:  # a model without logits_to_keep computes them all
        logits = model(**kw).logits
    logits = logits[:, -batch.keep :]
    T = batch.input_ids.shape[1]
    # Kept logits are positions T-keep..T-1; prepend their own input ids so
    # token_logprobs' shift pairs position t's logits with token t+1.
    return token_logprobs(logits, batch.input_ids[:, T - batch.keep :], batch.temperature)


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


def train(
    model: PeftModel,
    seqs: list[Sequence],
    req: JobRequest,
    opts: TrainOptions,
    ctl: Control,
    pad_id: int,
) -> Metrics:
    """Runs the job's epochs on model in place and returns the statistics."""
    hp = req.hyperparameters.resolved()
    device = next(p for p in model.parameters()).device
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=hp.learning_rate, weight_decay=opts.weight_decay)
    model.train()  # no dropout (lora_dropout 0, the base's off: models.disable_dropout)

    n_steps = max(1, min(opts.steps_per_epoch, len(seqs)))
    slices = [
        seqs[k * len(seqs) // n_steps : (k + 1) * len(seqs) // n_steps] for k in range(n_steps)
    ]
    mbs = max(1, opts.micro_batch_size)
    total = hp.epochs * sum((len(s) + mbs - 1) // mbs for s in slices)
    done = 0

    loss_steps, kl_steps, norms = [], [], []
    clipped = ratio_sum = tokens_all = 0.0
    for _epoch in range(hp.epochs):
        for part in slices:
            step_tokens = float(sum(len(s.completion_ids) for s in part))
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
                logp = completion_logprobs(model, batch)
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
            opt.step()
            loss_steps.append(step_loss)
            kl_steps.append(step_kl)
            norms.append(float(norm))
    opt.zero_grad(set_to_none=True)
    return Metrics(
        loss=sum(loss_steps) / len(loss_steps),
        kl=sum(kl_steps) / len(kl_steps),
        grad_norm=sum(norms) / len(norms),
        clip_fraction=clipped / tokens_all,
        tokens=int(sum(len(s.completion_ids) for s in seqs)),
        sequences=len(seqs),
        steps=len(norms),
        epochs=hp.epochs,
        ratio_mean=ratio_sum / tokens_all,
    )


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
) -> None:
    """Writes model's adapter as a PEFT directory (adapter_config.json,
    adapter_model.safetensors, and ADAPTER_JOB_FILE naming job_id) at dest,
    atomically: into a temporary directory beside it, fsynced, then renamed
    into place. An adapter already at dest is replaced only when job_id
    made it, or the job that made it ended cancelled or failed (job_state
    gives a job's state)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.parent / f".tmp-{dest.name}-{uuid.uuid4().hex[:8]}"
    try:
        model.save_pretrained(str(tmp), safe_serialization=True)
        cfg_file = tmp / "adapter_config.json"
        cfg = json.loads(cfg_file.read_text())
        cfg["base_model_name_or_path"] = base_model
        cfg_file.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
        (tmp / ADAPTER_JOB_FILE).write_text(json.dumps({"job_id": job_id}) + "\n")
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
    killed trainer left half-written, once untouched for ABANDONED_AFTER."""
    now = time.time()
    for d in adapters_dir.glob(".tmp-*"):
        try:
            abandoned = now - d.stat().st_mtime > ABANDONED_AFTER
        except OSError:
            continue
        if abandoned:
            shutil.rmtree(d, ignore_errors=True)


def _fsync_path(p: Path) -> None:
    fd = os.open(p, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


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
    seqs = build_sequences(req.trajectories, tokenizer, vocab_size=vocab)
    pad_id = (
        tokenizer.pad_token_id
        if tokenizer is not None and tokenizer.pad_token_id is not None
        else 0
    )
    model = attach_lora(base, req, opts.seed)
    try:
        if opts.gradient_checkpointing:
            model.gradient_checkpointing_enable(
                gradient_checkpointing_kwargs={"use_reentrant": False}
            )
        metrics = train(model, seqs, req, opts, ctl, pad_id)
        ctl.check()
        dest = adapters_dir / req.output_adapter
        save_adapter(model, req.base_model or str(base.name_or_path), dest, req.id, ctl.job_state)
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
