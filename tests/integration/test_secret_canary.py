"""Secrets: a canary API key in a provider's environment variable is sent to the provider and
appears nowhere else: not in stdout/stderr of the CLI (with verbose logs and workflows), not in
result lines, traces, job views, error messages, nor any file under the home folder (the
SQLite database and logs included), even when the provider answers with an error."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import yaml

from tests.support.scripted_llm import Reply, ScriptedLLMServer
from tests.support.workflows import conductor_reply

ROOT = Path(__file__).resolve().parents[2]
KEY_VAR = "CONDUCTOR_TEST_CANARY_KEY"


def _script(model: str, messages: list[dict], body: dict) -> Reply:
    if model.endswith("scripted-conductor"):
        return conductor_reply(messages)
    if model.endswith("beta"):  # a provider that rejects the key, with its usual error text
        return Reply(status=401, error="Incorrect API key provided. You can find your API key at https://example")
    return Reply("The answer is 42.")


def test_a_canary_key_never_leaves_the_provider_call(tmp_path):
    canary = f"sk-canary-{uuid.uuid4().hex}"
    server = ScriptedLLMServer(_script).start()
    try:
        common = {"api_base": server.base_url, "api_key_env": KEY_VAR, "retries": 0, "timeout_s": 10}
        pool = {
            "conductor": {"model": "openai/scripted-conductor", "policy_version": "canary", **common},
            "workers": [
                {"name": "alpha", "model": "openai/scripted-worker-alpha", "description": "generalist", **common},
                {"name": "beta", "model": "openai/scripted-worker-beta", "description": "checker", **common},
            ],
        }
        (tmp_path / "pool.yaml").write_text(yaml.safe_dump(pool))
        problems = tmp_path / "problems.jsonl"
        problems.write_text(
            json.dumps({"id": "ok", "question": "What is 6 * 7? [wf:fanout]", "answer": "42"}) + "\n"
            + json.dumps({"id": "bad", "question": "What is 1 + 1? [wf:fanout]", "answer": "2"}) + "\n"
            + "not json at all\n"
        )  # fmt: skip
        home = tmp_path / "home"
        env = {k: v for k, v in os.environ.items() if not k.startswith("CONDUCTOR_")}
        env |= {
            KEY_VAR: canary,
            "CONDUCTOR_HOME": str(home),
            "CONDUCTOR_POOL_FILE": str(tmp_path / "pool.yaml"),
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            "LITELLM_LOG": "DEBUG",
        }
        outputs = []
        for args in (
            ["run", str(problems), "--out", str(tmp_path / "results.jsonl"), "--show-workflows"],
            ["traces", "export", "--out", str(tmp_path / "traces.jsonl"), "--include-eval"],
            ["usage"],
            ["status"],
        ):
            done = subprocess.run([sys.executable, "-m", "conductor.cli.main", *args], check=False, cwd=ROOT,
                                  env=env, capture_output=True, text=True, timeout=300)  # fmt: skip
            assert done.returncode == 0, done.stderr[-3000:]
            outputs.append(done.stdout + done.stderr)
        results = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
        job_id = next(r["job_id"] for r in results if r["id"] == "ok")
        view = subprocess.run([sys.executable, "-m", "conductor.cli.main", "status", job_id], check=False, cwd=ROOT,
                              env=env, capture_output=True, text=True, timeout=120)  # fmt: skip
        outputs.append(view.stdout + view.stderr)
    finally:
        server.stop()

    # The canary was really in play: the provider received it.
    assert server.calls and all(c.headers.get("authorization") == f"Bearer {canary}" for c in server.calls)
    assert {r["id"] for r in results} == {"ok", "bad"} and any(c.status == 401 for c in server.calls)
    leaks = [f"CLI output #{i}" for i, text in enumerate(outputs) if canary in text]
    for path in [tmp_path / "results.jsonl", tmp_path / "traces.jsonl", *home.rglob("*")]:
        if path.is_file() and canary.encode() in path.read_bytes():
            leaks.append(str(path))
    assert not leaks, f"the canary key leaked into: {leaks}"
