"""The problems of an evaluation: a built-in benchmark from the shared data directory, or any problem file."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from conductor.domain.errors import InputError
from conductor.domain.inputs import read_problems
from conductor.domain.problem import Problem

#: name -> (file in the data directory, reader format, only the MBPP test split)
BENCHMARKS: dict[str, tuple[str, str, bool]] = {
    "gsm8k": ("gsm8k_test.jsonl", "gsm8k", False),
    "math500": ("math500_test.jsonl", "math500", False),
    "aime24": ("aime24.jsonl", "aime24", False),
    "mmlu": ("mmlu_test.jsonl.gz", "mmlu", False),
    "humaneval": ("HumanEval.jsonl.gz", "humaneval", False),
    "mbpp": ("mbpp_sanitized.json", "mbpp", True),
}


def data_dir() -> Path:
    env = os.environ.get("CONDUCTOR_DATA_DIR")
    return Path(env) if env else Path(__file__).resolve().parents[3] / "shared" / "data"


@dataclass
class Benchmark:
    label: str
    path: Path
    problems: list[Problem]
    rejected: list[str] = field(default_factory=list)


def load_benchmark(spec: str, *, limit: int | None = None, data: Path | None = None) -> Benchmark:
    """A built-in benchmark by name, or any problem file by path; the first `limit` problems."""
    name = spec.strip()
    if name.lower() in BENCHMARKS:
        file, fmt, test_split = BENCHMARKS[name.lower()]
        path, label = (data or data_dir()) / file, name.lower()
        if not path.exists():
            raise InputError(f"benchmark {label}: {path} not found (set CONDUCTOR_DATA_DIR or pass a file path)")
    else:
        path, fmt, test_split = Path(name), None, False
        if not path.exists():
            raise InputError(f"{name!r} is neither a benchmark ({', '.join(BENCHMARKS)}) nor an existing file")
        label = path.name.split(".")[0]
    problems: list[Problem] = []
    rejected: list[str] = []
    seen: set[str] = set()
    for number, item in read_problems(path, format=fmt, mbpp_test_split=test_split):
        if limit is not None and len(problems) >= limit:
            break
        if isinstance(item, InputError):
            rejected.append(str(item))
            continue
        if item.id in seen:
            rejected.append(f"record {number}: duplicate id {item.id!r}, skipped")
            continue
        seen.add(str(item.id))
        problems.append(item)
    return Benchmark(label, path, problems, rejected)
