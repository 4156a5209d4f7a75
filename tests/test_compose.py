"""docker-compose.yml: valid for Compose, one worker service per queue, GPU for vLLM, no secrets in files."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
COMPOSE = REPO / "docker-compose.yml"


def _services() -> dict:
    return yaml.safe_load(COMPOSE.read_text())["services"]


@pytest.mark.skipif(shutil.which("docker-compose") is None, reason="docker-compose is not installed")
def test_compose_file_passes_docker_compose_config():
    # A bare environment: the file must not depend on variables the operator has not set.
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/tmp")}
    result = subprocess.run(
        ["docker-compose", "-f", str(COMPOSE), "config", "-q"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr


def test_one_worker_service_per_queue_with_the_right_pool():
    commands = {name: " ".join(svc["command"]) for name, svc in _services().items() if name.startswith("worker-")}

    assert commands == {
        "worker-conductor": "conductor worker -Q conductor",
        "worker-llm": "conductor worker -Q llm -P threads -c 64",
        "worker-default": "conductor worker -Q default",
        "worker-reward": "conductor worker -Q reward -P prefork",
        "worker-train": "conductor worker -Q train -P solo -c 1",
    }
    assert " ".join(_services()["beat"]["command"]) == "conductor beat"


def test_vllm_serves_the_conductor_on_a_gpu_with_runtime_lora():
    vllm = _services()["vllm"]

    assert vllm["image"].startswith("vllm/vllm-openai")
    assert "--enable-lora" in vllm["command"]
    assert vllm["environment"]["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "True"
    devices = vllm["deploy"]["resources"]["reservations"]["devices"]
    assert devices[0]["driver"] == "nvidia" and "gpu" in devices[0]["capabilities"]
    served = vllm["command"][vllm["command"].index("--served-model-name") + 1]
    frontier = (REPO / "conductor" / "config" / "pools" / "frontier.yaml").read_text()
    assert f"hosted_vllm/{served}" in frontier and "http://vllm:8000/v1" in frontier


def test_flower_has_auth_and_the_api_runs_the_real_command():
    services = _services()

    assert "--basic-auth=" in " ".join(services["flower"]["command"])
    assert services["api"]["command"] == ["conductor", "api", "--host", "0.0.0.0", "--port", "8000"]
    from conductor.cli.main import app

    assert "api" in {c.name for c in app.registered_commands}, "the compose command must exist"
    assert {"redis", "postgres", "vllm", "beat", "flower"} <= set(services)


def test_no_secret_is_written_in_the_deploy_files():
    for path in (COMPOSE, REPO / "Dockerfile"):
        text = path.read_text()
        assert not re.search(r"sk-[A-Za-z0-9]{8,}|AIza[0-9A-Za-z_-]{20,}", text), path
        for key, value in re.findall(r"(\w*(?:API_KEY|TOKEN|PASSWORD)\w*): (.+)", text):
            assert value.startswith(("${", "$$")), f"{path.name}: {key} must come from the env"


def test_the_image_does_not_ship_local_state():
    ignored = (REPO / ".dockerignore").read_text().split()
    assert {".venv", ".conductor", ".git", ".env"} <= set(ignored)
