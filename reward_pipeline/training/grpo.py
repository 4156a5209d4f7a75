"""Offline GRPO over stored traces: one trainer, fed by the dataset builder (offline) or by the
online loop (the traces of the iteration it just ran, staleness 0).

The configuration surface is TRL's `GRPOConfig` (learning rate, clip epsilons, beta, loss type,
reward scaling, batch sizes, the importance-sampling cap, seed), so the knobs mean what they mean
in TRL. The loop itself is ours because TRL 1.16 has no supported path that trains on stored
behaviour logprobs (its GRPOTrainer generates its own rollouts; see TRL issue #2680).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from conductor.domain.errors import TrainingError
from reward_pipeline.training.dataset import Row
from reward_pipeline.training.health import StepHealth
from reward_pipeline.training.logprobs import grammar_masks, pad_batch, scatter_behaviour, token_logprobs
from reward_pipeline.training.objective import ObjectiveConfig, ScaleRewards, group_advantages, grpo_loss

#: The `GRPOConfig` fields this trainer reads (pinned against TRL 1.16.0).
USED_TRL_FIELDS = (
    "learning_rate", "epsilon", "epsilon_high", "beta", "loss_type", "scale_rewards",
    "per_device_train_batch_size", "gradient_accumulation_steps", "num_iterations", "max_grad_norm",
    "weight_decay", "max_completion_length", "vllm_importance_sampling_cap", "seed",
)  # fmt: skip


def make_config(output_dir: Path, **overrides: Any) -> Any:
    """A TRL `GRPOConfig` with this project's defaults (the paper's where they apply)."""
    from trl import GRPOConfig

    defaults: dict[str, Any] = {
        "output_dir": str(output_dir),
        "use_cpu": True,
        "report_to": "none",
        # The paper: lr 1e-6 on a full 7B; a LoRA on 135M needs a larger step to move in a few iterations.
        "learning_rate": 2e-5,
        "epsilon": 0.2,
        "beta": 0.0,
        "loss_type": "dapo",  # token-mean over the batch
        "scale_rewards": "group",
        "per_device_train_batch_size": 4,
        "gradient_accumulation_steps": 2,
        "num_generations": 4,
        "num_iterations": 1,
        "max_grad_norm": 1.0,
        "weight_decay": 0.0,
        "max_completion_length": 256,
        "vllm_importance_sampling_cap": 2.0,
        "seed": 0,
    }
    defaults.update(overrides)
    return GRPOConfig(**defaults)


def objective_config(cfg: Any) -> ObjectiveConfig:
    loss_type = cfg.loss_type if cfg.loss_type in ("grpo", "dapo", "dr_grpo", "bnpo") else None
    if loss_type is None:
        raise TrainingError(f"loss_type {cfg.loss_type!r} is not supported offline (grpo, dapo, dr_grpo, bnpo)")
    return ObjectiveConfig(
        epsilon=cfg.epsilon,
        epsilon_high=cfg.epsilon_high,
        importance_cap=cfg.vllm_importance_sampling_cap or math.inf,
        beta=cfg.beta,
        loss_type=loss_type,
        max_completion_length=cfg.max_completion_length,
    )


@dataclass
class _Item:
    row: Row
    advantage: float


class OfflineGRPOTrainer:
    """Trains `model` (a PEFT LoRA model) on groups of stored rows."""

    def __init__(self, model: Any, tokenizer: Any, config: Any, log: Callable[[dict[str, Any]], None] = print) -> None:
        import torch

        self.model = model
        self.tokenizer = tokenizer
        self.config = config
        self.objective = objective_config(config)
        self.log = log
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        params = [p for p in model.parameters() if p.requires_grad]
        if not params:
            raise TrainingError("the model has no trainable parameters (load the adapter with is_trainable=True)")
        self.optimizer = torch.optim.AdamW(params, lr=config.learning_rate, weight_decay=config.weight_decay)
        self.params = params
        self.step = 0
        self._proximal: dict[int, list[float]] = {}

    def reset_to(self, adapter: Path | None) -> None:
        """Continue from another adapter's weights (after a rejected candidate), with a fresh optimizer."""
        import torch
        from peft import set_peft_model_state_dict
        from safetensors.torch import load_file

        if adapter is None:
            raise TrainingError("cannot reset a LoRA trainer to the bare base model")
        set_peft_model_state_dict(self.model, load_file(str(adapter / "adapter_model.safetensors")))
        self.optimizer = torch.optim.AdamW(
            self.params, lr=self.config.learning_rate, weight_decay=self.config.weight_decay
        )

    def train(self, groups: list[list[Row]]) -> dict[str, Any]:
        """One pass (times `num_iterations`) over the groups; returns summary metrics."""
        rewards = [[r.reward for r in g] for g in groups]
        scale: ScaleRewards = "none" if self.config.scale_rewards in ("none", False) else self.config.scale_rewards
        if scale not in ("group", "batch", "none"):
            scale = "group"
        advantages = group_advantages(rewards, scale=scale)
        items = [
            _Item(row, adv)
            for g, advs, rs in zip(groups, advantages, rewards, strict=True)
            if len(set(rs)) > 1  # a group with no reward variance carries no signal
            for row, adv in zip(g, advs, strict=True)
        ]
        summary: dict[str, Any] = {
            "groups": len(groups),
            "groups_dropped_zero_variance": sum(1 for rs in rewards if len(set(rs)) <= 1),
            "rows_trained": len(items),
            "reward_mean": (sum(sum(rs) for rs in rewards) / max(1, sum(len(rs) for rs in rewards))),
            "steps": [],
        }
        if not items:
            return summary
        self._proximal = self._proximal_logprobs(items) if self.config.num_iterations > 1 else {}
        rng = random.Random(self.config.seed + self.step)
        per_step = self.config.per_device_train_batch_size * self.config.gradient_accumulation_steps
        for _ in range(self.config.num_iterations):
            rng.shuffle(items)
            for start in range(0, len(items), per_step):
                summary["steps"].append(self._optimizer_step(items[start : start + per_step]))
        return summary

    def _optimizer_step(self, chunk: list[_Item]) -> dict[str, Any]:
        import torch

        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        mb = self.config.per_device_train_batch_size
        total_tokens = sum(len(it.row.completion_ids) for it in chunk)
        merged: dict[str, float] = {}
        health = StepHealth(self.objective.importance_cap)
        for start in range(0, len(chunk), mb):
            micro = chunk[start : start + mb]
            parts = self._micro_loss(micro)
            # Weight micro-batches by their share of tokens (token-mean) or rows (others).
            share = (
                sum(len(it.row.completion_ids) for it in micro) / total_tokens
                if self.objective.loss_type in ("dapo", "bnpo")
                else len(micro) / len(chunk)
            )
            (parts.loss * share).backward()
            health.add(parts.tokens)
            for k, v in parts.metrics.items():
                merged[k] = merged.get(k, 0.0) + v * (share if k != "tokens" else 1.0)
        grad_norm = torch.nn.utils.clip_grad_norm_(self.params, self.config.max_grad_norm)
        self.optimizer.step()
        self.step += 1
        record = {
            "step": self.step,
            **merged,
            "grad_norm": float(grad_norm),
            "reward_mean": sum(it.row.reward for it in chunk) / len(chunk),
            "rows": len(chunk),
            **health.summary([it.row for it in chunk]),
        }
        self.log(record)
        return record

    def _proximal_logprobs(self, items: list[_Item]) -> dict[int, list[float]]:
        """The policy before this update's first step, per row: the anchor the ratio is clipped around."""
        import torch

        out: dict[int, list[float]] = {}
        mb = self.config.per_device_train_batch_size
        self.model.eval()
        with torch.no_grad():
            for start in range(0, len(items), mb):
                rows = [it.row for it in items[start : start + mb]]
                ids, attn, _, plens = pad_batch(
                    [r.prompt_ids for r in rows], [r.completion_ids for r in rows], self.pad_id
                )
                allowed = self._allowed(rows, plens, ids.shape[1])
                lp = token_logprobs(self.model, ids, attn, torch.tensor([r.temperature for r in rows]), allowed)
                for i, r in enumerate(rows):
                    out[r.round_id] = lp[i, plens[i] : plens[i] + len(r.completion_ids)].tolist()
        return out

    def _allowed(self, rows: list[Row], prompt_lens: list[int], width: int) -> Any | None:
        """The grammar masks the rows were sampled under, replayed along their stored ids."""
        if not any(r.grammar for r in rows):
            return None
        from conductor.inference.grammar import masks_for

        masks = masks_for(self.tokenizer, int(self.model.config.vocab_size))
        return grammar_masks(masks, [r.grammar for r in rows], [r.completion_ids for r in rows], prompt_lens, width)

    def _micro_loss(self, micro: list[_Item]) -> Any:
        import torch

        rows = [it.row for it in micro]
        ids, attn, mask, prompt_lens = pad_batch(
            [r.prompt_ids for r in rows], [r.completion_ids for r in rows], self.pad_id
        )
        temps = torch.tensor([r.temperature for r in rows], dtype=torch.float32)
        allowed = self._allowed(rows, prompt_lens, ids.shape[1])
        current = token_logprobs(self.model, ids, attn, temps, allowed)
        behaviour = scatter_behaviour([r.logprobs for r in rows], prompt_lens, ids.shape[1])
        if self._proximal:
            proximal = scatter_behaviour([self._proximal[r.round_id] for r in rows], prompt_lens, ids.shape[1])
        else:
            # One update per row: the proximal policy is the current one (ratio 1, clip inactive), and
            # the capped weight exp(current - behaviour) carries the whole off-policy correction.
            proximal = current.detach()
        reference = None
        if self.objective.beta > 0:
            with torch.no_grad(), self.model.disable_adapter():
                reference = token_logprobs(self.model, ids, attn, temps, allowed)
        advantages = torch.tensor([it.advantage for it in micro], dtype=torch.float32)
        return grpo_loss(current, proximal, behaviour * mask, advantages, mask, self.objective, reference)
