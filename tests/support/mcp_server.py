"""A small MCP server for tests, run as a program: over stdio by default, or over streamable HTTP on
loopback with `--port` (then every request must carry `--token` as its `X-Test-Token` header).

Its tools answer with the server's process id where a test needs to tell one server process from the
next (a session kept open, or reopened after a crash). `CRASH_MARKER` (an environment variable) names the
file through which `crash_once` remembers that it already crashed a process.

Run by path (`python tests/support/mcp_server.py`): it imports the MCP SDK only, not the project.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

server = MCPServer("conductor-test-tools")


@server.tool(description="Count the words of a text.")
def word_count(text: str) -> str:
    return f"{len(text.split())} words"


@server.tool(description="Add two integers.")
def add(a: int, b: int) -> str:
    return str(a + b)


@server.tool(description="The id of the server process that answers.")
def pid() -> str:
    return str(os.getpid())


@server.tool(description="Refuse, with the reason given.")
def refuse(reason: str) -> str:
    raise ToolError(f"refused: {reason}")


@server.tool(description="Take a while to answer.")
def sleep(seconds: float) -> str:
    time.sleep(seconds)
    return f"slept {seconds:g}s in {os.getpid()}"


@server.tool(description="Kill the server process the first time it is called; echo the text after that.")
def crash_once(text: str) -> str:
    marker = Path(os.environ["CRASH_MARKER"])
    if not marker.exists():
        marker.write_text(str(os.getpid()))
        os._exit(1)
    return f"{text} (answered by {os.getpid()})"


@server.tool(description="Kill the server process, every time.")
def crash(text: str) -> str:
    os._exit(1)


def _serve_http(port: int, token: str) -> None:
    import uvicorn
    from starlette.responses import PlainTextResponse
    from starlette.types import ASGIApp, Receive, Scope, Send

    app = server.streamable_http_app(host="127.0.0.1")

    def require_token(inner: ASGIApp) -> ASGIApp:
        async def guarded(scope: Scope, receive: Receive, send: Send) -> None:
            headers = dict(scope.get("headers") or [])
            if scope["type"] == "http" and headers.get(b"x-test-token") != token.encode():
                await PlainTextResponse("missing or wrong X-Test-Token", status_code=401)(scope, receive, send)
                return
            await inner(scope, receive, send)

        return guarded

    uvicorn.run(require_token(app), host="127.0.0.1", port=port, log_level="warning")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int)
    parser.add_argument("--token", default="")
    args = parser.parse_args()
    if args.port:
        _serve_http(args.port, args.token)
    else:
        server.run()
