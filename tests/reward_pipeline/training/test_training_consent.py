"""Training consent: a tenant that says no has none of its rounds in a dataset, a beat cycle, the
retrain trigger's count or the trace export, and is never explored; a tenant that never said follows
the deployment's default. Checkpoints name the tenants whose data trained them. Embedded worker on
SQLite with scripted models (see test_dataset: each question's first plan is right, the second
unparseable, so every job is a group with reward variance)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from conductor.app.service import JobSpec
from conductor.app.tenants import create_key, set_exploration, set_training
from conductor.cli.main import app as cli
from conductor.config.settings import Settings
from conductor.domain.problem import Problem
from conductor.runtime import Runtime
from conductor.store.models import Checkpoint, TrainingCycle
from reward_pipeline.exploration import explore
from reward_pipeline.rewards import score_job
from reward_pipeline.training.dataset import TraceFilter, build_dataset
from reward_pipeline.training.loops.cycle import CycleConfig, run_retrain_cycle
from schedulers.retrain import maybe_start_retrain
from tests.reward_pipeline.training.test_dataset import _script
from tests.support.pools import scripted_pool
from tests.support.scripted_llm import ScriptedLLMServer
from tests.support.system import embedded_system


@pytest.fixture
def tenants(tmp_path):
    """acme said no, globex never said, initech said yes; one job each, and one of the system's own."""
    server = ScriptedLLMServer(_script(), prompt_token_ids=True).start()
    try:
        with embedded_system(tmp_path, scripted_pool(server.base_url), recursion=False, plan_retries=0) as sys:
            ids = {name: create_key(sys.runtime.sessions, name)[1] for name in ("acme", "globex", "initech")}
            set_training(sys.runtime.sessions, "acme", False)
            set_training(sys.runtime.sessions, "initech", True)
            jobs = {}
            for name, tenant_id in [*ids.items(), ("system", None)]:
                problem = Problem(question=f"question of {name}", answer="42", kind="math")
                jobs[name], _ = sys.service.submit(problem, JobSpec(samples=2, tenant_id=tenant_id))
            sys.service.wait(list(jobs.values()), timeout=60, poll_s=0.05)
            for job_id in jobs.values():
                score_job(sys.runtime.sessions, job_id)
            yield sys, ids, jobs
    finally:
        server.stop()


def test_a_tenant_that_said_no_is_in_no_dataset_and_one_that_never_said_follows_the_default(tenants):
    sys, ids, jobs = tenants
    by_default = build_dataset(sys.runtime.sessions, TraceFilter(train_on_tenant_data=True))
    opt_in_only = build_dataset(sys.runtime.sessions, TraceFilter(train_on_tenant_data=False))
    asked_for = build_dataset(sys.runtime.sessions, TraceFilter(tenant_id=ids["acme"]))

    assert {r.job_id for r in by_default.rows} == {jobs["globex"], jobs["initech"], jobs["system"]}
    assert by_default.excluded["no_training_consent"] == 2  # acme's two samples, counted
    assert by_default.stats()["tenants"] == sorted([ids["globex"], ids["initech"]])
    assert {r.job_id for r in opt_in_only.rows} == {jobs["initech"], jobs["system"]}
    assert opt_in_only.stats()["tenants"] == [ids["initech"]]
    assert asked_for.rows == [] and asked_for.excluded["no_training_consent"] == 2  # naming it changes nothing


def test_train_dataset_names_a_tenant_as_every_other_command_does(tenants, monkeypatch):
    # `--tenant acme` was compared with tenant ids: it read as "acme has no traces", 0 rows and 0 excluded.
    sys, ids, _ = tenants
    monkeypatch.setenv("CONDUCTOR_HOME", str(sys.settings.home))
    monkeypatch.setenv("CONDUCTOR_DATABASE_URL", sys.settings.database_url or "")

    def stats(*args: str) -> dict:
        result = CliRunner().invoke(cli, ["train", "dataset", *args])
        assert result.exit_code == 0, result.output
        return dict(json.loads(result.stdout))

    by_name, by_id = stats("--tenant", "acme"), stats("--tenant", ids["acme"])
    assert by_name == by_id and by_name["rows"] == 0 and by_name["excluded"]["no_training_consent"] == 2
    assert stats("--tenant", "globex")["tenants"] == [ids["globex"]]
    typo = CliRunner().invoke(cli, ["train", "dataset", "--tenant", "acmee"])
    assert typo.exit_code != 0 and "no tenant acmee" in typo.output


def test_the_trace_export_and_the_retrain_trigger_leave_out_a_tenant_that_said_no(tenants, tmp_path):
    sys, _, jobs = tenants
    out = tmp_path / "traces.jsonl"
    sys.service.export_traces(out)
    exported = {json.loads(line)["job_id"] for line in out.read_text().splitlines()}
    settings = sys.settings.model_copy(update={"retrain_enabled": True, "retrain_min_new_traces": 1000})
    decision = maybe_start_retrain(sys.runtime.sessions, settings, lambda _: None)

    assert exported == {jobs["globex"], jobs["initech"], jobs["system"]}
    assert decision == "waiting: 6 of 1000 new rewarded traces"  # two samples each of three jobs, not acme's


