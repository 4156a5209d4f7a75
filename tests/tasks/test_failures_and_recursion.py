"""Plans that do not parse, workers that fail, budgets, recursion, samples: each ends in a recorded state."""

from __future__ import annotations

import json

from sqlalchemy import select

from conductor.app.service import JobSpec
from conductor.domain.problem import Problem
from conductor.store.models import Round, Step
from tests.conftest import default_script
from tests.support.pools import scripted_pool
from tests.support.scripted_llm import Reply, ScriptedLLMServer
from tests.support.system import embedded_system


def _solve(tmp_path, question, *, script=None, pool_kwargs=None, spec=JobSpec(), **settings):
    server = ScriptedLLMServer(script or default_script()).start()
    try:
        pool = scripted_pool(server.base_url, **(pool_kwargs or {}))
        with embedded_system(tmp_path, pool, **settings) as sys:
            job_id, _ = sys.service.submit(Problem(question=question), spec)
            sys.service.wait([job_id], timeout=60)
            return sys.service.job(job_id), server
    finally:
        server.stop()


def test_an_unparseable_plan_is_recorded_resampled_then_answered_by_the_fallback_worker(tmp_path):
    job, _ = _solve(tmp_path, "[garbled] hello", plan_retries=1, fallback_worker="beta", recursion=False)

    rounds = job["chains"][0]["rounds"]
    assert [r["kind"] for r in rounds] == ["plan", "plan", "fallback"]
    assert [r["status"] for r in rounds[:2]] == ["unparseable", "unparseable"]
    assert all(r["parse_error"].startswith("missing_block") for r in rounds[:2])
    assert rounds[2]["steps"][0]["worker"] == "beta"
    assert job["status"] == "done" and job["answer"].startswith("beta did")


def test_without_a_fallback_the_job_fails_with_the_parse_error(tmp_path):
    job, _ = _solve(tmp_path, "[garbled] hello", plan_retries=0, recursion=False)

    assert job["status"] == "failed"
    assert "no valid plan after 1 attempts: missing_block" in job["error"]


def test_a_worker_that_keeps_failing_fails_its_step_and_the_job_with_the_reason(tmp_path):
    def script(model, messages, body):
        if model.endswith("conductor"):
            return default_script()(model, messages, body)
        return Reply(status=400, error="this worker rejects everything")

    job, _ = _solve(tmp_path, "[wf:chain] x", script=script, recursion=False)

    steps = job["chains"][0]["rounds"][0]["steps"]
    assert [s["status"] for s in steps] == ["failed", "skipped"]
    assert "rejects everything" in steps[0]["error"]
    assert job["status"] == "failed" and "rejects everything" in job["error"]


def test_replan_with_empty_lists_keeps_the_answer(tmp_path):
    job, _ = _solve(tmp_path, "[wf:single] x", recursion=True, max_rounds=3)

    rounds = job["chains"][0]["rounds"]
    assert [(r["kind"], r["status"], r["parse_status"]) for r in rounds] == [
        ("plan", "done", "ok"),
        ("replan", "accepted", "accept"),
    ]
    assert job["answer"] == rounds[0]["answer"]


def test_replan_with_a_new_workflow_starts_a_round_that_sees_the_previous_answer(tmp_path):
    job, server = _solve(tmp_path, "[wf:single] [replan:redo] x", recursion=True, max_rounds=3)

    rounds = job["chains"][0]["rounds"]
    assert [r["kind"] for r in rounds] == ["plan", "replan", "replan"]
    assert rounds[1]["status"] == "done" and rounds[2]["status"] == "accepted"
    redo = next(c for c in server.calls_for("scripted-worker") if c.last_user.startswith("redo-done"))
    assert redo.messages[1] == {"role": "assistant", "content": rounds[0]["answer"]}
    assert job["answer"] == rounds[1]["answer"] != rounds[0]["answer"]


def test_a_conductor_trained_on_first_plans_only_is_never_offered_a_replan(tmp_path):
    server = ScriptedLLMServer(default_script()).start()
    try:
        pool = scripted_pool(server.base_url)
        pool.conductor = pool.conductor.model_copy(update={"replans": False})
        with embedded_system(tmp_path, pool, recursion=True, max_rounds=3) as sys:
            job_id, _ = sys.service.submit(Problem(question="[wf:single] [replan:redo] x"))
            sys.service.wait([job_id], timeout=60)
            job = sys.service.job(job_id)
    finally:
        server.stop()

    assert [r["kind"] for r in job["chains"][0]["rounds"]] == ["plan"] and job["status"] == "done"


