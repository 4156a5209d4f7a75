"""Long-lived MCP client sessions, one per declared server per process, for callers on any thread.

The MCP SDK is asyncio-based and the llm queue's workers are threads, so one daemon thread per process
runs an event loop that owns every session; a caller hands it a coroutine and waits for the result
(`asyncio.run_coroutine_threadsafe`). A session's transport (anyio task groups) must be entered and left
by one task, so each session lives inside a task of its own that holds it open until it is told to stop.

A session is opened on first use and kept: a stdio server is started once, not per call. One that dies
(its process exits, its connection closes, a call times out) is dropped and reopened by the next call, so
the gateway's retries reach a fresh server. A fork (Celery prefork) leaves the parent's loop thread
behind, so a process that finds itself forked starts its own.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections.abc import Coroutine, Mapping
from contextlib import suppress
from typing import Any, TypeVar

import anyio
import mcp_types
from mcp import Client, MCPError, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from conductor.config.mcp_servers import McpServerSpec

__all__ = ["McpServerDown", "McpSessions", "McpToolFailed"]

log = logging.getLogger(__name__)
T = TypeVar("T")
#: JSON-RPC codes that say the connection, not the tool, failed (the SDK's own, not on the wire).
_TRANSPORT_CODES = (mcp_types.CONNECTION_CLOSED, mcp_types.REQUEST_TIMEOUT)
#: A transport that broke under a call rather than closing cleanly.
_BROKEN_STREAM = (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream)
#: Time for a coroutine to come back after its own deadline (the session's teardown, a slow loop).
_GRACE_S = 10.0


class McpServerDown(Exception):
    """The server could not be started or reached, closed the connection, or did not answer in time:
    a provider failure, worth another attempt on a fresh session."""


class McpToolFailed(Exception):
    """A live server refused the call with a protocol error (unknown tool, invalid arguments): the
    tool's answer to a call it could not take, not a server failure."""


class _Session:
    """One open client: the task that holds it open, and the event that lets that task close it."""

    def __init__(self) -> None:
        self.client: Client | None = None
        self.ready = asyncio.Event()
        self.stop = asyncio.Event()
        self.error: BaseException | None = None
        self.task: asyncio.Task[None] | None = None

    @property
    def alive(self) -> bool:
        return self.client is not None and not self.stop.is_set()


