"""The loss on small hand-made tensors, with hand-computed values."""

import math

import pytest
import torch

from grpo_trainer.loss import grpo_loss, token_logprobs, token_logprobs_and_entropy


def _ratios(rows: list[list[float]]) -> tuple[torch.Tensor, torch.Tensor]:
    """logp_new and logp_old (zeros) whose ratios are rows."""
    new = torch.tensor([[math.log(r) for r in row] for row in rows], dtype=torch.float64)
    return new.requires_grad_(True), torch.zeros_like(new)


def test_clipping_hand_computed():
    # Two sequences, advantages +1 and -1, ratios 1.5, 0.5, 1.1 each;
    # epsilon 0.2 (low bound 0.8), epsilon_high 0.3 (high bound 1.3).
    new, old = _ratios([[1.5, 0.5, 1.1], [1.5, 0.5, 1.1]])
    adv = torch.tensor([1.0, -1.0], dtype=torch.float64)
    mask = torch.ones_like(new)
    parts = grpo_loss(new, old, adv, mask, epsilon=0.2, epsilon_high=0.3)
    # A=+1: -min(1.5, 1.3) = -1.3 (clipped), -min(0.5, 0.8) = -0.5, -min(1.1, 1.1) = -1.1
    # A=-1: -min(-1.5, -1.3) = 1.5, -min(-0.5, -0.8) = 0.8 (clipped), -min(-1.1, -1.1) = 1.1
    assert parts.loss_sum.item() == pytest.approx(-1.3 - 0.5 - 1.1 + 1.5 + 0.8 + 1.1, abs=1e-12)
    assert parts.clipped == 2
    assert parts.tokens == 6
    assert parts.ratio_sum == pytest.approx(2 * (1.5 + 0.5 + 1.1), abs=1e-12)
    parts.loss_sum.backward()
    # d(-A r)/d logp = -A r where the unclipped term is taken, 0 where clipped.
    want = torch.tensor([[0.0, -0.5, -1.1], [1.5, 0.0, 1.1]], dtype=torch.float64)
    assert torch.allclose(new.grad, want, atol=1e-12), new.grad


def test_ratio_exactly_one_when_old_is_new():
    torch.manual_seed(0)
    new = -torch.rand(3, 5, dtype=torch.float64) * 4
    adv = torch.tensor([0.7, -1.2, 0.1], dtype=torch.float64)
    mask = torch.ones_like(new)
    parts = grpo_loss(new, new.clone(), adv, mask, epsilon=0.2, epsilon_high=0.2)
    assert parts.ratio_sum == 15.0
    assert parts.clipped == 0
    assert parts.loss_sum.item() == pytest.approx(-5 * (0.7 - 1.2 + 0.1), abs=1e-12)


def test_mask_removes_loss_and_gradient():
    new = torch.tensor([[-1.0, -2.0, 50.0], [-0.5, 30.0, -1.5]], dtype=torch.float64)
    new.requires_grad_(True)
    old = torch.tensor([[-1.2, -2.0, -1000.0], [-0.4, -900.0, -1.0]], dtype=torch.float64)
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 1.0]], dtype=torch.float64)
    adv = torch.tensor([1.0, -2.0], dtype=torch.float64)
    parts = grpo_loss(new, old, adv, mask, epsilon=0.2, epsilon_high=0.2, kl_beta=0.5, logp_ref=old)
    assert math.isfinite(parts.loss_sum.item())
    parts.loss_sum.backward()
    assert new.grad[0, 2] == 0 and new.grad[1, 1] == 0
    assert parts.tokens == 4
    # The same loss as on the unmasked tokens alone.
    keep = mask.bool()
    only = grpo_loss(
        new.detach()[keep].unsqueeze(0),
        old[keep].unsqueeze(0),
        torch.tensor([[1.0, 1.0, -2.0, -2.0]], dtype=torch.float64),
        torch.ones(1, 4, dtype=torch.float64),
        epsilon=0.2,
        epsilon_high=0.2,
        kl_beta=0.5,
        logp_ref=old[keep].unsqueeze(0),
    )
    assert parts.loss_sum.item() == pytest.approx(only.loss_sum.item(), abs=1e-12)


