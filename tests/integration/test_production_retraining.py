"""Retraining from production traffic, end to end, on Redis + PostgreSQL with worker processes.

The official `openai` client sends chat requests to a real `conductor api`; an opted-in tenant's
requests get exploration samples after the answer, the scripted judge scores each group,
`conductor train dataset` sees judge-rewarded groups, beat starts a cycle that trains SmolLM2's
LoRA on them (CPU), gates the candidate on dev problems through the same queue and promotes it,
and the next chat request's rounds record the new policy version. The user's latency with
exploration on is measured against an opted-out tenant's in the same deployment.

The scripted Conductor plans one step; the worker answers "The answer is N" with N cycling
1, 2, 3 per call, and the judge prefers answers that say 1 (and, where a group's answers all score
alike, the first it was shown), so every group has reward variance.
"""

from __future__ import annotations

import itertools
import json
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select

from conductor.app.tenants import set_exploration
from conductor.config.pool import Pool
from conductor.store.models import Checkpoint, Job, Judgement, Round, TrainingCycle
from tests.conftest import MODEL_HOME
from tests.reward_pipeline.training.test_health import read_board
from tests.support.api_deployment import Deployment, deploy
from tests.support.cluster import REPO, Proc, workers
from tests.support.judge import judge_reply, judge_worker
from tests.support.pools import scripted_pool
from tests.support.scripted_llm import Reply, ScriptedLLMServer
from tests.support.waiting import ended_cycle, wait_for
from tests.support.workflows import conductor_reply

pytestmark = pytest.mark.services

SMOLLM2_VOCAB = 49152
SETTINGS: dict[str, Any] = {
    "exploration_rate": "1.0",
    "exploration_samples": "3",
    "judge_backoff_s": "0.1",
    "policy_refresh_s": "0.5",
    "retrain_enabled": "true",
    "retrain_check_s": "1",
    "retrain_min_new_traces": "9",
    "retrain_min_groups": "3",
    "retrain_dev_limit": "2",
}


def script() -> Callable[[str, list[dict], dict], Reply]:
    counter = itertools.count()
    lock = threading.Lock()

    def reply(model: str, messages: list[dict], body: dict) -> Reply:
        if model.endswith("scripted-judge"):
            # Concurrent groups interleave their calls, so a group may hold no "1" (or only "1"s):
            # the spread keeps every group trainable however the calls fell.
            return judge_reply(messages, lambda a: 1.0 if a.rstrip().endswith("1") else 0.3, spread=True)
        if model.endswith("scripted-conductor") or model.startswith("conductor-"):  # base or a promoted LoRA
            return conductor_reply(messages)
        with lock:
            n = next(counter) % 3 + 1
        return Reply(f"The answer is {n}", delay_s=0.05)

    return reply


def judged_pool(base_url: str) -> Pool:
    return scripted_pool(base_url, extra_workers=[judge_worker(base_url)])


def chat(d: Deployment, key: str, text: str) -> tuple[str, float]:
    started = time.monotonic()
    raw = d.client(key).chat.completions.with_raw_response.create(
        model="conductor", messages=[{"role": "user", "content": text}]
    )
    raw.parse()
    return raw.headers["x-conductor-job-id"], time.monotonic() - started


def cli(d: Deployment, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "conductor.cli.main", *args],
        cwd=REPO, env=d.env, capture_output=True, text=True, timeout=300, check=True,
    )  # fmt: skip
    return done.stdout


