"""The CPU retraining report: its per-iteration figure starts at the warm-up, draws the best single
worker the run measured itself, and tells the calculator's one-step route from a model's."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "retraining_cpu.py"
_spec = importlib.util.spec_from_file_location("retraining_cpu", SCRIPT)
report = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(report)

WARMUP_GATE = {"event": "gate", "candidate": {"accuracy": 0.5}, "active": {"accuracy": 0.1}}
CYCLE = {
    "cycle": 1,
    "iterations": [{"rollouts": {"reward_mean": 0.3}}, {"rollouts": {"reward_mean": 0.4}}],
    "gate": {"candidate": {"accuracy": 0.55}, "passed": True},
}


def test_iteration_zero_is_the_warm_up_and_each_cycles_last_iteration_carries_its_gate():
    table = report.iteration_table([CYCLE], WARMUP_GATE)

    assert [(r["iteration"], r["reward_mean"], r["dev_accuracy"]) for r in table] == [
        (0, None, 0.5),
        (1, 0.3, None),
        (2, 0.4, 0.55),
    ]
    assert [r["iteration"] for r in report.iteration_table([CYCLE], None)] == [1, 2]


def test_a_run_that_continued_from_the_shipped_adapter_starts_at_that_policy_not_at_a_warm_up(tmp_path):
    # `train online` on a store without a warm-up: the first gate is cycle 1's, after its iterations.
    cycle = {**CYCLE, "gate": {**CYCLE["gate"], "active": {"version": "shipped-1", "accuracy": 0.42}}}
    events = [{"event": "dev_baselines"}, {"event": "iteration"}, {"event": "iteration"}, {"event": "gate"}]
    (tmp_path / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    (tmp_path / "cycles.json").write_text(json.dumps([cycle]))

    cycles, extra = report.load(tmp_path)

    assert extra["warmup_gate"] is None
    assert [(r["iteration"], r["dev_accuracy"]) for r in report.iteration_table(cycles, None)] == [
        (0, 0.42),
        (1, None),
        (2, 0.55),
    ]


def test_the_best_single_worker_comes_from_the_runs_own_dev_baselines():
    summary = {
        "dev_baselines": [
            {"method": "single:smol-precise", "accuracy": 0.125, "ci_low": 0.04, "ci_high": 0.31},
            {"method": "single:smol-creative", "accuracy": 0.0417, "ci_low": 0.007, "ci_high": 0.2},
        ]
    }

    assert report.baseline(None, summary) == {
        "method": "single:smol-precise",
        "accuracy": 0.125,
        "ci": (0.04, 0.31),
    }
    assert report.baseline(None, {}) is None


def test_a_calculator_plan_is_its_own_route():
    assert report.route_of(["calculator"]) == "one step, the calculator"
    assert report.route_of(["smol-precise"]) == "one step, a model"
    assert report.route_of(["smol-precise", "calculator"]) == "model -> calculator"
    assert report.route_of(["calculator", "smol-precise"]) == "other multi-step"


def test_a_python_plan_is_a_tool_route_not_a_model():
    assert report.route_of(["python"]) == "one step, python"
    assert report.route_of(["smol-creative", "python"]) == "model -> python"


def test_the_figure_is_drawn_for_a_run_without_grpo_cycles(tmp_path):
    out = tmp_path / "iterations.png"

    report.plot_iterations([], report.iteration_table([], WARMUP_GATE), None, out)

    assert out.stat().st_size > 0


def test_the_report_says_where_each_cycles_time_went_iterations_summed_and_the_gate_apart():
    timed = {
        **CYCLE,
        "iterations": [
            {"rollouts": {"reward_mean": 0.3}, "seconds": {"rollouts": 100.0, "train": 20.0}},
            {"rollouts": {"reward_mean": 0.4}, "seconds": {"rollouts": 80.0, "train": 25.0}},
        ],
        "gate": {**CYCLE["gate"], "seconds": {"candidate": 30.0, "active": 28.0}},
    }
    gate = {"candidate": {"parse_rate": 1.0, "accuracy": 0.5, "tokens_per_question": 300.0}}
    timed["gate"]["candidate"] = {**timed["gate"]["candidate"], **gate["candidate"]}
    timed["iterations"] = [{**it, "train": {"reward_mean": 0.5}} | {"rollouts": {**it["rollouts"], "parse_rate": 1.0}}
                           for it in timed["iterations"]]  # fmt: skip

    table = report.rows([timed], None)
    text = report.markdown(table, [], {})

    assert table[0]["seconds"] == {"rollouts": 180.0, "train": 45.0, "gate_candidate": 30.0, "gate_active": 28.0}
    assert "| 1 | 28 | 30 | 180 | 45 | 283 |" in text
