"""The job explorer in a real headless Chromium, against a real `conductor api` process, real worker
processes, Redis and PostgreSQL (the scripted model server behind the pool)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from conductor.domain.states import JobStatus, RoundKind, RoundStatus, StepStatus
from conductor.store.models import Chain, Job, Round, Step, Tenant
from tests.conftest import default_script
from tests.support.api_deployment import Deployment, fresh_deployment
from tests.support.browser import chromium, log_in
from tests.support.scripted_llm import Reply
from tests.support.workflows import block, question_of

pytestmark = pytest.mark.services

SLOW_STEP_S = 4.0


def _script() -> Any:
    """The default script, plus a `[slow]` question: a fan-out whose step "slow part B" takes a few seconds."""
    base = default_script(worker_delay=0.05)

    def script(model: str, messages: list[dict], body: dict) -> Reply:
        if model.endswith("scripted-conductor") and "[slow]" in question_of(messages):
            if "You already ran this workflow" not in question_of(messages):
                return Reply(block("[0, 1, 0]", '["part A", "slow part B", "combine"]', "[[], [], [0, 1]]"))
        reply = base(model, messages, body)
        if messages[-1]["content"] == "slow part B":
            reply.delay_s = SLOW_STEP_S
        return reply

    return script


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    with fresh_deployment(tmp_path_factory.mktemp("explorer"), _script()) as d:
        yield d


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium() as b:
        yield b


@pytest.fixture
def context(browser: Any) -> Iterator[Any]:
    ctx = browser.new_context(viewport={"width": 1600, "height": 1000})
    yield ctx
    ctx.close()


def ui(d: Deployment) -> str:
    return d.base_url.removesuffix("/v1") + "/ui"


def submit(d: Deployment, key: str, question: str, **problem: Any) -> str:
    r = httpx.post(
        f"{d.base_url}/jobs",
        json={"problem": {"question": question, **problem}},
        headers={"Authorization": f"Bearer {key}"},
        timeout=30,
    )
    assert r.status_code == 201, r.text
    return str(r.json()["id"])


def wait_status(d: Deployment, key: str, job_id: str, timeout: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = httpx.get(f"{d.base_url}/jobs/{job_id}", headers={"Authorization": f"Bearer {key}"}, timeout=30).json()
        if job["status"] in ("done", "failed", "cancelled", "budget_exceeded"):
            return job  # type: ignore[no-any-return]
        time.sleep(0.3)
    raise AssertionError(f"job {job_id} did not end")


def test_a_three_step_workflow_is_drawn_as_three_nodes_with_its_access_edges(deployment: Deployment, context: Any):
    key = deployment.key("acme")
    job_id = submit(deployment, key, "[wf:fanout] what is 6*7?", answer="42")
    wait_status(deployment, key, job_id)
    page = log_in(context, ui(deployment), key)

    page.goto(f"{ui(deployment)}/jobs/{job_id}")
    page.wait_for_selector("svg.workflow .node")
    nodes = page.locator("svg.workflow .node")
    assert nodes.count() == 3
    assert [nodes.nth(i).get_attribute("data-status") for i in range(3)] == ["done"] * 3
    edges = page.eval_on_selector_all("svg.workflow .edge", "es => es.map(e => [e.dataset.from, e.dataset.to])")
    assert sorted(edges) == [["0", "2"], ["1", "2"]], "fanout: steps 0 and 1 both feed step 2, nothing else"
    assert "parse: ok" in page.inner_text(".round header")
    assert "42" in page.inner_text("#job-reference")

    page.click('svg.workflow .node[data-step="2"]')
    assert page.inner_text("#step-subtask") == "combine"
    assert page.inner_text("#step-output").startswith("alpha did <combine>")

    page.goto(f"{ui(deployment)}/jobs?q=6*7")
    assert page.locator(f'tr.job[data-job="{job_id}"]').count() == 1
    page.goto(f"{ui(deployment)}/jobs?q=no-such-text-anywhere")
    assert page.locator("tr.job").count() == 0


def test_a_running_jobs_page_changes_when_a_step_finishes(deployment: Deployment, context: Any):
    key = deployment.key("acme")
    page = log_in(context, ui(deployment), key)
    job_id = submit(deployment, key, "[slow] a slow one")
    page.goto(f"{ui(deployment)}/jobs/{job_id}")
    page.evaluate("window.__sameDocument = true")  # gone if the page reloads

    slow = 'svg.workflow .node[data-step="1"]'
    page.wait_for_selector(f'{slow}[data-status="running"]', timeout=30_000)
    assert page.get_attribute('svg.workflow .node[data-step="2"]', "data-status") == "pending"
    page.wait_for_selector(f'{slow}[data-status="done"]', timeout=30_000)
    page.wait_for_selector("#job-status.s-done", timeout=30_000)
    assert page.get_attribute('svg.workflow .node[data-step="2"]', "data-status") == "done"
    assert page.evaluate("window.__sameDocument") is True, "updated in place, not reloaded"


def test_another_tenants_job_is_not_found_and_an_admin_key_sees_it(deployment: Deployment, context: Any, browser: Any):
    owner = deployment.key("acme")
    job_id = submit(deployment, owner, "[wf:single] mine")
    wait_status(deployment, owner, job_id)

    page = log_in(context, ui(deployment), deployment.key("globex"))
    response = page.goto(f"{ui(deployment)}/jobs/{job_id}")
    assert response.status == 404
    assert f"no job {job_id} that this key can see" in page.inner_text("main")
    assert page.locator("svg.workflow").count() == 0
    page.goto(f"{ui(deployment)}/jobs")
    assert page.locator(f'tr.job[data-job="{job_id}"]').count() == 0
    data = page.request.get(f"{ui(deployment)}/jobs/{job_id}/data")
    assert data.status == 404

    admin_ctx = browser.new_context()
    try:
        admin = log_in(admin_ctx, ui(deployment), deployment.key("ops", scopes=["admin"]))
        assert admin.goto(f"{ui(deployment)}/jobs/{job_id}").status == 200
        admin.wait_for_selector("svg.workflow .node")
    finally:
        admin_ctx.close()


def _big_job(d: Deployment, tenant_name: str, n: int) -> str:
    """A running job whose one round has `n` steps, each seeing the previous one and the one ten
    back, written straight into the store (no Conductor writes 200-step plans)."""
    with d.runtime.sessions.begin() as s:
        tenant = s.query(Tenant).filter_by(name=tenant_name).one()
        job = Job(tenant_id=tenant.id, status=JobStatus.RUNNING, problem={"question": "big"}, open_chains=1)
        s.add(job)
        s.flush()
        chain = Chain(job_id=job.id, question="big")
        s.add(chain)
        s.flush()
        rnd = Round(chain_id=chain.id, job_id=job.id, round_index=0, kind=RoundKind.PLAN, status=RoundStatus.RUNNING)
        rnd.n_steps = n
        s.add(rnd)
        s.flush()
        for i in range(n):
            deps = [j for j in (i - 1, i - 10) if j >= 0]
            s.add(
                Step(
                    round_id=rnd.id,
                    job_id=job.id,
                    step_index=i,
                    worker_index=i % 2,
                    worker_name=("alpha", "beta")[i % 2],
                    subtask=f"subtask {i}",
                    access=deps,
                    dependencies=deps,
                    pending_deps=0,
                    status=StepStatus.DONE if i < n // 2 else StepStatus.PENDING,
                    output=f"out {i}" if i < n // 2 else None,
                    prompt_tokens=10,
                    completion_tokens=i,
                )
            )
        return job.id


def test_a_page_with_200_steps_stays_responsive(deployment: Deployment, context: Any):
    key = deployment.key("bigco")
    job_id = _big_job(deployment, "bigco", 200)
    page = log_in(context, ui(deployment), key)
    page.add_init_script(
        "window.__long = []; new PerformanceObserver(l => window.__long.push(...l.getEntries()))"
        ".observe({type: 'longtask', buffered: true});"
    )
    started = time.monotonic()
    page.goto(f"{ui(deployment)}/jobs/{job_id}")
    page.wait_for_selector('svg.workflow .node[data-step="199"]')
    first_paint_s = time.monotonic() - started
    drawn_at = page.evaluate("performance.now()")
    assert page.locator("svg.workflow .node").count() == 200
    assert page.locator("svg.workflow .edge").count() == 199 + 190

    # The job is running, so the page keeps polling; a click must still answer at once.
    time.sleep(2.5)
    click_ms = page.evaluate(
        """() => { const t = performance.now();
                   document.querySelector('svg.workflow .node[data-step="150"]')
                     .dispatchEvent(new MouseEvent('click', {bubbles: true}));
                   return performance.now() - t; }"""
    )
    assert page.inner_text("#step-subtask") == "subtask 150"
    long_after_load = page.evaluate(f"window.__long.filter(e => e.startTime > {drawn_at}).map(e => e.duration)")
    print(f"200 steps: shown in {first_paint_s:.2f} s, click {click_ms:.1f} ms, later long tasks {long_after_load}")
    assert first_paint_s < 10, "200 nodes laid out and drawn"
    assert click_ms < 100, "opening a step is instant"
    assert all(d < 250 for d in long_after_load), "polling an unchanged job never blocks the page"
