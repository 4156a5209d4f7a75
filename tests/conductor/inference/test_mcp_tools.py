"""MCP tools behind the worker interface, against real servers: the third-party time server over stdio
and the test server over stdio and streamable HTTP. How the tool is described to the Conductor, what a
call answers, and which failures are the tool's answer and which are a server's failure."""

from __future__ import annotations

import concurrent.futures
from pathlib import Path

import pytest

from conductor.config.pool import Pool
from conductor.domain.mcp_tools import TOOL_ERROR_PREFIX
from conductor.domain.prompts import build_plan_messages
from conductor.inference.gateway import Gateway
from conductor.inference.mcp_sessions import McpServerDown, McpSessions
from conductor.inference.mcp_worker import McpTools
from tests.support.mcp_servers import TIME_SERVER, http_test_server, stdio_test_server


def _pool(servers: dict, *workers: dict) -> Pool:
    return Pool.model_validate(
        {
            "conductor": {"model": "openai/scripted-conductor", "api_base": "http://127.0.0.1:9"},
            "workers": [{"name": "writer", "model": "openai/writer", "description": "writes"}, *workers],
            "mcp_servers": servers,
        }
    )


def _ask(tools: McpTools, pool: Pool, worker: str, *messages: str) -> str:
    turns = [{"role": "user" if i % 2 == 0 else "assistant", "content": m} for i, m in enumerate(messages)]
    return tools.call(pool.worker(worker), turns, label=worker).text


@pytest.fixture
def tools_for():
    """The tools of a pool's servers, on sessions of their own that are closed after the test."""
    made: list[McpTools] = []

    def make(pool: Pool) -> McpTools:
        made.append(McpTools(McpSessions(pool.mcp_servers)))
        return made[-1]

    yield make
    for tools in made:
        tools.sessions.close()


def test_the_conductor_is_shown_the_tools_own_description_and_arguments(tools_for):
    pool = _pool({"time": TIME_SERVER}, {"name": "clock", "model": "mcp/time/get_current_time"})

    tools_for(pool).describe(pool)
    prompt = "\n".join(
        m["content"] for m in build_plan_messages("What time is it in Tokyo?", pool.cards(), max_steps=3)
    )

    assert "Get current time in a specific timezone" in prompt
    assert "timezone (string, required): IANA timezone name" in prompt
    assert "the timezone alone, or a JSON object" in prompt


def test_a_description_written_in_the_pool_is_kept(tools_for):
    pool = _pool(
        {"time": TIME_SERVER}, {"name": "clock", "model": "mcp/time/get_current_time", "description": "a clock"}
    )

    tools_for(pool).describe(pool)

    assert pool.worker("clock").description == "a clock"


def test_a_server_that_cannot_start_leaves_a_placeholder_description_and_the_pool_usable(tools_for):
    pool = _pool({"gone": {"command": "/nonexistent/mcp-server"}}, {"name": "gone", "model": "mcp/gone/lookup"})

    tools_for(pool).describe(pool)

    assert pool.worker("gone").description == "The tool 'lookup' of the MCP server 'gone'."


def test_the_subtask_is_the_one_string_argument_and_the_answer_is_the_tools_text(tools_for):
    pool = _pool({"time": TIME_SERVER}, {"name": "clock", "model": "mcp/time/get_current_time"})

    answer = _ask(tools_for(pool), pool, "clock", "Asia/Tokyo")

    assert '"timezone": "Asia/Tokyo"' in answer and "+09:00" in answer


def test_a_json_object_written_by_the_step_before_is_the_arguments(tools_for):
    pool = _pool({"t": stdio_test_server()}, {"name": "add", "model": "mcp/t/add"})

    answer = _ask(tools_for(pool), pool, "add", "Write the call.", '```json\n{"a": 2, "b": 40}\n```', "Add.")

    assert answer == "42"


def test_a_tools_error_a_refused_call_and_unusable_arguments_are_the_answer_not_a_failure(tools_for):
    pool = _pool(
        {"time": TIME_SERVER, "t": stdio_test_server()},
        {"name": "clock", "model": "mcp/time/get_current_time"},
        {"name": "refuse", "model": "mcp/t/refuse"},
        {"name": "add", "model": "mcp/t/add"},
        {"name": "missing", "model": "mcp/t/no_such_tool"},
    )
    tools = tools_for(pool)

    bad_zone = _ask(tools, pool, "clock", "Nowhere/Land")
    refused = _ask(tools, pool, "refuse", "not today")
    no_arguments = _ask(tools, pool, "add", "add two and forty")
    wrong_arguments = _ask(tools, pool, "add", '{"a": "two", "b": 40}')
    missing = _ask(tools, pool, "missing", "{}")

    assert bad_zone.startswith(TOOL_ERROR_PREFIX) and "Invalid timezone" in bad_zone
    assert refused == f"{TOOL_ERROR_PREFIX}Error executing tool refuse: refused: not today"
    assert no_arguments.startswith(TOOL_ERROR_PREFIX) and "a, b" in no_arguments
    assert wrong_arguments.startswith(TOOL_ERROR_PREFIX) and "valid integer" in wrong_arguments
    assert missing == f"{TOOL_ERROR_PREFIX}the MCP server 't' has no tool 'no_such_tool'"


