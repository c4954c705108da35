"""python -m grpo_tinymodel build --out DIR --seed S"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    p = argparse.ArgumentParser(prog="python -m grpo_tinymodel")
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="build (or reuse from the cache) the tiny model")
    b.add_argument("--out", type=Path, help="also copy the model here")
    b.add_argument("--seed", type=int, default=1)
    b.add_argument("--cache-dir", type=Path, help="default: $GRPO_CACHE or ~/.cache/grpo")
    b.add_argument("--small", action="store_true", help="a very small config, for tests")
    k = sub.add_parser("key", help="print the cache key for a seed")
    k.add_argument("--seed", type=int, default=1)
    args = p.parse_args(argv)

    from .build import SMALL, BuildConfig, build, cache_key

    if args.cmd == "key":
        print(cache_key(args.seed, BuildConfig()))
        return 0
    cfg = SMALL if args.small else BuildConfig()
    path = build(args.seed, cfg, cache_dir=args.cache_dir, out=args.out)
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
