"""`conductor run FILE` on PostgreSQL: a line whose text the store cannot hold (NUL, a lone
surrogate) or whose question is past its length is reported by its number, and every other line
runs to its end."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import default_script
from tests.support.cluster import write_pool
from tests.support.pools import scripted_pool
from tests.support.scripted_llm import ScriptedLLMServer

ROOT = Path(__file__).resolve().parents[3]

pytestmark = pytest.mark.services


def test_bad_lines_are_reported_by_number_and_the_rest_run(tmp_path: Path, pg_url: str):
    server = ScriptedLLMServer(default_script()).start()
    problems = tmp_path / "problems.jsonl"
    problems.write_text(
        json.dumps({"id": "ok1", "question": "[wf:single] first"})
        + "\n"
        + json.dumps({"id": "nul", "question": "a NUL \x00 here"})
        + "\n"
        + json.dumps({"id": "sur", "question": "fine", "metadata": {"note": "\ud800"}})
        + "\n"
        + json.dumps({"id": "long", "question": "x" * 301})
        + "\n"
        + json.dumps({"id": "ok2", "question": "[wf:single] last"})
        + "\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONDUCTOR_")} | {
        "CONDUCTOR_HOME": str(tmp_path),
        "CONDUCTOR_DATABASE_URL": pg_url,
        "CONDUCTOR_POOL_FILE": str(write_pool(scripted_pool(server.base_url), tmp_path / "pool.yaml")),
        "CONDUCTOR_RECURSION": "false",
        "CONDUCTOR_MAX_QUESTION_CHARS": "300",
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    }
    try:
        out = subprocess.run(
            [sys.executable, "-m", "conductor.cli.main", "run", str(problems), "--out", str(tmp_path / "r.jsonl")],
            cwd=ROOT, env=env, check=False, capture_output=True, text=True, timeout=180,
        )  # fmt: skip
    finally:
        server.stop()

    assert out.returncode == 0, out.stderr
    rejected = [line for line in out.stderr.splitlines() if "rejected" in line and line.startswith("line ")]
    assert len(rejected) == 3, out.stderr
    assert rejected[0].startswith("line 2: rejected:") and "NUL" in rejected[0]
    assert rejected[1].startswith("line 3: rejected:") and "lone surrogate" in rejected[1]
    assert rejected[2].startswith("line 4: rejected:") and "CONDUCTOR_MAX_QUESTION_CHARS" in rejected[2]
    results = [json.loads(x) for x in (tmp_path / "r.jsonl").read_text().splitlines()]
    assert [(r["id"], r["status"]) for r in results] == [("ok1", "done"), ("ok2", "done")]
