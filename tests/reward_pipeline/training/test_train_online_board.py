"""`conductor train online` as an ML person starts it, at its smallest size on the in-process SmolLM2: the
report directory it names holds TensorBoard event files (read back with TensorBoard's own reader) whose
points are the numbers of the run's own `cycles.json`, one per cycle and one per optimizer step."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import MODEL_HOME
from tests.reward_pipeline.training.test_health import read_board

pytestmark = pytest.mark.slow


@pytest.mark.timeout(1200)
def test_train_online_writes_each_cycle_and_each_optimizer_step_to_tensorboard(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "models").symlink_to((MODEL_HOME / "models").resolve())
    report = tmp_path / "report"
    # The run's own home and nothing else of the test process's deployment settings.
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONDUCTOR_")}
    env.update(CONDUCTOR_HOME=str(home), LITELLM_LOCAL_MODEL_COST_MAP="True", HF_HUB_OFFLINE="1")
    conductor = str(Path(sys.executable).parent / "conductor")
    size = "--cycles 1 --iterations 1 --problems 2 --samples 4 --mixed 2 --dev-limit 1".split()
    log = tmp_path / "train-online.log"
    with log.open("w") as out:
        done = subprocess.run(
            [conductor, "train", "online", "--no-vllm", *size, "--lr", "2e-4", "--report-dir", str(report)],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            timeout=1100,
            check=False,
        )
    assert done.returncode == 0, log.read_text()[-5000:]

    (cycle,) = json.loads((report / "cycles.json").read_text())
    (iteration,) = cycle["iterations"]
    board = read_board(report / "tensorboard")

    # The cycle's point: its rollouts (2 problems x 4 samples) and the gate's decision, at the cycle's index.
    rollouts = iteration["rollouts"]
    assert rollouts["jobs"] == 2 and rollouts["plan_rounds"] == 8
    for key in ("jobs", "plan_rounds", "parse_rate", "correct", "reward_mean"):
        assert board[f"cycle/rollouts/{key}"] == [(cycle["cycle"], pytest.approx(rollouts[key]))], key
    assert board["cycle/gate/passed"] == [(cycle["cycle"], float(cycle["gate"]["passed"]))]
    assert board["cycle/gate/candidate/accuracy"] == [
        (cycle["cycle"], pytest.approx(cycle["gate"]["candidate"]["accuracy"]))
    ]

    # Every optimizer step of the cycle is a point of `train/` at its step number; a cycle whose groups all
    # had one reward trains nothing and has none (checked both ways: no step, no `train/` series).
    steps = iteration["train_steps"]
    losses = board.get("train/loss", [])
    assert [s for s, _ in losses] == [st["step"] for st in steps]
    assert [v for _, v in losses] == pytest.approx([st["loss"] for st in steps], rel=1e-5)
    assert [v for _, v in board.get("train/grad_norm", [])] == pytest.approx([st["grad_norm"] for st in steps])
