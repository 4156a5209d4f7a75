"""Promotion and rollback: every process follows the store's active checkpoint without a restart,
each round records the version that produced it, and a failed gate changes nothing."""

from __future__ import annotations

import json
import time

import pytest

from conductor.domain.problem import Problem
from conductor.runtime import Runtime
from conductor.store.models import Round
from reward_pipeline.training.board import TrainingBoard
from reward_pipeline.training.checkpoints import Registry
from reward_pipeline.training.export import lineage
from reward_pipeline.training.gate import PolicyEval, decide, evaluate_workers
from reward_pipeline.training.loops.local_run import LocalRunConfig, _warmup_gate
from reward_pipeline.training.loops.online import GateContext, OnlineConfig, Policy, continue_from
from reward_pipeline.training.rollouts import RolloutBatch, Rollouts
from tests.reward_pipeline.training.test_health import read_board
from tests.support.pools import scripted_pool
from tests.support.scripted_llm import Reply, ScriptedLLMServer
from tests.support.system import embedded_system, make_settings
from tests.support.workflows import block


def _script(model: str, messages: list[dict], body: dict) -> Reply:
    if model.endswith("scripted-conductor") or model.startswith("conductor-"):
        return Reply(block("[0]", '["answer it"]', "[[]]"))
    return Reply("The answer is 42.")


@pytest.fixture
def server():
    srv = ScriptedLLMServer(_script).start()
    yield srv
    srv.stop()


def _adapter(tmp_path, name: str):
    path = tmp_path / "adapters" / name
    path.mkdir(parents=True)
    (path / "adapter_config.json").write_text("{}")
    return path


def test_every_process_switches_to_a_promoted_checkpoint_and_back_on_rollback(tmp_path, server):
    settings = make_settings(tmp_path, policy_refresh_s=0.2)
    pool = scripted_pool(server.base_url)
    procs = [Runtime(settings, pool=pool.model_copy(deep=True)) for _ in range(2)]  # two worker processes
    registry = Registry(procs[0].sessions)
    messages = [{"role": "user", "content": "q"}]
    assert {p.gateway.call_conductor(messages).policy_version for p in procs} == {"scripted-v0"}

    for name in ("ck-1", "ck-2"):
        registry.add(
            id=name, parent_id="ck-1" if name == "ck-2" else None, stage="grpo", base_model="b",
            path=_adapter(tmp_path, name), config={}, metrics={}, data_window={},
        )  # fmt: skip
    registry.promote("ck-1")
    time.sleep(0.3)
    seen = [p.gateway.call_conductor(messages) for p in procs]
    assert {c.policy_version for c in seen} == {"ck-1"}
    assert server.calls[-1].model == "conductor-ck-1"  # the adapter's own served name, never reused

    registry.promote("ck-2")
    time.sleep(0.3)
    assert {p.gateway.call_conductor(messages).policy_version for p in procs} == {"ck-2"}
    assert [c.status for c in registry.list()] == ["retired", "active"]

    registry.rollback()  # back to ck-2's parent
    time.sleep(0.3)
    assert {p.gateway.call_conductor(messages).policy_version for p in procs} == {"ck-1"}
    registry.rollback()  # ck-1 has no parent: the pool's own Conductor
    time.sleep(0.3)
    assert {p.gateway.call_conductor(messages).policy_version for p in procs} == {"scripted-v0"}
    assert server.calls[-1].model == "scripted-conductor"
    for p in procs:
        p.close()


def test_rounds_record_the_version_that_produced_them(tmp_path, server):
    pool = scripted_pool(server.base_url)
    with embedded_system(tmp_path, pool, recursion=False, policy_refresh_s=0.1) as sys:
        registry = Registry(sys.runtime.sessions)
        before, _ = sys.service.submit(Problem(question="one"))
        sys.service.wait([before], timeout=30, poll_s=0.05)
        registry.add(
            id="ck-9", parent_id=None, stage="grpo", base_model="b", path=_adapter(tmp_path, "ck-9"),
            config={}, metrics={}, data_window={},
        )  # fmt: skip
        registry.promote("ck-9")
        time.sleep(0.2)
        after, _ = sys.service.submit(Problem(question="two"))
        sys.service.wait([after], timeout=30, poll_s=0.05)
        with sys.runtime.sessions() as s:
            version = {r.job_id: (r.policy_version, r.conductor_model) for r in s.query(Round).all()}
    assert version[before] == ("scripted-v0", "openai/scripted-conductor")
    assert version[after] == ("ck-9", "openai/conductor-ck-9")


