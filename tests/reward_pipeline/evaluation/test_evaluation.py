"""The eval harness (`conductor eval`), its statistics and baselines, and `conductor verify`.

The harness runs through the real CLI and system against the scripted server, whose answers
the questions control (see `test_rewards.eval_script`); one test runs the local SmolLM2 pool.
"""

from __future__ import annotations

import gzip
import json
import sqlite3
import time
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from conductor.cli.main import app as cli
from conductor.config.pool import load_pool
from conductor.domain.errors import InputError
from conductor.domain.inputs import read_problems
from conductor.domain.problem import Problem
from conductor.domain.prompts import EXPRESSION_HINT, PROGRAM_HINT
from conductor.store.models import Reward
from reward_pipeline.evaluation import majority_vote
from reward_pipeline.evaluation.baselines import parse_method, parse_methods
from reward_pipeline.evaluation.report import pareto_front, percentile, wilson_interval
from tests.conftest import DATA, MODEL_HOME
from tests.reward_pipeline.test_rewards import scripted_server
from tests.support.pools import scripted_pool

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

# p1: everyone right; p2: only the MoA aggregator (which sees the proposals) answers; p3: all
# wrong; p4: multiple choice, everyone right. Expected accuracy: moa 3/4, the others 2/4.
# Families (kinds of question) for the route table: a = p1, p2; b = p3, p4.
PROBLEMS = [
    {"id": "p1", "question": "What is 2 + 3? [say:5]", "answer": "5", "metadata": {"family": "a"}},
    {"id": "p2", "question": "What is 3 + 4? [moa-say:7]", "answer": "7", "metadata": {"family": "a"}},
    {"id": "p3", "question": "What is 4 + 4? [say:9]", "answer": "8", "metadata": {"family": "b"}},
    {
        "id": "p4",
        "question": "Which number is prime? [say:B]",
        "choices": ["4", "5"],
        "answer": "5",
        "metadata": {"family": "b"},
    },
]
METHODS = "conductor,single:alpha,moa,router"


def _home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    # The embedded CLI pulls the local model into an empty home; link the one already pulled.
    (home / "models").symlink_to(MODEL_HOME / "models")
    return home


def _job_count(home: Path) -> int:
    with sqlite3.connect(home / "conductor.db") as db:
        return db.execute("select count(*) from jobs").fetchone()[0]


def test_eval_writes_table_json_and_plots_and_a_rerun_only_runs_new_pairs(tmp_path, monkeypatch):
    home = _home(tmp_path)
    problems = tmp_path / "mini.jsonl"
    problems.write_text("".join(json.dumps(p) + "\n" for p in PROBLEMS))
    out = tmp_path / "eval"
    with scripted_server() as srv:
        pool_file = tmp_path / "pool.yaml"
        pool_file.write_text(yaml.safe_dump(scripted_pool(srv.base_url).model_dump(mode="json", exclude_none=True)))
        monkeypatch.setenv("CONDUCTOR_HOME", str(home))
        monkeypatch.setenv("CONDUCTOR_RECURSION", "false")
        runner = CliRunner()
        args = [
            "eval",
            "--benchmark",
            str(problems),
            "--methods",
            METHODS,
            "--out",
            str(out),
            "--pool",
            str(pool_file),
            "--no-progress",
        ]

        first = runner.invoke(cli, [*args, "--limit", "2"])
        assert first.exit_code == 0, first.output
        assert _job_count(home) == 2 * 4
        calls_first = len(srv.calls)
        # An interrupted run leaves a cut line behind; the rerun must shrug it off.
        with (out / "results.jsonl").open("a") as fh:
            fh.write('{"benchmark": "mini", "meth')

        second = runner.invoke(cli, [*args, "--limit", "4"])
        assert second.exit_code == 0, second.output
        assert _job_count(home) == 4 * 4  # only the two new problems per method were submitted
        calls_second = len(srv.calls) - calls_first

    assert calls_second == calls_first  # same work per problem, and none repeated
    summary = json.loads((out / "results.json").read_text())["summary"]
    acc = {c["method"]: c["accuracy"] for c in summary["overall"]}
    assert acc == {"conductor": 0.5, "single:alpha": 0.5, "moa": 0.75, "router": 0.5}
    cells = {(c["benchmark"], c["method"]): c for c in summary["cells"]}
    moa = cells[("mini", "moa")]
    assert moa["n"] == 4 and moa["steps_per_workflow"] == 3.0  # two proposers + the aggregator
    assert cells[("mini", "router")]["steps_per_workflow"] == 1.0
    assert moa["ci_low"] < 0.75 < moa["ci_high"]
    assert moa["tokens_per_question"] > cells[("mini", "single:alpha")]["tokens_per_question"] > 0
    assert moa["latency_p50_s"] > 0 and moa["latency_p95_s"] >= moa["latency_p50_s"]
    for name in ("accuracy_vs_tokens.png", "accuracy_by_benchmark.png", "accuracy_vs_cost.png"):
        data = (out / name).read_bytes()
        assert data[:8] == PNG_MAGIC and len(data) > 2000
    # moa is the most accurate; the three at 50% differ only in tokens: the cheapest of them is on the front.
    overall = {c["method"]: c for c in summary["overall"]}
    cheapest = min(("conductor", "single:alpha", "router"), key=lambda m: overall[m]["tokens_per_question"])
    assert summary["pareto"]["tokens"] == [cheapest, "moa"]
    assert "Pareto front" in (out / "report.md").read_text()
    table = (out / "report.md").read_text()
    assert "| moa | 75.0 |" in table and "| single:alpha | 50.0 |" in table
    assert "| moa | 75.0 |" in second.stdout
    lines = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines() if x.endswith("}")]
    assert len({(r["method"], r["problem_id"]) for r in lines}) == 16

    # The route table: per family, per fixed route; the oracle router takes the best fixed route per family
    # with hindsight (a: moa 2/2; b: 1/2 for every route, the first listed wins the tie).
    routes = summary["route_table"]
    assert routes["cells"]["a"]["moa"]["correct"] == 2 and routes["cells"]["a"]["single:alpha"]["correct"] == 1
    assert routes["oracle"]["choice"] == {"a": "moa", "b": "single:alpha"}
    assert (routes["oracle"]["correct"], routes["oracle"]["n"]) == (3, 4)
    assert routes["best_fixed"] == "moa"
    # The Conductor's first plans are named by their workers, per family.
    assert sum(routes["routes"]["conductor|a"].values()) == 2
    assert "Route table" in table and "oracle router" in table