def test_the_replans_setting_offers_replans_to_a_pool_that_has_them_off(tmp_path):
    # How a deployment measures a Conductor trained on replans without editing its pool file.
    server = ScriptedLLMServer(default_script()).start()
    try:
        pool = scripted_pool(server.base_url)
        pool.conductor = pool.conductor.model_copy(update={"replans": False})
        with embedded_system(tmp_path, pool, recursion=True, max_rounds=3, replans=True) as sys:
            job_id, _ = sys.service.submit(Problem(question="[wf:single] [replan:redo] x"))
            sys.service.wait([job_id], timeout=60)
            job = sys.service.job(job_id)
    finally:
        server.stop()

    assert [r["kind"] for r in job["chains"][0]["rounds"]][:2] == ["plan", "replan"] and job["status"] == "done"


def test_the_conductor_as_a_worker_runs_a_nested_workflow(tmp_path):
    def script(model, messages, body):
        text = "\n".join(m["content"] for m in messages)
        if model.endswith("conductor") and "[nest]" in text and "Earlier work" not in text and "inner" not in text:
            # Model 2 is the Conductor itself (in_pool): delegate "inner" to a nested workflow.
            return Reply(
                '```python\nmodel_id = [0, 2]\nsubtasks = ["outer", "inner [wf:chain]"]\naccess_list = [[], "all"]\n```'
            )
        return default_script()(model, messages, body)

    job, _ = _solve(tmp_path, "[nest] x", script=script, pool_kwargs={"in_pool": True}, recursion=False, max_depth=1)

    assert job["status"] == "done", job["error"]
    top, nested = job["chains"][0], job["chains"][1]
    assert nested["depth"] == 1 and nested["parent_step_id"] == top["rounds"][0]["steps"][1]["step_id"]
    assert [s["subtask"] for s in nested["rounds"][0]["steps"]] == ["solve", "check"]
    assert job["answer"] == nested["answer"] == top["rounds"][0]["steps"][1]["output"]


def test_samples_run_g_independent_workflows_for_one_problem(tmp_path):
    job, server = _solve(tmp_path, "[wf:single] x", recursion=False, spec=JobSpec(samples=3))

    assert [c["sample"] for c in job["chains"]] == [0, 1, 2]
    assert all(c["status"] == "done" for c in job["chains"])
    assert len(server.calls_for("scripted-conductor")) == 3
    assert job["answer"] == job["chains"][0]["answer"]


def test_a_model_call_budget_stops_the_job_in_budget_exceeded(tmp_path):
    job, _ = _solve(tmp_path, "[wf:wide] x", recursion=False, max_model_calls=3)

    assert job["status"] == "budget_exceeded"
    assert "budget exhausted" in job["error"]
    assert job["model_calls"] == 3


def test_a_token_budget_stops_before_overspending(tmp_path):
    job, _ = _solve(tmp_path, "[wf:chain] x", recursion=False, spec=JobSpec(budget_tokens=15))

    assert job["status"] == "budget_exceeded"
    assert "tokens (budget 15)" in job["error"]


def test_a_duplicate_delivery_of_a_finished_step_changes_nothing(tmp_path):
    server = ScriptedLLMServer(default_script()).start()
    try:
        with embedded_system(tmp_path, scripted_pool(server.base_url), recursion=False) as sys:
            job_id, _ = sys.service.submit(Problem(question="[wf:chain] x"))
            sys.service.wait([job_id], timeout=60)
            calls_before = len(server.calls)
            with sys.runtime.sessions() as s:
                step_ids = list(s.scalars(select(Step.id).where(Step.job_id == job_id)))
                round_ids = list(s.scalars(select(Round.id).where(Round.job_id == job_id)))
            for sid in step_ids:
                sys.app.send_task("conductor.run_step", args=[sid])
            for rid in round_ids:
                sys.app.send_task("conductor.plan", args=[rid])
            sys.app.send_task("conductor.solve", args=[job_id])
            import time

            time.sleep(2)
            assert len(server.calls) == calls_before
            after = sys.service.job(job_id)
            assert after["status"] == "done" and len(after["chains"]) == 1
    finally:
        server.stop()


def test_a_batch_reports_malformed_lines_and_runs_the_rest(tmp_path):
    batch = tmp_path / "batch.jsonl"
    batch.write_text(
        "\n".join(
            [
                json.dumps({"id": "a", "question": "[wf:single] one"}),
                "{not json",
                json.dumps({"id": "c", "answer": "no question"}),
                json.dumps({"id": "d", "question": "[wf:chain] four"}),
            ]
        )
        + "\n"
    )
    server = ScriptedLLMServer(default_script()).start()
    try:
        with embedded_system(tmp_path, scripted_pool(server.base_url), recursion=False) as sys:
            report = sys.service.submit_batch(batch)
            sys.service.wait(report.job_ids, timeout=60)
            lines = list(sys.service.result_lines(report.job_ids))
            usage = sys.service.usage(batch_id=report.batch_id)
    finally:
        server.stop()
    assert [r["line"] for r in report.rejected] == [2, 3]
    assert [(x["id"], x["status"]) for x in lines] == [("a", "done"), ("d", "done")]
    assert usage["jobs"] == 2 and usage["by_status"] == {"done": 2}
    assert usage["prompt_tokens"] + usage["completion_tokens"] == sum(x["tokens"] for x in lines) > 0


