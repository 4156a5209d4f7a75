"""The language of plans the parser accepts, as one regular expression a decoder can be held to.

A Conductor decoded under this grammar cannot write a plan that fails to parse: the three lists
have the same length (1..``max_steps``; or all three empty where a replan may keep its answer),
every worker id is a model of the pool, every access entry is ``"all"``, ``[]`` or earlier step
numbers, and every subtask is a non-blank string whose characters and escapes Python reads.
The block is written the way :meth:`Workflow.to_python` writes it (the format the warm-up
teaches), so a trained policy loses nothing to the constraint.

The regex uses the subset that Python's ``re`` and the grammar backends (xgrammar, llguidance)
read alike: literals, classes, groups, alternation and bounded repetition. A subtask is bounded in
*words* (runs of non-blank characters separated by one space), and the words of a plan share a
budget sized to the Conductor's token cap: a policy that repeats a sentence inside a subtask is cut
at its word limit and the plan still parses. Words, because xgrammar 0.2.8 computes a mask inside
``c{0,n}`` in time growing with ``n`` (measured on this project's tokenizer: 58 ms per token at n=60,
2.1 s at n=200, which made vLLM decode at 1.5 tokens/s). A word's own length is bounded too
(``max_word_chars``, 32): a policy that wants to close the list early used to write one endless
"word" (``]]]]...``) into the token cap (docs/retraining_cpu/grammar_run/, and 1 of 16 unseen prompts
for the shipped adapter); now it must end the word, and closing the string is then the likeliest way
on. Bounded words cost ~6 ms a mask on this tokenizer (unbounded 0.01 ms), a few percent of a CPU
decode step.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import asdict, dataclass
from functools import lru_cache
from typing import Any, Literal

from conductor.domain.workflow import PLAN_ORDERS, PlanOrder

__all__ = ["GRAMMAR_VERSION", "PlanGrammar"]

#: Bumped whenever the language changes, so a stored round says which one masked its sampling.
GRAMMAR_VERSION = "plan-regex-6"

Preamble = Literal["none", "free"]

# A string literal body: ordinary characters, or the escapes repr() writes and Python reads as such.
# Every character str.splitlines() breaks on is excluded (the parser reads the block line by line), and
# the null byte, which Python refuses in source.
_LINE_BREAKS = r"\x00\n\r\x0b\x0c\x1c-\x1e\x85\u2028\u2029"
# Whitespace as str.strip() sees it: a subtask may not start with it, or it could strip to nothing.
_BLANKS = r" \t\x1f\xa0\u1680\u2000-\u200a\u202f\u205f\u3000" + _LINE_BREAKS
_ESCAPE = r"\\[\\'\"nt]"
_FIRST_ESCAPE = r"\\[\\'\"]"


@dataclass(frozen=True)
class PlanGrammar:
    """The plans a round may produce: sized to the pool, the step cap and the completion budget."""

    pool_size: int
    max_steps: int = 5
    #: Words one subtask may have, and all subtasks of a plan together.
    max_subtask_words: int = 60
    max_plan_words: int = 128
    #: "free": up to ``max_preamble_words`` of thought (no backticks) may precede the block.
    preamble: Preamble = "none"
    max_preamble_words: int = 60
    #: Characters one word may have (a run without spaces: an expression written without them, a path).
    max_word_chars: int = 32
    #: A replan may answer three empty lists (keep the previous answer).
    allow_empty: bool = False
    #: The order of the three lists (:data:`conductor.domain.workflow.PLAN_ORDERS`).
    order: PlanOrder = "workers-first"

    def __post_init__(self) -> None:
        if self.order not in PLAN_ORDERS:
            raise ValueError(f"unknown plan order {self.order!r}; one of {', '.join(PLAN_ORDERS)}")
        if self.pool_size < 1 or self.max_steps < 1:
            raise ValueError("a plan grammar needs at least one worker and one step")
        if min(self.max_subtask_words, self.max_plan_words, self.max_preamble_words) < 1:
            raise ValueError("word budgets must be positive")
        if self.max_word_chars < 2:
            raise ValueError("a word must be allowed at least two characters")

    @classmethod
    def for_round(
        cls,
        pool_size: int,
        *,
        max_steps: int,
        max_tokens: int,
        prompt_style: str,
        replan: bool,
        order: PlanOrder = "workers-first",
    ) -> PlanGrammar:
        """The grammar of one Conductor round, sized so its longest completion fits ``max_tokens``: the
        full prompts ask for brief thought before the block (a preamble, from the same budget), the
        compact one for the block only; a replan may keep its answer."""
        free = replan or prompt_style != "compact"
        # A conservative 2 tokens per word (words carry punctuation), after ~10 tokens per step of structure.
        words = max(8, (max_tokens - 20 - 10 * max_steps) // 2)
        thought = words // 3 if free else 0
        return cls(
            pool_size=pool_size,
            max_steps=max_steps,
            max_plan_words=words - thought,
            preamble="free" if free else "none",
            max_preamble_words=max(1, thought),
            allow_empty=replan,
            order=order,
        )

    def subtask_words(self, n_steps: int) -> int:
        """Words one subtask may have in a plan of ``n_steps`` steps."""
        return max(1, min(self.max_subtask_words, self.max_plan_words // n_steps))

    def regex(self) -> str:
        # Every Conductor round asks for its grammar's regex (and its record, its hash): built once per grammar.
        return _regex(self)

    def _build(self) -> str:
        plans = [self._plan(n) for n in range(1, self.max_steps + 1)]
        if self.allow_empty:
            plans.insert(0, self._lines({name: r"\[\]" for name in PLAN_ORDERS[self.order]}))
        block = r"```python\n(" + "|".join(plans) + r")\n```"
        if self.preamble == "free":
            word = f"[^`{_BLANKS}]{{1,{self.max_word_chars}}}"
            return rf"({word}([ \n]{word}){{0,{self.max_preamble_words - 1}}}\n)?" + block
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
        subtask = _string(self.subtask_words(n), self.max_word_chars)
        workers = r"\[" + r", ".join([worker] * n) + r"\]"
        subtasks = r"\[" + r", ".join([subtask] * n) + r"\]"
        access = r"\[" + r", ".join(_access(i) for i in range(n)) + r"\]"
        return self._lines({"model_id": workers, "subtasks": subtasks, "access_list": access})

    def _lines(self, values: dict[str, str]) -> str:
        return r"\n".join(f"{name} = {values[name]}" for name in PLAN_ORDERS[self.order])


@lru_cache(maxsize=64)
def _regex(grammar: PlanGrammar) -> str:
    return grammar._build()


def _alternatives(options: Any) -> str:
    items = list(options)
    return items[0] if len(items) == 1 else "(" + "|".join(items) + ")"


def _string(words: int, chars: int) -> str:
    """A quoted, non-blank subtask of at most ``words`` words of at most ``chars`` characters (an escape
    counts as one), one space between them."""
    quoted = []
    for q in ("'", '"'):
        char = f"([^{q}\\\\{_BLANKS}]|{_ESCAPE})"
        first = f"([^{q}\\\\{_BLANKS}]|{_FIRST_ESCAPE})"
        tail = f"( {char}{{1,{chars}}}){{0,{words - 1}}}" if words > 1 else ""
        quoted.append(f"{q}{first}{char}{{0,{chars - 1}}}{tail}{q}")
    return "(" + "|".join(quoted) + ")"


def _access(i: int) -> str:
    """Step ``i`` sees "all", nothing, or a list of earlier steps."""
    options = [r"'all'", r'"all"', r"\[\]"]
    if i > 0:
        earlier = _alternatives(str(j) for j in range(i))
        options.append(rf"\[{earlier}(, {earlier}){{0,{i - 1}}}\]")
    return "(" + "|".join(options) + ")"
