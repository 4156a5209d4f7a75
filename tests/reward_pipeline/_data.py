"""Benchmark rows as `Problem`s for the verifier tests (skips the test when the data is absent)."""

from __future__ import annotations

import gzip
import json
import os
from functools import cache
from pathlib import Path

import pytest

from conductor.domain.problem import Problem

DATA = Path(os.environ.get("CONDUCTOR_DATA_DIR", Path(__file__).resolve().parents[3] / "shared" / "data"))


def _path(name: str) -> Path:
    p = DATA / name
    if not p.exists():
        pytest.skip(f"benchmark data {p} not available")
    return p


def _jsonl(name: str) -> list[dict]:
    p = _path(name)
    opener = gzip.open if name.endswith(".gz") else open
    with opener(p, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


@cache
def math500() -> list[dict]:
    return _jsonl("math500_test.jsonl")


@cache
def gsm8k() -> list[dict]:
    return _jsonl("gsm8k_test.jsonl")


@cache
def humaneval() -> list[dict]:
    return _jsonl("HumanEval.jsonl.gz")


@cache
def mbpp_test() -> list[dict]:
    rows = json.loads(_path("mbpp_sanitized.json").read_text(encoding="utf-8"))
    return [r for r in rows if 11 <= r["task_id"] <= 510]


@cache
def mmlu() -> list[dict]:
    return [r for r in _jsonl("mmlu_test.jsonl.gz") if r["correct_answer"] in "ABCD" and len(r["correct_answer"]) == 1]


def humaneval_problem(row: dict) -> Problem:
    return Problem(
        id=row["task_id"], question=row["prompt"], kind="code", tests=row["test"], entry_point=row["entry_point"]
    )


def mbpp_problem(row: dict) -> Problem:
    return Problem(
        id=f"mbpp/{row['task_id']}",
        question=row["prompt"],
        kind="code",
        tests="\n".join([*row["test_imports"], *row["test_list"]]),
        metadata={"source": "mbpp"},
    )


def mmlu_problem(row: dict) -> Problem:
    return Problem(
        question=row["question"],
        kind="mc",
        choices=[row[f"answer_{c}"] for c in "abcd"],
        answer=row["correct_answer"],
        metadata={"source": "mmlu", "topic": row["topic"]},
    )