def test_a_failed_gate_leaves_the_active_policy_untouched(tmp_path):
    registry = Registry(Runtime(make_settings(tmp_path)).sessions)
    for name in ("good", "worse"):
        registry.add(
            id=name, parent_id=None, stage="grpo", base_model="b", path=_adapter(tmp_path, name),
            config={}, metrics={}, data_window={},
        )  # fmt: skip
    registry.promote("good")
    active = PolicyEval("good", n=40, plans=40, parsed=38, correct=20, tokens_per_question=300)
    candidate = PolicyEval("worse", n=40, plans=40, parsed=20, correct=19, tokens_per_question=300)

    decision = decide(candidate, active)
    registry.record_gate("worse", decision)

    assert not decision["passed"] and "parse rate worse" in decision["reasons"][0]
    assert registry.active().id == "good"
    assert registry.get("worse").status == "rejected" and registry.get("worse").gate == decision


def test_the_gate_passes_a_candidate_within_the_noise_and_fails_one_that_spends_too_many_tokens():
    active = PolicyEval("a", n=24, plans=24, parsed=23, correct=4, tokens_per_question=300)
    same = PolicyEval("c", n=24, plans=24, parsed=22, correct=3, tokens_per_question=320)
    costly = PolicyEval("c", n=24, plans=24, parsed=23, correct=4, tokens_per_question=400)

    assert decide(same, active)["passed"]
    verdict = decide(costly, active)
    assert not verdict["passed"] and "tokens/question" in verdict["reasons"][0]


def test_a_policy_eval_reads_its_counts_from_one_job_per_dev_problem():
    batch = RolloutBatch(
        job_ids=["j1", "j2", "j3", "j4"], plan_rounds=5, parsed_rounds=4, correct_chains=3, tokens=1000
    )

    ev = PolicyEval.from_rollouts("ck-1", batch)

    assert ev == PolicyEval("ck-1", n=4, plans=5, parsed=4, correct=3, tokens_per_question=250)
    assert ev.parse_rate == 0.8 and ev.accuracy == 0.75


class _Serving:
    """Records which policy is active; the fake rollouts below read it."""

    def __init__(self) -> None:
        self.active: list[str] = []

    def load(self, version, adapter) -> None:
        pass

    def activate(self, gateway, version, adapter, *, temperature) -> None:
        self.active.append(version)


class _Rollouts:
    """The active warm-up policy parses every plan, the base model a quarter of them."""

    def __init__(self, serving: _Serving) -> None:
        self.serving = serving

    def run(self, problems, *, samples, options) -> RolloutBatch:
        n = len(problems)
        parsed = n if self.serving.active[-1] != "base" else n // 4
        return RolloutBatch(job_ids=[f"j{i}" for i in range(n)], plan_rounds=n, parsed_rounds=parsed, tokens=100 * n)


def _store_with_a_warmup(tmp_path) -> tuple[Registry, _Serving, list[dict], GateContext]:
    """A store holding one warm-up candidate, and a gate over scripted rollouts in which it passes."""
    registry = Registry(Runtime(make_settings(tmp_path)).sessions)
    registry.add(
        id="warm-1", parent_id=None, stage="warmup", base_model="b", path=_adapter(tmp_path, "warm-1"),
        config={}, metrics={}, data_window={},
    )  # fmt: skip
    serving, events = _Serving(), []
    return registry, serving, events, GateContext(_Rollouts(serving), None, serving, registry, log=events.append)


def test_the_warmup_gate_needs_no_trainer_and_promotes_a_candidate_that_passes(tmp_path):
    registry, serving, events, gating = _store_with_a_warmup(tmp_path)

    start = _warmup_gate(gating, [Problem(question=f"q{i}") for i in range(40)], LocalRunConfig(online=OnlineConfig()))

    assert start.version == "warm-1" and serving.active == ["warm-1", "base"]
    assert registry.active().id == "warm-1"
    assert [e["event"] for e in events] == ["gate"] and events[0]["passed"]
    # Where the gate's time went is recorded with its decision: the candidate's dev run and the active one's.
    assert set(events[0]["seconds"]) == {"candidate", "active"}
    assert all(s >= 0 for s in events[0]["seconds"].values())


def test_the_warmup_gates_decision_is_cycle_0_on_the_runs_tensorboard(tmp_path):
    """`make train-local` runs `train online --cycles 0`: the gate of its warm-up is the online stage's only
    decision, and it must still be on the run's board (read back with TensorBoard's own reader)."""
    _, _, events, gating = _store_with_a_warmup(tmp_path)
    board = TrainingBoard(tmp_path / "report" / "tensorboard")

    dev = [Problem(question=f"q{i}") for i in range(40)]
    _warmup_gate(gating, dev, LocalRunConfig(online=OnlineConfig()), board=board)
    board.close()

    (decision,) = events
    points = read_board(tmp_path / "report" / "tensorboard")
    assert points["cycle/gate/passed"] == [(0, 1.0)]
    assert points["cycle/gate/candidate/accuracy"] == [(0, pytest.approx(decision["candidate"]["accuracy"]))]
    assert points["cycle/gate/active/parse_rate"] == [(0, pytest.approx(decision["active"]["parse_rate"]))]


def _workers_script(model: str, messages: list[dict], body: dict) -> Reply:
    return Reply("The answer is 42." if model.endswith("alpha") else "The answer is 7.")


