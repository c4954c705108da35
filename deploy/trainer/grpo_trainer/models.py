"""Base models from local directories. The served name a job gives as
base_model maps to a directory (``--model NAME=PATH``) or to the default
(``--model PATH``); nothing is ever downloaded."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch


class ModelNotFound(LookupError):
    """No local model directory for a base_model name."""


@dataclass
class ModelStore:
    """Maps base_model names to directories and keeps the last loaded model,
    so consecutive jobs on one base model load it once."""

    paths: dict[str, Path] = field(default_factory=dict)
    default: Path | None = None
    device: str = "auto"
    dtype: str = "auto"

    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _loaded: tuple[Path, Any, Any] | None = field(default=None, repr=False)

    def resolve(self, base_model: str) -> Path:
        if base_model in self.paths:
            return self.paths[base_model]
        if self.default is not None:
            return self.default
        served = ", ".join(sorted(self.paths)) or "none"
        raise ModelNotFound(
            f"base_model {base_model!r}: no local model for it (served: {served}); "
            "start the trainer with --model PATH or --model NAME=PATH"
        )

    def torch_device(self) -> torch.device:
        if self.device == "auto":
            return torch.device("cuda" if torch.cuda.is_available() else "cpu")
        return torch.device(self.device)

    def torch_dtype(self, device: torch.device) -> torch.dtype:
        if self.dtype == "auto":
            return torch.bfloat16 if device.type == "cuda" else torch.float32
        return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float64": torch.float64}[
            self.dtype
        ]

    def get(self, path: Path) -> tuple[Any, Any]:
        """The model and tokenizer in path, loaded once."""
        with self._lock:
            if self._loaded is not None and self._loaded[0] == path:
                return self._loaded[1], self._loaded[2]
            self._loaded = None
            model, tok = load_model(
                path, self.torch_device(), self.torch_dtype(self.torch_device())
            )
            self._loaded = (path, model, tok)
            return model, tok

    def forget(self) -> None:
        """Drops the cached model (after a job left it in doubt)."""
        with self._lock:
            self._loaded = None


def load_model(path: Path, device: torch.device, dtype: torch.dtype) -> tuple[Any, Any]:
    """Loads a Hugging Face causal LM and its tokenizer from a local directory."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if not (path / "config.json").is_file():
        raise ModelNotFound(f"model directory {path} has no config.json")
    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=dtype, local_files_only=True)
    model.to(device)
    model.eval()
    disable_dropout(model)
    for p in model.parameters():
        p.requires_grad_(False)
    tok = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    return model, tok


def disable_dropout(model: Any) -> int:
    """Sets every dropout rate of model to 0 and returns how many it changed:
    dropout modules' p and the rates attention modules apply themselves
    (attention_dropout, dropout) in training mode. Training must compute the
    policy that sampled (vLLM serves without dropout), or the importance
    ratio of an on-policy token is not 1 and a job is not deterministic."""
    changed = 0
    for m in model.modules():
        if isinstance(m, torch.nn.Dropout) and m.p > 0:
            m.p = 0.0
            changed += 1
        for attr in ("attention_dropout", "dropout"):
            v = getattr(m, attr, None)
            if isinstance(v, float) and v > 0:
                setattr(m, attr, 0.0)
                changed += 1
    return changed
