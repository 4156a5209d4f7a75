"""The GRPO objective on crafted numbers: what each term does, and what it must not do."""

from __future__ import annotations

import math

import pytest
import torch

from reward_pipeline.training.objective import ObjectiveConfig, group_advantages, grpo_loss


def _batch():
    torch.manual_seed(0)
    current = torch.randn(3, 5).clamp(max=-0.1).requires_grad_(True)
    mask = torch.tensor([[0, 1, 1, 1, 0], [0, 0, 1, 1, 1], [0, 1, 1, 0, 0]], dtype=torch.float32)
    adv = torch.tensor([1.0, -0.5, 0.25])
    return current, mask, adv


def test_on_policy_rows_have_ratio_one_and_the_reinforce_gradient():
    current, mask, adv = _batch()
    parts = grpo_loss(current, current.detach(), current.detach(), adv, mask, ObjectiveConfig(loss_type="dapo"))
    parts.loss.backward()

    reinforce = current.detach().clone().requires_grad_(True)
    (-(adv.view(-1, 1) * reinforce * mask).sum() / mask.sum()).backward()

    assert parts.metrics["ratio_mean"] == pytest.approx(1.0)
    assert parts.metrics["clip_fraction"] == 0.0 and parts.metrics["capped_fraction"] == 0.0
    assert torch.allclose(current.grad, reinforce.grad, atol=1e-7)


def test_a_stale_rows_importance_weight_is_capped():
    current, mask, adv = _batch()
    behaviour = current.detach() - 5.0  # the behaviour policy found these tokens e^5 times less likely
    cap = 2.0
    parts = grpo_loss(current, current.detach(), behaviour, adv, mask, ObjectiveConfig(importance_cap=cap))
    parts.loss.backward()

    assert parts.metrics["capped_fraction"] == 1.0
    assert parts.metrics["importance_weight_mean"] == pytest.approx(cap)
    expected = -(cap * adv.view(-1, 1) * mask) / mask.sum()
    assert torch.allclose(current.grad, expected, atol=1e-6)


def test_a_weight_below_the_cap_scales_the_gradient_exactly():
    current, mask, adv = _batch()
    behaviour = current.detach() + math.log(2.0)  # behaviour twice as likely: weight 0.5
    parts = grpo_loss(current, current.detach(), behaviour, adv, mask, ObjectiveConfig(importance_cap=2.0))
    parts.loss.backward()

    assert parts.metrics["importance_weight_mean"] == pytest.approx(0.5)
    assert torch.allclose(current.grad, -(0.5 * adv.view(-1, 1) * mask) / mask.sum(), atol=1e-6)


@pytest.mark.parametrize("loss_type", ["grpo", "dapo", "dr_grpo", "bnpo"])
def test_padding_tokens_change_nothing(loss_type):
    current, mask, adv = _batch()
    config = ObjectiveConfig(loss_type=loss_type, max_completion_length=8)
    base = grpo_loss(current, current.detach() + 0.1, current.detach() - 0.2, adv, mask, config)

    padded = torch.cat([current.detach(), torch.randn(3, 4) * 50], dim=1).requires_grad_(True)
    pmask = torch.cat([mask, torch.zeros(3, 4)], dim=1)
    prox = torch.cat([current.detach() + 0.1, torch.randn(3, 4) * 50], dim=1)
    beh = torch.cat([current.detach() - 0.2, torch.randn(3, 4) * 50], dim=1)
    more = grpo_loss(padded, prox, beh, adv, pmask, config)

    assert float(more.loss.detach()) == pytest.approx(float(base.loss.detach()), abs=1e-6)
    more.loss.backward()
    assert torch.all(padded.grad[:, 5:] == 0)


def test_the_clip_stops_the_gradient_past_one_plus_epsilon_for_positive_advantages():
    current = torch.tensor([[-1.0, -1.0]], requires_grad=True)
    proximal = torch.tensor([[-1.5, -1.0]])  # token 0: ratio e^0.5 > 1.2, clipped; token 1: ratio 1
    parts = grpo_loss(current, proximal, proximal, torch.tensor([1.0]), torch.ones(1, 2), ObjectiveConfig(epsilon=0.2))
    parts.loss.backward()

    assert parts.metrics["clip_fraction"] == pytest.approx(0.5)
    assert current.grad[0, 0] == 0.0 and current.grad[0, 1] < 0


def test_kl_is_zero_by_default_and_penalises_drift_when_enabled():
    current, mask, adv = _batch()
    reference = current.detach() - 0.3
    off = grpo_loss(current, current.detach(), current.detach(), adv, mask, ObjectiveConfig(), reference)
    on = grpo_loss(current, current.detach(), current.detach(), adv, mask, ObjectiveConfig(beta=0.1), reference)

    assert "kl_reference" not in off.metrics
    assert on.metrics["kl_reference"] > 0 and float(on.loss) > float(off.loss)


def test_a_group_with_no_reward_variance_gets_zero_advantages():
    advantages = group_advantages([[1.0, 1.0, 1.0], [0.0, 0.5, 1.0]])

    assert advantages[0] == [0.0, 0.0, 0.0]
    assert advantages[1][0] < 0 < advantages[1][2] and sum(advantages[1]) == pytest.approx(0.0, abs=1e-6)


def test_dr_grpo_scaling_leaves_advantages_unscaled():
    assert group_advantages([[0.0, 1.0]], scale="none") == [[-0.5, 0.5]]
    scaled = group_advantages([[0.0, 1.0]], scale="group")[0]
    assert scaled[1] == pytest.approx(1.0, rel=1e-3)
