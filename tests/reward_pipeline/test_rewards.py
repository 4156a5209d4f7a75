"""Rewards for finished jobs: the paper's 0 / 0.5 / 1, per-round zeros, best-of-G, feedback, idempotency.

Jobs run the real pipeline (embedded Celery worker, SQLite) against the scripted server; the
`conductor.score` task scores them on the reward queue as soon as finalize enqueues it.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import func, select

from conductor.app.service import JobSpec
from conductor.domain.problem import Problem
from conductor.store.models import Reward
from reward_pipeline.rewards import RewardScheme, record_feedback, score_job
from reward_pipeline.training.dataset import build_dataset
from tests.support.pools import scripted_pool
from tests.support.scripted_llm import Reply, ScriptedLLMServer
from tests.support.system import embedded_system
from tests.support.workflows import block, question_of

# -- a scripted Conductor and workers whose answers the question controls -----------------------
# Conductor: one step on worker 0 whose subtask is the whole question; "[garble-first]" makes the
# first plan for that question unparseable. Workers: "[say:X]" answers X, "[say-seq:A,B,C]"
# answers A, B, C to successive calls (samples of one job), "[moa-say:X]" answers X only when
# it sees earlier steps (an aggregator), else "unsure".


def eval_script() -> tuple[object, Counter]:
    plans: Counter = Counter()
    said: Counter = Counter()
    lock = threading.Lock()

    def script(model: str, messages: list[dict], body: dict) -> Reply:
        text = question_of(messages)
        if model.endswith("scripted-conductor"):
            if "You already ran this workflow" in text:
                return Reply(block("[]", "[]", "[]"))
            q = text.rsplit("Question: ", 1)[-1].split("\n\nThink briefly")[0].strip()
            with lock:
                plans[q] += 1
                n = plans[q]
            if "[garble-first]" in q and n == 1:
                return Reply("I would just answer it directly, no lists needed.")
            return Reply(block("[0]", json.dumps([q]), "[[]]"))
        last = messages[-1]["content"]
        if m := re.search(r"\[say:([^\]]+)\]", last):
            return Reply(f"Let me work it out. The answer is {m.group(1)}")
        if m := re.search(r"\[say-seq:([^\]]+)\]", last):
            with lock:
                i = said[m.group(1)]
                said[m.group(1)] += 1
            values = m.group(1).split(",")
            return Reply(f"The answer is {values[i % len(values)]}")
        if m := re.search(r"\[moa-say:([^\]]+)\]", last):
            seen = any(x["role"] == "assistant" for x in messages)
            return Reply(f"The answer is {m.group(1)}" if seen else "I am unsure.")
        return Reply("no idea")

    return script, plans


def wait_scored(runtime, job_id: str, timeout: float = 30.0) -> list[Reward]:
    """Poll until the score task has written the job's verifier rewards."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with runtime.sessions() as s:
            rows = list(
                s.scalars(
                    select(Reward).where(Reward.job_id == job_id, Reward.source == "verifier").order_by(Reward.id)
                )
            )
        if rows:
            return rows
        time.sleep(0.1)
    raise AssertionError(f"job {job_id} was not scored within {timeout}s")


@contextmanager
def scripted_server() -> Iterator[ScriptedLLMServer]:
    script, _ = eval_script()
    server = ScriptedLLMServer(script).start()  # type: ignore[arg-type]
    try:
        yield server
    finally:
        server.stop()


def _run(sys, problem: Problem, samples: int | None = None) -> tuple[str, dict]:
    job_id, _ = sys.service.submit(problem, JobSpec(samples=samples))
    sys.service.wait([job_id], timeout=60, poll_s=0.05)
    wait_scored(sys.runtime, job_id)
    return job_id, sys.service.job(job_id)


def test_right_answer_earns_1_and_wrong_answer_earns_half(tmp_path: Path) -> None:
    with scripted_server() as srv, embedded_system(tmp_path, scripted_pool(srv.base_url), recursion=False) as sys:
        _, right = _run(sys, Problem(question="What is 2 + 3? [say:5]", answer="5"))
        _, wrong = _run(sys, Problem(question="What is 2 + 2? [say:5]", answer="4"))

    assert [(r["value"], r["correct"], r["verifier"]) for r in right["rewards"]] == [(1.0, True, "number")]
    assert [(r["value"], r["correct"], r["verifier"]) for r in wrong["rewards"]] == [(0.5, False, "number")]
    chain = right["chains"][0]
    assert right["rewards"][0]["chain_id"] == chain["chain_id"]
    assert right["rewards"][0]["round_id"] == chain["rounds"][-1]["round_id"]
    assert "expected 4" in wrong["rewards"][0]["details"]["reason"]


def test_an_unparseable_plan_round_gets_0_and_the_trace_export_carries_each_rounds_reward(tmp_path: Path) -> None:
    with scripted_server() as srv, embedded_system(tmp_path, scripted_pool(srv.base_url), recursion=False) as sys:
        job_id, view = _run(sys, Problem(question="[garble-first] What is 6 * 7? [say:42]", answer="42"))
        traces = tmp_path / "traces.jsonl"
        sys.service.export_traces(traces)

    rounds = view["chains"][0]["rounds"]
    assert [r["parse_status"] for r in rounds] == ["failed", "ok"]
    by_round = {r["round_id"]: r for r in view["rewards"]}
    assert by_round[rounds[0]["round_id"]]["value"] == 0.0
    assert by_round[rounds[0]["round_id"]]["verifier"] == "parse"
    assert by_round[rounds[0]["round_id"]]["chain_id"] is None  # must not leak onto the chain's parsed rounds
    assert by_round[rounds[1]["round_id"]]["value"] == 1.0
    lines = [json.loads(x) for x in traces.read_text().splitlines()]
    exported = {ln["round_id"]: ln["reward"]["value"] for ln in lines if ln["job_id"] == job_id}
    assert exported == {rounds[0]["round_id"]: 0.0, rounds[1]["round_id"]: 1.0}


