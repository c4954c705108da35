"""The GRPO / PPO-clip loss, per token, on plain tensors.

All tensors are [batch, tokens] aligned on completion positions: ``mask`` is 1
where a sampled completion token is and 0 on prompt, tool, user and padding
positions, which therefore carry no loss and no gradient."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class LossParts:
    """The summed loss of a batch and its statistics (sums over masked tokens,
    so micro-batches add up)."""

    loss_sum: torch.Tensor  # differentiable
    pg_sum: float
    kl_sum: float
    clipped: float
    ratio_sum: float
    tokens: float


def token_logprobs(
    logits: torch.Tensor, input_ids: torch.Tensor, temperature: torch.Tensor | None = None
) -> torch.Tensor:
    """log p(input_ids[:, t] | input_ids[:, :t]) for t >= 1, shape [B, T-1].
    temperature ([B], optional) divides each row's logits first, for
    sampled logprobs that were reported after temperature scaling (vLLM's
    --logprobs-mode processed_logprobs); vLLM's default raw logprobs are at
    temperature 1."""
    return token_logprobs_and_entropy(logits, input_ids, temperature, entropy=False)[0]


def token_logprobs_and_entropy(
    logits: torch.Tensor,
    input_ids: torch.Tensor,
    temperature: torch.Tensor | None = None,
    entropy: bool = True,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """token_logprobs, and (when entropy) the entropy -sum p log p of the
    same distributions, [B, T-1], without gradient: one log-softmax for
    both."""
    logits = logits[:, :-1, :]
    if logits.dtype in (torch.float16, torch.bfloat16):
        logits = logits.float()
    if temperature is not None:
        logits = logits / temperature.to(logits.dtype)[:, None, None]
    logp = torch.log_softmax(logits, dim=-1)
    picked = torch.gather(logp, -1, input_ids[:, 1:].unsqueeze(-1)).squeeze(-1)
    ent = None
    if entropy:
        # By slices of positions: p log p over the whole [B, T, vocab] at
        # once would double the logits' memory (2.5 GB at 4096 positions of
        # Qwen3's 151,936 in float32).
        with torch.no_grad():
            ent = torch.cat([-(c.exp() * c).sum(-1) for c in logp.split(256, dim=1)], dim=1)
    return picked, ent


def grpo_loss(
    logp_new: torch.Tensor,
    logp_old: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    epsilon: float,
    epsilon_high: float,
    kl_beta: float = 0.0,
    logp_ref: torch.Tensor | None = None,
) -> LossParts:
    """Token-level PPO-clip with the sampler's logprobs as the old policy:

        ratio = exp(logp_new - logp_old)
        pg    = -min(ratio * A, clip(ratio, 1 - epsilon, 1 + epsilon_high) * A)
        kl    = exp(logp_ref - logp_new) - (logp_ref - logp_new) - 1   (k3)
        loss  = sum(mask * (pg + kl_beta * kl))

    advantages is [B] (one per sequence) or [B, T]. The caller divides by
    the number of masked tokens of the whole batch (token-level averaging).
    kl is measured (kl_sum) whenever logp_ref is given, kl_beta 0 included;
    it is in the loss only when kl_beta > 0, which needs logp_ref."""
    mask = mask.to(logp_new.dtype)
    adv = advantages.to(logp_new.dtype)
    if adv.dim() == 1:
        adv = adv.unsqueeze(-1)
    # Masked positions get log ratio 0 so no inf or nan can leak out of them.
    log_ratio = torch.where(mask > 0, logp_new - logp_old.to(logp_new.dtype), 0.0)
    ratio = torch.exp(log_ratio)
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1.0 - epsilon, 1.0 + epsilon_high) * adv
    pg = -torch.minimum(unclipped, clipped)
    per_token = pg
    kl = torch.zeros_like(pg)
    if kl_beta > 0 and logp_ref is None:
        raise ValueError("kl_beta > 0 needs logp_ref")
    if logp_ref is not None:
        d = torch.where(mask > 0, logp_ref.to(logp_new.dtype) - logp_new, 0.0)
        kl = torch.exp(d) - d - 1.0
    if kl_beta > 0:
        per_token = pg + kl_beta * kl
    is_clipped = (clipped < unclipped).to(mask.dtype) * mask
    return LossParts(
        loss_sum=(per_token * mask).sum(),
        pg_sum=float((pg * mask).sum().detach()),
        kl_sum=float((kl * mask).sum().detach()),
        clipped=float(is_clipped.sum()),
        ratio_sum=float((ratio * mask).sum().detach()),
        tokens=float(mask.sum()),
    )