# -- pieces ------------------------------------------------------------------------------------
def test_the_pareto_front_keeps_what_nothing_beats() -> None:
    points = [("a", 1.0, 0.5), ("b", 2.0, 0.5), ("c", 2.0, 0.8), ("d", 3.0, 0.7), ("e", 0.5, 0.1)]
    assert pareto_front(points) == ["e", "a", "c"], "b costs more than a for the same; d costs more than c for less"
    assert pareto_front([("x", 1.0, 0.5), ("y", 1.0, 0.5)]) == ["x", "y"], "ties both stay"


def test_wilson_interval_and_percentile() -> None:
    lo, hi = wilson_interval(5, 10)
    assert round(lo, 4) == 0.2366 and round(hi, 4) == 0.7634
    lo, hi = wilson_interval(0, 10)
    assert lo == 0.0 and round(hi, 4) == 0.2775
    assert wilson_interval(10, 10)[1] == 1.0
    assert percentile([1, 2, 3, 4], 50) == 2.5 and percentile([7], 95) == 7 and percentile([], 50) is None


def test_method_specs_become_job_options() -> None:
    pool = scripted_pool("http://127.0.0.1:9/v1")
    p = Problem(question="Q?", answer="1")
    assert parse_method("router", pool).job_args(p) == {"options": {"max_steps": 1, "recursion": False}, "samples": 1}
    single = parse_method("single:beta", pool).job_args(p)["options"]["workflow"]
    assert single == {"model_id": [1], "subtasks": ["Q?"], "access_list": [[]]}
    moa = parse_method("moa", pool).job_args(p)["options"]["workflow"]
    assert moa["model_id"] == [0, 1, 0] and moa["access_list"] == [[], [], "all"] and "Q?" in moa["subtasks"][2]
    reflect = parse_method("self-reflect:beta:3", pool).job_args(p)["options"]["workflow"]
    assert reflect["model_id"] == [1, 1, 1, 1] and reflect["access_list"] == [[], "all", "all", "all"]
    bon = parse_method("best-of-n:alpha:4", pool)
    assert bon.vote and bon.job_args(p)["samples"] == 4
    assert [m.label for m in parse_methods("conductor, moa,conductor,best-of-n", pool)] == [
        "conductor",
        "moa",
        "best-of-n:alpha:5",
    ]
    for bad in ("single", "single:gamma", "best-of-n:alpha:0", "nope", "router:x"):
        with pytest.raises(InputError):
            parse_method(bad, pool)


