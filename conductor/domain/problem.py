"""A problem as the system receives it, whatever file or API it came from."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from conductor.domain.text import unstorable

ProblemKind = Literal["math", "mc", "code", "text"]


class Problem(BaseModel):
    """One question plus whatever is known to check an answer to it.

    `answer` is the reference (LaTeX, number, or choice letter); `tests` is code that must
    pass (an assert block, or a HumanEval `check` function used with `entry_point`);
    `rubric` lets an LLM judge score free text.
    """

    model_config = ConfigDict(extra="forbid")

    id: str | None = None
    question: str = Field(min_length=1)
    answer: str | None = None
    kind: ProblemKind | None = None
    choices: list[str] | None = None
    tests: str | None = None
    entry_point: str | None = None
    rubric: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)

    @field_validator("question")
    @classmethod
    def _not_blank(cls, v: str) -> str:
        # Whitespace alone would still become a job: a Conductor planning for a question that is not there.
        if not v.strip():
            raise ValueError("is blank")
        return v

    @field_validator("*")
    @classmethod
    def _storable(cls, v: Any) -> Any:
        # Every field is stored (the job's problem column): a NUL would make the job unwritable.
        if found := unstorable(v):
            where, what = found
            raise ValueError(what if where in ("value", "object") else f"{where} {what}")
        return v

    @property
    def has_reference(self) -> bool:
        return bool(self.answer or self.tests or self.rubric)
