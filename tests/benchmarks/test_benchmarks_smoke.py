"""Every script in benchmarks/ runs end to end at its smallest size, as `make bench` would start it, so
none rots unnoticed between benchmark runs: a script that errors, or reports a failure, fails here.

Each runs in its own process (the scripts put the repository on sys.path and parse their own
arguments) from a temporary directory, so nothing they write lands in the checkout. Sizes are the
smallest that still take every code path of the script: one client, a handful of jobs or lines.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from conductor.inference.vllm_server import default_python
from tests.conftest import MODEL_HOME

ROOT = Path(__file__).resolve().parents[2]
VALIDATION = ROOT / "reward_pipeline" / "evaluation" / "data" / "mixed_validation.jsonl"
BENCHMARKS = ROOT / "benchmarks"
RETRAINING_RUN = ROOT / "docs" / "retraining_cpu" / "two_model_pool"


def _retraining_results(tmp: Path) -> list[str]:
    """A finished run's results, as `conductor train online --report-dir` leaves them (no warm-up gate)."""
    for name in ("cycles.json", "summary.json"):
        (tmp / name).write_text((RETRAINING_RUN / name).read_text())
    (tmp / "events.jsonl").write_text("")
    return ["--results", str(tmp), "--db", str(tmp / "no-such.db")]


def _py_spy_profile(tmp: Path) -> list[str]:
    """Three samples in py-spy's raw (collapsed) format: one in SQLAlchemy under our frame, one ours alone."""
    (tmp / "spy.txt").write_text(
        "run_step (tasks/steps.py:40);execute (sqlalchemy/engine/base.py:1400) 2\nrun_step (tasks/steps.py:40) 1\n"
    )
    return [str(tmp / "spy.txt")]


def _hosts() -> None:
    from tests.support import hosts

    if missing := hosts.missing():
        pytest.skip(missing)


def _vllm_venv() -> None:
    if not default_python().exists():
        message = f"vLLM venv missing ({default_python()}); run scripts/setup_vllm_venv.sh"
        # `make test-vllm` builds the venv first, so there a missing venv is a failure, not a skip.
        if os.environ.get("CONDUCTOR_TEST_REQUIRE_VLLM") == "1":
            pytest.fail(message)
        pytest.skip(message)


@dataclass(frozen=True)
class Smoke:
    args: list[str] = field(default_factory=list)
    marks: tuple[pytest.MarkDecorator, ...] = ()
    expect: str | None = None  # printed by a run that went right
    setup: Callable[[Path], list[str]] | None = None  # more arguments, from files it writes
    needs: Callable[[], None] | None = None  # skips (or fails) when the machine lacks what it needs
    env: dict[str, str] = field(default_factory=dict)
    timeout_s: int = 240


SMOKES: dict[str, Smoke] = {
    "api_load.py": Smoke(
        ["--clients", "1", "--requests", "1", "--latency", "0", "--threads", "2", "--batch-lines", "5"],
        expect='"errors": 0',
    ),
    "batch_scale.py": Smoke(
        ["--problems", "20", "--procs", "1", "--threads", "2", "--sample-s", "0.5"],
        marks=(pytest.mark.services,),
        expect="| final job states |",
    ),
    # Faults are the integration suite's (tests/integration/test_chaos.py); here the script's wiring.
    "chaos.py": Smoke(
        ["--problems", "6", "--events", "0", "--window", "1", "--workers", "1", "--timeout", "240"],
        marks=(pytest.mark.services,),
        expect="PASS",
    ),
    # Faults are the integration suite's (tests/integration/test_partitions.py); here the hosts and wiring.
    "partitions.py": Smoke(
        ["--problems", "6", "--faults", "0", "--timeout", "200"],
        marks=(pytest.mark.services, pytest.mark.hosts),
        expect="PASS",
        needs=_hosts,
    ),
    "local_inference.py": Smoke(
        ["--model-home", str(MODEL_HOME), "--prompts", "1", "--max-tokens", "4", "--concurrency", "1"],
        marks=(pytest.mark.vllm, pytest.mark.slow, pytest.mark.timeout(900)),
        expect="vLLM / in-process",
        needs=_vllm_venv,
        timeout_s=840,
    ),
    # Every mode: embedded, the cluster with tracing off and on, and a variant of the worker settings.
    "orchestration_overhead.py": Smoke(
        "--latency 0 --jobs 4 --concurrency 2 --procs 1 --tracing off,on --variant nospare:spare_thread_share=0".split(),
        marks=(pytest.mark.services,),
        expect="| (b) Redis+PostgreSQL, 1 worker proc x 2 calls (2 threads), tracing on, nospare |",
    ),
    "retraining_cpu.py": Smoke(setup=_retraining_results, expect="wrote "),
    # Wiring only: the embedded store and broker, two jobs; the figures want the services and 120 jobs.
    "step_cost.py": Smoke(
        ["--sqlite", "--memory", "--jobs", "2", "--threads", "2", "--statements"],
        expect="CPU ms/step",
    ),
    "spy_summary.py": Smoke(setup=_py_spy_profile, expect="| SQLAlchemy | 67% |"),
    # The served Conductor is the local pool's, in process: the model comes from the test model home.
    # Two plans (grammar on, off), cut short: the wiring, not the plans (a full plan is ~600 tokens).
    "unseen_plans.py": Smoke(
        ["--n", "1", "--benchmarks", "mmlu", "--max-tokens", "24"],
        marks=(pytest.mark.slow, pytest.mark.timeout(900)),
        expect="| mmlu |",
        env={"CONDUCTOR_HOME": str(MODEL_HOME)},
        timeout_s=840,
    ),
    # One validation question of each kind through the shipped adapter: one forward pass each, no generation.
    "route_probs.py": Smoke(
        ["--n", "1", "--questions", str(VALIDATION)],
        marks=(pytest.mark.timeout(600),),
        expect="| facts | 1 |",
        env={"CONDUCTOR_HOME": str(MODEL_HOME)},
        timeout_s=540,
    ),
    "verifiers.py": Smoke(["--n", "2", "--workers", "1"], expect="all correct"),
    # Four pools, one validation question of each kind, plans cut short: the wiring, not the routes.
    "pool_routes.py": Smoke(
        ["--n", "1", "--max-tokens", "16", "--questions", str(VALIDATION)],
        marks=(pytest.mark.slow, pytest.mark.timeout(900)),
        expect="| without tools |",
        env={"CONDUCTOR_HOME": str(MODEL_HOME)},
        timeout_s=840,
    ),
}