def test_one_session_per_server_serves_every_call_and_thread(tools_for):
    pool = _pool({"t": stdio_test_server()}, {"name": "pid", "model": "mcp/t/pid"})
    tools = tools_for(pool)

    with concurrent.futures.ThreadPoolExecutor(8) as threads:
        pids = set(threads.map(lambda _: _ask(tools, pool, "pid", "{}"), range(24)))

    assert len(pids) == 1, "one server process answered every call"
    assert pids == {_ask(tools, pool, "pid", "{}")}, "and it is still the one answering"


def test_a_server_that_dies_is_a_server_failure_and_the_next_call_starts_a_fresh_one(tools_for, tmp_path: Path):
    marker = tmp_path / "crashed"
    pool = _pool({"t": stdio_test_server(CRASH_MARKER=str(marker))}, {"name": "echo", "model": "mcp/t/crash_once"})
    tools = tools_for(pool)

    with pytest.raises(McpServerDown, match="Connection closed"):
        _ask(tools, pool, "echo", "hello")
    answer = _ask(tools, pool, "echo", "hello")

    crashed_pid = marker.read_text()
    assert answer.startswith("hello (answered by ") and crashed_pid not in answer


def test_a_call_past_the_workers_timeout_is_a_server_failure_and_the_session_is_reopened(tools_for):
    pool = _pool({"t": stdio_test_server()}, {"name": "sleep", "model": "mcp/t/sleep", "timeout_s": 1})
    tools = tools_for(pool)
    first_pid = _ask(tools, pool, "sleep", '{"seconds": 0}').rsplit(" ", 1)[1]

    with pytest.raises(McpServerDown, match="timed out"):
        _ask(tools, pool, "sleep", '{"seconds": 5}')
    answer = _ask(tools, pool, "sleep", '{"seconds": 0}')

    assert answer.startswith("slept 0s in ") and not answer.endswith(first_pid), "a fresh server answered"


def test_a_server_that_cannot_be_reached_is_a_server_failure(tools_for):
    pool = _pool(
        {
            "gone": {"command": "/nonexistent/mcp-server"},
            "closed": {"url": "http://127.0.0.1:9/mcp", "connect_timeout_s": 5},
        },
        {"name": "gone", "model": "mcp/gone/lookup"},
        {"name": "closed", "model": "mcp/closed/lookup"},
    )
    tools = tools_for(pool)

    with pytest.raises(McpServerDown, match=r"cannot start or reach MCP server 'gone'.*No such file"):
        _ask(tools, pool, "gone", "x")
    with pytest.raises(McpServerDown, match=r"cannot start or reach MCP server 'closed'.*ConnectError"):
        _ask(tools, pool, "closed", "x")


def test_a_streamable_http_server_is_called_with_the_pools_headers(tools_for, monkeypatch):
    monkeypatch.setenv("TEST_MCP_TOKEN", "s3cret")
    with http_test_server(token="s3cret") as url:
        pool = _pool(
            {
                "remote": {"url": url, "headers_env": {"X-Test-Token": "TEST_MCP_TOKEN"}},
                "wrong": {"url": url, "headers": {"X-Test-Token": "guess"}, "connect_timeout_s": 5},
            },
            {"name": "count", "model": "mcp/remote/word_count"},
            {"name": "unauthorised", "model": "mcp/wrong/word_count"},
        )
        tools = tools_for(pool)
        tools.describe(pool)

        answer = _ask(tools, pool, "count", "three little words")
        with pytest.raises(McpServerDown, match=r"cannot start or reach MCP server 'wrong'.*error response"):
            _ask(tools, pool, "unauthorised", "three little words")

    assert answer == "3 words"
    assert pool.worker("count").description.startswith("Count the words of a text.")


def test_the_gateway_retries_a_dead_server_and_then_walks_the_fallback_chain(tmp_path: Path):
    pool = Pool.model_validate(
        {
            "conductor": {"model": "openai/scripted-conductor", "api_base": "http://127.0.0.1:9"},
            "workers": [
                {"name": "crash", "model": "mcp/t/crash", "retries": 1, "fallback": "pid"},
                {"name": "pid", "model": "mcp/t/pid"},
            ],
            "mcp_servers": {"t": stdio_test_server()},
        }
    )
    gateway = Gateway(pool, model_home=tmp_path, backoff_base_s=0.01)
    try:
        result = gateway.call_worker("crash", [{"role": "user", "content": "boom"}])
    finally:
        gateway.close()

    assert result.served_by == "pid" and result.text.isdigit()
    assert len(result.errors) == 1 and "crash: failed after 2 attempts: attempt 2: McpServerDown" in result.errors[0]
