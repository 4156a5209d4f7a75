"""Code verifier: run a model's Python against the problem's tests in the sandbox
(`conductor.sandbox`) and pass it only if every test ran and passed.

Program layout: [HumanEval prompt, when the answer needs it] + candidate code + tests
[+ ``check(entry_point)``] + a completion marker. The marker is a random token printed after the
last test; a run counts as passed only with exit code 0 *and* the marker on stdout, so a
candidate that calls ``sys.exit(0)`` / ``os._exit(0)`` before the tests run does not pass. The
program goes to the interpreter over stdin, so the token is not in any file the candidate could
read back.
"""

from __future__ import annotations

import re
import secrets
import textwrap
import warnings
from typing import Any

from conductor.domain.errors import VerifierError
from conductor.domain.problem import Problem
from conductor.sandbox import SandboxLimits, SandboxSetupError, run_python, source_line
from reward_pipeline.verifiers.base import Verdict

__all__ = ["CodeVerifier", "build_program", "extract_code"]

_FENCE_RE = re.compile(r"```[ \t]*(?P<lang>[\w+.-]*)[^\n]*\n(?P<body>.*?)```", re.DOTALL)


def _defines(code: str, name: str) -> bool:
    return re.search(rf"^\s*(?:async\s+)?def\s+{re.escape(name)}\s*\(", code, re.MULTILINE) is not None


def _parses(code: str) -> bool:
    """Compiles (not just parses: "'return' outside function" is a compile-time error)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # invalid escapes in docstrings are not our concern here
        try:
            compile(code, "<candidate>", "exec", dont_inherit=True)
        except (SyntaxError, ValueError):
            return False
    return True


def extract_code(answer: str, entry_point: str | None = None) -> str:
    """The code in a model's answer.

    The last fenced block tagged python/py (preferring, when ``entry_point`` is given, the last
    one that defines it); else the last fenced block of any language; else the raw text.
    An unterminated final fence (a cut-off reply) counts as a block.
    """
    text = answer or ""
    blocks = [(m["lang"].lower(), m["body"]) for m in _FENCE_RE.finditer(text)]
    tail = text.rfind("```")
    if tail != -1 and text.count("```") % 2 == 1:
        m = re.match(r"```[ \t]*([\w+.-]*)[^\n]*\n(.*)\Z", text[tail:], re.DOTALL)
        if m:
            blocks.append((m.group(1).lower(), m.group(2)))
    py = [b for lang, b in blocks if lang in ("python", "py", "python3")]
    if entry_point:
        defining = [b for b in py or [b for _, b in blocks] if _defines(b, entry_point)]
        if defining:
            return defining[-1]
    if py:
        return py[-1]
    if blocks:
        return blocks[-1][1]
    return text


def _prompt_code(problem: Problem, entry: str) -> str | None:
    """The problem's Python prompt (HumanEval style): code that compiles and defines ``entry``."""
    for cand in (problem.metadata.get("prompt"), problem.question):
        if not isinstance(cand, str) or not cand.strip():
            continue
        for code in [cand, *[m["body"] for m in _FENCE_RE.finditer(cand)][::-1]]:
            if _defines(code, entry) and _parses(code):
                return code
    return None


def _as_body(code: str, prompt: str) -> str:
    """Indent a function body the model returned flush-left, if that is what it did."""
    code = code.strip("\n")
    lines = code.splitlines()
    if not lines or lines[0][:1] in (" ", "\t"):
        return code
    options = [
        textwrap.indent(code, "    "),
        # only the first line lost its indentation (common when a reply starts mid-function)
        "    " + lines[0] + ("\n" + "\n".join(lines[1:]) if lines[1:] else ""),
    ]
    for opt in options:
        if _parses(prompt.rstrip("\n") + "\n" + opt):
            return opt
    return options[0]


def build_program(code: str, problem: Problem, *, marker: str = "") -> str:
    """The full program for ``code`` and ``problem``'s tests (see the module docstring)."""
    entry = problem.entry_point
    prompt = _prompt_code(problem, entry) if entry else None
    parts: list[str] = []
    if entry and prompt is not None:
        if _defines(code, entry):
            # Keep the prompt's imports and helper functions; the answer's definition overrides
            # the prompt's stub because it comes later.
            parts += [prompt, code]
        else:
            parts.append(prompt.rstrip("\n") + "\n" + _as_body(code, prompt))
    else:
        parts.append(code)
    tests = problem.tests or ""
    parts.append(tests)
    if entry and re.search(r"^def\s+check\s*\(", tests, re.MULTILINE):
        parts.append(f"check({entry})")
    if marker:
        parts.append(f"print({marker!r}, flush=True)")
    return "\n\n".join(p.rstrip() for p in parts) + "\n"


def _last_error_line(stderr: str) -> str:
    lines = [ln.strip() for ln in stderr.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else ""


class CodeVerifier:
    """Correct when the candidate code passes ``problem.tests`` in the sandbox."""

    name = "code"

    def __init__(self, *, limits: SandboxLimits | None = None) -> None:
        self.limits = limits or SandboxLimits(wall_time_s=10.0)

    def verify(self, answer: str, problem: Problem) -> Verdict:
        if not problem.tests:
            raise VerifierError(f"problem {problem.id or '?'} has no tests for the code verifier")
        code = extract_code(answer or "", problem.entry_point)
        if not code.strip():
            return Verdict(False, self.name, "empty answer: no code to run", {"exit_code": None})
        marker = "conductor-tests-completed-" + secrets.token_hex(16)
        program = build_program(code, problem, marker=marker)
        try:
            res = run_python(program, limits=self.limits)
        except SandboxSetupError as e:
            raise VerifierError(f"sandbox could not run the code: {e}") from e
        details: dict[str, Any] = res.details()
        details["program_chars"] = len(program)
        completed = marker in res.stdout_tail
        details["tests_completed"] = completed
        details["stdout_tail"] = res.stdout_tail.replace(marker, "<completion marker>")
        if res.ok and completed:
            return Verdict(True, self.name, f"all tests passed in {res.duration_s:.2f}s", details)
        return Verdict(False, self.name, self._why(res, program, completed), details)

    def _why(self, res, program: str, completed: bool) -> str:
        if res.timed_out:
            return f"timeout after {res.limits.wall_time_s:g}s (wall-clock limit)"
        err = _last_error_line(res.stderr_tail)
        where = source_line(program, res.stderr_tail)
        at = f" at line {where[0]}: {where[1][:160]}" if where and where[1] else ""
        limit = f" ({res.limit_hit.replace('_', ' ')} limit hit)" if res.limit_hit else ""
        if res.signal is not None:
            return f"{res.describe()}{limit}" + (f"; last error: {err[:200]}" if err else "")
        if res.exit_code == 0 and not completed:
            return "the program exited with code 0 before the tests finished (no completion marker)"
        if err:
            return f"{err[:300]}{at}{limit}"
        return f"exit code {res.exit_code}{limit}"
