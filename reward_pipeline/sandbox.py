"""Run untrusted Python (model-written code plus its tests) in a sandboxed subprocess.

Model output is never executed in the calling process. Each run gets:

* a fresh temporary directory as its working directory (removed afterwards);
* ``python -I`` (isolated mode: no ``PYTHON*`` variables, no user site, script dir not trusted)
  reading the program from a pipe on stdin, so the source is not on disk for the program to read
  back (tracebacks say ``<stdin>``; :func:`source_line` maps their line numbers back);
* an environment scrubbed down to ``PATH`` and ``LANG``;
* ``resource`` limits set in ``preexec_fn`` (address space, CPU seconds, processes, file size,
  open files, no core dumps); ``preexec_fn`` is documented as unsafe with threads, so it is kept
  to ``setrlimit`` calls on values computed beforehand (no imports, no allocation-heavy work);
* a new session (``start_new_session=True``) whose whole process group is SIGKILLed on a
  wall-clock timeout and again after every run, whatever happened.

On top of that, :func:`detect_isolation` probes once per process for the strongest mode that
works here and every result records which one ran (``SandboxResult.isolation``):

``namespaces`` (we are root and ``unshare`` works)
    ``unshare --net --mount --pid --fork --kill-child --mount-proc``: no network interfaces but a
    downed loopback; a private PID namespace (the program cannot see or signal processes outside
    it, and when its init exits or is killed, every process left inside dies with it, including
    ones that called ``setsid``); private size-capped tmpfs mounts over ``/tmp``, ``/var/tmp``,
    ``/dev/shm`` (the world-writable directories) and ``/run`` (unix sockets of local databases,
    which no network namespace hides), with the work directory bind-mounted back at its own path; then ``setpriv`` drops to a fresh, otherwise unused uid
    picked per run (so ``RLIMIT_NPROC`` counts only this run's processes, and root-owned files
    are read-only to it) with no supplementary groups, ``no_new_privs`` and an empty capability
    bounding set. Writes outside the work directory therefore either fail (permissions) or land
    on a tmpfs that vanishes with the run.
``user-namespaces`` (not root, unprivileged user namespaces allowed)
    the same namespaces via ``unshare --user --map-root-user``; the program keeps the caller's
    uid as seen from outside, so it can still write the caller's own files.
``rlimits`` (fallback)
    only the limits, the session and the temp cwd; as root the program still runs under a
    fresh uid, and processes of that uid are killed after the run. No network isolation.

The exit status of a namespaced run comes from ``sh`` (the PID-namespace init), so a program
killed by signal N is reported as exit code 128+N and decoded back to ``signal=N``.
"""

from __future__ import annotations

import math
import os
import random
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from conductor.domain.errors import SandboxSetupError

__all__ = [
    "Isolation",
    "SandboxLimits",
    "SandboxResult",
    "SandboxSetupError",
    "detect_isolation",
    "run_python",
    "source_line",
]

SETUP_FAILED_MARK = "conductor-sandbox: setup failed"
_SETUP_EXIT = 125
# Fresh uids come from a range no real account uses, so a run can't touch anyone's files or
# processes and per-user limits (RLIMIT_NPROC) count this run alone.
_UID_BASE = 1_000_000
_UID_SPAN = 1_000_000
_FALLBACK_UID = 65534  # nobody, when the uid map (e.g. a container) has no room for fresh uids
# World-writable or socket-holding places: /run has the PostgreSQL and MySQL unix sockets, which a
# network namespace does not hide (they are files), and must not be reachable from a sandbox.
_PRIVATE_DIRS = ("/tmp", "/var/tmp", "/dev/shm", "/run")
_KEPT_ENV = ("PATH", "LANG")

# Runs inside the new mount namespace as root, before privileges are dropped. It cds into the
# work dir first: after /tmp is shadowed by the private tmpfs, "." still names the real work dir,
# which is then bind-mounted back at its own path so absolute paths keep working.
_NS_SCRIPT = r"""
set -u
w=$1; sz=$2; u=$3; shift 3
fail() { echo "conductor-sandbox: setup failed: $1" >&2; exit 125; }
cd "$w" || fail "cd $w"
for d in PRIVATE_DIRS; do
  [ -d "$d" ] || continue
  mount -t tmpfs -o "size=$sz,mode=1777,nosuid,nodev" tmpfs "$d" || fail "mount tmpfs on $d"
done
mkdir -p "$w" && mount --no-canonicalize --bind . "$w" && cd "$w" || fail "bind work dir"
unset PWD OLDPWD  # cd exported them; the program's environment stays PATH and LANG only
if [ "$u" = "-" ]; then
  "$@"
else
  setpriv --reuid="$u" --regid="$u" --clear-groups --no-new-privs --bounding-set=-all -- "$@"
fi
exit $?
""".replace("PRIVATE_DIRS", " ".join(_PRIVATE_DIRS))

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


