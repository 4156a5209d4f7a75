"""The language of plans the parser accepts, as one regular expression a decoder can be held to.

A Conductor decoded under this grammar cannot write a plan that fails to parse: the three lists
have the same length (1..``max_steps``; or all three empty where a replan may keep its answer),
every worker id is a model of the pool, every access entry is ``"all"``, ``[]`` or earlier step
numbers, and every subtask is a non-blank string of bounded length whose escapes Python reads.
The block is written the way :meth:`Workflow.to_python` writes it (the format the warm-up
teaches), so a trained policy loses nothing to the constraint.

The regex uses the subset that Python's ``re`` and the grammar backends (xgrammar, llguidance)
read alike: literals, classes, groups, alternation and bounded repetition. Per step count ``n``
the subtasks share one character budget, so a plan of any length fits the Conductor's token cap
(a plan cut off at the cap is the one defect a grammar cannot rule out on its own).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import asdict, dataclass
from typing import Any, Literal

__all__ = ["GRAMMAR_VERSION", "PlanGrammar"]

#: Bumped whenever the language changes, so a stored round says which one masked its sampling.
GRAMMAR_VERSION = "plan-regex-3"

Preamble = Literal["none", "free"]

# A string literal body: ordinary characters, or the escapes repr() writes and Python reads as such.
# Every character str.splitlines() breaks on is excluded (the parser reads the block line by line), and
# the null byte, which Python refuses in source.
_LINE_BREAKS = r"\x00\n\r\x0b\x0c\x1c-\x1e\x85\u2028\u2029"
# Whitespace as str.strip() sees it: a subtask may not start with it, or it could strip to nothing.
_BLANKS = r" \t\x1f\xa0\u1680\u2000-\u200a\u202f\u205f\u3000" + _LINE_BREAKS
_ESCAPE = r"\\[\\'\"nt]"
_FIRST_ESCAPE = r"\\[\\'\"]"
_BODY = {"'": rf"[^'\\{_LINE_BREAKS}]", '"': rf'[^"\\{_LINE_BREAKS}]'}
_FIRST = {"'": rf"[^'\\{_BLANKS}]", '"': rf'[^"\\{_BLANKS}]'}
#: Characters the structure around the subtasks takes for one step (ids, quotes, access, separators).
_STRUCTURE_CHARS_PER_STEP = 24
_FIXED_CHARS = 70  # the fences and the three names


@dataclass(frozen=True)
class PlanGrammar:
    """The plans a round may produce: sized to the pool, the step cap and the completion budget."""

    pool_size: int
    max_steps: int = 5
    #: Upper bound on one subtask's characters, and on all of a plan's subtasks together.
    max_subtask_chars: int = 600
    max_plan_chars: int = 900
    #: "free": up to ``max_preamble_chars`` of thought (no backticks) may precede the block.
    preamble: Preamble = "none"
    max_preamble_chars: int = 400
    #: A replan may answer three empty lists (keep the previous answer).
    allow_empty: bool = False

    def __post_init__(self) -> None:
        if self.pool_size < 1 or self.max_steps < 1:
            raise ValueError("a plan grammar needs at least one worker and one step")
        if self.max_subtask_chars < 1 or self.max_plan_chars < 1:
            raise ValueError("subtask and plan budgets must be positive")

    @classmethod
    def for_token_budget(
        cls, pool_size: int, *, max_steps: int, max_tokens: int, preamble: Preamble = "none", **kw: Any
    ) -> PlanGrammar:
        """A grammar whose longest completion fits ``max_tokens`` at a conservative 3 characters per
        token; a preamble of thought takes at most a third of that budget."""
        budget = max(90, 3 * max_tokens)
        thought = min(400, budget // 3) if preamble == "free" else 0
        return cls(
            pool_size=pool_size,
            max_steps=max_steps,
            max_plan_chars=budget - thought,
            preamble=preamble,
            max_preamble_chars=max(1, thought),
            **kw,
        )

    @classmethod
    def for_round(
        cls, pool_size: int, *, max_steps: int, max_tokens: int, prompt_style: str, replan: bool
    ) -> PlanGrammar:
        """The grammar of one Conductor round: the full prompts ask for brief thought before the block
        (so a preamble is allowed), the compact one for the block only; a replan may keep its answer."""
        return cls.for_token_budget(
            pool_size,
            max_steps=max_steps,
            max_tokens=max_tokens,
            preamble="free" if replan or prompt_style != "compact" else "none",
            allow_empty=replan,
        )

    def subtask_limit(self, n_steps: int) -> int:
        """Characters one subtask may have in a plan of ``n_steps`` steps."""
        budget = self.max_plan_chars - _FIXED_CHARS - _STRUCTURE_CHARS_PER_STEP * n_steps
        return max(8, min(self.max_subtask_chars, budget // n_steps))

    def regex(self) -> str:
        lengths = [n for n in range(1, self.max_steps + 1) if n == 1 or self.subtask_limit(n) > 8]
        plans = [self._plan(n) for n in lengths]
        if self.allow_empty:
            plans.insert(0, r"model_id = \[\]\nsubtasks = \[\]\naccess_list = \[\]")
        block = r"```python\n(" + "|".join(plans) + r")\n```"
        if self.preamble == "free":
            return rf"([^`]{{1,{self.max_preamble_chars}}}\n)?" + block
        return block

    def describe(self) -> dict[str, Any]:
        """What a round's ``sampling`` records: the language's parameters, version and hash."""
        text = self.regex()
        return {
            "kind": "regex",
            "version": GRAMMAR_VERSION,
            **asdict(self),
            "sha256": hashlib.sha256(text.encode()).hexdigest(),
        }

    def matches(self, completion: str) -> bool:
        """Whether ``completion`` is a sentence of this grammar (Python's ``re``; for tests and checks)."""
        return re.fullmatch(self.regex(), completion) is not None

    # -- pieces ------------------------------------------------------------------------
    def _plan(self, n: int) -> str:
        worker = _alternatives(str(i) for i in range(self.pool_size))
        subtask = _string(self.subtask_limit(n))
        workers = r"\[" + r", ".join([worker] * n) + r"\]"
        subtasks = r"\[" + r", ".join([subtask] * n) + r"\]"
        access = r"\[" + r", ".join(_access(i) for i in range(n)) + r"\]"
        return rf"model_id = {workers}\nsubtasks = {subtasks}\naccess_list = {access}"


def _alternatives(options: Any) -> str:
    items = list(options)
    return items[0] if len(items) == 1 else "(" + "|".join(items) + ")"


def _string(limit: int) -> str:
    quoted = []
    for q in ("'", '"'):
        first = f"({_FIRST[q]}|{_FIRST_ESCAPE})"
        rest = f"({_BODY[q]}|{_ESCAPE}){{0,{limit - 1}}}"
        quoted.append(f"{q}{first}{rest}{q}")
    return "(" + "|".join(quoted) + ")"


def _access(i: int) -> str:
    """Step ``i`` sees "all", nothing, or a list of earlier steps."""
    options = [r"'all'", r'"all"', r"\[\]"]
    if i > 0:
        earlier = _alternatives(str(j) for j in range(i))
        options.append(rf"\[{earlier}(, {earlier}){{0,{i - 1}}}\]")
    return "(" + "|".join(options) + ")"
