"""Export a checkpoint for shipping: LoRA weights (fp16, small), adapter config, and a record of
everything that made it (its lineage with each ancestor's config, data window, metrics and gate)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from conductor.domain.errors import TrainingError
from reward_pipeline.training.checkpoints import CheckpointView, Registry

WEIGHTS = "adapter_model.safetensors"
CONFIG = "adapter_config.json"


def record_entry(adapter: Path, checkpoint_id: str | None = None) -> dict[str, Any]:
    """From the `record.json` an export left beside `adapter`: the lineage entry of `checkpoint_id` (default:
    the exported checkpoint itself); {} where there is no record or no such entry."""
    path = adapter / "record.json"
    if not path.exists():
        return {}
    record = json.loads(path.read_text())
    wanted = checkpoint_id or record.get("checkpoint")
    return next((c for c in record.get("lineage", []) if c.get("id") == wanted), {})


def record_row(view: CheckpointView) -> dict[str, Any]:
    """A checkpoint's row as a record holds it: every field, times as text, no path (it is local to a store)."""
    row: dict[str, Any] = json.loads(json.dumps(dataclasses.asdict(view) | {"path": None}, default=str))
    return row


def lineage(registry: Registry, checkpoint_id: str) -> list[CheckpointView]:
    chain, seen = [], set()
    current: str | None = checkpoint_id
    while current and current not in seen:
        seen.add(current)
        view = registry.get(current)
        chain.append(view)
        current = view.parent_id
    return chain


def export_adapter(registry: Registry, checkpoint_id: str, to: Path) -> Path:
    import torch
    from safetensors.torch import load_file, save_file

    views = lineage(registry, checkpoint_id)
    src = Path(views[0].path or "")
    if not (src / WEIGHTS).exists():
        raise TrainingError(f"checkpoint {checkpoint_id} has no {WEIGHTS} at {src}")
    to.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.to(torch.float16).contiguous() for k, v in load_file(str(src / WEIGHTS)).items()}
    save_file(tensors, str(to / WEIGHTS))
    config = json.loads((src / CONFIG).read_text())
    config["base_model_name_or_path"] = "smollm2-135m-instruct"  # resolved against the model cache, not a path
    (to / CONFIG).write_text(json.dumps(config, indent=1))
    record = {
        "checkpoint": checkpoint_id,
        "lineage": [record_row(v) for v in views],
    }
    (to / "record.json").write_text(json.dumps(record, indent=1))  # record_row made every row JSON
    return to
