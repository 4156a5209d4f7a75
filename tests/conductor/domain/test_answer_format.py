"""An answer format says which answers it accepts, and why it refuses the others."""

from __future__ import annotations

import pytest

from conductor.domain.answer_format import AnswerFormat, Function, JsonAnswer, TextAnswer, ToolCall
from conductor.domain.errors import AnswerFormatError, InputError

POINT = {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}
ADD = Function("add", "adds", {"type": "object", "properties": {"a": {"type": "number"}}, "required": ["a"]})
NOW = Function("now")


def test_a_schema_answer_must_parse_and_conform():
    fmt = AnswerFormat.json_schema(POINT, name="point")
    assert fmt.check('{"x": 3}') == JsonAnswer({"x": 3}, '{"x": 3}')
    with pytest.raises(AnswerFormatError, match="not JSON"):
        fmt.check("x is 3")
    with pytest.raises(AnswerFormatError, match=r"schema 'point': at x: 'three' is not of type 'integer'"):
        fmt.check('{"x": "three"}')


def test_json_object_refuses_other_json():
    with pytest.raises(AnswerFormatError, match="not an object"):
        AnswerFormat.json_object().check("[1, 2]")


def test_an_invalid_schema_is_bad_input_before_any_work():
    with pytest.raises(InputError, match="not a valid JSON Schema"):
        AnswerFormat.json_schema({"type": 12})
    with pytest.raises(InputError, match="parameters of function 'f'"):
        Function("f", parameters={"type": "nope"})


def test_auto_accepts_text_or_a_valid_call_and_required_only_a_call():
    auto = AnswerFormat.tools([ADD, NOW])
    assert auto.check("just words") == TextAnswer("just words")
    assert auto.check('{"name": "add", "arguments": {"a": 1}}') == ToolCall("add", {"a": 1})
    with pytest.raises(AnswerFormatError, match="calls 'sub'"):
        auto.check('{"name": "sub", "arguments": {}}')
    with pytest.raises(AnswerFormatError, match="at the top level: 'a' is a required property"):
        auto.check('{"name": "add", "arguments": {}}')
    with pytest.raises(AnswerFormatError, match="required"):
        AnswerFormat.tools([ADD], "required").check("just words")


def test_a_named_tool_choice_allows_only_that_function():
    fmt = AnswerFormat.tools([ADD, NOW], "now")
    assert fmt.decoding_schema() == NOW.call_schema()
    with pytest.raises(AnswerFormatError, match="not one of \\['now'\\]"):
        fmt.check('{"name": "add", "arguments": {"a": 1}}')
    with pytest.raises(InputError, match="not one of the tools"):
        AnswerFormat.tools([ADD], "now")


def test_a_format_survives_the_job_options_round_trip():
    for fmt in (
        AnswerFormat.json_object(),
        AnswerFormat.json_schema(POINT, strict=True),
        AnswerFormat.tools([ADD], "add"),
    ):
        assert AnswerFormat.from_options(fmt.to_options()) == fmt
