"""The python tool's pure half: which code a step hands it, the program that runs that code like a REPL,
and the answer a run becomes.

Running the program is not done here (the domain starts no processes): the gateway hands `program_for`'s
source to the sandbox (`conductor.sandbox`) and turns how it ended into a `ProgramRun`. Like the
calculator, the tool reads the step's visible responses latest first, then its subtask, and answers
with text whatever happens: an exception is a (wrong) answer, text without code is a miss
(`NO_CODE`), neither is a failed job.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

__all__ = [
    "MAX_ANSWER_CHARS",
    "MAX_CODE_CHARS",
    "NO_CODE",
    "ProgramRun",
    "answer_of",
    "error_of",
    "find_code",
    "program_for",
    "run_python_tool",
]

#: Longer text is not parsed: the tool is for short programs, and parsing is done in the calling process.
MAX_CODE_CHARS = 8000
#: An answer is a step's output, read by later steps and the verifiers: a long printout is cut to its end.
MAX_ANSWER_CHARS = 2000

#: What the tool answers when nothing it sees is Python: an answer (the step completes and the verifier
#: scores it wrong), not an error. It holds no digit, so no verifier can read a number out of it.
NO_CODE = "No Python code found: give the python tool an expression or a short program, or a ```python block."

_FENCED = re.compile(r"```[ \t]*(?:python3?|py)?[ \t]*\n(.*?)```", re.DOTALL | re.IGNORECASE)
# The sandbox's program prints its exception on stderr after this mark, so the answer never mixes an
# error with the program's own output.
_ERROR_MARK = "conductor-python-tool-error: "


@dataclass(frozen=True)
class ProgramRun:
    """How one sandboxed run of `program_for`'s source ended."""

    stdout: str
    error: str | None  # None when it ran to the end; else e.g. "ZeroDivisionError: division by zero"


def find_code(texts: Sequence[str]) -> str | None:
    """The code in the first of ``texts`` that holds some, or None.

    In each text: the last fenced block (```python, ```py or a bare ```), else the whole text if it is
    Python, else its longest run of final lines that is ("Compute this:\\nsum(range(10))"). A bare name
    or a lone literal is not code: a model's one-word answer ("Paris", "42") is not a program to run.
    """
    for text in texts:
        blocks = _FENCED.findall(text)
        candidates = [blocks[-1]] if blocks else _line_suffixes(text)
        for candidate in candidates:
            if _is_code(candidate):
                return candidate.strip()
    return None


def program_for(code: str) -> str:
    """A self-contained program that runs ``code`` like a REPL: its output, then the value of a final
    expression (``str`` of a string, ``repr`` of anything else; nothing for None); an exception is printed
    on stderr after a mark (see `answer_of`). It parses ``code`` itself, so a syntax error of the
    sandbox's Python is an answer too."""
    return _REPL.replace("CODE", repr(code))


def answer_of(run: ProgramRun) -> str:
    """The step's answer: ``Error: ...`` for a program that failed, else what it printed."""
    if run.error is not None:
        return _cap(f"Error: {run.error}")
    out = run.stdout.strip()
    return _cap(out) if out else "No output: the program printed nothing and did not end with an expression."


def error_of(stderr: str) -> str | None:
    """The exception the program reported on ``stderr`` (see `program_for`), or None."""
    for line in reversed(stderr.splitlines()):
        if line.startswith(_ERROR_MARK):
            return line[len(_ERROR_MARK) :].strip()
    return None


def run_python_tool(texts: Sequence[str], execute: Callable[[str], ProgramRun]) -> str:
    """The tool's answer for ``texts`` (in priority order), running the code found with ``execute``."""
    code = find_code(texts)
    return NO_CODE if code is None else answer_of(execute(program_for(code)))


def _line_suffixes(text: str) -> list[str]:
    lines = text.strip().splitlines()
    return ["\n".join(lines[i:]) for i in range(len(lines))]


def _is_code(text: str) -> bool:
    if not text.strip() or len(text) > MAX_CODE_CHARS:
        return False
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return False
    if not tree.body:
        return False
    lone = tree.body[0] if len(tree.body) == 1 else None
    return not (isinstance(lone, ast.Expr) and isinstance(lone.value, ast.Name | ast.Constant))


def _cap(text: str) -> str:
    return text if len(text) <= MAX_ANSWER_CHARS else "…" + text[-MAX_ANSWER_CHARS:]


# Runs inside the sandbox, maybe under another Python than ours: only the standard library, and no
# syntax newer than 3.8. Names start with an underscore so the program's own names do not clash.
_REPL = """
import ast as _ast, sys as _sys

def _main(_source):
    _namespace = {"__name__": "__main__", "__builtins__": __builtins__}
    try:
        _tree = _ast.parse(_source, "<python tool>", "exec")
        _last = None
        if _tree.body and isinstance(_tree.body[-1], _ast.Expr):
            _last = _ast.Expression(_tree.body.pop().value)
        exec(compile(_tree, "<python tool>", "exec"), _namespace)
        if _last is not None:
            _value = eval(compile(_last, "<python tool>", "eval"), _namespace)
            if _value is not None:
                print(_value if isinstance(_value, str) else repr(_value))
    except SystemExit as _e:
        if _e.code not in (None, 0):  # sys.exit() or sys.exit(0) ends a program that worked
            _fail(_e)
    except BaseException as _e:  # KeyboardInterrupt, MemoryError too: every ending is an answer
        _fail(_e)

def _fail(_e):
    _sys.stdout.flush()
    _message = str(_e).replace("\\n", " ").strip()
    _sys.stderr.write("\\nMARK%s\\n" % (type(_e).__name__ + (": " + _message if _message else "")))
    _sys.exit(1)

_main(CODE)
""".replace("MARK", _ERROR_MARK)
