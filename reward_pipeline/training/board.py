"""Training telemetry as TensorBoard event files, where ML people look for it.

The same numbers the store keeps (`training_steps`, `training_cycles`) and `conductor train report`
plots, written as TRL's `report_to="tensorboard"` writes its own: one scalar per metric per optimizer
step under `train/`, and per cycle (data health, the steps' averages, the gate's decision) under
`cycle/`. Nested records are flattened with `/` (`train/reward_by_source/judge`,
`cycle/health/staleness/2`), booleans become 0/1, and anything that is not a number is left out.

`torch.utils.tensorboard` needs the `tensorboard` package; the writer is made on first use, so a
process that never trains never imports it.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

__all__ = ["TrainingBoard", "scalars"]


def scalars(record: Mapping[Any, Any], prefix: str) -> Iterator[tuple[str, float]]:
    """(tag, value) for every finite number in `record`, nested mappings flattened under `prefix`."""
    for key, value in record.items():
        tag = f"{prefix}/{key}"
        if isinstance(value, Mapping):
            yield from scalars(value, tag)
        elif isinstance(value, bool):
            yield tag, float(value)
        elif isinstance(value, int | float) and math.isfinite(value):
            yield tag, float(value)


class TrainingBoard:
    """Event files under `log_dir` (open it with `tensorboard --logdir <log_dir>`)."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self._writer: Any = None

    def _write(self, record: Mapping[Any, Any], prefix: str, step: int) -> None:
        if self._writer is None:
            from torch.utils.tensorboard import SummaryWriter

            self._writer = SummaryWriter(log_dir=str(self.log_dir))
        for tag, value in scalars(record, prefix):
            self._writer.add_scalar(tag, value, global_step=step)
        # Flushed per record: a cycle is minutes apart and a crash must not lose what was trained.
        self._writer.flush()

    def step(self, record: Mapping[str, Any]) -> None:
        """One optimizer step's record (`OfflineGRPOTrainer` passes it to its `log`): loss, reward
        mean and by source, importance weights and ESS, clip fraction, staleness, grad norm."""
        self._write({k: v for k, v in record.items() if k != "step"}, "train", int(record["step"]))

    def cycle(self, index: int, **sections: Mapping[str, Any] | None) -> None:
        """One cycle's numbers, each section under `cycle/<name>/` (health, train, gate, ...)."""
        self._write({name: s for name, s in sections.items() if s is not None}, "cycle", index)

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
