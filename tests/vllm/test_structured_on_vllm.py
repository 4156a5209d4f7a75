"""A `json_schema` response format answered by a vLLM-served worker: the gateway sends vLLM the schema's
grammar as `structured_outputs` (what vLLM 0.32 reads), so SmolLM2-135M's first answer conforms.

The API is the embedded default; the Conductor is the scripted one (it hands the question to the only
worker), so what is tested is the worker's decoding on the real vLLM server."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

import openai
import pytest
from pydantic import BaseModel, Field

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from conductor.config.pool import Pool
from conductor.inference.vllm_server import VllmServer
from tests.api.test_structured_outputs import embedded_client
from tests.support.pools import scripted_pool
from tests.vllm.conftest import SERVED

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(600)]


class Capital(BaseModel):
    city: str = Field(max_length=24)
    continent: Literal["Europe", "Asia", "Africa", "America", "Oceania"]
    founded_year: int


@pytest.fixture
def client(server: VllmServer, tmp_path: Path) -> Iterator[openai.OpenAI]:
    def pool(conductor_url: str) -> Pool:
        spec = scripted_pool(conductor_url).model_dump()
        vllm = {"model": f"hosted_vllm/{SERVED}", "api_base": server.base_url, "timeout_s": 120}
        spec["workers"] = [
            {**vllm, "name": "smol", "description": "a small model", "max_tokens": 64, "temperature": 0.0}
        ]
        return Pool.model_validate(spec)

    with embedded_client(tmp_path, pool) as (c, _):
        yield c


def test_a_json_schema_answer_from_a_vllm_worker_conforms_on_its_first_attempt(client: openai.OpenAI):
    done = client.chat.completions.parse(
        model="conductor",
        messages=[{"role": "user", "content": "Which city is the capital of Japan?"}],
        response_format=Capital,
    )
    parsed = done.choices[0].message.parsed
    assert isinstance(parsed, Capital) and parsed.city
    # One Conductor call (scripted) and one vLLM call: no corrective retry was needed.
    assert done.model_extra["conductor"]["model_calls"] == 2
