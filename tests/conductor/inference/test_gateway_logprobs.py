"""What a Conductor call brings back for training (token ids, logprobs, prompt ids) and policy hot-swap.

Parsing is checked on both shapes it meets: raw OpenAI-style dicts and litellm ModelResponses.
The local backend is checked twice: with a stand-in model (fast, the litellm plumbing) and
with the real SmolLM2 (slow, the ids are what the tokenizer really produced).
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from litellm.types.utils import ChoiceLogprobs, Choices, Message, ModelResponse
from pydantic import ValidationError
from sqlalchemy import select

from conductor.config.pool import Pool
from conductor.domain.plan_grammar import PlanGrammar
from conductor.domain.problem import Problem
from conductor.inference.gateway import Gateway, parse_logprobs, parse_prompt_token_ids
from conductor.inference.local_backend import Generation
from conductor.store.models import Round
from tests.conftest import MODEL_HOME
from tests.support.pools import scripted_pool
from tests.support.system import embedded_system

LOCAL_NAME = "smollm2-135m-instruct"
MESSAGES = [{"role": "user", "content": "What is 2 + 3?"}]


def _content(tokens: list[str], logprobs: list[float]) -> list[dict]:
    return [
        {"token": t, "logprob": lp, "bytes": None, "top_logprobs": []} for t, lp in zip(tokens, logprobs, strict=True)
    ]


def _raw(tokens: list[str], logprobs: list[float], **choice_extra) -> dict:
    return {
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "x"},
                "logprobs": {"content": _content(tokens, logprobs)},
                **choice_extra,
            }
        ],
        "prompt_token_ids": [1, 2, 3],
    }


def _model_response(tokens: list[str], logprobs: list[float], **choice_extra) -> ModelResponse:
    choice = Choices(
        index=0,
        finish_reason="stop",
        message=Message(role="assistant", content="x"),
        logprobs=ChoiceLogprobs(content=_content(tokens, logprobs)),
        **choice_extra,
    )
    return ModelResponse(model="m", choices=[choice], prompt_token_ids=[1, 2, 3])


SHAPES = pytest.mark.parametrize("make", [_raw, _model_response], ids=["raw-dict", "model-response"])


# -- parsing -------------------------------------------------------------------------------
@SHAPES
def test_token_id_tokens_give_ids_and_logprobs(make):
    response = make(["token_id:5", "token_id:7"], [-0.5, -1.25], token_ids=[5, 7])
    assert parse_logprobs(response) == ([5, 7], [-0.5, -1.25])
    assert parse_prompt_token_ids(response) == [1, 2, 3]


@SHAPES
def test_ids_without_the_plain_token_ids_list_still_parse(make):
    # vLLM without `return_token_ids` (or an older server): the logprob tokens alone suffice.
    assert parse_logprobs(make(["token_id:9"], [-0.1])) == ([9], [-0.1])


@SHAPES
def test_text_tokens_keep_logprobs_but_never_guess_ids(make):
    # A hosted API writes tokens as text: re-tokenising them is what the trace must not do.
    assert parse_logprobs(make(["Hello", " world"], [-0.2, -0.3])) == (None, [-0.2, -0.3])


@SHAPES
def test_disagreeing_token_id_lists_drop_the_ids_and_warn(make, caplog):
    with caplog.at_level(logging.WARNING, logger="conductor.inference.gateway"):
        ids, logprobs = parse_logprobs(make(["token_id:5", "token_id:7"], [-0.5, -1.0], token_ids=[5, 8]))
    assert ids is None and logprobs == [-0.5, -1.0]
    assert "disagree" in caplog.text


def test_missing_logprobs_or_choices_give_nothing():
    assert parse_logprobs({"choices": [{"message": {"content": "x"}}]}) == (None, None)
    assert parse_logprobs({"choices": []}) == (None, None)
    plain = ModelResponse(model="m", choices=[Choices(index=0, message=Message(role="assistant", content="x"))])
    assert parse_logprobs(plain) == (None, None)
    assert parse_prompt_token_ids(plain) is None
    assert parse_prompt_token_ids({"prompt_token_ids": None}) is None


# -- the request an OpenAI-compatible Conductor gets ------------------------------------------
def test_conductor_calls_ask_for_token_ids_and_worker_calls_do_not(scripted, tmp_path):
    gateway = Gateway(scripted_pool(scripted.base_url), model_home=tmp_path)
    c = gateway.call_conductor(MESSAGES)
    gateway.call_worker("alpha", MESSAGES)

    conductor_body = scripted.calls_for("scripted-conductor")[0].body
    assert conductor_body["logprobs"] is True
    assert conductor_body["return_tokens_as_token_ids"] is True and conductor_body["return_token_ids"] is True
    worker_body = scripted.calls_for("scripted-worker-alpha")[0].body
    assert "logprobs" not in worker_body and "return_token_ids" not in worker_body
    assert c.token_ids and len(c.token_ids) == len(c.logprobs)
    assert c.prompt_token_ids is None  # this server sends none: nothing is made up
    assert c.policy_version == "scripted-v0"


def test_the_direct_openai_path_sends_and_reads_exactly_what_litellm_does(scripted, tmp_path):
    """Self-hosted servers skip litellm (its per-call CPU); nothing a trace or a bill needs may change."""
    direct = Gateway(scripted_pool(scripted.base_url), model_home=tmp_path)
    via_litellm = Gateway(scripted_pool(scripted.base_url), model_home=tmp_path, direct_openai=False)
    a, b = direct.call_conductor(MESSAGES), via_litellm.call_conductor(MESSAGES)
    for field in ("text", "prompt_tokens", "completion_tokens", "cost_usd", "token_ids", "logprobs", "sampling"):
        assert getattr(a, field) == getattr(b, field), field
    sent = [c.body for c in scripted.calls_for("scripted-conductor")]
    keys = ("model", "messages", "max_tokens", "temperature", "logprobs", "top_p", "return_token_ids", "top_k")
    assert [{k: body.get(k) for k in keys} for body in sent[:1]] == [{k: sent[1].get(k) for k in keys}]
    assert direct.call_worker("alpha", MESSAGES).text == via_litellm.call_worker("alpha", MESSAGES).text


# -- the local backend ------------------------------------------------------------------------
class _StandInModel:
    """Answers like LocalModel.generate without loading weights."""

    regexes: list[str | None]

    def __init__(self) -> None:
        self.regexes = []

    def generate(self, messages, *, max_tokens=256, temperature=0.0, seed=None, regex=None, grammar=None) -> Generation:
        self.regexes.append(regex)
        return Generation("five", [1204, 2], [-0.25, -0.5], [1, 9906, 28, 2], "stop")


def _local_pool() -> Pool:
    spec = {"model": f"local/{LOCAL_NAME}", "max_tokens": 24, "temperature": 0.0}
    return Pool.model_validate({"conductor": spec, "workers": [{**spec, "name": "w", "description": "d"}]})


def test_local_backend_fields_survive_litellm_into_the_completion(tmp_path):
    gateway = Gateway(_local_pool(), model_home=tmp_path)
    path = str(gateway._local_path(f"local/{LOCAL_NAME}"))
    gateway.local_models._models[path] = _StandInModel()  # type: ignore[assignment]
    try:
        c = gateway.call_conductor(MESSAGES)
    finally:
        gateway.local_models.drop(path)
    assert (c.text, c.token_ids, c.logprobs) == ("five", [1204, 2], [-0.25, -0.5])
    assert c.prompt_token_ids == [1, 9906, 28, 2]
    assert (c.prompt_tokens, c.completion_tokens) == (4, 2)


GRAMMAR = PlanGrammar.for_round(1, max_steps=2, max_tokens=24, prompt_style="compact", replan=False)


@pytest.mark.parametrize("enabled", [True, False])
def test_a_served_conductor_decodes_under_the_plan_grammar_and_the_round_records_it(tmp_path, enabled):
    gateway = Gateway(_local_pool(), model_home=tmp_path, plan_grammar=enabled)
    path = str(gateway._local_path(f"local/{LOCAL_NAME}"))
    stand_in = _StandInModel()
    gateway.local_models._models[path] = stand_in  # type: ignore[assignment]
    try:
        c = gateway.call_conductor(MESSAGES, grammar=GRAMMAR)
    finally:
        gateway.local_models.drop(path)

    assert c.sampling is not None
    if enabled:
        assert stand_in.regexes == [GRAMMAR.regex()]
        recorded = c.sampling["grammar"]
        assert recorded["regex"] == GRAMMAR.regex() and recorded["backend"] == "xgrammar"
        assert (
            recorded["sha256"] == GRAMMAR.describe()["sha256"] and recorded["version"] == GRAMMAR.describe()["version"]
        )
    else:  # the setting turns the constraint off: nothing sent, nothing recorded
        assert stand_in.regexes == [None] and c.sampling["grammar"] is None


def test_a_hosted_conductor_that_cannot_take_a_grammar_keeps_parse_and_resample(scripted, tmp_path):
    gateway = Gateway(scripted_pool(scripted.base_url), model_home=tmp_path)

    c = gateway.call_conductor(MESSAGES, grammar=GRAMMAR)

    assert c.sampling is not None and c.sampling["grammar"] is None
    assert "structured_outputs" not in scripted.calls_for("scripted-conductor")[-1].body


def test_a_vllm_conductor_receives_the_grammar_as_structured_outputs(scripted, tmp_path):
    pool = scripted_pool(scripted.base_url)
    pool.conductor = pool.conductor.model_copy(update={"model": "hosted_vllm/scripted-conductor"})
    gateway = Gateway(pool, model_home=tmp_path)

    c = gateway.call_conductor(MESSAGES, grammar=GRAMMAR)

    body = scripted.calls_for("scripted-conductor")[-1].body
    assert body["structured_outputs"] == {"regex": GRAMMAR.regex()}
    assert c.sampling is not None and c.sampling["grammar"]["regex"] == GRAMMAR.regex()


@pytest.mark.slow
def test_local_model_returns_the_prompt_ids_its_tokenizer_made(tmp_path):
    model_dir = MODEL_HOME / "models" / LOCAL_NAME
    if not (model_dir / "config.json").exists():
        pytest.fail("the local model is missing: run `make model` (the test command does)")
    from transformers import AutoTokenizer

    gateway = Gateway(_local_pool(), model_home=MODEL_HOME)
    c = gateway.call_conductor(MESSAGES)

    tok = AutoTokenizer.from_pretrained(model_dir)
    expected = tok.apply_chat_template(MESSAGES, add_generation_prompt=True, tokenize=True)
    expected = expected["input_ids"] if not isinstance(expected, list) else expected
    assert c.prompt_token_ids == list(expected)
    assert c.prompt_tokens == len(c.prompt_token_ids)
    assert "What is 2 + 3?" in tok.decode(c.prompt_token_ids)
    assert c.token_ids and len(c.token_ids) == len(c.logprobs) == c.completion_tokens
    assert all(lp <= 0.0 for lp in c.logprobs)
    assert tok.decode(c.token_ids, skip_special_tokens=True).strip() == c.text.strip()


# -- switching the served policy ------------------------------------------------------------
def test_switch_conductor_replaces_the_shared_spec_and_keeps_its_settings(tmp_path):
    pool = scripted_pool("http://127.0.0.1:9/v1")
    gateway = Gateway(pool, model_home=tmp_path)
    before = pool.conductor

    spec = gateway.switch_conductor("hosted_vllm/policy-1", policy_version="policy-1")
    assert pool.conductor is spec and gateway.pool is pool
    assert (spec.model, spec.policy_version, spec.api_base) == ("hosted_vllm/policy-1", "policy-1", before.api_base)
    assert (spec.temperature, spec.max_tokens, spec.timeout_s) == (
        before.temperature,
        before.max_tokens,
        before.timeout_s,
    )
    assert before.model == "openai/scripted-conductor"  # the old spec object is untouched, not mutated

    assert gateway.switch_conductor("openai/gpt-x", policy_version="p2", api_base="").api_base is None
    assert gateway.switch_conductor("hosted_vllm/p3", policy_version="p3", api_base="http://h:1/v1").api_base == (
        "http://h:1/v1"
    )
    with pytest.raises(ValidationError):
        gateway.switch_conductor("no-provider", policy_version="bad")
    assert pool.conductor.model == "hosted_vllm/p3"  # a rejected switch leaves the served policy alone


def test_concurrent_switches_leave_one_consistent_spec(tmp_path):
    pool = scripted_pool("http://127.0.0.1:9/v1")
    gateway = Gateway(pool, model_home=tmp_path)
    threads = [
        threading.Thread(
            target=gateway.switch_conductor, args=(f"hosted_vllm/p{i}",), kwargs={"policy_version": f"p{i}"}
        )
        for i in range(16)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert pool.conductor.model == f"hosted_vllm/{pool.conductor.policy_version}"


def test_rounds_after_a_switch_record_the_new_policy_through_the_queue(scripted, tmp_path: Path):
    pool = scripted_pool(scripted.base_url)
    with embedded_system(tmp_path, pool, recursion=False) as system:
        first, _ = system.service.submit(Problem(question="[wf:single] before"))
        system.service.wait([first], timeout=60)
        # Another name the scripted server also answers as a Conductor (it matches the suffix).
        system.runtime.gateway.switch_conductor("openai/v2-scripted-conductor", policy_version="v2")
        second, _ = system.service.submit(Problem(question="[wf:single] after"))
        system.service.wait([second], timeout=60)
        assert system.runtime.engine.pool is system.runtime.gateway.pool
        with system.runtime.sessions() as s:
            rounds = {r.job_id: r for r in s.scalars(select(Round))}
            seen = {job: (r.policy_version, r.conductor_model, r.status) for job, r in rounds.items()}
        statuses = [system.service.job(j)["status"] for j in (first, second)]
    assert statuses == ["done", "done"]
    assert seen[first][:2] == ("scripted-v0", "openai/scripted-conductor")
    assert seen[second][:2] == ("v2", "openai/v2-scripted-conductor")
    assert [c.model for c in scripted.calls_for("v2-")] == ["v2-scripted-conductor"]
