"""Read the workflow out of a Conductor completion: the three lists in its last fenced code block.

The Conductor ends its answer with one fenced block that assigns ``model_id``, ``subtasks`` and
``access_list``. We parse that block with :func:`ast.parse` and read each value with
:func:`ast.literal_eval`, so nothing the model wrote is ever executed. Any defect raises
:class:`~conductor.domain.errors.PlanParseError` whose ``kind`` is one of :data:`ERROR_KINDS`; the
training reward treats every kind the same (0), but the kind and the detail are what an
operator reads when a policy starts emitting broken plans.

Which block counts
    The last block tagged ``python`` / ``py`` / ``python3`` (any case); if there is none, the
    last untagged block. Blocks tagged with another language are ignored. Fences are lines
    that start with three backticks (after optional indentation); a block also closes on a
    line that *ends* with three backticks (models often glue the fence to the last list). A
    python-tagged fence always opens a new block, even inside an unclosed earlier block, and
    an unclosed final block still counts: a completion cut off at its token cap after the
    lists were written is a usable plan.

Inside the block
    Only top-level plain (or annotated) assignments to the three names are read; other
    statements and comments are tolerated, and the last assignment of a name wins. Each list
    may be a list or a tuple literal. Access entries are ``"all"``, ``[]`` or the indices of
    earlier steps (a list or a tuple); duplicates are harmless and kept. Worker ids are ints
    (not bools) in ``[0, pool_size)``.

Error kinds (checked in this order)
    ``missing_block``      no fenced code block at all
    ``syntax``             the block is not valid Python (or nested too deeply to parse)
    ``missing_list``       one of the three names is never assigned at top level
    ``not_literal``        a value contains code rather than a literal (a call, a name, an
                           operator...), which we refuse to evaluate
    ``not_a_list``         a value is a literal but not a list or tuple
    ``unequal_lengths``    the three lists differ in length
    ``too_many_steps``     more than ``max_steps`` steps
    ``empty_workflow``     three empty lists where ``allow_empty`` is False
    ``bad_worker``         a worker id that is not an int (str, float, bool, ...)
    ``unknown_worker``     an int worker id outside the pool
    ``bad_subtask``        a subtask that is not a non-empty string, or is too long
    ``bad_access``         an access entry of the wrong type or value (incl. negative indices)
    ``forward_reference``  an access entry naming a later step
    ``self_reference``     an access entry naming the step itself
Steps are checked in order and, within a step, worker, then subtask, then access; the first
defect found is reported.
"""

from __future__ import annotations

import ast
import re
import warnings

from conductor.domain.errors import PlanParseError
from conductor.domain.workflow import Access, Workflow

__all__ = [
    "ERROR_KINDS",
    "LIST_NAMES",
    "MAX_COMPLETION_CHARS",
    "MAX_SUBTASK_CHARS",
    "extract_block",
    "parse_workflow",
]

LIST_NAMES = ("model_id", "subtasks", "access_list")

ERROR_KINDS = frozenset(
    {
        "missing_block",
        "syntax",
        "missing_list",
        "not_literal",
        "not_a_list",
        "unequal_lengths",
        "too_many_steps",
        "empty_workflow",
        "bad_worker",
        "unknown_worker",
        "bad_subtask",
        "bad_access",
        "forward_reference",
        "self_reference",
    }
)

#: Only this many trailing characters of a completion are looked at. The block sits at the end,
#: and a real plan (the paper caps completions at 1,024 tokens) is a few KB; the cap bounds the
#: work a runaway or hostile completion can cause.
MAX_COMPLETION_CHARS = 64 * 1024
#: A subtask is forwarded to a worker verbatim; anything longer is a degenerate plan.
MAX_SUBTASK_CHARS = 16_000

_FENCE = "```"
_PYTHON_TAGS = frozenset({"python", "py", "python3"})
_INLINE_OPENER = re.compile(r"```[ \t]*(python3?|py)[ \t]*$", re.IGNORECASE)
# Node types literal_eval may accept; anything else inside a value is code.
_LITERAL_NODES = (ast.Constant, ast.List, ast.Tuple, ast.Set, ast.Dict, ast.UnaryOp, ast.expr_context, ast.unaryop)
# Failures of ast.parse / literal_eval on adversarial text: deep nesting exhausts the C stack
# guard (RecursionError, MemoryError), lone surrogates cannot be encoded (UnicodeError is a
# ValueError), and null bytes are a SyntaxError or ValueError depending on the Python version.
_PARSE_FAILURES = (SyntaxError, ValueError, TypeError, RecursionError, MemoryError, OverflowError)


