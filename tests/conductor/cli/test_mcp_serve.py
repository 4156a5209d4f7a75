"""`conductor mcp serve` offers the calculator to other agents: a pool that declares it as an MCP server
calls it like any MCP tool, so the worker path itself is the client under test."""

from __future__ import annotations

import sys

import pytest

from conductor.config.pool import Pool
from conductor.domain.calculator import NO_EXPRESSION
from conductor.domain.mcp_tools import TOOL_ERROR_PREFIX
from conductor.inference.mcp_sessions import McpSessions
from conductor.inference.mcp_worker import McpTools
from tests.support.cluster import REPO

SERVED = {
    "command": sys.executable,
    "args": ["-m", "conductor.cli.main", "mcp", "serve"],
    "env": {"PYTHONPATH": str(REPO)},
    "cwd": str(REPO),
    "connect_timeout_s": 90,  # the CLI's imports, on a busy two-core machine
}


@pytest.fixture
def served():
    pool = Pool.model_validate(
        {
            "conductor": {"model": "openai/scripted-conductor", "api_base": "http://127.0.0.1:9"},
            "workers": [{"name": "calc", "model": "mcp/conductor/calculator"}],
            "mcp_servers": {"conductor": SERVED},
        }
    )
    tools = McpTools(McpSessions(pool.mcp_servers))
    yield pool, tools
    tools.sessions.close()


def _ask(pool: Pool, tools: McpTools, text: str) -> str:
    return tools.call(pool.worker("calc"), [{"role": "user", "content": text}], label="calc").text


def test_the_served_calculator_computes_and_describes_itself(served):
    pool, tools = served

    tools.describe(pool)

    assert _ask(pool, tools, "The answer is (48 / 2) + 48.") == "72"
    assert pool.worker("calc").description.startswith("Evaluate an arithmetic expression exactly")
    assert "the expression alone, or a JSON object" in pool.worker("calc").description


def test_words_with_nothing_to_compute_are_the_tools_error(served):
    pool, tools = served

    assert (
        _ask(pool, tools, "nine bags of marbles")
        == f"{TOOL_ERROR_PREFIX}Error executing tool calculator: {NO_EXPRESSION}"
    )
