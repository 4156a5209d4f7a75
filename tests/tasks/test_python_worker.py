"""The python tool as a worker in real workflows (Celery workers, Redis, PostgreSQL, the sandbox): it runs
the code the step before it wrote, an exception is a recorded wrong answer, and a plan that hands it words
ends with a miss answer, not a failed job. Text answers are scored by the short-answer verifier."""

from __future__ import annotations

from pathlib import Path

from conductor.domain.problem import Problem
from conductor.domain.python_tool import NO_CODE
from tests.reward_pipeline.test_rewards import wait_scored
from tests.support.pools import scripted_pool
from tests.support.scripted_llm import Reply, ScriptedLLMServer
from tests.support.system import embedded_system
from tests.support.workflows import block, question_of

PYTHON = {"name": "python", "model": "tool/python", "description": "Python interpreter"}
WRITE_THEN_RUN = block("[0, 2]", '["Write Python that computes the answer.", "Run it."]', "[[], [0]]")
PYTHON_ON_WORDS = block("[2]", '["How many r are in strawberry?"]', "[[]]")
PYTHON_DIVIDES_BY_ZERO = block("[2]", '["1 / 0"]', "[[]]")


def _script(model: str, messages: list[dict], body: dict) -> Reply:
    question = question_of(messages)
    if model.endswith("scripted-conductor"):
        if "[words]" in question:
            return Reply(PYTHON_ON_WORDS)
        return Reply(PYTHON_DIVIDES_BY_ZERO if "[zero]" in question else WRITE_THEN_RUN)
    return Reply("Count them in code:\n```python\nword = 'strawberry'\nword.count('r')\n```")


def test_a_model_writes_code_the_python_tool_runs_it_and_the_text_verifier_scores_it(tmp_path: Path):
    strawberry = {"kind": "text", "answer": "three", "metadata": {"aliases": ["3"]}}
    server = ScriptedLLMServer(_script).start()
    try:
        pool = scripted_pool(server.base_url, extra_workers=[PYTHON])
        with embedded_system(tmp_path, pool, recursion=False, plan_retries=0) as sys:
            ran, _ = sys.service.submit(Problem(question="How many r in strawberry?", **strawberry))
            raised, _ = sys.service.submit(Problem(question="[zero] How many r in strawberry?", **strawberry))
            words, _ = sys.service.submit(Problem(question="[words] How many r in strawberry?", **strawberry))
            sys.service.wait([ran, raised, words], timeout=300)
            jobs = {
                name: sys.service.job(job_id) for name, job_id in (("ran", ran), ("raised", raised), ("words", words))
            }
            rewards = {name: wait_scored(sys.runtime, job_id) for name, job_id in (("ran", ran), ("raised", raised))}
    finally:
        server.stop()

    assert {name: job["status"] for name, job in jobs.items()} == {"ran": "done", "raised": "done", "words": "done"}
    write, run = jobs["ran"]["chains"][0]["rounds"][0]["steps"]
    assert "```python" in write["output"]
    assert (run["worker"], run["output"], run["tokens"]) == ("python", "3", 0)
    assert jobs["ran"]["answer"] == "3"
    assert [(r.value, r.correct, r.verifier) for r in rewards["ran"]] == [(1.0, True, "text")]

    assert jobs["raised"]["answer"] == "Error: ZeroDivisionError: division by zero"
    assert [(r.value, r.correct, r.verifier) for r in rewards["raised"]] == [(0.5, False, "text")]

    assert jobs["words"]["answer"] == NO_CODE
