"""Flower, started with docker-compose.yml's own command against the test broker: its API lists
the live workers to a caller with the credentials, answers 401 without them, and Flower refuses
to start without a password."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import yaml

from tests.support.api_deployment import free_port
from tests.support.cluster import REPO, cluster_env, workers, write_pool
from tests.support.pools import scripted_pool

pytestmark = pytest.mark.services


def compose_flower_script(broker: str, port: int) -> str:
    """The flower service's `sh -c` script, with the test broker and port, `$$` unescaped as Compose does."""
    service = yaml.safe_load((REPO / "docker-compose.yml").read_text())["services"]["flower"]
    script = service["command"][-1].replace("$$", "$")
    script = script.replace("redis://redis:6379/0", broker)
    script, n = re.subn(r"--port=\d+", f"--port={port} --address=127.0.0.1", script)
    assert n == 1 and broker in script and "--basic-auth" in script
    # The image runs `celery` from its PATH; here it is this interpreter's.
    return script.replace("exec celery ", f"exec {sys.executable} -m celery ")


def _start(script: str, env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        ["sh", "-c", script], env=env, cwd=log.parent, stdout=log.open("wb"), stderr=subprocess.STDOUT
    )


def test_flower_lists_live_workers_with_credentials_and_refuses_without(tmp_path, redis_db):
    pool_file = write_pool(scripted_pool("http://127.0.0.1:9/v1"), tmp_path / "pool.yaml")
    env = cluster_env(tmp_path, redis_db, f"sqlite:///{tmp_path / 'unused.db'}", pool_file)
    port = free_port()
    script = compose_flower_script(redis_db, port)
    url = f"http://127.0.0.1:{port}/api/workers"

    refused = _start(script, {**env, "FLOWER_USER": "admin", "FLOWER_PASSWORD": ""}, tmp_path / "refused.log")
    assert refused.wait(timeout=30) == 1
    assert "set FLOWER_PASSWORD" in (tmp_path / "refused.log").read_text()

    with workers(env, tmp_path, ["w1"], queues="default", concurrency=1):
        flower = _start(script, {**env, "FLOWER_USER": "admin", "FLOWER_PASSWORD": "s3cret-pw"}, tmp_path / "f.log")
        try:
            listed: dict[str, object] = {}
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and "w1@test" not in listed:
                assert flower.poll() is None, (tmp_path / "f.log").read_text()
                try:
                    r = httpx.get(url, params={"refresh": "1"}, auth=("admin", "s3cret-pw"), timeout=10)
                    if r.status_code == 200:
                        listed = r.json()
                except httpx.HTTPError:
                    pass
                time.sleep(0.5)
            assert "w1@test" in listed, (tmp_path / "f.log").read_text()[-2000:]
            assert httpx.get(url, timeout=10).status_code == 401
            assert httpx.get(url, auth=("admin", "wrong"), timeout=10).status_code == 401
            assert httpx.get(f"http://127.0.0.1:{port}/", timeout=10).status_code == 401  # the dashboard too
        finally:
            flower.terminate()
            try:
                flower.wait(timeout=15)
            except subprocess.TimeoutExpired:
                flower.kill()
                flower.wait(timeout=15)
    assert "s3cret-pw" not in (tmp_path / "f.log").read_text()
