"""The read models: one JSON spelling per shape of a job, the same numbers in every shape."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from conductor.app.read_models import JobSummary, ResultLine, Usage
from conductor.store.models import Job


def _job(**overrides: object) -> Job:
    fields: dict[str, object] = {
        "id": "job-1",
        "external_id": "p-7",
        "status": "done",
        "priority": 5,
        "problem": {"question": "What is 6 * 7?"},
        "samples": 1,
        "options": {},
        "answer": "42",
        "error": None,
        "prompt_tokens": 30,
        "completion_tokens": 12,
        "model_calls": 3,
        "cost_usd": 0.0123456789,
        "created_at": datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC),
        "finished_at": datetime(2026, 1, 2, 3, 4, 9, tzinfo=UTC),
    }
    fields.update(overrides)
    return Job(**fields)


def test_every_shape_spells_money_cost_usd_and_counts_the_same_tokens():
    job = _job()
    line, summary = ResultLine.of(job).to_json(), JobSummary.of(job).to_json()
    assert "cost" not in line and line["cost_usd"] == summary["usage"]["cost_usd"] == 0.01234568
    assert line["tokens"] == summary["usage"]["total_tokens"] == 42
    assert summary["usage"]["model_calls"] == 3


def test_the_openai_usage_carries_tokens_only():
    assert Usage.of(_job()).openai() == {"prompt_tokens": 30, "completion_tokens": 12, "total_tokens": 42}


def test_a_result_line_names_the_problem_by_its_own_id_and_the_job_by_its_job_id():
    line = ResultLine.of(_job()).to_json()
    assert (line["id"], line["job_id"]) == ("p-7", "job-1")
    assert ResultLine.of(_job(external_id=None)).to_json()["id"] == "job-1"


def test_a_job_summary_is_plain_json_as_a_webhook_stores_it():
    summary = JobSummary.of(_job()).to_json()
    assert json.loads(json.dumps(summary)) == summary
    assert summary["created_at"] == "2026-01-02T03:04:05+00:00" and summary["custom_id"] == "p-7"
