"""Times the training of one job request (a job body as grpo posts it) on a
local model, as the trainer's worker runs it, without saving the adapter:

    OMP_NUM_THREADS=1 python tests/bench_job.py JOB.json MODEL_DIR \\
        [--mini-batches N] [--learning-rate LR] [--runs 3] [--no-pack]

The job's parent adapter is dropped (the adapter starts fresh), so any job
file works on its own. --no-pack trains every sampled turn as its own
sequence. Prints, per run, the seconds train() took, then the sequences and
tokens the model ran over."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from grpo_trainer.api import JobRequest
from grpo_trainer.data import build_sequences, pack_turns
from grpo_trainer.models import load_model
from grpo_trainer.train import Control, TrainOptions, attach_lora, seed_everything, train


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("job", type=Path)
    ap.add_argument("model", type=Path)
    ap.add_argument("--mini-batches", type=int, default=4)
    ap.add_argument("--learning-rate", type=float, default=1e-2)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--no-pack", action="store_true")
    a = ap.parse_args()
    torch.set_num_threads(1)
    body = json.loads(a.job.read_text())
    body["parent_adapter"] = None
    body["hyperparameters"]["mini_batches"] = a.mini_batches
    body["hyperparameters"]["learning_rate"] = a.learning_rate
    req = JobRequest.model_validate(body)
    base, tok = load_model(a.model, torch.device("cpu"), torch.float32)
    turns = build_sequences(req.trajectories, tok, vocab_size=len(tok))
    seqs = turns if a.no_pack else pack_turns(turns)
    ran = sum(len(s.input_ids) for s in seqs)
    for run in range(a.runs):
        seed_everything(0)
        model = attach_lora(base, req, 0)
        t0 = time.perf_counter()
        m, _ = train(model, seqs, req, TrainOptions(), Control(), tok.pad_token_id or 0)
        secs = time.perf_counter() - t0
        model.unload()
        print(f"run {run + 1}: {secs:.2f} s  loss {m.loss:.6f}  grad_norm {m.grad_norm:.6f}")
    print(
        f"{len(turns)} sampled turns, {len(seqs)} sequences, {ran} input tokens, "
        f"{m.tokens} loss tokens, {m.steps} optimizer steps"
    )


if __name__ == "__main__":
    main()