def test_kl_k3_hand_computed():
    # logp_ref - logp_new = log 2: k3 = 2 - log 2 - 1.
    new = torch.tensor([[math.log(0.25), math.log(0.5)]], dtype=torch.float64)
    ref = torch.tensor([[math.log(0.5), math.log(0.5)]], dtype=torch.float64)
    parts = grpo_loss(
        new,
        new.clone(),
        torch.tensor([0.0], dtype=torch.float64),
        torch.ones_like(new),
        epsilon=0.2,
        epsilon_high=0.2,
        kl_beta=0.1,
        logp_ref=ref,
    )
    assert parts.kl_sum == pytest.approx(2 - math.log(2) - 1, abs=1e-12)
    assert parts.loss_sum.item() == pytest.approx(0.1 * (2 - math.log(2) - 1), abs=1e-12)


def test_kl_is_measured_without_its_penalty():
    # kl_beta 0 with the reference given: kl is measured (the same k3 as
    # above, 2 - log 2 - 1) but not in the loss (advantage 0: the loss is 0).
    new = torch.tensor([[math.log(0.25), math.log(0.5)]], dtype=torch.float64)
    ref = torch.tensor([[math.log(0.5), math.log(0.5)]], dtype=torch.float64)
    parts = grpo_loss(
        new,
        new.clone(),
        torch.tensor([0.0], dtype=torch.float64),
        torch.ones_like(new),
        epsilon=0.2,
        epsilon_high=0.2,
        kl_beta=0.0,
        logp_ref=ref,
    )
    assert parts.kl_sum == pytest.approx(2 - math.log(2) - 1, abs=1e-12)
    assert parts.loss_sum.item() == 0.0


def test_kl_needs_reference():
    x = torch.zeros(1, 2)
    with pytest.raises(ValueError, match="logp_ref"):
        grpo_loss(x, x, torch.zeros(1), torch.ones(1, 2), 0.2, 0.2, kl_beta=0.1)


def test_token_logprobs_hand_computed():
    # Vocabulary of 2; logits favour token 1 by log 3 at position 0.
    logits = torch.tensor([[[0.0, math.log(3)], [0.0, 0.0], [5.0, 5.0]]], dtype=torch.float64)
    ids = torch.tensor([[0, 1, 0]])
    got = token_logprobs(logits, ids)
    assert got.shape == (1, 2)
    assert got[0, 0].item() == pytest.approx(math.log(0.75), abs=1e-12)
    assert got[0, 1].item() == pytest.approx(math.log(0.5), abs=1e-12)


def test_token_logprobs_at_a_temperature():
    # At temperature 0.5 the logits double: p(token 1) = 9 / (1 + 9).
    logits = torch.tensor([[[0.0, math.log(3)], [0.0, 0.0]]], dtype=torch.float64)
    got = token_logprobs(logits, torch.tensor([[0, 1]]), torch.tensor([0.5], dtype=torch.float64))
    assert got[0, 0].item() == pytest.approx(math.log(0.9), abs=1e-12)


def test_entropy_hand_computed_and_across_slices():
    # Uniform over 4 tokens: ln 4; one token certain: 0.
    logits = torch.tensor(
        [[[0.0, 0.0, 0.0, 0.0], [1e4, 0.0, 0.0, 0.0], [0.0] * 4]], dtype=torch.float64
    )
    _, ent = token_logprobs_and_entropy(logits, torch.tensor([[0, 1, 2]]))
    assert ent[0].tolist() == pytest.approx([math.log(4), 0.0], abs=1e-12)
    # Positions beyond one slice of 256 give what the formula gives at once.
    g = torch.Generator().manual_seed(5)
    logits = torch.randn(2, 600, 7, generator=g, dtype=torch.float64)
    ids = torch.randint(0, 7, (2, 600), generator=g)
    logp, ent = token_logprobs_and_entropy(logits, ids)
    p = torch.log_softmax(logits[:, :-1], -1)
    assert ent.shape == (2, 599)
    assert torch.allclose(ent, -(p.exp() * p).sum(-1), rtol=1e-12, atol=0)
    assert torch.equal(logp, token_logprobs(logits, ids))
