"""The sandbox's value types: the limits of a run, the isolation it ran under, and its result."""

from __future__ import annotations

import math
import re
import signal
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class SandboxLimits:
    """Per-run limits; ``cpu_time_s`` defaults to the wall time rounded up plus one second."""

    wall_time_s: float = 10.0
    cpu_time_s: int | None = None
    memory_bytes: int = 1 << 30
    max_processes: int = 64
    max_file_bytes: int = 16 << 20
    max_open_files: int = 256
    tmpfs_bytes: int = 64 << 20
    tail_bytes: int = 4000

    @property
    def effective_cpu_s(self) -> int:
        return self.cpu_time_s if self.cpu_time_s is not None else math.ceil(self.wall_time_s) + 1


@dataclass(frozen=True)
class Isolation:
    """What the sandbox actually enforces on this machine (found by :func:`detect_isolation`)."""

    mode: str  # "namespaces" | "user-namespaces" | "rlimits"
    network: bool  # no usable network inside
    pid_namespace: bool  # own PID namespace: outside processes invisible, leftovers killed
    private_tmp: bool  # /tmp, /var/tmp, /dev/shm, /run/lock are private tmpfs mounts
    drops_uid: bool  # runs under a fresh unprivileged uid
    python: str
    python_version: str
    fresh_uids: bool = True  # a new uid per run (else the shared fallback uid)
    notes: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["notes"] = list(self.notes)
        return d


@dataclass(frozen=True)
class SandboxResult:
    exit_code: int | None  # None when killed by a signal (see ``signal``)
    signal: int | None
    timed_out: bool
    duration_s: float
    stdout_tail: str
    stderr_tail: str
    stdout_bytes: int
    stderr_bytes: int
    limit_hit: str | None  # "wall_time" | "cpu_time" | "memory" | "processes" | "file_size" | "network"
    isolation: Isolation
    uid: int | None = None
    limits: SandboxLimits = field(default_factory=SandboxLimits)

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out

    def describe(self) -> str:
        """A short phrase for why the run ended, e.g. 'timeout after 5.0s'."""
        if self.timed_out:
            return f"timeout after {self.limits.wall_time_s:g}s"
        if self.signal is not None:
            name = _signal_name(self.signal)
            if self.limit_hit:
                return f"killed by {name} ({self.limit_hit.replace('_', ' ')} limit)"
            return f"killed by {name}"
        return f"exit code {self.exit_code}"

    def details(self) -> dict[str, Any]:
        return {
            "exit_code": self.exit_code,
            "signal": self.signal,
            "timed_out": self.timed_out,
            "duration_s": round(self.duration_s, 4),
            "stdout_tail": self.stdout_tail,
            "stderr_tail": self.stderr_tail,
            "stdout_bytes": self.stdout_bytes,
            "stderr_bytes": self.stderr_bytes,
            "limit_hit": self.limit_hit,
            "limits": asdict(self.limits) | {"cpu_time_s": self.limits.effective_cpu_s},
            "sandbox_uid": self.uid,
            # the probe's notes (why stronger modes were rejected) stay on detect_isolation()
            "isolation": {k: v for k, v in self.isolation.as_dict().items() if k != "notes"},
        }


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def source_line(source: str, stderr: str) -> tuple[int, str] | None:
    """The deepest ``<stdin>`` traceback frame in ``stderr`` as (line number, source text)."""
    found = re.findall(r'File "<stdin>", line (\d+)', stderr)
    if not found:
        return None
    lineno = int(found[-1])
    lines = source.splitlines()
    if 1 <= lineno <= len(lines):
        return lineno, lines[lineno - 1].strip()
    return lineno, ""
