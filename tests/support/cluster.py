"""Real worker and beat processes on Redis + PostgreSQL, for integration tests."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import yaml

from conductor.config.pool import Pool

REPO = Path(__file__).resolve().parents[2]


def write_pool(pool: Pool, path: Path) -> Path:
    path.write_text(yaml.safe_dump(pool.model_dump(mode="json", exclude_none=True)))
    return path


def cluster_env(home: Path, broker: str, db: str, pool_file: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONDUCTOR_")}
    env.update(
        CONDUCTOR_HOME=str(home),
        CONDUCTOR_BROKER_URL=broker,
        CONDUCTOR_DATABASE_URL=db,
        CONDUCTOR_POOL_FILE=str(pool_file),
        PYTHONPATH=str(REPO),
        LITELLM_LOCAL_MODEL_COST_MAP="True",
    )
    env.update({f"CONDUCTOR_{k.upper()}": v for k, v in extra.items()})
    return env


class Proc:
    def __init__(
        self, name: str, args: list[str], env: dict[str, str], log: Path, *, prefix: list[str] | None = None
    ) -> None:
        self.name = name
        self.log = log
        self._command = (args, env, prefix)
        self._fh = log.open("w")
        self.popen = subprocess.Popen(
            [*(prefix or []), sys.executable, "-m", "conductor.cli.main", *args],  # prefix: `ip netns exec ns`
            env=env,
            cwd=REPO,
            stdout=self._fh,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def again(self, log: Path) -> Proc:
        """The same command started anew (a supervisor's restart), logging to `log`."""
        args, env, prefix = self._command
        return Proc(self.name, args, env, log, prefix=prefix)

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.popen.poll() is None:
            os.killpg(self.popen.pid, sig)
        self.popen.wait(timeout=30)

    def stop(self) -> None:
        if self.popen.poll() is None:
            os.killpg(self.popen.pid, signal.SIGTERM)
            try:
                self.popen.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.kill()
        self._fh.close()

    def tail(self, n: int = 40) -> str:
        return "\n".join(self.log.read_text().splitlines()[-n:])


def wait_ready(procs: list[Proc], timeout: float = 90.0) -> None:
    """A worker is ready once its log says so."""
    deadline = time.monotonic() + timeout
    pending = [p for p in procs]
    while pending and time.monotonic() < deadline:
        for p in list(pending):
            if p.popen.poll() is not None:
                raise RuntimeError(f"{p.name} exited early:\n{p.tail()}")
            if "ready." in p.log.read_text():
                pending.remove(p)
        time.sleep(0.3)
    if pending:
        raise RuntimeError(f"{[p.name for p in pending]} not ready:\n" + "\n".join(p.tail() for p in pending))


@contextmanager
def workers(
    env: dict[str, str],
    home: Path,
    names: list[str],
    *,
    queues: str = "conductor,llm,default",
    concurrency: int = 4,
    beat: bool = False,
) -> Iterator[dict[str, Proc]]:
    procs = {
        n: Proc(
            n,
            ["worker", "-Q", queues, "-c", str(concurrency), "-P", "threads", "-n", f"{n}@test", "-l", "INFO"],
            env,
            home / f"{n}.log",
        )
        for n in names
    }
    try:
        wait_ready(list(procs.values()))
        if beat:
            procs["beat"] = Proc("beat", ["beat", "-l", "INFO"], env, home / "beat.log")
        yield procs
    finally:
        for p in procs.values():
            p.stop()
