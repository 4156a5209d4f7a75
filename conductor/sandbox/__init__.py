"""Run untrusted Python in a sandboxed subprocess: model-written code plus its tests (the code verifier)
and the python tool's programs (`run_tool_program`, called by the gateway).

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

from conductor.domain.errors import SandboxSetupError
from conductor.sandbox.isolation import detect_isolation
from conductor.sandbox.model import Isolation, SandboxLimits, SandboxResult, source_line
from conductor.sandbox.runner import run_in
from conductor.sandbox.tool import PYTHON_TOOL_LIMITS, run_tool_program

__all__ = [
    "PYTHON_TOOL_LIMITS",
    "Isolation",
    "SandboxLimits",
    "SandboxResult",
    "SandboxSetupError",
    "detect_isolation",
    "run_python",
    "run_tool_program",
    "source_line",
]


def run_python(
    source: str,
    *,
    limits: SandboxLimits | None = None,
    isolation: Isolation | None = None,
) -> SandboxResult:
    """Run ``source`` with ``python -I -`` in the sandbox and report how it ended.

    Never raises for anything the program does; raises :class:`SandboxSetupError` if the
    sandbox itself failed to start it. ``isolation`` defaults to what :func:`detect_isolation`
    finds on this machine.
    """
    return run_in(source, limits or SandboxLimits(), isolation or detect_isolation())
