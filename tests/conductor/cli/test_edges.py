"""Clear errors at the edges: an unreachable broker, database or model server is one line naming
the URL (no password) and what to check, a non-zero exit and no traceback unless `--debug`;
`conductor --help` answers quickly because no heavy library is imported before a command runs."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.support.api_deployment import free_port
from tests.support.pools import scripted_pool

ROOT = Path(__file__).resolve().parents[3]
CONDUCTOR = [sys.executable, "-m", "conductor.cli.main"]


def _run(args: list[str], tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("CONDUCTOR_")}
    base |= {"CONDUCTOR_HOME": str(tmp_path), "LITELLM_LOCAL_MODEL_COST_MAP": "True", **env}
    return subprocess.run(
        [*CONDUCTOR, *args], cwd=ROOT, env=base, check=False, capture_output=True, text=True, timeout=180
    )


def test_help_answers_fast_and_imports_nothing_heavy():
    probe = (
        "import sys, conductor.cli.main as m; "
        "heavy = [n for n in ('litellm', 'celery', 'sqlalchemy', 'torch', 'transformers', 'kombu', 'redis') "
        "if n in sys.modules]; print(heavy)"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, check=False, capture_output=True, text=True, timeout=60
    )
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
    best = min(_timed_help() for _ in range(3))
    assert best < 1.5, f"conductor --help took {best:.2f}s"


def _timed_help() -> float:
    started = time.perf_counter()
    out = subprocess.run([*CONDUCTOR, "--help"], cwd=ROOT, check=False, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "solve" in out.stdout
    return time.perf_counter() - started


@pytest.mark.services
def test_unreachable_broker_is_one_line_with_the_url_and_no_password(tmp_path):
    out = _run(
        ["solve", "What is 2 + 2?"],
        tmp_path,
        CONDUCTOR_BROKER_URL="redis://:s3cret@127.0.0.1:1/0",
        CONDUCTOR_DATABASE_URL=f"sqlite:///{tmp_path / 'db.sqlite'}",
    )
    assert out.returncode == 5, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith("error: cannot reach the broker at redis://:***@127.0.0.1:1/0")
    assert "CONDUCTOR_BROKER_URL" in lines[0] and "s3cret" not in out.stderr + out.stdout
    assert "Traceback" not in out.stderr


def test_unreachable_database_is_one_line_and_debug_shows_the_traceback(tmp_path):
    env = {"CONDUCTOR_DATABASE_URL": "postgresql+psycopg://root@127.0.0.1:1/test"}
    out = _run(["status"], tmp_path, **env)
    assert out.returncode == 5, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: cannot reach the database at postgresql+psycopg://"), lines
    assert "127.0.0.1:1/test" in lines[0] and "CONDUCTOR_DATABASE_URL" in lines[0]
    debug = _run(["--debug", "status"], tmp_path, **env)
    assert debug.returncode != 0 and "OperationalError" in debug.stderr and len(debug.stderr.splitlines()) > 5


def test_status_without_a_job_reports_embedded_mode(tmp_path):
    out = _run(["status"], tmp_path)
    assert out.returncode == 0, out.stderr
    assert '"mode": "embedded' in out.stdout and '"jobs_waiting_for_score": 0' in out.stdout


def _dead_pool(tmp_path: Path) -> tuple[str, dict[str, str]]:
    """A pool whose every model is served at a port nothing listens on, with one quick retry."""
    dead = f"http://127.0.0.1:{free_port()}/v1"
    pool = scripted_pool(dead, retries=1, timeout_s=5).model_dump(mode="json", exclude_none=True)
    (tmp_path / "pool.yaml").write_text(yaml.safe_dump(pool))
    return dead, {"CONDUCTOR_POOL_FILE": str(tmp_path / "pool.yaml")}


def test_solve_against_an_unreachable_model_server_is_one_line_naming_it(tmp_path):
    dead, env = _dead_pool(tmp_path)
    out = _run(["solve", "What is 2 + 2?"], tmp_path, **env)
    assert out.returncode == 5, out.stderr
    assert out.stdout == "" and "Traceback" not in out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert re.fullmatch(
        rf"error: job \w+ failed: cannot reach the model server at {re.escape(dead)} \(.*Connection refused, "
        r"2 attempts\): is it running, and is api_base in the pool file right\?",
        lines[0],
    ), lines[0]
    debug = _run(["--debug", "solve", "What is 2 + 2?"], tmp_path, **env)
    assert debug.returncode == 5 and "round 0 (plan): failed" in debug.stdout, "--debug shows the whole job too"


def test_run_against_an_unreachable_model_server_records_every_job_failed_and_says_why_once(tmp_path):
    dead, env = _dead_pool(tmp_path)
    problems = tmp_path / "problems.jsonl"
    problems.write_text('{"id": "a", "question": "1 + 1?"}\n{"id": "b", "question": "2 + 2?"}\n')
    out = _run(["run", str(problems), "--out", str(tmp_path / "results.jsonl")], tmp_path, **env)
    assert out.returncode == 5, out.stderr
    errors = [line for line in out.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and errors[0].startswith(
        f"error: 2 of 2 jobs failed: cannot reach the model server at {dead} ("
    )
    assert "Traceback" not in out.stderr
    results = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert [(r["id"], r["status"]) for r in results] == [("a", "failed"), ("b", "failed")]
    assert all(f"cannot reach the model server at {dead}" in r["error"] for r in results)


@pytest.mark.parametrize("question", ["", "   \n"])
def test_solve_without_a_question_is_one_line_and_starts_nothing(tmp_path, question):
    out = _run(["solve", question], tmp_path, CONDUCTOR_POOL_FILE=str(tmp_path / "no-such-pool.yaml"))

    assert out.returncode == 3, out.stderr
    assert out.stdout == "" and out.stderr.strip().splitlines() == [
        f"error: field 'question': {'String should have at least 1 character' if not question else 'is blank'}"
    ]