def test_the_tool_route_has_a_model_write_the_expression_and_a_tool_compute_it() -> None:
    pool = load_pool("local.yaml")  # smol-precise, smol-creative, calculator
    p = Problem(question="Tom has 3 bags of 4 apples. How many apples?", answer="12")
    route = parse_method("tool-route", pool)
    assert route.label == "tool-route:smol-precise:calculator"
    wf = route.job_args(p)["options"]["workflow"]
    assert wf["model_id"] == [0, 2] and wf["access_list"] == [[], "all"]
    assert wf["subtasks"][0].startswith(EXPRESSION_HINT) and p.question in wf["subtasks"][0]
    assert parse_method("tool-route:smol-creative", pool).job_args(p)["options"]["workflow"]["model_id"] == [1, 2]
    assert not route.vote and route.job_args(p)["samples"] == 1
    voted = parse_method("tool-route:smol-creative:calculator:5", pool)
    assert voted.label == "tool-route:smol-creative:calculator:5" and voted.vote and voted.job_args(p)["samples"] == 5
    for bad in ("tool-route:calculator", "tool-route:smol-precise:smol-creative", "tool-route:a:b:c", "tool-route:::0"):
        with pytest.raises(InputError):
            parse_method(bad, pool)
    with pytest.raises(InputError, match="no tool worker"):
        parse_method("tool-route", scripted_pool("http://127.0.0.1:9/v1"))


def test_the_python_route_has_a_model_write_a_program_and_the_python_tool_run_it() -> None:
    pool = load_pool("local.yaml")  # smol-precise, smol-creative, calculator, python
    p = Problem(question="How many r's are in 'strawberry'?", answer="3")
    route = parse_method("tool-route:smol-precise:python", pool)
    wf = route.job_args(p)["options"]["workflow"]
    assert wf["model_id"] == [0, 3] and wf["access_list"] == [[], "all"]
    assert wf["subtasks"][0].startswith(PROGRAM_HINT) and p.question in wf["subtasks"][0]


def test_majority_vote_uses_the_verifiers_extraction() -> None:
    def reward(extracted):
        return Reward(value=0.5, correct=False, verifier="number", details={"evidence": {"extracted": extracted}})

    p = Problem(question="Q", answer="5")
    samples = [
        (0, "it is 4", reward("4")),
        (1, "maybe 5", reward("5")),
        (2, "so 5", reward("5")),
        (3, "?", reward(None)),
    ]
    assert majority_vote(samples, p) == (1, {"4": 1, "5": 2})
    assert majority_vote([(0, "a", reward("4")), (1, "b", reward("3"))], p)[0] == 0  # tie: first seen
    code = Problem(question="f", tests="assert f() == 1", entry_point="f")
    answers = [
        (0, "```python\ndef f():\n    return 2\n```", None),
        (1, "def f():\n    return 1", None),
        (2, "```python\ndef f():  \n    return 1\n```", None),
    ]
    assert majority_vote(answers, code)[0] == 1


# -- conductor verify on the real benchmark files ------------------------------------------------
def _subset(name: str, dest: Path, n: int) -> Path:
    src = DATA / name
    if not src.exists():
        pytest.skip(f"benchmark data {src} not available")
    if name.endswith(".json"):
        rows = [r for r in json.loads(src.read_text()) if 11 <= r["task_id"] <= 510][:n]
        path = dest / name
        path.write_text(json.dumps(rows))
        return path
    opener = gzip.open if name.endswith(".gz") else open
    with opener(src, "rt", encoding="utf-8") as fh:
        lines = []
        for raw in fh:
            if raw.strip() and '"correct_answer": "answer"' not in raw:
                lines.append(raw)
            if len(lines) == n:
                break
    path = dest / name.removesuffix(".gz")
    path.write_text("".join(lines))
    return path


def _reference_answer(problem: Problem, raw: dict) -> str:
    if problem.metadata.get("source") == "humaneval":
        return problem.metadata["prompt"] + raw["canonical_solution"]
    if problem.metadata.get("source") == "mbpp":
        return f"```python\n{raw['code']}\n```"
    if problem.kind == "mc":
        return f"The answer is ({problem.answer})."
    return f"Working through it... the final answer is \\boxed{{{problem.answer}}}"


