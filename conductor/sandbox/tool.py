"""The python tool's runner: one program in the sandbox, its ending turned into the domain's `ProgramRun`."""

from __future__ import annotations

from conductor.domain.python_tool import ProgramRun, error_of
from conductor.sandbox.isolation import detect_isolation
from conductor.sandbox.model import SandboxLimits
from conductor.sandbox.runner import run_in

#: A tool step is one short computation inside a workflow whose worker slot waits for it: a few seconds
#: of wall time (CPU time one second more), far less memory than the code verifier's tests get, and an
#: answer-sized output tail. An infinite loop answers "Error: timeout after 5s".
PYTHON_TOOL_LIMITS = SandboxLimits(wall_time_s=5.0, memory_bytes=512 << 20, max_processes=16, tail_bytes=4000)


def run_tool_program(program: str, limits: SandboxLimits = PYTHON_TOOL_LIMITS) -> ProgramRun:
    """Run ``program`` (from `conductor.domain.python_tool.program_for`) in the sandbox.

    Raises :class:`SandboxSetupError` only when the sandbox could not start it: that is a broken
    worker machine, not an answer.
    """
    result = run_in(program, limits, detect_isolation())
    if result.ok:
        return ProgramRun(stdout=result.stdout_tail, error=None)
    # The program reports its own exceptions; a run it could not report on was stopped from outside.
    error = None if result.timed_out or result.signal is not None else error_of(result.stderr_tail)
    return ProgramRun(stdout=result.stdout_tail, error=error or _ended(result.describe(), result.limit_hit))


def _ended(how: str, limit_hit: str | None) -> str:
    if limit_hit == "memory":
        return f"MemoryError: the program ran out of memory ({how})"
    return how