def _scripts() -> set[str]:
    """The files one runs; the rest (overhead_jobs.py: the jobs and the direct loop) are imported by them."""
    return {p.name for p in BENCHMARKS.glob("*.py") if '__name__ == "__main__"' in p.read_text()}


def test_every_benchmark_script_has_a_smoke_run():
    assert _scripts() == set(SMOKES)


@pytest.mark.parametrize(
    "script", [pytest.param(name, marks=smoke.marks, id=name.removesuffix(".py")) for name, smoke in SMOKES.items()]
)
def test_the_benchmark_runs_at_its_smallest_size(script: str, tmp_path: Path):
    smoke = SMOKES[script]
    if smoke.needs is not None:
        smoke.needs()
    args = [*smoke.args, *(smoke.setup(tmp_path) if smoke.setup else [])]
    done, said = _run(script, args, tmp_path, smoke.env, smoke.timeout_s)
    assert done.returncode == 0, said
    assert smoke.expect is None or smoke.expect in done.stdout, said


def _run(
    script: str, args: list[str], cwd: Path, env: dict[str, str], timeout_s: float
) -> tuple[subprocess.CompletedProcess[str], str]:
    """The script in its own process from ``cwd``, and what it said (for a failing assertion)."""
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / script), *args],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(ROOT), "MPLBACKEND": "Agg", **env},
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    return done, f"$ {script} {' '.join(args)}\n--- stdout\n{done.stdout[-3000:]}\n--- stderr\n{done.stderr[-3000:]}"


def test_the_smoke_sizes_are_each_scripts_own_options():
    # Also where the run above is skipped (no services, no model, no vLLM venv here): a renamed option
    # would otherwise surface only on a machine that has them.
    for script, smoke in SMOKES.items():
        source = (BENCHMARKS / script).read_text()
        for option in (a for a in smoke.args if a.startswith("--")):
            assert json.dumps(option) in source, f"{script} has no {option}"


@pytest.mark.timeout(600)
def test_route_probs_reads_a_conductor_served_subtasks_first_on_the_subtask_it_writes(tmp_path: Path):
    pool = (ROOT / "conductor" / "config" / "pools" / "local.yaml").read_text()
    assert "  prompt: compact\n" in pool
    (tmp_path / "pool.yaml").write_text(
        pool.replace("  prompt: compact\n", "  prompt: compact\n  plan_order: subtasks-first\n")
    )
    args = ["--n", "1", "--questions", str(VALIDATION), "--pool", str(tmp_path / "pool.yaml"), "--out", str(tmp_path)]
    done, said = _run("route_probs.py", args, tmp_path, {"CONDUCTOR_HOME": str(MODEL_HOME)}, 540)
    assert done.returncode == 0, said
    assert "question as first subtask" in done.stdout and "| facts | 1 |" in done.stdout, said
    record = json.loads((tmp_path / "route_probs.json").read_text())
    assert record["plan_order"] == "subtasks-first" and len(record["rows"]) == 6
    for rows in record["rows"].values():
        row = rows[0]
        assert 0 < row["question_first_at_t"] <= 1 and 0 < row["question_first"] <= 1
        assert abs(sum(row["ids_given_question"]) - 1) < 1e-6
    for kind in record["summary"].values():
        assert 0 <= kind["expected_to_tools"] <= 1
