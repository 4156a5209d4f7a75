"""The official `openai` client's chat completion and response answered by SmolLM2 through the whole pipeline:
a real `conductor api` process in the embedded mode (SQLite, in-process Celery worker)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import yaml

from conductor.app.tenants import create_key
from conductor.config.settings import Settings
from conductor.runtime import Runtime
from tests.conftest import MODEL_HOME
from tests.support.api_deployment import free_port, wait_http
from tests.support.browser import chromium, log_in
from tests.support.cluster import REPO, Proc

pytestmark = pytest.mark.slow


def test_openai_client_chat_is_answered_by_the_local_model(tmp_path: Path):
    if not (MODEL_HOME / "models" / "smollm2-135m-instruct" / "config.json").exists():
        pytest.fail("the local model is missing: run `make model` (the test command does)")
    (tmp_path / "models").symlink_to(MODEL_HOME / "models")
    pool = yaml.safe_load((REPO / "conductor" / "config" / "pools" / "local.yaml").read_text())
    pool["conductor"]["max_tokens"] = 160  # short completions keep the CPU run short; same path
    for w in pool["workers"]:
        w["max_tokens"] = 48
    (tmp_path / "pool.yaml").write_text(yaml.safe_dump(pool))
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONDUCTOR_")}
    env.update(
        CONDUCTOR_HOME=str(tmp_path),
        CONDUCTOR_POOL_FILE=str(tmp_path / "pool.yaml"),
        CONDUCTOR_RECURSION="false",
        HF_HUB_OFFLINE="1",
        LITELLM_LOCAL_MODEL_COST_MAP="True",
        PYTHONPATH=str(REPO),
    )
    runtime = Runtime(Settings(home=tmp_path, pool_file=tmp_path / "pool.yaml"))
    key, _ = create_key(runtime.sessions, "acme")
    runtime.close()
    port = free_port()
    api = Proc("api", ["api", "--port", str(port)], env, tmp_path / "api.log")
    try:
        wait_http(f"http://127.0.0.1:{port}/openapi.json", api, timeout=180)
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=key, max_retries=0, timeout=600)
        reply = client.chat.completions.create(
            model="conductor", messages=[{"role": "user", "content": "What is 2 + 3? Answer with a number."}]
        )
        answered = client.responses.create(
            model="conductor", input="What is 4 + 4? Answer with a number.", reasoning={"effort": "low"}
        )
        low_steps = _steps_of(f"http://127.0.0.1:{port}/v1", key, answered.model_extra["conductor"]["job_id"])
        drawn = _explorer_drawing(f"http://127.0.0.1:{port}/ui", key, reply.model_extra["conductor"]["job_id"])
    finally:
        api.stop()
    info = reply.model_extra["conductor"]
    assert info["status"] == "done", api.tail()
    assert reply.choices[0].message.content and reply.usage.completion_tokens > 0
    assert info["model_calls"] >= 2 and info["rounds"] >= 1  # the Conductor planned and a worker answered

    # The Responses API over the same pipeline: the usage splits the Conductor's calls from the workers'.
    assert answered.status == "completed" and answered.output_text, api.tail()
    split = answered.usage.model_extra
    assert split["conductor"]["calls"] >= 1 and split["workers"]["calls"] >= 1
    assert split["conductor"]["output_tokens"] + split["workers"]["output_tokens"] == answered.usage.output_tokens

    assert low_steps and max(low_steps) <= 1, "low effort: one-step workflows (or the one-step fallback)"

    # The job explorer draws the workflow SmolLM2 planned: one node per stored step, one edge per dependency.
    steps = [st for c in drawn["job"]["chains"] for r in c["rounds"] for st in r["steps"]]
    assert steps and drawn["nodes"] == len(steps)
    assert drawn["edges"] == sum(len(st["dependencies"]) for st in steps)


def _explorer_drawing(ui: str, key: str, job_id: str) -> dict[str, Any]:
    with chromium() as browser:
        context = browser.new_context()
        page = log_in(context, ui, key)
        page.goto(f"{ui}/jobs/{job_id}")
        page.wait_for_selector("svg.workflow .node")
        job = page.request.get(f"{ui}/jobs/{job_id}/data").json()
        return {
            "job": job,
            "nodes": page.locator("svg.workflow .node").count(),
            "edges": page.locator("svg.workflow .edge").count(),
        }


def _steps_of(base_url: str, key: str, job_id: str) -> list[int]:
    job = httpx.get(f"{base_url}/jobs/{job_id}", headers={"Authorization": f"Bearer {key}"}, timeout=30).json()
    return [len(r["steps"]) for c in job["chains"] for r in c["rounds"] if r["steps"]]