@pytest.mark.parametrize(
    ("name", "n"),
    [
        ("gsm8k_test.jsonl", 20),
        ("math500_test.jsonl", 12),
        ("mmlu_test.jsonl.gz", 20),
        ("HumanEval.jsonl.gz", 4),
        ("mbpp_sanitized.json", 4),
    ],
)
def test_verify_scores_reference_answers_100_percent_and_shuffled_ones_low(tmp_path, name, n):
    path = _subset(name, tmp_path, n)
    raw_rows = (
        json.loads(path.read_text())
        if name.endswith(".json")
        else [json.loads(x) for x in path.read_text().splitlines()]
    )
    problems = [p for _, p in read_problems(path)]
    assert len(problems) == n and all(isinstance(p, Problem) for p in problems)
    answers = [_reference_answer(p, raw) for p, raw in zip(problems, raw_rows, strict=True)]
    right = tmp_path / "right.jsonl"
    right.write_text(
        "".join(json.dumps({"id": p.id, "answer": a}) + "\n" for p, a in zip(problems, answers, strict=False))
    )
    shuffled = tmp_path / "shuffled.jsonl"
    rotated = answers[1:] + answers[:1]
    shuffled.write_text(
        "".join(json.dumps({"id": p.id, "answer": a}) + "\n" for p, a in zip(problems, rotated, strict=False))
    )
    runner = CliRunner()

    good = runner.invoke(
        cli, ["verify", "--file", str(path), "--answers", str(right), "--out", str(tmp_path / "v.jsonl")]
    )
    assert good.exit_code == 0, good.output
    assert f"accuracy: {n}/{n} = 100.0%" in good.stdout
    verdicts = [json.loads(x) for x in (tmp_path / "v.jsonl").read_text().splitlines()]
    assert len(verdicts) == n and all(v["correct"] for v in verdicts)

    bad = runner.invoke(cli, ["verify", "--file", str(path), "--answers", str(shuffled)])
    assert bad.exit_code == 0, bad.output
    correct = int(bad.stdout.split("accuracy: ")[1].split("/")[0])
    assert correct <= n // 3, bad.stdout


# -- a real model run --------------------------------------------------------------------------
@pytest.mark.slow
def test_eval_with_the_local_smollm2_pool(tmp_path, monkeypatch):
    """gsm8k, mmlu and humaneval x conductor, single, moa, tool-route on SmolLM2-135M; numbers as they come."""
    if not (MODEL_HOME / "models" / "smollm2-135m-instruct" / "config.json").exists():
        pytest.skip("the local model is not pulled")
    for name in ("gsm8k_test.jsonl", "mmlu_test.jsonl.gz", "HumanEval.jsonl.gz"):
        if not (DATA / name).exists():
            pytest.skip(f"benchmark data {name} not available")
    home = _home(tmp_path)
    pool = yaml.safe_load(
        (Path(__file__).resolve().parents[3] / "conductor" / "config" / "pools" / "local.yaml").read_text()
    )
    # Small budgets keep 2 CPU cores under a few minutes: a 135M model says what it says early.
    pool["conductor"]["max_tokens"] = 160
    for w in pool["workers"]:
        w["max_tokens"] = 48
    pool_file = tmp_path / "pool.yaml"
    pool_file.write_text(yaml.safe_dump(pool))
    for key, value in {
        "HOME": home,
        "RECURSION": "false",
        "MAX_ROUNDS": "1",
        "PLAN_RETRIES": "0",
        "FALLBACK_WORKER": "smol-precise",
        "MAX_STEPS": "2",
        "DATA_DIR": DATA,
    }.items():
        monkeypatch.setenv(f"CONDUCTOR_{key}", str(value))
    out = tmp_path / "eval"
    started = time.monotonic()
    result = CliRunner().invoke(
        cli,
        [
            "eval",
            "--benchmark",
            "gsm8k,mmlu,humaneval",
            "--limit",
            "2",
            "--methods",
            "conductor,single:smol-precise,moa,tool-route",
            "--out",
            str(out),
            "--pool",
            str(pool_file),
            "--no-progress",
        ],
    )
    elapsed = time.monotonic() - started
    print(f"\nreal-model eval took {elapsed:.0f}s\n{result.stdout}")
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "results.json").read_text())["summary"]
    assert {c["n"] for c in summary["cells"]} == {2} and len(summary["cells"]) == 12
    assert all(c["scored"] == 2 for c in summary["cells"])
    assert all(c["tokens_per_question"] > 0 for c in summary["cells"])
    for name in ("accuracy_vs_tokens.png", "accuracy_by_benchmark.png", "accuracy_vs_cost.png"):
        assert (out / name).read_bytes()[:8] == PNG_MAGIC
    assert summary["pareto"]["tokens"], "some method is on the accuracy-per-token front"
    assert "| conductor |" in (out / "report.md").read_text()


def test_mixture_of_agents_asks_the_pools_models_not_its_tools() -> None:
    pool = load_pool("local.yaml")  # smol-precise, smol-creative, calculator, python
    wf = parse_method("moa", pool).job_args(Problem(question="Which city is the capital of Sweden?"))["options"][
        "workflow"
    ]
    assert wf["model_id"] == [0, 1, 0] and wf["access_list"] == [[], [], "all"]
