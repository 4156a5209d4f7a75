"""The grammar a served worker decodes a formatted answer under (`conductor.inference.structured`), checked
with xgrammar's own matcher: no model needed."""

from __future__ import annotations

from typing import Any

import xgrammar as xgr

from conductor.domain.answer_format import AnswerFormat, Function
from conductor.inference.structured import SAFE_INTEGER, grammar_of


def accepts(fmt: AnswerFormat, text: str) -> bool:
    return bool(xgr.testing._is_grammar_accept_string(xgr.Grammar.from_ebnf(grammar_of(fmt)), text))


def with_integer(schema: dict[str, Any]) -> AnswerFormat:
    return AnswerFormat.json_schema(
        {"type": "object", "properties": {"population": schema}, "required": ["population"]}, name="city", strict=True
    )


def test_an_unbounded_integer_stops_at_the_range_json_readers_keep_exactly():
    """SmolLM2 asked for a city's population wrote digits until its token cap, so the answer never closed."""
    fmt = with_integer({"type": "integer"})
    assert accepts(fmt, f'{{"population": {SAFE_INTEGER}}}')
    assert accepts(fmt, f'{{"population": {-SAFE_INTEGER}}}')
    assert not accepts(fmt, f'{{"population": {SAFE_INTEGER + 1}}}')
    assert not accepts(fmt, '{"population": 20000000000000000000000000}')


def test_an_integer_with_bounds_of_its_own_keeps_them():
    fmt = with_integer({"type": "integer", "minimum": 0, "maximum": 100})
    assert accepts(fmt, '{"population": 100}')
    assert not accepts(fmt, '{"population": 101}')
    assert not accepts(fmt, '{"population": -1}')


def test_a_function_calls_integer_arguments_are_bounded_too():
    add = Function("add", "", {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]})
    fmt = AnswerFormat.tools([add], "required")
    assert accepts(fmt, '{"name": "add", "arguments": {"n": 7}}')
    assert not accepts(fmt, '{"name": "add", "arguments": {"n": 12345678901234567890}}')
