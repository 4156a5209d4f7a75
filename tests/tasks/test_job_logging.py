"""The job label on log lines: what a line says inside and outside a job's task, and that a
task's binding ends with the task, even when it raises (a pool thread then runs another job)."""

from __future__ import annotations

import io
import logging

import pytest
from celery import Celery

from conductor import log_context
from conductor.log_context import JobLogContext, job_context, note_job
from tasks import job_logging
from tasks.names import TaskName


@pytest.fixture
def lines():
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(job)s|%(message)s"))
    log_context.install([handler])
    logger = logging.getLogger("tests.job_logging")
    logger.addHandler(handler)
    logger.propagate, logger.level = False, logging.INFO
    yield logger, lambda: stream.getvalue().splitlines()
    logger.removeHandler(handler)


def test_a_line_names_what_is_known_of_its_job_and_nothing_outside_one(lines):
    logger, written = lines
    logger.info("before")
    with job_context(round_id=7):
        logger.info("leasing")
        note_job("j1")  # the orchestrator learns the job from the leased round
        logger.info("calling")
    logger.info("after")
    note_job("j2")  # outside a task: ignored, so it cannot label later lines
    logger.info("later")
    assert written() == ["|before", " [round=7]|leasing", " [job=j1 round=7]|calling", "|after", "|later"]


def test_an_explicit_job_id_on_a_record_is_kept(lines):
    logger, written = lines
    with job_context(job_id="running"):
        logger.info("about another job", extra={"job": " [job=other]"})
    assert written() == [" [job=other]|about another job"]


@pytest.mark.parametrize("fails", [False, True])
def test_a_tasks_binding_ends_with_the_task(fails):
    app = Celery(set_as_current=False)
    job_logging.connect()
    seen: list[JobLogContext | None] = []

    @app.task(name=TaskName.RUN_STEP.value, shared=False)
    def run_step(step_id: int) -> None:
        seen.append(log_context.current())
        note_job("j1")
        if fails:
            raise RuntimeError("the step's call failed")

    run_step.apply(args=[42])
    assert seen == [JobLogContext(step_id=42)]
    assert log_context.current() is None