class McpSessions:
    def __init__(self, servers: Mapping[str, McpServerSpec]) -> None:
        self.servers = dict(servers)
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._pid: int | None = None
        # Touched on the loop only, so they need no lock.
        self._sessions: dict[str, _Session] = {}
        self._opening: dict[str, asyncio.Lock] = {}
        self._tools: dict[str, dict[str, mcp_types.Tool]] = {}

    # -- for callers on any thread -------------------------------------------------------
    def list_tools(self, server: str) -> dict[str, mcp_types.Tool]:
        """The server's tools by name (asked once per process; reopening a session keeps the list)."""
        return self._run(self._list_tools(server), self._spec(server).connect_timeout_s * 2)

    def call_tool(self, server: str, tool: str, arguments: dict[str, Any], *, timeout_s: float) -> Any:
        """The tool's `CallToolResult` (an `isError` one included: the caller decides what it means).

        Raises McpServerDown for a server that failed, McpToolFailed for a call a live server refused."""
        deadline = self._spec(server).connect_timeout_s + timeout_s
        return self._run(self._call_tool(server, tool, arguments, timeout_s), deadline)

    def close(self) -> None:
        """Close every session (a stdio server exits) and stop the loop thread."""
        with self._lock:
            loop, thread, self._loop, self._thread = self._loop, self._thread, None, None
            owned = self._pid == os.getpid()
        if loop is None or thread is None or not owned:
            return
        with suppress(Exception):
            asyncio.run_coroutine_threadsafe(self._close_all(), loop).result(_GRACE_S)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(_GRACE_S)

    # -- the loop thread -----------------------------------------------------------------
    def _run(self, coro: Coroutine[Any, Any, T], deadline_s: float) -> T:
        future = asyncio.run_coroutine_threadsafe(coro, self._ensure_loop())
        try:
            return future.result(deadline_s + _GRACE_S)
        except TimeoutError:
            future.cancel()
            raise McpServerDown(f"no answer from the MCP client in {deadline_s + _GRACE_S:g}s") from None

    def _ensure_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None or self._pid != os.getpid():
                loop = asyncio.new_event_loop()
                thread = threading.Thread(target=loop.run_forever, name="mcp-sessions", daemon=True)
                thread.start()
                self._loop, self._thread, self._pid = loop, thread, os.getpid()
                self._sessions, self._opening, self._tools = {}, {}, {}
            return self._loop

    def _spec(self, server: str) -> McpServerSpec:
        try:
            return self.servers[server]
        except KeyError:
            raise McpServerDown(f"no MCP server {server!r} is declared; declared: {sorted(self.servers)}") from None

    # -- on the loop ---------------------------------------------------------------------
    async def _list_tools(self, server: str) -> dict[str, mcp_types.Tool]:
        if server not in self._tools:
            client = await self._client(server)
            tools: dict[str, mcp_types.Tool] = {}
            cursor: str | None = None
            try:
                while True:
                    page = await client.list_tools(cursor=cursor)
                    tools.update({t.name: t for t in page.tools})
                    cursor = page.next_cursor
                    if not cursor:
                        break
            except MCPError as exc:
                raise self._down(server, exc) from exc
            self._tools[server] = tools
        return self._tools[server]

    async def _call_tool(self, server: str, tool: str, arguments: dict[str, Any], timeout_s: float) -> Any:
        client = await self._client(server)
        try:
            return await client.call_tool(tool, arguments, read_timeout_seconds=timeout_s)
        except MCPError as exc:
            if exc.code in _TRANSPORT_CODES:
                raise self._down(server, exc) from exc
            raise McpToolFailed(exc.message) from exc
        except (OSError, *_BROKEN_STREAM) as exc:
            raise self._down(server, exc) from exc

    async def _client(self, server: str) -> Client:
        spec = self._spec(server)
        session = self._sessions.get(server)
        if session is not None and session.alive and session.client is not None:
            return session.client
        async with self._opening.setdefault(server, asyncio.Lock()):
            session = self._sessions.get(server)
            if session is not None and session.alive and session.client is not None:
                return session.client  # another caller opened it while this one waited
            session = _Session()
            self._sessions[server] = session
            session.task = asyncio.create_task(self._hold(server, spec, session), name=f"mcp:{server}")
            try:
                await asyncio.wait_for(session.ready.wait(), spec.connect_timeout_s)
            except TimeoutError:
                session.task.cancel()
                raise McpServerDown(
                    f"MCP server {server!r} ({spec.address}) did not start in {spec.connect_timeout_s:g}s"
                ) from None
            if session.client is None:
                error = session.error
                raise McpServerDown(
                    f"cannot start or reach MCP server {server!r} ({spec.address}): {_describe(error)}"
                ) from error
            return session.client

    async def _hold(self, server: str, spec: McpServerSpec, session: _Session) -> None:
        """Open the session, keep it until told to stop, then close it in this same task."""
        try:
            async with Client(_transport(spec), cache=None) as client:
                session.client = client
                session.ready.set()
                await session.stop.wait()
        except Exception as exc:  # a server that cannot start, or whose transport broke under the session
            session.error = exc
            log.warning("MCP server %r: session ended: %s", server, _describe(exc))
        finally:
            session.client = None
            session.stop.set()
            session.ready.set()

    def _down(self, server: str, exc: BaseException) -> McpServerDown:
        """Drop the server's session (the next call reopens it) and say why it failed."""
        session = self._sessions.get(server)
        if session is not None:
            session.stop.set()
        return McpServerDown(f"MCP server {server!r} ({self.servers[server].address}): {_describe(exc)}")

    async def _close_all(self) -> None:
        sessions = list(self._sessions.values())
        for session in sessions:
            session.stop.set()
        tasks = [s.task for s in sessions if s.task is not None]
        if tasks:
            await asyncio.wait(tasks, timeout=_GRACE_S)


def _transport(spec: McpServerSpec) -> Any:
    if spec.command is not None:
        return StdioServerParameters(command=spec.command, args=spec.args, env=spec.env or None, cwd=spec.cwd)
    assert spec.url is not None  # the spec's validator: one transport or the other
    return streamable_http_client(spec.url, http_client=create_mcp_http_client(headers=spec.http_headers()))


def _describe(exc: BaseException | None) -> str:
    if exc is None:
        return "no reason given"
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(_describe(e) for e in exc.exceptions)
    if isinstance(exc, MCPError):
        return exc.message
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
