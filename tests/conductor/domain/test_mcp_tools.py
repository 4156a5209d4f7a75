"""How a step's messages become an MCP tool's arguments, and how a tool is described to the Conductor."""

from __future__ import annotations

import pytest

from conductor.domain.mcp_tools import ToolArgumentsError, describe_tool, split_model, tool_arguments

ONE_STRING = {"type": "object", "properties": {"timezone": {"type": "string"}}, "required": ["timezone"]}
TWO_NUMBERS = {
    "type": "object",
    "properties": {"a": {"type": "integer"}, "b": {"type": "integer", "description": "the second"}},
    "required": ["a", "b"],
}
NOTHING = {"type": "object", "properties": {}}


def _messages(*texts: str) -> list[dict]:
    return [{"role": "user" if i % 2 == 0 else "assistant", "content": t} for i, t in enumerate(texts)]


def test_a_json_object_in_the_subtask_is_the_arguments():
    assert tool_arguments(TWO_NUMBERS, _messages('{"a": 1, "b": 2}')) == {"a": 1, "b": 2}
    assert tool_arguments(ONE_STRING, _messages('{"timezone": "UTC"}')) == {"timezone": "UTC"}


def test_else_a_json_object_the_latest_visible_step_wrote_even_fenced():
    messages = _messages("plan", '{"a": 9, "b": 9}', "write it", '```json\n{"a": 1, "b": 2}\n```', "Add them.")

    assert tool_arguments(TWO_NUMBERS, messages) == {"a": 1, "b": 2}


def test_a_tool_that_takes_one_string_takes_the_subtask_itself():
    assert tool_arguments(ONE_STRING, _messages("  Asia/Tokyo \n")) == {"timezone": "Asia/Tokyo"}


def test_a_json_value_that_is_not_an_object_is_text():
    assert tool_arguments(ONE_STRING, _messages('["UTC"]')) == {"timezone": '["UTC"]'}


def test_a_tool_that_needs_nothing_gets_nothing():
    assert tool_arguments(NOTHING, _messages("whatever the Conductor wrote")) == {}
    assert tool_arguments(None, _messages("")) == {}


def test_words_for_a_tool_that_needs_an_object_are_no_arguments():
    with pytest.raises(ToolArgumentsError, match="needs a, b, written as a JSON object in the subtask"):
        tool_arguments(TWO_NUMBERS, _messages("add one and two"))
    with pytest.raises(ToolArgumentsError, match="the subtask was empty"):
        tool_arguments(ONE_STRING, _messages("  "))


def test_the_description_summarises_the_arguments():
    assert describe_tool("Add  two\nintegers.", TWO_NUMBERS) == (
        "Add two integers. Write its arguments as a JSON object: a (integer, required); "
        "b (integer, required): the second."
    )
    assert describe_tool("Now.", NOTHING) == "Now. Takes no arguments."
    assert "the timezone alone, or a JSON object" in describe_tool(None, ONE_STRING)


def test_a_long_argument_note_is_cut():
    schema = {"properties": {"q": {"type": "string", "description": "x" * 500}}, "required": ["q"]}

    assert len(describe_tool("Search.", schema)) < 250


@pytest.mark.parametrize("model", ["mcp/time", "mcp//tool", "tool/time/now"])
def test_an_mcp_worker_names_a_server_and_a_tool(model):
    with pytest.raises(ValueError, match="mcp/<server>/<tool>"):
        split_model(model)
    assert split_model("mcp/docs/search/v2") == ("docs", "search/v2")