def test_best_of_g_picks_the_right_sample_as_the_jobs_answer(tmp_path: Path) -> None:
    with scripted_server() as srv, embedded_system(tmp_path, scripted_pool(srv.base_url), recursion=False) as sys:
        job_id, view = _run(sys, Problem(question="What is 10 / 2? [say-seq:7,9,5]", answer="5"), samples=3)

    values = sorted(r["value"] for r in view["rewards"])
    assert values == [0.5, 0.5, 1.0]
    best = next(r for r in view["rewards"] if r["value"] == 1.0)
    assert view["answer"] == "The answer is 5"
    assert view["job_id"] == job_id
    chain_answers = {c["chain_id"]: c["answer"] for c in view["chains"]}
    assert chain_answers[best["chain_id"]] == view["answer"]


def test_scoring_is_idempotent_and_force_rescores_with_another_scheme(tmp_path: Path) -> None:
    with scripted_server() as srv, embedded_system(tmp_path, scripted_pool(srv.base_url), recursion=False) as sys:
        job_id, _ = _run(sys, Problem(question="What is 1 + 1? [say:3]", answer="2"))
        first = wait_scored(sys.runtime, job_id)
        again = score_job(sys.runtime.sessions, job_id)
        sys.app.send_task("conductor.score", args=[job_id])  # a duplicate delivery
        time.sleep(0.5)
        with sys.runtime.sessions() as s:
            count = s.scalar(select(func.count()).select_from(Reward).where(Reward.job_id == job_id))
        rescored = score_job(sys.runtime.sessions, job_id, force=True, scheme=RewardScheme(unparseable=-1, wrong=0.25))
        stored = sys.service.job(job_id)["rewards"]

    assert [r.id for r in again] == [r.id for r in first] and count == 1
    assert [r.value for r in rescored] == [0.25]
    assert [r["value"] for r in stored] == [0.25]  # replaced, not added


def test_feedback_adds_a_feedback_reward_on_the_answer_chain_and_a_new_one_replaces_it(tmp_path: Path) -> None:
    with scripted_server() as srv, embedded_system(tmp_path, scripted_pool(srv.base_url), recursion=False) as sys:
        job_id, view = _run(sys, Problem(question="What is 3 + 3? [say:6]", answer="6"))
        down = record_feedback(sys.runtime.sessions, job_id, "thumbs down")
        traces = tmp_path / "t.jsonl"
        sys.service.export_traces(traces)
        trace = json.loads(traces.read_text().splitlines()[0])
        up = record_feedback(sys.runtime.sessions, job_id, 0.9)
        after = sys.service.job(job_id)
        # A job with no reference is never verified, but feedback still rewards it.
        free_id, _ = sys.service.submit(Problem(question="Tell me a joke [say:none]"))
        sys.service.wait([free_id], timeout=30, poll_s=0.05)
        free = record_feedback(sys.runtime.sessions, free_id, "up")
        free_view = sys.service.job(free_id)

    assert (down.source, down.verifier, down.correct, down.value) == ("feedback", "feedback", False, 0.5)
    assert down.chain_id == view["chains"][0]["chain_id"]
    assert trace["reward"]["verifier"] == "feedback"  # the newest reward on the chain wins in the export
    assert up.correct is True and abs(up.value - 0.95) < 1e-9
    sources = Counter(r["source"] for r in after["rewards"])
    assert sources == {"verifier": 1, "feedback": 1}
    assert [r["source"] for r in free_view["rewards"]] == ["feedback"] and free.value == 1.0


def test_a_plan_that_handed_the_calculator_words_earns_wrong_though_the_fallback_answered_right(tmp_path: Path) -> None:
    def script(model: str, messages: list[dict], body: dict) -> Reply:
        if model.endswith("scripted-conductor"):
            return Reply(block("[2]", json.dumps(["six times seven"]), "[[]]"))
        return Reply("The answer is 42")

    server = ScriptedLLMServer(script, prompt_token_ids=True).start()  # type: ignore[arg-type]
    calc = {"name": "calc", "model": "tool/calculator", "description": "arithmetic"}
    pool = scripted_pool(server.base_url, extra_workers=[calc])
    try:
        with embedded_system(tmp_path, pool, recursion=False, fallback_worker="alpha") as sys:
            _, view = _run(sys, Problem(question="What is six times seven?", answer="42"))
            rows = build_dataset(sys.runtime.sessions).rows
    finally:
        server.stop()

    plan, fallback = view["chains"][0]["rounds"]
    assert (plan["kind"], fallback["kind"]) == ("plan", "fallback") and view["answer"] == "The answer is 42"
    by_round = {r["round_id"]: r for r in view["rewards"] if r["chain_id"] is None}
    assert (by_round[plan["round_id"]]["value"], by_round[plan["round_id"]]["verifier"]) == (0.5, "tool-miss")
    chain = next(r for r in view["rewards"] if r["chain_id"] is not None)
    assert (chain["value"], chain["correct"]) == (1.0, True)  # the user got a right answer
    assert [(r.round_id, r.reward) for r in rows] == [(plan["round_id"], 0.5)]  # the policy learns its plan was wrong