# --------------------------------------------------------------------------- isolation probing

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
        res = run_python(_PROBE_SOURCE, limits=SandboxLimits(wall_time_s=15.0), isolation=candidate)
    except (OSError, SandboxSetupError) as e:
        return None, f"did not start ({e})"
    if not res.ok:
        return None, f"{res.describe()}: {res.stderr_tail.strip()[-300:]}"
    import json

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


# --------------------------------------------------------------------------- running


def _own_process_count() -> int:
    uid = os.getuid()
    n = 0
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                n += entry.stat().st_uid == uid
            except OSError:
                pass
    return n


def _limits_preexec(limits: SandboxLimits, *, shared_uid: bool):
    cpu = limits.effective_cpu_s
    nproc = limits.max_processes
    if shared_uid and os.geteuid() != 0:
        # RLIMIT_NPROC counts every process of the real uid, so when the program keeps the
        # caller's uid the budget must sit on top of what the caller already runs.
        nproc += _own_process_count()
    # Everything is computed here, in the parent: the child between fork and exec must do as
    # little as possible (see the module docstring about threads).
    settings = (
        (resource.RLIMIT_AS, (limits.memory_bytes, limits.memory_bytes)),
        (resource.RLIMIT_CPU, (cpu, cpu + 1)),
        (resource.RLIMIT_NPROC, (nproc, nproc)),
        (resource.RLIMIT_FSIZE, (limits.max_file_bytes, limits.max_file_bytes)),
        (resource.RLIMIT_NOFILE, (limits.max_open_files, limits.max_open_files)),
        (resource.RLIMIT_CORE, (0, 0)),
    )
    setrlimit = resource.setrlimit

    def preexec() -> None:
        for res, value in settings:
            setrlimit(res, value)

    return preexec


def _read_tail(path: Path, n: int) -> tuple[str, int]:
    size = path.stat().st_size
    with path.open("rb") as f:
        if size > n:
            f.seek(size - n)
        data = f.read(n)
    text = data.decode("utf-8", errors="replace")
    if size > n:
        text = "…" + text
    return text, size


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _kill_uid(python: str, uid: int) -> None:
    """Kill every process of ``uid`` by sending kill(-1) *as* that uid (rlimits mode cleanup)."""
    try:
        subprocess.run(
            [python, "-I", "-c", "import os, signal\ntry: os.kill(-1, signal.SIGKILL)\nexcept OSError: pass"],
            check=False,
            user=uid,
            group=uid,
            extra_groups=[],
            env={k: os.environ[k] for k in _KEPT_ENV if k in os.environ},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=10,
            cwd="/",
        )
    except (OSError, subprocess.SubprocessError):
        pass


def _rmtree(path: Path) -> None:
    def onerror(func, p, _exc):  # the program may have chmod-ed things read-only
        try:
            os.chmod(p, 0o700)
            func(p)
        except OSError:
            pass

    shutil.rmtree(path, onerror=onerror)


def _classify(timed_out: bool, sig: int | None, stderr: str, iso: Isolation) -> str | None:
    if timed_out:
        return "wall_time"
    if sig == signal.SIGXCPU:
        return "cpu_time"
    if sig == signal.SIGXFSZ or "File too large" in stderr:
        return "file_size"
    last = stderr.strip().splitlines()[-1] if stderr.strip() else ""
    if "MemoryError" in last or "Cannot allocate memory" in stderr or "std::bad_alloc" in stderr:
        return "memory"
    if "BlockingIOError" in last or "Resource temporarily unavailable" in stderr:
        return "processes"
    if iso.network and ("Network is unreachable" in stderr or "Temporary failure in name resolution" in stderr):
        return "network"
    return None


