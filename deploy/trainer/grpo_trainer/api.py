"""Wire types of the trainer job API (DESIGN §5), mirroring trainer/api.go.

Trajectory items stay plain dicts: they are OpenAI messages and choice
objects exactly as the inference server returned them, checked when the job
runs (a bad one fails the job with an error naming the trajectory)."""

from __future__ import annotations

import math
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic_core import PydanticCustomError

JobState = Literal["queued", "running", "succeeded", "failed", "cancelled"]
TERMINAL_STATES = frozenset({"succeeded", "failed", "cancelled"})

# An output adapter name becomes a directory name.
ADAPTER_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")

# A job whose escaped id is too long for a directory name is stored under
# "sha256-<hex digest of the id>" (jobs.job_dir_name): an id of that shape
# would name another job's records.
HASHED_ID_RE = re.compile(r"sha256-[0-9a-f]{64}", re.IGNORECASE)

MAX_RANK = 256
DEFAULT_RANK = 8
DEFAULT_TARGET_MODULES = (
    "q_proj",
    "k_proj",
    "v_proj",
    "o_proj",
    "gate_proj",
    "up_proj",
    "down_proj",
)
DEFAULT_LEARNING_RATE = 1e-5
DEFAULT_EPSILON = 0.2
DEFAULT_EPOCHS = 1

# The largest values a job may carry. They refuse only the absurd, before
# the job is accepted (a value torch cannot compute with fails the job with
# torch's words, or trains the adapter to inf): AdamW moves each weight by
# about the learning rate per step (LoRA trains at 1e-6 to 1e-3); PEFT's
# alpha is 2x the rank; a KL weight is 0.001 to 0.1; an advantage is a
# reward centred in its group (divided by its spread by default, which
# bounds it by about sqrt(n) for n episodes); epsilon_high is about 0.2 to
# 0.3 (DAPO's 0.28).
MAX_LEARNING_RATE = 1.0
MAX_ALPHA = 16 * MAX_RANK
MAX_EPSILON_HIGH = 100.0
MAX_KL_BETA = 1000.0
MAX_EPOCHS = 1000
MAX_ABS_ADVANTAGE = 1e6
# Optimizer steps per epoch beyond this would be slices of a sequence or
# less; warm-up longer than this is no warm-up a run can reach.
MAX_MINI_BATCHES = 4096
MAX_WARMUP_STEPS = 1_000_000


def _accepted(v: float, ok: bool, accepted: str) -> float:
    """v when it is finite and ok, else an error that gives v and what is
    accepted (validation's caller adds the field's name). The fields it
    checks let inf and nan through to it (allow_inf_nan=True), so that their
    error gives the value and the range too."""
    if not (math.isfinite(v) and ok):
        raise PydanticCustomError(
            "out_of_range",
            "{value} is out of range; accepted: {accepted}",
            {"value": repr(v), "accepted": accepted},
        )
    return v


class _Wire(BaseModel):
    # Unknown keys are accepted and ignored: the API grows additively.
    model_config = ConfigDict(extra="ignore", allow_inf_nan=False)


class Adapter(_Wire):
    name: str = ""
    path: str


class LoRA(_Wire):
    rank: int = Field(0, description="0 takes the default 8")
    alpha: float = Field(0.0, allow_inf_nan=True, description="0 takes twice the rank")
    target_modules: list[str] = Field(default_factory=list)

    @field_validator("rank")
    @classmethod
    def _rank(cls, v: int) -> int:
        return int(_accepted(v, 0 <= v <= MAX_RANK, f"0 to {MAX_RANK} (0 takes {DEFAULT_RANK})"))

    @field_validator("alpha")
    @classmethod
    def _alpha(cls, v: float) -> float:
        return _accepted(v, 0 <= v <= MAX_ALPHA, f"0 to {MAX_ALPHA} (0 takes twice the rank)")

    @field_validator("target_modules")
    @classmethod
    def _names(cls, v: list[str]) -> list[str]:
        for name in v:
            if not re.fullmatch(r"[A-Za-z0-9_.]+", name):
                raise ValueError(f"{name!r} is not a module name")
        return v

    def resolved(self) -> tuple[int, float, list[str]]:
        rank = self.rank or DEFAULT_RANK
        alpha = self.alpha or 2.0 * rank
        targets = list(self.target_modules) or list(DEFAULT_TARGET_MODULES)
        return rank, alpha, targets