def test_a_beat_cycle_builds_its_dataset_without_the_tenant_that_said_no_and_records_who_is_in_it(tenants, tmp_path):
    sys, ids, _ = tenants
    with sys.runtime.sessions.begin() as s:
        cycle = TrainingCycle(trigger="beat", status="queued")
        s.add(cycle)
        s.flush()
        cycle_id = cycle.id
    # More groups than there are: the cycle stops after its dataset, before any training.
    result = run_retrain_cycle(sys.service, cycle_id, tmp_path, CycleConfig(min_groups=100))

    assert result["status"] == "skipped"
    assert result["dataset"]["tenants"] == sorted([ids["globex"], ids["initech"]])
    assert result["dataset"]["excluded"]["no_training_consent"] == 2


def test_a_tenant_that_said_no_to_training_is_never_explored_even_when_it_said_yes_to_exploration(tmp_path):
    from tests.reward_pipeline.test_exploration import chat, explorers_of
    from tests.reward_pipeline.test_group_rewards import system

    with system(tmp_path, settings={"exploration_rate": 1.0}) as (sys, _):
        _, acme = create_key(sys.runtime.sessions, "acme")
        set_exploration(sys.runtime.sessions, "acme", True)
        set_training(sys.runtime.sessions, "acme", False)
        job = chat(sys, "Pick [say-seq:5,7]", acme)
        time.sleep(1.0)  # room for a wrongly sent exploration job to show up
        asked_again = explore(sys.service, job)

        assert explorers_of(sys, job) == [] and asked_again is None
        set_training(sys.runtime.sessions, "acme", True)
        assert explore(sys.service, job) is not None  # the same job, once training is allowed


def test_checkpoints_show_and_list_name_the_tenants_whose_data_trained_each(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("CONDUCTOR_HOME", str(tmp_path))
    runtime = Runtime(Settings(home=tmp_path))
    _, acme = create_key(runtime.sessions, "acme")
    _, globex = create_key(runtime.sessions, "globex")
    with runtime.sessions.begin() as s:
        s.add(Checkpoint(id="legacy-0", base_model="b"))  # trained before lineage was recorded
        s.add(Checkpoint(id="warmup-1", base_model="b", data_window={"tenants": []}))
        s.add(Checkpoint(id="grpo-2", parent_id="warmup-1", base_model="b", data_window={"tenants": [acme]}))
        s.add(Checkpoint(id="grpo-3", parent_id="grpo-2", base_model="b", data_window={"tenants": [globex]}))
    runtime.close()

    shown = json.loads(CliRunner().invoke(cli, ["checkpoints", "show"]).stdout)
    one = json.loads(CliRunner().invoke(cli, ["checkpoints", "show", "grpo-3"]).stdout)
    listed = CliRunner().invoke(cli, ["checkpoints", "list"]).stdout.splitlines()

    trained = {c["id"]: c["trained_on"] for c in shown}
    assert trained["grpo-3"] == {"own": ["globex"], "tenants": ["acme", "globex"], "complete": True}
    assert trained["grpo-2"] == {"own": ["acme"], "tenants": ["acme"], "complete": True}
    assert trained["warmup-1"] == {"own": [], "tenants": [], "complete": True}
    assert trained["legacy-0"] == {"own": None, "tenants": [], "complete": False}
    assert one["trained_on"] == trained["grpo-3"]
    assert any(line.startswith("grpo-3") and "tenants=acme,globex" in line for line in listed)
    assert any(line.startswith("legacy-0") and "tenants=- (and unrecorded)" in line for line in listed)


def test_a_tenant_can_say_no_when_its_key_is_created_and_change_it_later(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("CONDUCTOR_HOME", str(tmp_path))
    monkeypatch.setenv("CONDUCTOR_TRAIN_ON_TENANT_DATA", "true")

    def run(*args: str) -> str:
        result = CliRunner().invoke(cli, list(args))
        assert result.exit_code == 0, result.output
        return result.stdout

    run("keys", "create", "--tenant", "acme", "--training", "off")
    run("keys", "create", "--tenant", "globex")
    run("keys", "create", "--tenant", "acme")  # another key: the choice stands
    listed = {line.split()[0]: line for line in run("tenants", "list").splitlines()}
    assert "training=off (trains: no)" in listed["acme"] and "keys=2" in listed["acme"]
    assert "training=unset (trains: yes)" in listed["globex"]

    run("keys", "create", "--tenant", "acme", "--training", "unset")
    assert "training=unset (trains: yes)" in run("tenants", "list")
    refused = CliRunner().invoke(cli, ["keys", "create", "--tenant", "initech", "--training", "never"])
    assert refused.exit_code != 0 and "choose on, off or unset" in refused.output
    assert "initech" not in run("tenants", "list")  # nothing created for a choice that is not one