def run_python(
    source: str,
    *,
    limits: SandboxLimits | None = None,
    isolation: Isolation | None = None,
) -> SandboxResult:
    """Run ``source`` with ``python -I -`` in the sandbox and report how it ended.

    Never raises for anything the program does; raises :class:`SandboxSetupError` if the
    sandbox itself failed to start it.
    """
    limits = limits or SandboxLimits()
    iso = isolation or detect_isolation()
    ns = iso.mode in ("namespaces", "user-namespaces")
    uid: int | None = None
    if iso.drops_uid:
        uid = _UID_BASE + random.randrange(_UID_SPAN) if iso.fresh_uids else _FALLBACK_UID

    base = Path(tempfile.mkdtemp(prefix="conductor-sbx-"))
    try:
        work, out_dir = _make_dirs(base, uid)
        cmd, cwd, popen_kw = _command(iso, limits, work, uid)
        rc, timed_out, duration = _execute(cmd, cwd, popen_kw, source.encode("utf-8"), limits, uid, out_dir)
        if uid is not None and not ns:
            _kill_uid(iso.python, uid)
        stdout_tail, stdout_bytes = _read_tail(out_dir / "stdout", limits.tail_bytes)
        stderr_tail, stderr_bytes = _read_tail(out_dir / "stderr", limits.tail_bytes)
        if rc == _SETUP_EXIT and SETUP_FAILED_MARK in stderr_tail:
            raise SandboxSetupError(stderr_tail.strip()[-500:])
        sig, exit_code = _exit_status(rc, ns=ns, timed_out=timed_out)
        return SandboxResult(
            exit_code=exit_code,
            signal=sig,
            timed_out=timed_out,
            duration_s=duration,
            stdout_tail=stdout_tail,
            stderr_tail=stderr_tail,
            stdout_bytes=stdout_bytes,
            stderr_bytes=stderr_bytes,
            limit_hit=_classify(timed_out, sig, stderr_tail, iso),
            isolation=iso,
            uid=uid,
            limits=limits,
        )
    finally:
        _rmtree(base)


def _make_dirs(base: Path, uid: int | None) -> tuple[Path, Path]:
    """work/ (the program's, owned by its uid) and out/ (ours: its stdout and stderr files)."""
    os.chmod(base, 0o711)  # the sandbox uid may traverse to work/ but not list or reach out/
    work = base / "work"
    work.mkdir(mode=0o700)
    out_dir = base / "out"
    out_dir.mkdir(mode=0o700)
    if uid is not None:
        os.chown(work, uid, uid)
    return work, out_dir


def _command(
    iso: Isolation, limits: SandboxLimits, work: Path, uid: int | None
) -> tuple[list[str], str, dict[str, Any]]:
    """The command line, working directory and extra Popen arguments for this isolation mode."""
    py_cmd = [iso.python, "-I", "-"]
    if iso.mode in ("namespaces", "user-namespaces"):
        unshare = ["unshare"]
        if iso.mode == "user-namespaces":
            unshare += ["--user", "--map-root-user"]
        unshare += ["--net", "--mount", "--pid", "--fork", "--kill-child", "--mount-proc", "--"]
        cmd = [
            *unshare, "/bin/sh", "-c", _NS_SCRIPT, "sh",
            str(work), str(limits.tmpfs_bytes), str(uid) if uid is not None else "-", *py_cmd,
        ]  # fmt: skip
        return cmd, "/", {}
    popen_kw: dict[str, Any] = {}
    if uid is not None:
        popen_kw.update(user=uid, group=uid, extra_groups=[])
    return py_cmd, str(work), popen_kw


def _execute(
    cmd: list[str],
    cwd: str,
    popen_kw: dict[str, Any],
    data: bytes,
    limits: SandboxLimits,
    uid: int | None,
    out_dir: Path,
) -> tuple[int, bool, float]:
    """Run the command under the limits, feeding it ``data``; returns (returncode, timed out, seconds)."""
    env = {k: os.environ[k] for k in _KEPT_ENV if k in os.environ}
    env.setdefault("PATH", "/usr/bin:/bin")
    start = time.monotonic()
    timed_out = False
    with (out_dir / "stdout").open("wb") as out_f, (out_dir / "stderr").open("wb") as err_f:
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.PIPE,
            stdout=out_f,
            stderr=err_f,
            cwd=cwd,
            env=env,
            start_new_session=True,
            close_fds=True,
            preexec_fn=_limits_preexec(limits, shared_uid=uid is None),  # noqa: PLW1509 - see docstring
            **popen_kw,
        )
        writer = threading.Thread(target=_feed, args=(proc, data), daemon=True)
        writer.start()
        try:
            proc.wait(timeout=limits.wall_time_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill_group(proc.pid)
            proc.wait()
        finally:
            # Also after a normal exit: background children may still hold the group.
            _kill_group(proc.pid)
            writer.join(timeout=5)
    return proc.returncode, timed_out, time.monotonic() - start


def _exit_status(rc: int, *, ns: bool, timed_out: bool) -> tuple[int | None, int | None]:
    """(signal, exit code) from a return code; exactly one is set."""
    if timed_out:
        return signal.SIGKILL, None
    if rc < 0:
        return -rc, None
    if ns and rc > 128 and rc - 128 < signal.NSIG:
        # sh (the namespace's init) reports a child killed by signal N as 128+N
        return rc - 128, None
    return None, rc


def _feed(proc: subprocess.Popen, data: bytes) -> None:
    assert proc.stdin is not None
    try:
        proc.stdin.write(data)
    except (BrokenPipeError, OSError):
        pass
    finally:
        try:
            proc.stdin.close()
        except OSError:
            pass
