"""Arize Phoenix as the OTLP receiver: a real `phoenix serve` process, from the virtualenv of its own
that `make phoenix-venv` builds (`scripts/setup_phoenix_venv.sh`, `.venv-phoenix`).

It listens on loopback on free ports (OTLP/HTTP and its REST API share `PHOENIX_PORT`, OTLP/gRPC on
`PHOENIX_GRPC_PORT`) and keeps its SQLite database in a working directory the caller gives (a test's
temporary one), so nothing outlives the test. Spans come back through Phoenix's REST API
(`GET /v1/projects/{name}/spans`), in the shape our hand-written receiver gives them.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx

from tests.support.api_deployment import free_port
from tests.support.cluster import REPO
from tests.support.otlp_receiver import ReceivedSpan

PHOENIX_VENV = REPO / ".venv-phoenix"
PHOENIX = PHOENIX_VENV / "bin" / "phoenix"


class PhoenixServer:
    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.grpc_port = free_port()
        self.log = workdir / "phoenix.log"
        self._popen: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """The UI, the REST API and the OTLP/HTTP receiver (`/v1/traces`, which the SDK appends)."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def grpc_endpoint(self) -> str:
        return f"http://127.0.0.1:{self.grpc_port}"

    def start(self, timeout: float = 180.0) -> PhoenixServer:
        # Nothing of ours leaks in: no OTEL_* (Phoenix would trace itself) and no PHOENIX_* but these.
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "PHOENIX_"))}
        env.update(
            PHOENIX_WORKING_DIR=str(self.workdir),
            PHOENIX_HOST="127.0.0.1",
            PHOENIX_PORT=str(self.port),
            PHOENIX_GRPC_PORT=str(self.grpc_port),
            PHOENIX_TELEMETRY_ENABLED="false",
        )
        with self.log.open("wb") as log:
            self._popen = subprocess.Popen(
                [str(PHOENIX), "serve"], env=env, cwd=self.workdir, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
        self._wait_up(timeout)
        return self

    def _wait_up(self, timeout: float) -> None:
        assert self._popen is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._popen.poll() is not None:
                raise RuntimeError(f"phoenix exited ({self._popen.returncode}):\n{self.tail()}")
            try:
                if httpx.get(f"{self.url}/v1/projects", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        raise RuntimeError(f"phoenix not up after {timeout:.0f}s:\n{self.tail()}")

    def stop(self) -> None:
        if self._popen is None or self._popen.poll() is not None:
            return
        os.killpg(self._popen.pid, signal.SIGTERM)
        try:
            self._popen.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(self._popen.pid, signal.SIGKILL)
            self._popen.wait(timeout=20)

    def tail(self, n: int = 40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:]) if self.log.exists() else ""

    def projects(self) -> list[str]:
        return [p["name"] for p in self._get("/v1/projects")["data"]]

    def spans(self, project: str) -> list[ReceivedSpan]:
        """Every span Phoenix stored in `project`, page by page (none while Phoenix has no such project yet)."""
        if project not in self.projects():
            return []
        out: list[ReceivedSpan] = []
        cursor: str | None = None
        while True:
            page = self._get(f"/v1/projects/{project}/spans", limit=1000, **({"cursor": cursor} if cursor else {}))
            out.extend(_span(s) for s in page["data"])
            cursor = page.get("next_cursor")
            if not cursor:
                return out

    def _get(self, path: str, **params: Any) -> Any:
        response = httpx.get(f"{self.url}{path}", params=params, timeout=30)
        response.raise_for_status()
        return response.json()


def _span(s: dict[str, Any]) -> ReceivedSpan:
    """One span of Phoenix's REST answer: ids as Phoenix stores them (the OTLP ids, hex)."""
    return ReceivedSpan(
        trace_id=s["context"]["trace_id"],
        span_id=s["context"]["span_id"],
        parent_id=s.get("parent_id") or None,
        name=s["name"],
        service="",  # Phoenix keeps a span's resource as its project, not as span attributes
        attributes=dict(s.get("attributes") or {}),
    )
