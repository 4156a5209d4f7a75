"""The calculator as a worker in real workflows: it computes what the step before it wrote, and a plan
that hands it words ends with an answer, not a failed job."""

from __future__ import annotations

from pathlib import Path

import pytest

from conductor.config.pool import Pool, load_pool
from conductor.domain.calculator import NO_EXPRESSION, calculate
from conductor.domain.problem import Problem
from tests.conftest import MODEL_HOME
from tests.support.pools import scripted_pool
from tests.support.scripted_llm import Reply, ScriptedLLMServer
from tests.support.system import embedded_system
from tests.support.workflows import block, question_of

CALCULATOR = {"name": "calculator", "model": "tool/calculator", "description": "exact arithmetic"}
EXPRESSION_THEN_COMPUTE = block(
    "[0, 2]",
    '["Write the arithmetic expression for: 9 bags of 25 marbles and 3 more marbles.", "Compute it."]',
    "[[], [0]]",
)
CALCULATOR_ON_WORDS = block("[2]", '["Tom has nine bags of marbles. How many?"]', "[[]]")


def _script(model: str, messages: list[dict], body: dict) -> Reply:
    if model.endswith("scripted-conductor"):
        return Reply(CALCULATOR_ON_WORDS if "[words]" in question_of(messages) else EXPRESSION_THEN_COMPUTE)
    return Reply("The marbles are 9 * 25 + 3 in all.")


def _solve(home: Path, pool_for, question: str, answer: str) -> dict:
    server = ScriptedLLMServer(_script).start()
    try:
        with embedded_system(home, pool_for(server.base_url), recursion=False, plan_retries=0) as sys:
            job_id, _ = sys.service.submit(Problem(question=question, answer=answer, kind="math"))
            sys.service.wait([job_id], timeout=300)
            return sys.service.job(job_id)
    finally:
        server.stop()


def _scripted_with_calculator(base_url: str) -> Pool:
    return scripted_pool(base_url, extra_workers=[CALCULATOR])


def test_a_model_writes_the_expression_and_the_calculator_evaluates_it(tmp_path):
    job = _solve(tmp_path, _scripted_with_calculator, "How many marbles?", "228")

    assert job["status"] == "done", job
    assert job["answer"] == "228"
    write, compute = job["chains"][0]["rounds"][0]["steps"]
    assert write["output"] == "The marbles are 9 * 25 + 3 in all."
    assert (compute["worker"], compute["output"]) == ("calculator", "228")
    assert compute["tokens"] == 0, "a tool spends no tokens"


def test_a_calculator_given_words_answers_that_it_found_nothing_and_the_job_still_ends(tmp_path):
    job = _solve(tmp_path, _scripted_with_calculator, "[words] How many marbles?", "228")

    assert job["status"] == "done", job
    assert job["answer"] == NO_EXPRESSION


@pytest.mark.slow
def test_the_calculator_computes_what_the_real_local_model_wrote(tmp_path):
    if not (MODEL_HOME / "models" / "smollm2-135m-instruct" / "config.json").exists():
        pytest.fail("the local model is missing: run `make model` (the test command does)")
    (tmp_path / "models").symlink_to(MODEL_HOME / "models")

    def scripted_conductor_real_workers(base_url: str) -> Pool:
        # The bundled pool's workers (SmolLM2 in process, the calculator) under a scripted Conductor,
        # so the plan is fixed and only the model's expression is left to chance.
        pool = load_pool()
        pool.conductor = scripted_pool(base_url).conductor
        return pool

    job = _solve(tmp_path, scripted_conductor_real_workers, "marbles", "228")

    assert job["status"] == "done", job
    write, compute = job["chains"][0]["rounds"][0]["steps"]
    assert write["worker"] == "smol-precise" and write["tokens"] > 0, "SmolLM2 really wrote the first step"
    assert compute["output"] == calculate([write["output"]]).text
    plan, *rest = job["chains"][0]["rounds"]
    assert plan["answer"] == compute["output"]
    if compute["output"] == NO_EXPRESSION:  # the model wrote no expression: the fallback worker answered instead
        assert [r["kind"] for r in rest] == ["fallback"] and job["answer"] == rest[0]["answer"]
    else:
        assert job["answer"] == compute["output"]
