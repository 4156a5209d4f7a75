"""The local SmolLM2-135M decoded under an answer format's grammar: what it writes is what the format
accepts, whatever the model would have preferred (greedy, a token budget a JSON answer fits in)."""

from __future__ import annotations

import pytest

from conductor.app.formatted_answer import with_instruction
from conductor.config.pool import Pool
from conductor.domain.answer_format import AnswerFormat, Function, JsonAnswer, TextAnswer, ToolCall
from conductor.domain.errors import AnswerFormatError
from conductor.inference.gateway import Gateway
from tests.conftest import MODEL_HOME

pytestmark = pytest.mark.slow
MODEL = "local/smollm2-135m-instruct"
CITY = {
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 20}, "continent": {"enum": ["Europe", "Asia", "Other"]}},
    "required": ["name", "continent"],
}
WEATHER = Function(
    "get_weather",
    "Current weather of a city",
    {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20}}, "required": ["city"]},
)


@pytest.fixture(scope="module")
def gateway() -> Gateway:
    if not (MODEL_HOME / "models" / MODEL.split("/")[1] / "config.json").exists():
        pytest.fail("the local model is missing: run `make model` (the test command does)")
    spec = {"model": MODEL, "max_tokens": 48, "temperature": 0.0}
    pool = Pool.model_validate({"conductor": spec, "workers": [{**spec, "name": "w", "description": "d"}]})
    return Gateway(pool, model_home=MODEL_HOME)


def _ask(gateway: Gateway, question: str, fmt: AnswerFormat) -> str:
    messages = with_instruction([{"role": "user", "content": question}], fmt)
    return gateway.call_worker("w", messages, answer_format=fmt).text


def test_a_json_schema_answer_conforms_where_the_free_answer_does_not(gateway: Gateway):
    fmt = AnswerFormat.json_schema(CITY, name="city", strict=True)
    messages = with_instruction([{"role": "user", "content": "Which city is the capital of France?"}], fmt)
    free = gateway.call_worker("w", messages).text
    with pytest.raises(AnswerFormatError):
        fmt.check(free)  # told the schema, unconstrained, the model echoes it back
    answer = fmt.check(gateway.call_worker("w", messages, answer_format=fmt).text)
    assert isinstance(answer, JsonAnswer) and answer.value["continent"] in ("Europe", "Asia", "Other")


def test_a_json_object_answer_is_an_object(gateway: Gateway):
    fmt = AnswerFormat.json_object()
    # Any object: the grammar keeps it JSON, the question keeps it short enough for the token budget.
    answer = fmt.check(_ask(gateway, 'What is 2 + 3? Write {"answer": <the number>}.', fmt))
    assert isinstance(answer, JsonAnswer) and isinstance(answer.value, dict)


def test_a_required_tool_call_names_the_function_and_fits_its_parameters(gateway: Gateway):
    fmt = AnswerFormat.tools([WEATHER], "required")
    answer = fmt.check(_ask(gateway, "What is the weather in Paris?", fmt))
    assert isinstance(answer, ToolCall) and answer.name == "get_weather" and isinstance(answer.arguments["city"], str)


def test_with_tool_choice_auto_the_answer_is_text_or_a_valid_call(gateway: Gateway):
    fmt = AnswerFormat.tools([WEATHER], "auto")
    text = _ask(gateway, "What is the weather in Paris?", fmt)
    answer = fmt.check(text)
    # The grammar lets a text answer through only if it cannot be read as a call's opening brace.
    assert isinstance(answer, ToolCall) or (isinstance(answer, TextAnswer) and not text.startswith("{"))
