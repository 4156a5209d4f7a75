"""A soup of LoRA adapters: one adapter whose weight change is the weighted mean of theirs.

Adapters trained by one recipe at different seeds agree on what the reward taught every run (arithmetic
and strings to a tool, choices to a model) and disagree on what each run picked up by chance (which
knowledge questions look like a program): three warm-ups of near-identical recipes sent 7, 17 and 8 of 20
held-out facts to a tool, each a different set. Averaging the weight changes keeps the shared part and
shrinks the seed-specific part (Wortsman et al. 2022, "Model soups"). Measured (README, "A second seed and
the soup"): the facts turned out to be a bias every run shares, which a soup does not remove.

Independently trained LoRAs cannot be averaged factor by factor (A and B of two runs live in different
bases), so the soup concatenates them: A = [A_1; ...; A_k], B = [w_1 s_1 B_1, ..., w_k s_k B_k], whose
product is exactly sum_i w_i s_i B_i A_i, with rank the sum of the ranks and scaling 1 (lora_alpha = r).
Pure tensor work: no model is loaded.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from conductor.domain.errors import TrainingError
from reward_pipeline.training.export import CONFIG, WEIGHTS

# Fields two adapters must agree on for their weight changes to add up on the same modules.
_SAME = ("layers_to_transform", "bias", "fan_in_fan_out", "task_type")


@dataclass(frozen=True)
class SoupResult:
    path: Path
    rank: int
    weights: tuple[float, ...]
    sources: tuple[str, ...]


def _config(adapter: Path) -> dict[str, Any]:
    path = adapter / CONFIG
    if not path.exists():
        raise TrainingError(f"no {CONFIG} in {adapter}: not a LoRA adapter folder")
    config: dict[str, Any] = json.loads(path.read_text())
    if config.get("use_rslora") or config.get("rank_pattern") or config.get("alpha_pattern"):
        raise TrainingError(f"{adapter}: a soup needs one rank and one alpha per adapter (no rslora or patterns)")
    if config.get("use_dora"):
        raise TrainingError(f"{adapter}: DoRA magnitudes do not add up; only plain LoRA adapters can be souped")
    return config


def soup_adapters(adapters: list[Path], out: Path, weights: list[float] | None = None) -> SoupResult:
    """Write to ``out`` the adapter whose weight change is ``sum_i weights[i] * delta_i`` (default: the mean)."""
    import torch
    from safetensors.torch import load_file, save_file

    if len(adapters) < 2:
        raise TrainingError("a soup needs two adapters or more")
    w = [1.0 / len(adapters)] * len(adapters) if weights is None else list(weights)
    if len(w) != len(adapters):
        raise TrainingError(f"{len(w)} weights for {len(adapters)} adapters")
    configs = [_config(a) for a in adapters]
    first = configs[0]
    for a, c in zip(adapters[1:], configs[1:], strict=True):
        diff = [k for k in _SAME if c.get(k) != first.get(k)]
        # An export names the base model by its folder (resolved against the model cache), a store by its path.
        if Path(str(c.get("base_model_name_or_path"))).name != Path(str(first.get("base_model_name_or_path"))).name:
            diff.append("base_model_name_or_path")
        if set(c.get("target_modules") or []) != set(first.get("target_modules") or []):
            diff.append("target_modules")
        if diff:
            raise TrainingError(f"{a} differs from {adapters[0]} in {', '.join(diff)}: its changes apply elsewhere")
    tensors = [load_file(str(a / WEIGHTS)) for a in adapters]
    keys = set(tensors[0])
    for a, t in zip(adapters[1:], tensors[1:], strict=True):
        if set(t) != keys:
            raise TrainingError(f"{a} holds other LoRA modules than {adapters[0]}")
    dtype = next(iter(tensors[0].values())).dtype
    scalings = [float(c["lora_alpha"]) / float(c["r"]) for c in configs]
    merged: dict[str, Any] = {}
    for key in sorted(keys):
        if ".lora_A." in key:
            merged[key] = torch.cat([t[key].float() for t in tensors], dim=0).to(dtype).contiguous()
        elif ".lora_B." in key:
            parts = [wi * si * t[key].float() for wi, si, t in zip(w, scalings, tensors, strict=True)]
            merged[key] = torch.cat(parts, dim=1).to(dtype).contiguous()
        else:
            raise TrainingError(f"{adapters[0]} holds {key}, which is not a LoRA factor: no soup for it")
    rank = sum(int(c["r"]) for c in configs)
    out.mkdir(parents=True, exist_ok=True)
    save_file(merged, str(out / WEIGHTS))
    config = dict(first) | {"r": rank, "lora_alpha": rank, "target_modules": sorted(first["target_modules"])}
    (out / CONFIG).write_text(json.dumps(config, indent=1))
    return SoupResult(path=out, rank=rank, weights=tuple(w), sources=tuple(str(a) for a in adapters))
