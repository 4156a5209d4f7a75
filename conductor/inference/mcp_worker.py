"""MCP tools behind the worker interface: a step's messages in, the tool's answer out as a `Completion`.

Failures map as a provider's do. The tool's own failure (an `isError` result, arguments it cannot take,
a protocol error from a live server) is the step's answer, `tool error: ...`: recorded, and wrong as an
answer, never a failed job. A server that cannot be started or reached, dies, or does not answer in time
raises `McpServerDown`, which the gateway retries on a fresh session and then hands to the worker's
fallback, as it does a dead model server.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from typing import Any

from conductor.config.pool import ModelSpec, Pool
from conductor.domain.mcp_tools import (
    ToolArgumentsError,
    describe_tool,
    error_answer,
    split_model,
    tool_arguments,
    undescribed,
)
from conductor.inference.completion import Completion
from conductor.inference.mcp_sessions import McpServerDown, McpSessions, McpToolFailed

__all__ = ["McpTools"]

log = logging.getLogger(__name__)


class McpTools:
    def __init__(self, sessions: McpSessions) -> None:
        self.sessions = sessions

    def call(self, spec: ModelSpec, messages: Sequence[dict[str, Any]], *, label: str) -> Completion:
        server, tool = split_model(spec.model)
        started = time.perf_counter()
        text = self._answer(server, tool, messages, timeout_s=spec.timeout_s)
        return Completion(
            text=text, model=spec.model, worker=label, latency_s=time.perf_counter() - started, served_by=label
        )

    def describe(self, pool: Pool) -> None:
        """Give each MCP tool worker without a description of its own the tool's (with its arguments
        summarised), as its server lists it. A server that cannot be reached now leaves the placeholder: the
        calls will find out whether it came back, and the pool stays usable meanwhile."""
        for worker in pool.workers:
            if not worker.is_mcp_tool or worker.description != undescribed(worker.model):
                continue
            server, tool = split_model(worker.model)
            try:
                found = self.sessions.list_tools(server).get(tool)
            except McpServerDown as exc:
                log.warning("worker %s: cannot list the tools of MCP server %r: %s", worker.name, server, exc)
                found = None
            if found is not None:
                worker.description = describe_tool(found.description, found.input_schema)

    def _answer(self, server: str, tool: str, messages: Sequence[dict[str, Any]], *, timeout_s: float) -> str:
        listed = self.sessions.list_tools(server).get(tool)
        if listed is None:
            return error_answer(f"the MCP server {server!r} has no tool {tool!r}")
        try:
            arguments = tool_arguments(listed.input_schema, messages)
        except ToolArgumentsError as exc:
            return error_answer(str(exc))
        try:
            result = self.sessions.call_tool(server, tool, arguments, timeout_s=timeout_s)
        except McpToolFailed as exc:
            return error_answer(str(exc))
        text = _result_text(result)
        if result.is_error:
            log.info("MCP tool %s/%s answered with an error: %s", server, tool, text[:300])
            return error_answer(text)
        return text


def _result_text(result: Any) -> str:
    """The result's text blocks; its structured content where it has no text; a placeholder per other block."""
    parts = []
    for block in result.content or []:
        kind = getattr(block, "type", "")
        parts.append(block.text if kind == "text" else f"[{kind or 'unknown'} content]")
    if not any(p.strip() for p in parts) and result.structured_content is not None:
        return json.dumps(result.structured_content, ensure_ascii=False)
    return "\n".join(parts)
