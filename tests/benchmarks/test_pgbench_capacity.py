"""The capacity page's pgbench script (docs/capacity.md) is one `fanout` job as the engine runs it:
as many statements and commits as the engine issues for such a job on PostgreSQL, and it runs to
the end under pgbench at several client counts, with no failed transaction."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import uuid

import pytest

from benchmarks.pgbench.run import COMMITS, SCRIPT, STATEMENTS
from benchmarks.step_cost import run as step_cost
from tests.support.cluster import REPO

pytestmark = pytest.mark.services


def _script_counts() -> tuple[int, int]:
    lines = [line.strip() for line in SCRIPT.read_text().splitlines() if not line.strip().startswith("--")]
    ends = [line for line in lines if line.endswith(";") or line.endswith("\\gset")]
    commits = sum(1 for line in ends if line == "COMMIT;")
    return len(ends) - commits - sum(1 for line in ends if line == "BEGIN;"), commits


def test_the_script_runs_the_statements_and_commits_the_engine_runs_for_a_fanout_job():
    args = argparse.Namespace(jobs=10, threads=2, sqlite=False, memory=False, litellm=False, py_spy=None)
    args.workflow = "fanout"
    engine = step_cost(args)
    polls = sum(n for shape, n in engine["shapes"].items() if shape.startswith("SELECT count(*)"))

    assert _script_counts() == (STATEMENTS, COMMITS)
    assert round(engine["statements_per_job"] - polls) == STATEMENTS  # the submitter's polls are not the job's
    assert round(engine["commits_per_job"]) == COMMITS


def test_pgbench_runs_the_script_at_every_client_count_without_a_failure():
    database = f"conductor_pgbench_t_{uuid.uuid4().hex[:8]}"
    out = subprocess.run(
        [sys.executable, "benchmarks/pgbench/run.py", "--clients", "1,2", "--seconds", "2", "--database", database],
        cwd=REPO,
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    rows = re.findall(r"^\| (\d+) \| (\d+) \| \d+ \| \d+ \| [\d.]+ \| (\d+) \|$", out.stdout, re.M)
    assert [r[0] for r in rows] == ["1", "2"], out.stdout
    assert all(int(jobs) > 0 and failed == "0" for _, jobs, failed in rows), out.stdout