def parse_workflow(completion: str, *, pool_size: int, max_steps: int = 5, allow_empty: bool = False) -> Workflow:
    """Return the workflow in ``completion``'s last code block, or raise :class:`PlanParseError`.

    ``allow_empty=True`` is for replan answers, where three empty lists mean "keep the
    previous answer" and yield an empty :class:`Workflow`.
    """
    if pool_size < 1:
        raise ValueError(f"pool_size must be >= 1, got {pool_size}")
    if max_steps < 1:
        raise ValueError(f"max_steps must be >= 1, got {max_steps}")
    if not isinstance(completion, str):
        raise PlanParseError("missing_block", f"completion is {type(completion).__name__}, not text")

    source = extract_block(completion)
    if source is None:
        raise PlanParseError("missing_block", "no fenced code block (```python ... ```) in the completion")
    values = _read_assignments(source)

    lengths = {name: len(values[name].elts) for name in LIST_NAMES}
    if len(set(lengths.values())) > 1:
        shown = ", ".join(f"{name} has {n}" for name, n in lengths.items())
        raise PlanParseError("unequal_lengths", f"the three lists must have equal length: {shown}")
    n_steps = lengths["model_id"]
    if n_steps > max_steps:
        raise PlanParseError("too_many_steps", f"{n_steps} steps, at most {max_steps} allowed")
    if n_steps == 0:
        if allow_empty:
            return Workflow(())
        raise PlanParseError("empty_workflow", "the three lists are empty; a workflow needs at least one step")

    workers: list[int] = []
    subtasks: list[str] = []
    accesses: list[Access] = []
    for i in range(n_steps):
        workers.append(_check_worker(i, _element(source, "model_id", values["model_id"], i), pool_size))
        subtasks.append(_check_subtask(i, _element(source, "subtasks", values["subtasks"], i)))
        accesses.append(_check_access(i, _element(source, "access_list", values["access_list"], i)))
    return Workflow.from_lists(workers, subtasks, accesses)


def extract_block(completion: str) -> str | None:
    """The body of the block that counts (see the module doc), or None when there is none."""
    text = completion[-MAX_COMPLETION_CHARS:]
    last_python: str | None = None
    last_bare: str | None = None
    tag: str | None = None  # None while outside a block
    body: list[str] = []

    def close() -> None:
        nonlocal last_python, last_bare, tag
        if tag in _PYTHON_TAGS:
            last_python = "\n".join(body)
        elif tag == "":
            last_bare = "\n".join(body)
        tag = None

    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith(_FENCE):
            info = stripped[len(_FENCE) :].strip("`").strip()
            word = info.split(maxsplit=1)[0].lower() if info else ""
            if tag is None:
                tag, body = word, []
            elif word in _PYTHON_TAGS:
                # An earlier block was never closed; the model has started over.
                close()
                tag, body = word, []
            elif not info:
                close()
            else:
                body.append(line)
        elif tag is None and (m := _INLINE_OPENER.search(stripped)):
            # "Here is the plan: ```python" - an opener glued to prose.
            tag, body = m.group(1).lower(), []
        elif tag is not None and stripped.endswith(_FENCE):
            body.append(line.rstrip()[: -len(_FENCE)])
            close()
        elif tag is not None:
            body.append(line)
    if tag is not None:
        close()
    return last_python if last_python is not None else last_bare


def _read_assignments(source: str) -> dict[str, ast.List | ast.Tuple]:
    try:
        # Model text like "1if" draws SyntaxWarnings; they are noise in worker logs, not signal.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SyntaxWarning)
            tree = ast.parse(source, mode="exec")
    except _PARSE_FAILURES as exc:
        raise PlanParseError("syntax", f"the code block is not valid Python: {_describe_exc(exc)}") from None

    found: dict[str, ast.expr] = {}
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign):
            targets, value = stmt.targets, stmt.value
        elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
            targets, value = [stmt.target], stmt.value
        else:
            continue
        for target in targets:
            if isinstance(target, ast.Name) and target.id in LIST_NAMES:
                found[target.id] = value

    missing = [name for name in LIST_NAMES if name not in found]
    if missing:
        raise PlanParseError("missing_list", f"no top-level assignment to {', '.join(missing)} in the code block")

    lists: dict[str, ast.List | ast.Tuple] = {}
    for name in LIST_NAMES:
        node = found[name]
        if isinstance(node, (ast.List, ast.Tuple)):
            lists[name] = node
            continue
        _literal(source, name, node)  # raises not_literal for code
        raise PlanParseError("not_a_list", f"{name} must be a list, got {_snippet(source, node)} (line {node.lineno})")
    return lists


