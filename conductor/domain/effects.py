"""What the engine hands back: follow-up work to send after commit, and what a plan or step task needs."""

from __future__ import annotations

from dataclasses import dataclass, field

from conductor.domain.answer_format import AnswerFormat
from conductor.domain.states import RoundKind
from conductor.domain.workflow import Workflow


@dataclass
class Effects:
    """Follow-up work to send once the transaction that produced it has committed.

    The one way work is queued: pipeline tasks, scoring (and later webhooks) all come back
    as Effects and one dispatcher (`tasks.dispatch.Dispatcher`) sends them.
    """

    solve: list[str] = field(default_factory=list)
    plans: list[int] = field(default_factory=list)
    replans: list[int] = field(default_factory=list)
    steps: list[int] = field(default_factory=list)
    finalize: list[str] = field(default_factory=list)
    score: list[str] = field(default_factory=list)  #: finished jobs whose problem has a reference

    def merge(self, other: Effects) -> Effects:
        self.solve += other.solve
        self.plans += other.plans
        self.replans += other.replans
        self.steps += other.steps
        self.finalize += other.finalize
        self.score += other.score
        return self

    def __bool__(self) -> bool:
        return bool(self.solve or self.plans or self.replans or self.steps or self.finalize or self.score)


@dataclass(frozen=True)
class RoundTask:
    """What a plan/replan task needs to call the Conductor."""

    round_id: int
    job_id: str
    kind: RoundKind
    max_steps: int
    question: str
    previous: Workflow | None
    previous_answer: str | None
    #: A job may pin the Conductor policy (version, adapter path): the evaluation gate runs a
    #: candidate beside the active policy through the same queue this way.
    policy: tuple[str, str] | None = None


@dataclass(frozen=True)
class StepTask:
    """What a run_step task needs to call a worker."""

    step_id: int
    job_id: str
    worker_index: int
    worker_name: str
    subtask: str
    context: list[tuple[str, str]]
    depth: int
    #: Set on the step that writes a job's final answer (the last step of a top-level round) when the
    #: client asked for a format (`response_format`, `tools`): the step is decoded and checked under it.
    answer_format: AnswerFormat | None = None
    #: The round's question, which a model is shown when it writes a formatted answer from a tool's result.
    question: str = ""

    @property
    def nested_question(self) -> str:
        parts = [f"Earlier work:\n{s}\n---\n{o}" for s, o in self.context]
        return "\n\n".join([*parts, self.subtask])
