"""The GRPO objective with importance correction for stored (possibly stale) traces.

Decoupled, as verl / AReaL / prime-rl write it for off-policy rollouts:

    w_t     = min(exp(logp_prox_t - logp_behaviour_t), cap)        (detached; behaviour = stored)
    r_t     = exp(logp_theta_t - logp_prox_t)
    loss_t  = -w_t * min(r_t * A, clip(r_t, 1 - eps_low, 1 + eps_high) * A)   (+ beta * KL_t)

The proximal policy is the trainer's own policy at the start of the update (computed once, no
grad), so the clip bounds the step while the capped weight corrects for the gap between the
policy that sampled a trace and the one being trained. When the behaviour policy *is* the current
one, w = r = 1 and the gradient is exactly REINFORCE with group-normalised advantages.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

LossType = Literal["grpo", "dapo", "dr_grpo", "bnpo"]
ScaleRewards = Literal["group", "batch", "none"]


@dataclass(frozen=True)
class ObjectiveConfig:
    epsilon: float = 0.2
    epsilon_high: float | None = None
    importance_cap: float = 2.0
    beta: float = 0.0
    loss_type: LossType = "dapo"
    #: dr_grpo divides by a constant: the longest completion the run allows.
    max_completion_length: int = 512


def group_advantages(rewards: Sequence[Sequence[float]], *, scale: ScaleRewards = "group") -> list[list[float]]:
    """Reward minus its group's mean, divided by the group's std (`group`), the batch's (`batch`),
    or not at all (`none`, Dr. GRPO). A group with no variance gets zero advantages."""
    import statistics

    flat = [r for g in rewards for r in g]
    batch_std = statistics.pstdev(flat) if len(flat) > 1 else 0.0
    out = []
    for group in rewards:
        mean = sum(group) / len(group)
        std = statistics.pstdev(group) if len(group) > 1 else 0.0
        denom = {"group": std, "batch": batch_std, "none": 1.0}[scale]
        out.append([0.0 if std == 0.0 else (r - mean) / (denom + 1e-4 if scale != "none" else 1.0) for r in group])
    return out


@dataclass
class LossParts:
    loss: Any
    metrics: dict[str, float]
    #: Detached per-token tensors for the training-health statistics (`health.StepHealth`):
    #: `weight_raw` (the uncapped importance weight), `clipped`, `log_ratio_behaviour`
    #: (logp_behaviour - logp_current) and `mask`, all (rows, tokens).
    tokens: dict[str, Any] = field(default_factory=dict)


def grpo_loss(
    current: Any,
    proximal: Any,
    behaviour: Any,
    advantages: Any,
    mask: Any,
    config: ObjectiveConfig,
    reference: Any | None = None,
) -> LossParts:
    """The loss over one batch. Tensors are (rows, tokens) except `advantages` (rows,); `mask` is 1
    on completion tokens and 0 on prompt and padding, so padding never changes the result."""
    import torch

    mask = mask.float()
    on = mask > 0
    # Log-ratios are zeroed off the completion before exp: padding holds arbitrary values, and an
    # overflow there would turn the masked sum into NaN.
    weight_raw = torch.exp(torch.where(on, proximal - behaviour, 0.0)).detach()
    weight = torch.clamp(weight_raw, max=config.importance_cap)
    ratio = torch.exp(torch.where(on, current - proximal.detach(), 0.0))
    eps_high = config.epsilon_high if config.epsilon_high is not None else config.epsilon
    adv = advantages.view(-1, 1)
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1 - config.epsilon, 1 + eps_high) * adv
    per_token = -weight * torch.min(unclipped, clipped)
    kl = None
    if config.beta > 0 and reference is not None:
        # k3 estimator of KL(current || reference): unbiased and always >= 0.
        delta = torch.where(on, reference.detach() - current, 0.0)
        kl = torch.exp(delta) - delta - 1
        per_token = per_token + config.beta * kl
    loss = _aggregate(per_token, mask, config)
    with torch.no_grad():
        n = mask.sum().clamp(min=1)
        was_clipped = ((ratio < 1 - config.epsilon) & (adv < 0)) | ((ratio > 1 + eps_high) & (adv > 0))
        metrics = {
            "loss": float(loss.detach()),
            "ratio_mean": float((ratio * mask).sum() / n),
            "clip_fraction": float((was_clipped.float() * mask).sum() / n),
            "capped_fraction": float(((weight_raw > config.importance_cap).float() * mask).sum() / n),
            "importance_weight_mean": float((weight * mask).sum() / n),
            # k1 estimate of KL(behaviour || current) on the behaviour policy's own samples.
            "kl_behaviour_current": float(torch.where(on, behaviour - current.detach(), 0.0).sum() / n),
            "tokens": float(mask.sum()),
        }
        if kl is not None:
            metrics["kl_reference"] = float((kl.detach() * mask).sum() / n)
        tokens = {
            "weight_raw": weight_raw,
            "clipped": was_clipped,
            "log_ratio_behaviour": torch.where(on, behaviour - current.detach(), 0.0),
            "mask": mask.detach(),
        }
    return LossParts(loss, metrics, tokens)


def _aggregate(per_token: Any, mask: Any, config: ObjectiveConfig) -> Any:
    if config.loss_type == "grpo":  # mean per sequence, then over sequences (the original GRPO)
        return ((per_token * mask).sum(-1) / mask.sum(-1).clamp(min=1)).mean()
    if config.loss_type == "dr_grpo":  # a constant normaliser: no length bias
        return (per_token * mask).sum() / (per_token.shape[0] * config.max_completion_length)
    # dapo / bnpo: token-mean over the whole batch
    return (per_token * mask).sum() / mask.sum().clamp(min=1)
