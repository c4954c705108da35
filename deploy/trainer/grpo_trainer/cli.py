"""Command line: ``python -m grpo_trainer serve --host H --port P --data-dir DIR
[--model PATH | --model NAME=PATH ...] [--seed S]``."""

from __future__ import annotations

import argparse
import ipaddress
import logging
import os
import signal
from pathlib import Path


def parse_model_args(values: list[str]) -> tuple[dict[str, Path], Path | None]:
    """--model PATH sets the default model; --model NAME=PATH maps a served
    base_model name. A value whose NAME=PATH split leaves no existing file at
    the whole value is a mapping."""
    paths: dict[str, Path] = {}
    default: Path | None = None
    for v in values:
        name, sep, path = v.partition("=")
        if sep and name and path and not Path(v).exists():
            paths[name] = Path(path).resolve()
        else:
            if default is not None:
                raise ValueError(f"--model {v}: a default model ({default}) is already set")
            default = Path(v).resolve()
    return paths, default


def positive_int(v: str) -> int:
    n = int(v)
    if n < 1:
        raise argparse.ArgumentTypeError(f"{v}: want an integer >= 1")
    return n


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m grpo_trainer", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("serve", help="serve the trainer job API")
    s.add_argument("--host", default="127.0.0.1")
    s.add_argument("--port", type=int, default=7000)
    s.add_argument("--data-dir", required=True, type=Path, help="job records and adapters")
    s.add_argument(
        "--model",
        action="append",
        default=[],
        metavar="PATH|NAME=PATH",
        help="local model directory: the default for any base_model, or for the served name NAME",
    )
    s.add_argument("--seed", type=int, default=0, help="seed of fresh adapters")
    s.add_argument("--device", default="auto", help="auto (cuda if available), cpu, cuda, cuda:1")
    s.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16", "float64"])
    s.add_argument(
        "--micro-batch-size", type=positive_int, default=4, help="sequences per forward pass"
    )
    s.add_argument("--gradient-checkpointing", action="store_true", help="trade compute for memory")
    s.add_argument(
        "--logprobs-mode",
        default="raw",
        choices=["raw", "processed"],
        help="as vLLM's --logprobs-mode: raw (its default) or processed (after temperature)",
    )
    s.add_argument(
        "--max-job-bytes",
        type=positive_int,
        default=256 << 20,
        help="largest job request accepted, in bytes (larger: 413)",
    )
    s.add_argument(
        "--max-queued",
        type=positive_int,
        default=64,
        help="jobs that may wait to run (more: 429 with Retry-After)",
    )
    s.add_argument(
        "--api-key-env",
        default="",
        metavar="NAME",
        help="environment variable holding the bearer token every request but /healthz and "
        "/metrics must carry (required when --host is not a loopback address)",
    )
    s.add_argument("--threads", type=int, default=0, help="CPU threads for torch (0: its default)")
    s.add_argument("--log-level", default="info")
    return p


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    os.environ["HF_HUB_OFFLINE"] = "1"  # before transformers is imported
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    # cuBLAS is deterministic only with a fixed workspace.
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    if args.command == "serve":
        return serve(args)
    return 2


def is_loopback(host: str) -> bool:
    """Whether host is a loopback name or address (reachable from this
    machine only)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def api_key(args: argparse.Namespace) -> str | None:
    """The bearer token clients must send ("" for none), or None after
    logging why the server must not start: beyond loopback a key is
    required."""
    if args.api_key_env:
        key = os.environ.get(args.api_key_env, "")
        if not key:
            logging.error(
                "--api-key-env %s: the environment variable %s is unset or empty; "
                "set it to the bearer token clients send",
                args.api_key_env,
                args.api_key_env,
            )
            return None
        return key
    if not is_loopback(args.host):
        logging.error(
            "--host %s listens beyond loopback and needs a key: give --api-key-env NAME, "
            "the environment variable holding the bearer token clients send "
            "(grpo's trainer.api_key_env), or listen on 127.0.0.1",
            args.host,
        )
        return None
    return ""


def serve(args: argparse.Namespace) -> int:
    key = api_key(args)
    if key is None:
        return 2
    try:
        paths, default = parse_model_args(args.model)
    except ValueError as e:
        logging.error("%s", e)
        return 2
    for name, path in [*paths.items(), *([("default", default)] if default else [])]:
        if not (path / "config.json").is_file():
            logging.error("--model %s: %s has no config.json", name, path)
            return 2

    # Heavy imports (torch, transformers) only once the arguments are good.
    import uvicorn

    from grpo_trainer.app import Config, create_app
    from grpo_trainer.models import ModelStore
    from grpo_trainer.train import TrainOptions, seed_everything

    seed_everything(args.seed)
    if args.threads > 0:
        import torch

        torch.set_num_threads(args.threads)
    cfg = Config(
        data_dir=args.data_dir.resolve(),
        models=ModelStore(paths=paths, default=default, device=args.device, dtype=args.dtype),
        train=TrainOptions(
            seed=args.seed,
            micro_batch_size=args.micro_batch_size,
            gradient_checkpointing=args.gradient_checkpointing,
            logprobs_mode=args.logprobs_mode,
        ),
        max_job_bytes=args.max_job_bytes,
        max_queued=args.max_queued,
        api_key=key,
    )
    app = create_app(cfg)
    # uvicorn shuts down gracefully on SIGINT/SIGTERM (the lifespan stops
    # the worker; a job in training stays unfinished on disk and runs again
    # after a restart), then re-raises the signal to the handler it found:
    # these make that a clean exit 0.
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: None)
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level.lower())
    return 0


def run() -> None:
    """Console-script entry point."""
    import sys

    sys.exit(main(sys.argv[1:]))
