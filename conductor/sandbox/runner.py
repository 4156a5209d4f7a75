"""Run one program under given limits and isolation: the command line per mode, the process
group, the wall-clock kill, cleanup, and decoding how the program ended."""

from __future__ import annotations

import os
import random
import resource
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from conductor.domain.errors import SandboxSetupError
from conductor.sandbox.model import Isolation, SandboxLimits, SandboxResult

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


def _limits_preexec(limits: SandboxLimits, *, shared_uid: bool) -> Callable[[], None]:
    cpu = limits.effective_cpu_s
    nproc = limits.max_processes
    if shared_uid and os.geteuid() != 0:
        # RLIMIT_NPROC counts every process of the real uid, so when the program keeps the
        # caller's uid the budget must sit on top of what the caller already runs.
        nproc += _own_process_count()
    # Everything is computed here, in the parent: the child between fork and exec must do as
    # little as possible (see the package docstring about threads).
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
    def onerror(func: Callable[[str], object], p: str, _exc: object) -> None:  # may have been chmod-ed read-only
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


def run_in(source: str, limits: SandboxLimits, iso: Isolation) -> SandboxResult:
    """Run ``source`` with ``python -I -`` under ``limits`` and ``iso`` and report how it ended.

    Never raises for anything the program does; raises :class:`SandboxSetupError` if the
    sandbox itself failed to start it.
    """
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
            preexec_fn=_limits_preexec(limits, shared_uid=uid is None),  # noqa: PLW1509 - see the package docstring
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


def _feed(proc: subprocess.Popen[bytes], data: bytes) -> None:
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