@pytest.mark.slow
@pytest.mark.timeout(900)  # a CPU training cycle on a shared 2-core machine: minutes under load
def test_live_traffic_is_explored_judged_trained_on_gated_promoted_and_served(
    tmp_path: Path, pg_url: str, redis_db: str
) -> None:
    (tmp_path / "models").symlink_to(MODEL_HOME / "models")  # the trainer's base model, as `models pull` left it
    server = ScriptedLLMServer(script(), prompt_token_ids=True, vocab=SMOLLM2_VOCAB - 1)
    with deploy(
        tmp_path, pg_url, redis_db, script(), server=server, pool=judged_pool,
        queues="conductor,llm,default,reward", **SETTINGS,
    ) as d:  # fmt: skip
        acme, globex = d.key("acme"), d.key("globex")
        set_exploration(d.runtime.sessions, "acme", True)
        set_exploration(d.runtime.sessions, "globex", False)

        chat(d, globex, "Warm up: name a number")  # the first request pays for cold connections
        # Interleaved, so both tenants see the same cluster: acme's answers leave exploration running.
        latency: dict[str, list[float]] = {"acme": [], "globex": []}
        acme_jobs = []
        for i in range(3):
            job, seconds = chat(d, acme, f"Name a small number, please ({i})")
            acme_jobs.append(job)
            latency["acme"].append(seconds)
            latency["globex"].append(chat(d, globex, f"Name a small number too ({i})")[1])

        def judged() -> list[Judgement]:
            with d.runtime.sessions() as s:
                return list(
                    s.scalars(select(Judgement).where(Judgement.job_id.in_(acme_jobs), Judgement.status == "ok"))
                )

        wait_for("3 judged groups", lambda: len(judged()) == 3, 120)
        judgements = judged()
        stats = json.loads(cli(d, "train", "dataset", "--reward-sources", "judge"))
        assert stats["groups"] == 3 and stats["rows"] == 9 and stats["reward_by_source"]["judge"]["rows"] == 9

        with workers(d.env, tmp_path, ["trainer"], queues="train", concurrency=1):
            beat = Proc("beat", ["beat", "-l", "INFO"], d.env, tmp_path / "beat.log")
            try:
                cycle = wait_for("a beat-started cycle to finish", ended_cycle(d.runtime.sessions), 420, every=1.0)
            finally:
                beat.stop()
        assert isinstance(cycle, TrainingCycle)
        assert (cycle.trigger, cycle.status, cycle.error) == ("beat", "done", None), cycle.stats
        assert cycle.stats["gate"]["passed"], cycle.stats["gate"]
        assert cycle.stats["health"]["reward_by_source"]["judge"]["rows"] == 9
        # Where the cycle's time went is in its record: reading traces, training, and the gate's two dev runs.
        assert set(cycle.stats["seconds"]) == {"dataset", "train", "gate_candidate", "gate_active"}
        assert all(s > 0 for s in cycle.stats["seconds"].values()), cycle.stats["seconds"]
        # The trainer process wrote the cycle to TensorBoard: its point, and one run of its optimizer steps.
        board = read_board(tmp_path / "tensorboard" / "cycles")
        assert board["cycle/status/done"] == [(cycle.id, 1.0)] and board["cycle/gate/passed"] == [(cycle.id, 1.0)]
        steps = read_board(tmp_path / "tensorboard" / f"cycle-{cycle.id}")
        assert steps["train/loss"] and [s for s, _ in steps["train/ess"]] == [s for s, _ in steps["train/loss"]]
        assert steps["train/reward_by_source/judge/mean"]
        with d.runtime.sessions() as s:
            active = s.scalar(select(Checkpoint.id).where(Checkpoint.status == "active"))
            steps = s.scalar(select(func.count()).select_from(Job).where(Job.explore_of.in_(acme_jobs)))
        assert active == cycle.checkpoint_id and steps == 3

        def served_by_new_policy() -> list[str]:
            job, _ = chat(d, globex, "And one more number")
            with d.runtime.sessions() as s:
                versions = [v or "" for v in s.scalars(select(Round.policy_version).where(Round.job_id == job))]
            return versions if versions and set(versions) == {active} else []

        assert wait_for("a chat request planned by the promoted policy", served_by_new_policy, 30, every=0.2)
        status = cli(d, "train", "status")

    assert f"checkpoint={active}" in status and "gate passed" in status and "reward by source: judge" in status
    assert all(j.exploration and len(j.chain_ids) == 3 for j in judgements)
    on, off = statistics.median(latency["acme"]), statistics.median(latency["globex"])
    print(f"\nchat latency p50: exploration on {on:.3f}s, opted out {off:.3f}s (n=3 each): {latency}")
    # Exploration runs after the answer at the lowest priority; the user waits no longer than
    # the opted-out tenant beyond scheduling noise on a shared 2-core machine.
    assert on <= off + 0.5


def test_an_opted_out_tenant_contributes_no_exploration_samples_and_no_judge_calls(
    tmp_path: Path, pg_url: str, redis_db: str
) -> None:
    with deploy(
        tmp_path, pg_url, redis_db, script(), pool=judged_pool, queues="conductor,llm,default,reward",
        exploration_rate="1.0", exploration_samples="3",
    ) as d:  # fmt: skip
        globex, acme = d.key("globex"), d.key("acme")
        set_exploration(d.runtime.sessions, "globex", False)
        set_exploration(d.runtime.sessions, "acme", True)  # the control: exploration is on in this cluster
        jobs = [chat(d, globex, f"Globex asks for a number ({i})")[0] for i in range(3)]
        control, _ = chat(d, acme, "Acme asks for a number")

        def control_judged() -> int:
            with d.runtime.sessions() as s:
                return s.scalar(select(func.count()).select_from(Judgement).where(Judgement.job_id == control)) or 0

        wait_for("the opted-in control to be explored and judged", control_judged, 90)
        with d.runtime.sessions() as s:
            explored = s.scalar(select(func.count()).select_from(Job).where(Job.explore_of.in_(jobs)))
            judged = s.scalar(select(func.count()).select_from(Judgement).where(Judgement.job_id.in_(jobs)))
        prompts = [c.last_user for c in d.server.calls_for("scripted-judge")]
        planned = [c.last_user for c in d.server.calls_for("scripted-conductor")]

    assert explored == 0 and judged == 0
    assert len(prompts) == 1 and "Acme asks" in prompts[0] and not any("Globex" in p for p in prompts)
    assert sum("Globex" in p for p in planned) == 3  # one sample per request: the user's own
