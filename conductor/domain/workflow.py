"""The workflow the Conductor writes: three equal-length lists, as a validated value object."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

Access = Literal["all"] | tuple[int, ...]

#: The order a plan's three lists are written in. "workers-first" is the paper's; "subtasks-first" writes
#: what each step is asked before who answers it, so a policy's first decision is the question itself
#: (one string for every model route) against code, instead of one id among several models and tools.
PlanOrder = Literal["workers-first", "subtasks-first"]
PLAN_ORDERS: dict[str, tuple[str, str, str]] = {
    "workers-first": ("model_id", "subtasks", "access_list"),
    "subtasks-first": ("subtasks", "model_id", "access_list"),
}


@dataclass(frozen=True)
class Step:
    index: int
    worker: int  #: index into the worker pool as shown to the Conductor ("Model N")
    subtask: str
    access: Access  #: "all" or the indices of earlier steps whose results this step sees

    def dependencies(self) -> tuple[int, ...]:
        if self.access == "all":
            return tuple(range(self.index))
        return tuple(sorted(set(self.access)))


@dataclass(frozen=True)
class Workflow:
    steps: tuple[Step, ...]

    @classmethod
    def from_lists(
        cls, model_id: Sequence[int], subtasks: Sequence[str], access_list: Sequence[Access | Sequence[int]]
    ) -> Workflow:
        steps = []
        for i, (m, s, a) in enumerate(zip(model_id, subtasks, access_list, strict=True)):
            access: Access = "all" if a == "all" else tuple(int(x) for x in a)
            steps.append(Step(index=i, worker=int(m), subtask=str(s), access=access))
        return cls(tuple(steps))

    @property
    def is_empty(self) -> bool:
        """Three empty lists: on a replan this means "keep the previous answer"."""
        return not self.steps

    def successors(self, index: int) -> tuple[int, ...]:
        return tuple(s.index for s in self.steps if index in s.dependencies())

    def roots(self) -> tuple[int, ...]:
        return tuple(s.index for s in self.steps if not s.dependencies())

    def to_lists(self) -> dict[str, list[Any]]:
        return {
            "model_id": [s.worker for s in self.steps],
            "subtasks": [s.subtask for s in self.steps],
            "access_list": [s.access if s.access == "all" else list(s.access) for s in self.steps],
        }

    def to_python(self, order: PlanOrder = "workers-first") -> str:
        """The fenced block as the Conductor writes it (used in few-shots, replan prompts and warm-up targets)."""
        lists = self.to_lists()
        body = "".join(f"{name} = {lists[name]!r}\n" for name in PLAN_ORDERS[order])
        return f"```python\n{body}```"