class Hyperparameters(_Wire):
    learning_rate: float = Field(0.0, allow_inf_nan=True, description="0 takes 1e-5")
    epsilon: float = Field(0.0, allow_inf_nan=True, description="0 takes the default 0.2")
    epsilon_high: float = Field(0.0, allow_inf_nan=True, description="0 takes epsilon")
    kl_beta: float = Field(0.0, allow_inf_nan=True)
    epochs: int = Field(0, description="0 takes the default 1")
    mini_batches: int = Field(0, description="optimizer steps per epoch; 0 takes 1")
    warmup_steps: int = Field(0, description="linear warm-up over the lineage's first steps")
    reset_optimizer: bool = Field(False, description="start the optimizer state afresh")

    @field_validator("learning_rate")
    @classmethod
    def _learning_rate(cls, v: float) -> float:
        return _accepted(
            v,
            0 <= v <= MAX_LEARNING_RATE,
            f"0 to {MAX_LEARNING_RATE:g} (0 takes {DEFAULT_LEARNING_RATE:g})",
        )

    @field_validator("epsilon")
    @classmethod
    def _epsilon(cls, v: float) -> float:
        return _accepted(v, 0 <= v < 1, f"0 <= epsilon < 1 (0 takes {DEFAULT_EPSILON:g})")

    @field_validator("epsilon_high")
    @classmethod
    def _epsilon_high(cls, v: float) -> float:
        return _accepted(
            v, 0 <= v <= MAX_EPSILON_HIGH, f"0 to {MAX_EPSILON_HIGH:g} (0 takes epsilon)"
        )

    @field_validator("kl_beta")
    @classmethod
    def _kl_beta(cls, v: float) -> float:
        return _accepted(v, 0 <= v <= MAX_KL_BETA, f"0 to {MAX_KL_BETA:g}")

    @field_validator("epochs")
    @classmethod
    def _epochs(cls, v: int) -> int:
        return int(_accepted(v, 0 <= v <= MAX_EPOCHS, f"0 to {MAX_EPOCHS} (0 takes 1)"))

    @field_validator("mini_batches")
    @classmethod
    def _mini_batches(cls, v: int) -> int:
        return int(_accepted(v, 0 <= v <= MAX_MINI_BATCHES, f"0 to {MAX_MINI_BATCHES} (0 takes 1)"))

    @field_validator("warmup_steps")
    @classmethod
    def _warmup_steps(cls, v: int) -> int:
        return int(_accepted(v, 0 <= v <= MAX_WARMUP_STEPS, f"0 to {MAX_WARMUP_STEPS}"))

    def resolved(self) -> Hyperparameters:
        eps = self.epsilon or DEFAULT_EPSILON
        return Hyperparameters(
            learning_rate=self.learning_rate or DEFAULT_LEARNING_RATE,
            epsilon=eps,
            epsilon_high=self.epsilon_high or eps,
            kl_beta=self.kl_beta,
            epochs=self.epochs or DEFAULT_EPOCHS,
            mini_batches=self.mini_batches or 1,
            warmup_steps=self.warmup_steps,
            reset_optimizer=self.reset_optimizer,
        )


class Sampling(_Wire):
    model: str = ""
    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None
    chat_template_kwargs: dict[str, Any] | None = None


class Trajectory(_Wire):
    messages_and_choices: list[dict[str, Any]] = Field(min_length=1)
    tools: list[dict[str, Any]] | None = None
    reward: float = 0.0
    advantage: float = Field(allow_inf_nan=True)
    group: str = ""
    episode: str = ""
    agent: int = 0
    sampling: Sampling | None = None
    policy_step: int | None = None

    @field_validator("advantage")
    @classmethod
    def _advantage(cls, v: float) -> float:
        return _accepted(
            v,
            abs(v) <= MAX_ABS_ADVANTAGE,
            f"-{MAX_ABS_ADVANTAGE:g} to {MAX_ABS_ADVANTAGE:g}",
        )


class JobRequest(_Wire):
    id: str = Field(min_length=1, max_length=512)
    base_model: str = ""
    parent_adapter: Adapter | None = None
    output_adapter: str
    lora: LoRA = Field(default_factory=LoRA)
    hyperparameters: Hyperparameters = Field(default_factory=Hyperparameters)
    trajectories: list[Trajectory] = Field(min_length=1)

    @field_validator("id")
    @classmethod
    def _id(cls, v: str) -> str:
        if any(ord(c) < 0x20 or ord(c) == 0x7F for c in v):
            raise ValueError("no control characters allowed")
        if HASHED_ID_RE.fullmatch(v):
            raise ValueError(
                "sha256-<64 hex digits> is the trainer's name for the records of an id "
                "too long to be a directory name, and is refused as an id; accepted: "
                "1 to 512 characters without control characters, in any other form"
            )
        return v

    @field_validator("output_adapter")
    @classmethod
    def _output_adapter(cls, v: str) -> str:
        if not ADAPTER_NAME_RE.fullmatch(v):
            raise ValueError("want 1 to 200 of A-Z a-z 0-9 . _ -, starting with a letter or digit")
        return v


class Metrics(_Wire):
    loss: float = 0.0
    kl: float = 0.0
    grad_norm: float = 0.0
    clip_fraction: float = 0.0
    tokens: int = 0
    sequences: int = 0
    steps: int = 0
    epochs: int = 0
    ratio_mean: float = 0.0
    # Optimizer steps along the adapter's lineage after this job.
    optimizer_step: int = 0
    # Before the first update (the parent's policy, the sampler's): mean
    # |trainer logprob - sampler logprob| and mean entropy over the tokens
    # of the job's first optimizer step.
    sampler_logprob_gap: float = 0.0
    entropy: float = 0.0
    # L2 norm of the change of the trainable LoRA weights in this job.
    update_norm: float = 0.0


class Job(_Wire):
    id: str
    state: JobState
    progress: float = 0.0
    metrics: Metrics | None = None
    adapter: Adapter | None = None
    error: str | None = None


class ErrorBody(_Wire):
    error: str
