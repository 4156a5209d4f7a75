"""Training health: per-step statistics from the loss's own tensors, the staleness cap, a cycle
skipped for too few judged groups (reason stored and printed), and the report's PNGs."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from sqlalchemy import select

from conductor.store.models import TrainingCycle, TrainingStep
from reward_pipeline.training.board import TrainingBoard
from reward_pipeline.training.dataset import Row
from reward_pipeline.training.health import StepHealth, cycle_health, enforce_staleness_cap, record_steps
from reward_pipeline.training.health_report import cycle_lines, load_history, write_report
from reward_pipeline.training.loops.cycle import CycleConfig, run_retrain_cycle
from reward_pipeline.training.objective import ObjectiveConfig, grpo_loss
from tests.reward_pipeline.test_group_rewards import run_judged, system

ROOT = Path(__file__).resolve().parents[3]


def read_board(log_dir: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar series under `log_dir`, read back with TensorBoard's own reader."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(log_dir))
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def _row(i: int, reward: float, staleness: int = 0, source: str = "judge") -> Row:
    return Row(i, f"job{i // 2}", [1, 2], [3, 4], [-0.5, -0.5], 1.0, "base", staleness, reward, source=source)


def test_step_health_reads_weights_ess_caps_and_kl_off_the_losss_tokens() -> None:
    current = torch.full((2, 3), -1.0)
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
    # log w = proximal - behaviour: 0, ln 2, (pad), ln 4, ln 0.5, 0
    shift = torch.tensor([[0.0, math.log(2), 9.0], [math.log(4), math.log(0.5), 0.0]])
    parts = grpo_loss(
        current, current, current - shift, torch.tensor([1.0, -1.0]), mask, ObjectiveConfig(importance_cap=3.0)
    )
    health = StepHealth(importance_cap=3.0)
    health.add(parts.tokens)

    stats = health.summary([_row(0, 1.0, staleness=0), _row(1, 0.5, staleness=2, source="verifier")])

    w = torch.tensor([1.0, 2.0, 4.0, 0.5, 1.0], dtype=torch.float64)
    assert stats["tokens"] == 5  # the padded token is not counted
    assert (stats["iw_min"], stats["iw_max"]) == pytest.approx((0.5, 4.0))
    assert stats["iw_mean"] == pytest.approx(float(w.mean()))
    assert stats["ess"] == pytest.approx(float(w.sum() ** 2 / (5 * (w**2).sum())))
    assert stats["capped_fraction"] == pytest.approx(1 / 5)
    assert stats["kl_behaviour_current"] == pytest.approx(-float(torch.log(w).mean()))
    assert stats["staleness"] == {0: 1, 2: 1}
    assert stats["reward_by_source"] == {"judge": {"rows": 1, "mean": 1.0}, "verifier": {"rows": 1, "mean": 0.5}}


def test_the_staleness_cap_drops_rows_past_it_and_counts_them() -> None:
    groups = [[_row(0, 1.0, 0), _row(1, 0.5, 3)], [_row(2, 1.0, 4), _row(3, 0.5, 5)]]
    kept, dropped = enforce_staleness_cap(groups, cap=2)
    assert [[r.round_id for r in g] for g in kept] == [[0]] and dropped == 3


def test_cycle_health_weights_step_means_by_tokens_and_counts_zero_variance_groups() -> None:
    groups = [[_row(0, 1.0), _row(1, 0.5)], [_row(2, 0.5), _row(3, 0.5)]]
    steps = [
        {"tokens": 10, "iw_min": 0.5, "iw_mean": 1.0, "iw_max": 2.0, "ess": 1.0, "capped_fraction": 0.0,
         "clip_fraction": 0.0, "kl_behaviour_current": 0.0},
        {"tokens": 30, "iw_min": 0.2, "iw_mean": 2.0, "iw_max": 5.0, "ess": 0.5, "capped_fraction": 0.4,
         "clip_fraction": 0.2, "kl_behaviour_current": 0.4},
    ]  # fmt: skip
    h = cycle_health(groups, steps)
    assert h["zero_variance_fraction"] == 0.5 and h["groups"] == 2
    assert (h["iw_min"], h["iw_max"]) == (0.2, 5.0)
    assert h["iw_mean"] == pytest.approx(1.75) and h["ess"] == pytest.approx(0.625)
    assert h["capped_fraction"] == pytest.approx(0.3)


def test_a_cycle_with_too_few_judged_groups_is_skipped_with_the_reason_recorded_and_printed(tmp_path: Path) -> None:
    with system(tmp_path) as (sys_, _):
        run_judged(sys_, "Pick [say-seq:5,7]", samples=2)
        with sys_.runtime.sessions.begin() as s:
            cycle = TrainingCycle(trigger="beat", status="queued")
            s.add(cycle)
            s.flush()
            cycle_id = cycle.id
        result = run_retrain_cycle(sys_.service, cycle_id, tmp_path, CycleConfig(min_groups=3))
        with sys_.runtime.sessions() as s:
            row = s.get_one(TrainingCycle, cycle_id)
            stored_status, stored = row.status, dict(row.stats)

    assert result["status"] == stored_status == "skipped"
    reason = "1 groups with reward variance (1 judged) of 1; a cycle needs at least 3"
    assert stored["skipped"] == reason
    assert stored["health"]["reward_by_source"]["judge"]["rows"] == 2
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONDUCTOR_")}
    env |= {"CONDUCTOR_HOME": str(tmp_path), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    out = subprocess.run(
        [sys.executable, "-m", "conductor.cli.main", "train", "status"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=True,
    ).stdout  # fmt: skip
    assert f"cycle {cycle_id}  skipped" in out and f"skipped: {reason}" in out
    assert "reward by source: judge 0.75 (n=2)" in out

    # The same cycle on TensorBoard, one point at the cycle's id: its data health and why it did not train.
    board = read_board(tmp_path / "tensorboard" / "cycles")
    assert board["cycle/health/reward_by_source/judge/mean"] == [(cycle_id, 0.75)]
    assert board["cycle/health/reward_by_source/judge/rows"] == [(cycle_id, 2.0)]
    assert board["cycle/health/zero_variance_fraction"] == [(cycle_id, 0.0)]
    assert board["cycle/status/skipped"] == [(cycle_id, 1.0)] and board["cycle/status/done"] == [(cycle_id, 0.0)]


@pytest.mark.slow
def test_real_training_steps_store_their_health_and_the_report_plots_it(tmp_path: Path) -> None:
    """SmolLM2-135M: one group on-policy, one whose stored behaviour logprobs are off by a lot."""
    from transformers import AutoTokenizer

    from conductor.inference.local_backend import LocalModel
    from conductor.runtime import Runtime
    from reward_pipeline.training.grpo import OfflineGRPOTrainer, make_config
    from reward_pipeline.training.policy import LoraSpec, load_trainable
    from tests.reward_pipeline.training.test_training_real import BASE, _sample
    from tests.support.system import make_settings

    model_backend = LocalModel(str(BASE))
    gens = [_sample(model_backend, "What is 12 + 30?", 1.0, seed=s, max_tokens=12) for s in (1, 2, 3, 4)]
    rows = [
        Row(i, f"job{i // 2}", g.prompt_token_ids, g.token_ids,
            [lp - (1.5 if i >= 2 else 0.0) for lp in g.logprobs], 1.0, "base", 0 if i < 2 else 2,
            1.0 if i % 2 == 0 else 0.5, source="judge" if i < 2 else "verifier")
        for i, g in enumerate(gens)
    ]  # fmt: skip
    model = load_trainable(BASE, None, LoraSpec(r=4, top_layers=2))
    config = make_config(tmp_path, per_device_train_batch_size=2, gradient_accumulation_steps=2, num_generations=2)
    board = TrainingBoard(tmp_path / "tensorboard")
    trainer = OfflineGRPOTrainer(model, AutoTokenizer.from_pretrained(BASE), config, log=board.step)
    summary = trainer.train([rows[:2], rows[2:]])
    board.close()
    (step,) = summary["steps"]

    # Stale rows: the stored behaviour found their tokens e^-1.5 as likely, so w = e^1.5 > cap 2.
    assert step["iw_max"] == pytest.approx(math.exp(1.5), rel=0.02) and step["iw_min"] < 1.01
    assert 0 < step["ess"] < 1 and step["capped_fraction"] == pytest.approx(0.5, abs=0.2)
    assert step["staleness"] == {0: 2, 2: 2} and set(step["reward_by_source"]) == {"judge", "verifier"}

    # The step on TensorBoard, as TRL's report_to="tensorboard" would show it: every number of its record.
    scalars = read_board(tmp_path / "tensorboard")
    for tag, value in [("loss", step["loss"]), ("ess", step["ess"]), ("clip_fraction", step["clip_fraction"]),
                       ("iw_max", step["iw_max"]), ("reward_mean", step["reward_mean"]), ("staleness/2", 2.0),
                       ("reward_by_source/verifier/mean", 0.75)]:  # fmt: skip
        assert scalars[f"train/{tag}"] == [(1, pytest.approx(value, rel=1e-5))], tag

    runtime = Runtime(make_settings(tmp_path))
    runtime.migrate()
    with runtime.sessions.begin() as s:
        cycle = TrainingCycle(trigger="manual", status="done", stats={"health": cycle_health([rows[:2], rows[2:]], summary["steps"]), "gate": {"passed": True, "candidate": {"accuracy": 0.5}, "active": {"accuracy": 0.4}}})  # fmt: skip
        s.add(cycle)
        s.flush()
        cycle_id = cycle.id
    record_steps(runtime.sessions, summary["steps"], cycle_id=cycle_id, checkpoint_id="grpo-x")
    history = load_history(runtime.sessions)
    pngs = write_report(runtime.sessions, tmp_path / "report")
    with runtime.sessions() as s:
        stored = s.scalars(select(TrainingStep)).all()
        assert [(st.cycle_id, st.checkpoint_id) for st in stored] == [(cycle_id, "grpo-x")]
    runtime.close()

    text = "\n".join(cycle_lines(history[0]))
    assert "importance weight min/mean/max=" in text and "ess=" in text and "gate passed" in text
    assert [p.name for p in pngs] == ["reward_by_source.png", "importance_weights.png", "gate.png"]
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and p.stat().st_size > 5000 for p in pngs)