def test_the_run_measures_each_model_worker_alone_on_the_dev_set_with_its_interval(tmp_path):
    srv = ScriptedLLMServer(_workers_script).start()
    pool = scripted_pool(
        srv.base_url, extra_workers=[{"name": "calc", "model": "tool/calculator", "description": "exact arithmetic"}]
    )
    dev = [Problem(question=f"What is 6 * 7? ({i})", answer="42", kind="math") for i in range(4)]
    try:
        with embedded_system(tmp_path, pool, recursion=False) as sys:
            lines = evaluate_workers(Rollouts(sys.service), pool, dev, tag="dev-baseline")
    finally:
        srv.stop()

    assert [(b["method"], b["correct"], b["n"]) for b in lines] == [("single:alpha", 4, 4), ("single:beta", 0, 4)]
    assert lines[0]["ci_low"] < 1.0 == lines[0]["ci_high"] and lines[1]["ci_low"] == 0.0 < lines[1]["ci_high"]
    assert {c.model for c in srv.calls} == {"scripted-worker-alpha", "scripted-worker-beta"}  # no Conductor call


def _shipped(tmp_path, pool, version: str = "warmup-shipped"):
    """The pool's Conductor with an adapter beside it as `make train-local` exports one: weights and record."""
    path = _adapter(tmp_path, "shipped")
    (path / "adapter_model.safetensors").write_bytes(b"weights")
    entry = {"id": version, "stage": "warmup", "base_model": "smollm2", "gate": {"passed": True}, "metrics": {"n": 24}}
    (path / "record.json").write_text(json.dumps({"checkpoint": version, "lineage": [entry]}))
    return pool.conductor.model_copy(update={"adapter": str(path), "policy_version": version}), path


def test_training_continues_from_the_adapter_the_pool_ships_while_no_checkpoint_is_active(tmp_path, server):
    pool = scripted_pool(server.base_url)
    registry = Registry(Runtime(make_settings(tmp_path), pool=pool).sessions)
    assert continue_from(registry, pool.conductor) == Policy("base", None)  # nothing shipped: the base model
    conductor, path = _shipped(tmp_path, pool)

    # The shipped adapter is what serves and what wrote the traces, so GRPO trains it, not the base model.
    start = continue_from(registry, conductor)
    assert start == Policy("warmup-shipped", path)
    assert continue_from(registry, conductor) == start  # registered once, from its record
    [row] = registry.list()
    assert (row.status, row.stage, row.gate, row.metrics["n"]) == ("shipped", "warmup", {"passed": True}, 24)
    assert registry.active() is None  # nothing switches: the pool's own Conductor goes on serving it

    # A checkpoint trained from it names it as parent, so its lineage reaches the shipped record...
    registry.add(
        id="grpo-1", parent_id=start.version, stage="grpo", base_model="b", path=_adapter(tmp_path, "grpo-1"),
        config={}, metrics={}, data_window={},
    )  # fmt: skip
    registry.promote("grpo-1")
    assert continue_from(registry, conductor) == Policy("grpo-1", tmp_path / "adapters" / "grpo-1")
    assert [v.id for v in lineage(registry, "grpo-1")] == ["grpo-1", "warmup-shipped"]
    # ...and rolling it back returns to the pool's own Conductor (the shipped adapter as the pool serves it).
    assert registry.rollback() is None and registry.active() is None
    assert {c.id: c.status for c in registry.list()} == {"warmup-shipped": "shipped", "grpo-1": "retired"}


def test_a_local_run_without_a_warmup_of_its_own_continues_from_the_shipped_adapter(tmp_path, server):
    # `conductor train online` on a fresh store: its training pool carries no adapter, the deployed pool does.
    registry = Registry(Runtime(make_settings(tmp_path)).sessions)
    conductor, path = _shipped(tmp_path, scripted_pool(server.base_url))
    serving, events = _Serving(), []
    gating = GateContext(_Rollouts(serving), None, serving, registry, log=events.append)

    start = _warmup_gate(gating, [Problem(question="q")], LocalRunConfig(online=OnlineConfig()), shipped=conductor)

    assert start == Policy("warmup-shipped", path)
    assert events == [] and registry.active() is None  # nothing to gate: it is what the pool already serves


def test_on_a_fresh_store_checkpoints_list_shows_the_shipped_adapter_as_the_active_policy(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from conductor.cli.main import app as cli
    from conductor.config.pool import load_pool

    monkeypatch.setenv("CONDUCTOR_HOME", str(tmp_path))
    shipped = load_pool(None).conductor  # the bundled local pool and the adapter beside it

    listed = CliRunner().invoke(cli, ["checkpoints", "list"]).stdout.splitlines()

    assert listed[0].startswith(f"{shipped.policy_version}  active    stage=warmup  shipped with the pool at ")
    assert listed[0].endswith("gate passed") and listed[1].startswith("  dev set: accuracy ")
