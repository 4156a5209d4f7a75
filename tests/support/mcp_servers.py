"""MCP servers for tests, as a pool's `mcp_servers:` entries: the real third-party time server
(`mcp-server-time`), and the small test server (`tests/support/mcp_server.py`) over stdio or over
streamable HTTP on loopback."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

TEST_SERVER = Path(__file__).resolve().parent / "mcp_server.py"
#: The time server's own CLI; UTC so its descriptions and answers do not depend on the machine's zone.
TIME_SERVER: dict[str, Any] = {"command": sys.executable, "args": ["-m", "mcp_server_time", "--local-timezone", "UTC"]}


def stdio_test_server(**env: str) -> dict[str, Any]:
    return {"command": sys.executable, "args": [str(TEST_SERVER)], "env": env}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def http_test_server(token: str) -> Iterator[str]:
    """The test server over streamable HTTP on a loopback port while the block runs; yields its URL."""
    port = _free_port()
    proc = subprocess.Popen([sys.executable, str(TEST_SERVER), "--port", str(port), "--token", token])
    try:
        deadline = time.monotonic() + 30
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"the test MCP server exited with {proc.returncode}")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
