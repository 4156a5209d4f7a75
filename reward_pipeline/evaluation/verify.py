"""`conductor verify`: score answers produced elsewhere with the same verifiers."""

from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from conductor.domain.errors import VerifierError
from conductor.domain.problem import Problem
from reward_pipeline.evaluation.problems import load_benchmark
from reward_pipeline.verifiers import Verifier, verifier_for


@dataclass
class VerifyReport:
    total: int  #: problems in the file
    answered: int
    scored: int  #: problems a verifier could check
    correct: int
    lines: list[dict[str, Any]]
    unknown_ids: list[str]
    bad_lines: list[str]

    @property
    def accuracy(self) -> float | None:
        return self.correct / self.scored if self.scored else None


def _read_answers(path: Path) -> tuple[dict[str, str], list[str]]:
    answers: dict[str, str] = {}
    bad: list[str] = []
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            rec = json.loads(raw)
            key, answer = rec["id"], rec["answer"]
        except (ValueError, KeyError, TypeError) as exc:
            bad.append(f'line {number}: expected {{"id", "answer"}}: {exc}')
            continue
        answers.setdefault(str(key), "" if answer is None else str(answer))
    return answers, bad


def verify_answers(
    problems: str | Path,
    answers: Path,
    *,
    judge: Verifier | None = None,
    data: Path | None = None,
    threads: int | None = None,
) -> VerifyReport:
    """Score ``{"id", "answer"}`` lines against a problem file (or benchmark name) with the verifiers.

    A problem with no answer line counts as wrong; answers for unknown ids are listed.
    """
    bench = load_benchmark(str(problems), data=data)
    given, bad = _read_answers(Path(answers))
    known = {str(p.id) for p in bench.problems}

    def one(p: Problem) -> dict[str, Any]:
        pid = str(p.id)
        check = verifier_for(p, judge=judge)
        if check is None:
            return {"id": pid, "correct": None, "verifier": None, "reason": "no verifier for this problem"}
        if pid not in given:
            return {"id": pid, "correct": False, "verifier": check.name, "reason": "no answer given"}
        try:
            v = check.verify(given[pid], p)
        except VerifierError as exc:
            return {"id": pid, "correct": None, "verifier": check.name, "reason": f"verifier error: {exc}"}
        return {"id": pid, "correct": v.correct, "verifier": v.verifier, "reason": v.reason, "details": v.details}

    with ThreadPoolExecutor(max_workers=threads or min(8, os.cpu_count() or 2)) as pool:
        lines = list(pool.map(one, bench.problems))
    scored = [ln for ln in lines if ln["correct"] is not None]
    return VerifyReport(
        total=len(lines),
        answered=sum(1 for p in bench.problems if str(p.id) in given),
        scored=len(scored),
        correct=sum(1 for ln in scored if ln["correct"]),
        lines=lines,
        unknown_ids=sorted(set(given) - known),
        bad_lines=bad + bench.rejected,
    )
