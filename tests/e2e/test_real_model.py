"""The embedded default end to end with the real SmolLM2-135M model: CLI, Celery in-process, SQLite."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import DATA, MODEL_HOME

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]
POLICY = yaml.safe_load((REPO / "conductor" / "config" / "pools" / "local.yaml").read_text())["conductor"][
    "policy_version"
]


@pytest.fixture
def home(tmp_path: Path) -> Path:
    if not (MODEL_HOME / "models" / "smollm2-135m-instruct" / "config.json").exists():
        pytest.fail("the local model is missing: run `make model` (the test command does)")
    (tmp_path / "models").symlink_to(MODEL_HOME / "models")
    pool = yaml.safe_load((REPO / "conductor" / "config" / "pools" / "local.yaml").read_text())
    # Short completions keep the CPU run to a minute or two; the path is the same.
    pool["conductor"]["max_tokens"] = 160
    for w in pool["workers"]:
        w["max_tokens"] = 48
    (tmp_path / "pool.yaml").write_text(yaml.safe_dump(pool))
    return tmp_path


def _cli(home: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONDUCTOR_")}
    env.update(
        CONDUCTOR_HOME=str(home),
        CONDUCTOR_POOL_FILE=str(home / "pool.yaml"),
        CONDUCTOR_PLAN_RETRIES="0",
        CONDUCTOR_RECURSION="false",
        HF_HUB_OFFLINE="1",
        LITELLM_LOCAL_MODEL_COST_MAP="True",
    )
    return subprocess.run(
        [sys.executable, "-m", "conductor.cli.main", *args],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )


def test_three_gsm8k_problems_run_through_the_pipeline_and_export_trainable_traces(home):
    out = home / "results.jsonl"
    run = _cli(home, "run", str(DATA / "gsm8k_test.jsonl"), "--limit", "3", "--out", str(out))
    assert run.returncode == 0, run.stderr[-3000:]

    results = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["id"] for r in results] == ["gsm8k_test-1", "gsm8k_test-2", "gsm8k_test-3"]
    for r in results:
        assert r["status"] == "done", r["error"]
        assert r["answer"], "an answer must be recorded (correctness is not required of a 135M model)"
        assert r["tokens"] > 0 and r["workflow"]["model_id"]

    traces = home / "traces.jsonl"
    export = _cli(home, "traces", "export", "--out", str(traces))
    assert export.returncode == 0, export.stderr[-2000:]
    lines = [json.loads(line) for line in traces.read_text().splitlines()]
    assert len(lines) >= 3
    for t in lines:
        # The default Conductor is the shipped checkpoint: every round names it.
        assert t["policy_version"] == POLICY and t["completion_text"] is not None
        assert t["completion_token_ids"] and len(t["completion_token_ids"]) == len(t["completion_logprobs"])
        assert all(lp <= 0.0 for lp in t["completion_logprobs"])
        assert t["parse_status"] in ("ok", "failed")
        assert t["problem"]["answer"] is not None
    # The stored ids are what the model sampled: decoding them gives back the stored text.
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(MODEL_HOME / "models" / "smollm2-135m-instruct")
    first = lines[0]
    assert (
        tok.decode(first["completion_token_ids"], skip_special_tokens=True).strip() == first["completion_text"].strip()
    )

    status = _cli(home, "status", results[0]["job_id"])
    assert status.returncode == 0 and json.loads(status.stdout)["status"] == "done"
