"""`conductor run` and `conductor solve` say right or wrong when a problem has a reference: the
reference beside the answer, a mark per problem, one score line at the end; lines without a
reference get no mark and do not count."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.support.pools import scripted_pool
from tests.support.scripted_llm import Reply, ScriptedLLMServer
from tests.support.workflows import conductor_reply

ROOT = Path(__file__).resolve().parents[3]


def _script(model: str, messages: list[dict], body: dict) -> Reply:
    if model.endswith("scripted-conductor"):
        return conductor_reply(messages)
    return Reply("Adding them up, the final answer is 42.")


@pytest.fixture
def env(tmp_path: Path):
    server = ScriptedLLMServer(_script).start()
    pool = scripted_pool(server.base_url).model_dump(mode="json", exclude_none=True)
    (tmp_path / "pool.yaml").write_text(yaml.safe_dump(pool))
    base = {k: v for k, v in os.environ.items() if not k.startswith("CONDUCTOR_")}
    yield base | {
        "CONDUCTOR_HOME": str(tmp_path),
        "CONDUCTOR_POOL_FILE": str(tmp_path / "pool.yaml"),
        "CONDUCTOR_RECURSION": "false",
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    }
    server.stop()


def _conductor(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "conductor.cli.main", *args],
        cwd=ROOT, env=env, check=False, capture_output=True, text=True, timeout=180,
    )  # fmt: skip


def test_run_marks_each_problem_with_a_reference_and_prints_the_score(env, tmp_path):
    problems = tmp_path / "problems.jsonl"
    problems.write_text(
        '{"id": "right", "question": "What is 40 + 2?", "answer": "42", "kind": "math"}\n'
        '{"id": "wrong", "question": "What is 3 + 4?", "answer": "7", "kind": "math"}\n'
        '{"id": "open", "question": "Write a haiku."}\n'
    )

    out = _conductor(["run", str(problems), "--show-workflows", "--out", str(tmp_path / "r.jsonl")], env)

    assert out.returncode == 0, out.stderr
    assert "-> RIGHT (reference: 42)" in out.stderr and "-> WRONG (reference: 7)" in out.stderr
    assert out.stderr.strip().splitlines()[-2] == "score: 1/2 right (50%)", out.stderr
    lines = {r["id"]: r for r in map(json.loads, (tmp_path / "r.jsonl").read_text().splitlines())}
    assert (lines["right"]["reference"], lines["right"]["correct"]) == ("42", True)
    assert (lines["wrong"]["reference"], lines["wrong"]["correct"]) == ("7", False)
    assert "correct" not in lines["open"] and "reference" not in lines["open"]


def test_solve_with_a_reference_says_whether_the_answer_is_right(env):
    out = _conductor(["solve", "What is 3 + 4?", "--answer", "7"], env)

    assert out.returncode == 0, out.stderr
    assert "reference: 7 -> WRONG" in out.stdout