def _element(source: str, name: str, node: ast.List | ast.Tuple, i: int) -> object:
    return _literal(source, f"{name}[{i}]", node.elts[i])


def _literal(source: str, where: str, node: ast.expr) -> object:
    """literal_eval one value node; code inside it is reported, never run."""
    try:
        return ast.literal_eval(node)
    except _PARSE_FAILURES:
        pass
    offender: ast.AST = node
    try:
        for sub in ast.walk(node):
            if not isinstance(sub, _LITERAL_NODES):
                offender = sub
                break
    except RecursionError:  # pragma: no cover - ast.walk is iterative; belt and braces
        pass
    raise PlanParseError(
        "not_literal",
        f"{where} is not a plain literal: {_snippet(source, offender)} (line {getattr(offender, 'lineno', '?')}); "
        "only literal values are read, never evaluated",
    )


def _check_worker(i: int, value: object, pool_size: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise PlanParseError(
            "bad_worker", f"model_id[{i}] must be an int model number, got {type(value).__name__} {_short(value)}"
        )
    if not 0 <= value < pool_size:
        raise PlanParseError(
            "unknown_worker", f"model_id[{i}] is {_short(value)}, but the pool has models 0..{pool_size - 1}"
        )
    return value


def _check_subtask(i: int, value: object) -> str:
    if not isinstance(value, str):
        raise PlanParseError(
            "bad_subtask", f"subtasks[{i}] must be a string, got {type(value).__name__} {_short(value)}"
        )
    if not value.strip():
        raise PlanParseError("bad_subtask", f"subtasks[{i}] is empty")
    if len(value) > MAX_SUBTASK_CHARS:
        raise PlanParseError("bad_subtask", f"subtasks[{i}] has {len(value)} characters, at most {MAX_SUBTASK_CHARS}")
    return value


def _check_access(i: int, value: object) -> Access:
    if isinstance(value, str) and value == "all":
        return "all"
    if not isinstance(value, (list, tuple)):
        raise PlanParseError(
            "bad_access",
            f'access_list[{i}] must be "all", [] or a list of earlier step indices, got {_short(value)}',
        )
    for entry in value:
        if not isinstance(entry, int) or isinstance(entry, bool):
            raise PlanParseError(
                "bad_access",
                f"access_list[{i}] contains {type(entry).__name__} {_short(entry)}; step indices must be ints",
            )
        if entry < 0:
            raise PlanParseError("bad_access", f"access_list[{i}] contains negative step index {_short(entry)}")
        if entry == i:
            raise PlanParseError("self_reference", f"access_list[{i}] refers to step {i} itself")
        if entry > i:
            earlier = {0: "no steps (it is the first)", 1: "step 0"}.get(i, f"steps 0..{i - 1}")
            raise PlanParseError(
                "forward_reference",
                f"access_list[{i}] refers to later step {_short(entry)}; step {i} can only see {earlier}",
            )
    return tuple(value)


def _short(value: object, limit: int = 60) -> str:
    # repr() of a huge int (a 50,000-digit hex literal parses fine) raises past Python's
    # int-to-str digit limit, so summarise big ints instead of printing them.
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 200:
        return f"<{'negative ' if value < 0 else ''}int of {value.bit_length()} bits>"
    try:
        text = repr(value)
    except (ValueError, RecursionError):
        return f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _snippet(source: str, node: ast.AST, limit: int = 60) -> str:
    try:
        text = ast.get_source_segment(source, node) or type(node).__name__
    except (ValueError, IndexError, TypeError):
        text = type(node).__name__
    text = re.sub(r"\s+", " ", text)
    return repr(text if len(text) <= limit else text[: limit - 3] + "...")


def _describe_exc(exc: BaseException) -> str:
    if isinstance(exc, SyntaxError):
        where = f" (line {exc.lineno})" if exc.lineno else ""
        return f"{exc.msg}{where}"
    if isinstance(exc, (RecursionError, MemoryError)):
        return "expression nested too deeply"
    return f"{type(exc).__name__}: {str(exc)[:120]}"