def test_trace_export_leaves_out_evaluation_jobs_unless_asked(tmp_path):
    server = ScriptedLLMServer(default_script()).start()
    try:
        with embedded_system(tmp_path, scripted_pool(server.base_url), recursion=False) as sys:
            prod, _ = sys.service.submit(Problem(question="[wf:single] production"))
            bench, _ = sys.service.submit(
                Problem(question="[wf:single] benchmark"),
                JobSpec(options={"eval": {"run": "r1", "method": "conductor"}}),
            )
            sys.service.wait([prod, bench], timeout=60)
            default, everything = tmp_path / "train.jsonl", tmp_path / "all.jsonl"
            assert sys.service.export_traces(default) == 1
            assert sys.service.export_traces(everything, include_eval=True) == 2
    finally:
        server.stop()
    assert [json.loads(x)["job_id"] for x in default.read_text().splitlines()] == [prod]


def _calculator_for_everything(model, messages, body):
    # A policy that hands the calculator the question's words: the shipped adapter's habit off its math.
    if model.endswith("conductor"):
        return Reply('```python\nmodel_id = [2]\nsubtasks = ["Which planet is largest?"]\naccess_list = [[]]\n```')
    return Reply("Jupiter." if model.endswith("beta") else "Saturn.")


CALCULATOR = {"extra_workers": [{"name": "calc", "model": "tool/calculator", "description": "exact arithmetic"}]}


def test_a_plan_whose_answer_is_the_calculator_finding_nothing_is_answered_by_the_fallback_worker(tmp_path):
    job, _ = _solve(
        tmp_path, "Which planet is largest?", script=_calculator_for_everything, pool_kwargs=CALCULATOR,
        fallback_worker="beta", recursion=False,
    )  # fmt: skip

    rounds = job["chains"][0]["rounds"]
    assert [(r["kind"], r["status"]) for r in rounds] == [("plan", "done"), ("fallback", "done")]
    assert rounds[0]["answer"].startswith("No arithmetic expression found")  # the plan's own answer, kept
    assert rounds[1]["steps"][0]["worker"] == "beta" and rounds[1]["steps"][0]["subtask"] == "Which planet is largest?"
    assert job["status"] == "done" and job["answer"] == "Jupiter."


def test_with_the_setting_off_or_no_fallback_worker_the_calculators_miss_is_the_answer(tmp_path):
    for n, settings in enumerate([{"fallback_worker": "beta", "tool_miss_fallback": False}, {}]):
        job, _ = _solve(
            tmp_path / str(n), "Which planet is largest?", script=_calculator_for_everything, pool_kwargs=CALCULATOR,
            recursion=False, **settings,
        )  # fmt: skip

        assert [r["kind"] for r in job["chains"][0]["rounds"]] == ["plan"]
        assert job["status"] == "done" and job["answer"].startswith("No arithmetic expression found")


def _calculator_with(expression: str):
    def script(model, messages, body):
        if model.endswith("conductor"):
            return Reply(f'```python\nmodel_id = [2]\nsubtasks = ["{expression}"]\naccess_list = [[]]\n```')
        return Reply("beta says 5." if model.endswith("beta") else "alpha says 9.")

    return script


def test_a_calculator_handed_an_expression_with_no_number_of_the_question_is_a_miss_too(tmp_path):
    made_up, _ = _solve(
        tmp_path / "made-up", "Which planet is the largest?", script=_calculator_with("12 * 3 + 4"),
        pool_kwargs=CALCULATOR, fallback_worker="beta", recursion=False,
    )  # fmt: skip
    grounded, _ = _solve(
        tmp_path / "grounded", "Tom has 3 bags of 4 apples. How many apples?", script=_calculator_with("3 * 4"),
        pool_kwargs=CALCULATOR, fallback_worker="beta", recursion=False,
    )  # fmt: skip

    assert [r["kind"] for r in made_up["chains"][0]["rounds"]] == ["plan", "fallback"]
    assert made_up["chains"][0]["rounds"][0]["answer"] == "40" and made_up["answer"] == "beta says 5."
    assert [r["kind"] for r in grounded["chains"][0]["rounds"]] == ["plan"] and grounded["answer"] == "12"
