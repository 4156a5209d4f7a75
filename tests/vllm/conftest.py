"""One vLLM CPU server for the whole vLLM stage (starting one costs 30-60 s on 2 cores)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from conductor.inference.local_model import pull_default_model
from conductor.inference.vllm_server import VllmServer, default_python
from tests.conftest import MODEL_HOME

SERVED = "smol-base"


@pytest.fixture(scope="session")
def model_path() -> Path:
    return pull_default_model(MODEL_HOME)


@pytest.fixture(scope="session")
def server(model_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[VllmServer]:
    if not default_python().exists():
        message = f"vLLM venv missing ({default_python()}); run scripts/setup_vllm_venv.sh"
        # `make test-vllm` builds the venv first, so there a missing venv is a failure, not a skip.
        if os.environ.get("CONDUCTOR_TEST_REQUIRE_VLLM") == "1":
            pytest.fail(message)
        pytest.skip(message)
    log = tmp_path_factory.mktemp("vllm") / "server.log"
    srv = VllmServer(model_path, served_name=SERVED, max_model_len=2048, log_path=log)
    srv.start(timeout=240)
    yield srv
    srv.stop()


@pytest.fixture(scope="session")
def tokenizer(model_path: Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model_path)
