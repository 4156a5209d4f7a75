"""Find, once per process, the strongest sandbox mode that really works on this machine."""

from __future__ import annotations

import json
import os
import shutil
import sys
import threading
from collections.abc import Sequence
from dataclasses import replace

from conductor.domain.errors import SandboxSetupError
from conductor.sandbox.model import Isolation, SandboxLimits
from conductor.sandbox.runner import run_in

_PROBE_SOURCE = r"""
import errno, json, os, socket, sys
names = [n for _, n in socket.if_nameindex()]
try:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(1.0)
    s.connect(("127.0.0.1", 9))
    loopback = "connected"
except OSError as e:
    loopback = errno.errorcode.get(e.errno, str(e.errno))
exe = os.path.realpath(sys.executable)
print(json.dumps({
    "uid": os.getuid(), "pid": os.getpid(), "ifaces": names, "loopback": loopback,
    "version": sys.version.split()[0],
    "usable": os.access(exe, os.X_OK) and os.access(sys.base_prefix, os.R_OK | os.X_OK),
    "tmp_entries": len(os.listdir("/tmp")),
}))
"""

_detect_lock = threading.Lock()
_detected: Isolation | None = None


def _python_candidates(explicit: str | None) -> list[str]:
    if explicit:
        return [explicit]
    # The venv interpreter may live under a directory the dropped uid cannot enter (here
    # /root/.pyenv); the probe rejects such candidates and a system python takes over.
    cands = [sys.executable, getattr(sys, "_base_executable", "") or ""]
    for name in (f"python{sys.version_info.major}.{sys.version_info.minor}", "python3"):
        for d in ("/usr/bin", "/usr/local/bin", "/bin"):
            cands.append(os.path.join(d, name))
    out: list[str] = []
    for c in cands:
        if c and os.path.exists(c) and c not in out:
            out.append(c)
    return out


def _modes_to_try() -> list[str]:
    modes: list[str] = []
    if shutil.which("unshare") and shutil.which("mount"):
        if os.geteuid() == 0 and shutil.which("setpriv"):
            modes.append("namespaces")
        elif os.geteuid() != 0:
            modes.append("user-namespaces")
    modes.append("rlimits")
    return modes


def detect_isolation(
    *, modes: Sequence[str] | None = None, python: str | None = None, refresh: bool = False
) -> Isolation:
    """Probe (once per process, cached) the strongest sandbox mode that really works here.

    Each candidate mode runs a small probe program and is accepted only if the probe confirms
    what the mode promises (no network interfaces but loopback, a new PID namespace, the dropped
    uid, an interpreter the sandbox user can fully run). ``modes``/``python`` restrict the search
    (and bypass the cache), e.g. ``modes=("rlimits",)`` to exercise the fallback.
    ``CONDUCTOR_SANDBOX_PYTHON`` picks the interpreter.
    """
    global _detected
    custom = modes is not None or python is not None
    if not custom and not refresh and _detected is not None:
        return _detected
    with _detect_lock:
        if not custom and not refresh and _detected is not None:
            return _detected
        python = python or os.environ.get("CONDUCTOR_SANDBOX_PYTHON") or None
        notes: list[str] = []
        for mode in modes or _modes_to_try():
            for exe in _python_candidates(python):
                for fresh in (True, False) if mode != "user-namespaces" else (True,):
                    iso, why = _probe(mode, exe, fresh)
                    if iso is not None:
                        iso = replace(iso, notes=tuple(notes))
                        if not custom:
                            _detected = iso
                        return iso
                    notes.append(f"{mode} with {exe}{'' if fresh else ' (uid 65534)'}: {why}")
        raise SandboxSetupError("no sandbox mode works here: " + "; ".join(notes))


def _probe(mode: str, exe: str, fresh: bool) -> tuple[Isolation | None, str]:
    root = os.geteuid() == 0
    ns = mode in ("namespaces", "user-namespaces")
    candidate = Isolation(
        mode=mode,
        network=ns,
        pid_namespace=ns,
        private_tmp=ns,
        drops_uid=root and mode != "user-namespaces",
        python=exe,
        python_version="?",
        fresh_uids=fresh,
    )
    try:
        res = run_in(_PROBE_SOURCE, SandboxLimits(wall_time_s=15.0), candidate)
    except (OSError, SandboxSetupError) as e:
        return None, f"did not start ({e})"
    if not res.ok:
        return None, f"{res.describe()}: {res.stderr_tail.strip()[-300:]}"
    try:
        facts = json.loads(res.stdout_tail.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return None, "probe printed no report"
    if not facts.get("usable"):
        return None, "interpreter not fully accessible to the sandbox user"
    if ns and (facts["ifaces"] != ["lo"] or facts["loopback"] == "connected"):
        return None, f"network still visible ({facts['ifaces']}, loopback {facts['loopback']})"
    if ns and facts["pid"] > 10:
        return None, f"no PID namespace (pid {facts['pid']})"
    if ns and facts["tmp_entries"] > 1:
        return None, "/tmp is not private"
    if candidate.drops_uid and facts["uid"] == 0:
        return None, "still uid 0"
    return replace(candidate, python_version=facts["version"]), ""
