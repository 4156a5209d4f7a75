"""The deterministic-call cache: a greedy worker call made twice reaches the model once, on both stores,
through the gateway and through whole jobs; what it saved shows in the usage."""

from __future__ import annotations

import pytest

from conductor.config.pool import Pool, WorkerSpec
from conductor.config.settings import Settings
from conductor.domain.problem import Problem
from conductor.inference.call_cache import cache_key
from conductor.inference.gateway import Gateway
from conductor.store.call_cache import StoreCallCache
from conductor.store.db import make_engine, session_factory, upgrade
from tests.conftest import MODEL_HOME
from tests.support.pools import scripted_pool
from tests.support.system import embedded_system

HI = [{"role": "user", "content": "What is 2 + 3?"}]


def _spec(**kw) -> WorkerSpec:
    return WorkerSpec.model_validate({"name": "w", "description": "d", "model": "local/m", "temperature": 0.0, **kw})


def test_only_greedy_model_calls_we_serve_are_cached_unless_hosted_apis_are_asked_for():
    assert cache_key(_spec(), HI, "self-hosted") is not None
    assert cache_key(_spec(model="hosted_vllm/m", api_base="http://h/v1"), HI, "self-hosted") is not None
    assert cache_key(_spec(temperature=0.7), HI, "self-hosted") is None, "a sampled answer is not reproducible"
    assert cache_key(_spec(model="openai/gpt-5"), HI, "self-hosted") is None, "hosted APIs only when asked"
    assert cache_key(_spec(model="openai/gpt-5"), HI, "all") is not None
    assert cache_key(_spec(model="tool/calculator"), HI, "all") is None, "tools cost nothing to rerun"
    assert cache_key(_spec(), HI, "off") is None


def test_the_key_covers_everything_the_answer_depends_on():
    base = cache_key(_spec(), HI, "all")
    assert cache_key(_spec(), [dict(m) for m in HI], "all") == base, "equal calls share a key"
    others = [
        cache_key(_spec(model="local/other"), HI, "all"),
        cache_key(_spec(max_tokens=7), HI, "all"),
        cache_key(_spec(model="openai/m", api_base="http://a/v1"), HI, "all"),
        cache_key(_spec(model="openai/m", api_base="http://b/v1"), HI, "all"),
        cache_key(_spec(), [{"role": "user", "content": "What is 2 + 4?"}], "all"),
        cache_key(_spec(reasoning_effort="low"), HI, "all"),
    ]
    assert len({base, *others}) == len(others) + 1


def _greedy_pool(base_url: str) -> Pool:
    pool = scripted_pool(base_url)
    pool.workers = [w.model_copy(update={"temperature": 0.0}) for w in pool.workers]
    return pool


@pytest.fixture(params=["sqlite", "postgresql"])
def sessions(request, tmp_path):
    url = f"sqlite:///{tmp_path / 'c.db'}" if request.param == "sqlite" else request.getfixturevalue("pg_url")
    engine = make_engine(url)
    upgrade(engine)
    yield session_factory(engine)
    engine.dispose()


def test_a_repeated_greedy_worker_call_reaches_the_model_once(scripted, sessions, tmp_path):
    gateway = Gateway(_greedy_pool(scripted.base_url), model_home=tmp_path, cache=StoreCallCache(sessions))

    first = gateway.call_worker("alpha", HI)
    again = gateway.call_worker("alpha", HI)
    other = gateway.call_worker("alpha", [{"role": "user", "content": "something else"}])

    assert len(scripted.calls_for("scripted-worker-alpha")) == 2, "the repeat was answered from the cache"
    assert (again.text, again.cached, first.cached, other.cached) == (first.text, True, False, False)
    assert (again.prompt_tokens, again.completion_tokens) == (first.prompt_tokens, first.completion_tokens)
    usage = again.usage()
    assert (usage.cache_hits, usage.cached_tokens, usage.cost_usd) == (
        1,
        first.prompt_tokens + first.completion_tokens,
        0,
    )


def test_a_failed_call_is_not_cached(sessions, tmp_path):
    from tests.support.scripted_llm import Reply, ScriptedLLMServer

    replies = iter([Reply(status=500, error="boom"), Reply("fine")])
    server = ScriptedLLMServer(lambda model, messages, body: next(replies)).start()
    try:
        gateway = Gateway(_greedy_pool(server.base_url), model_home=tmp_path, cache=StoreCallCache(sessions))
        with pytest.raises(Exception, match="alpha"):
            gateway.call_worker("alpha", HI)
        assert gateway.call_worker("alpha", HI).text == "fine"
    finally:
        server.stop()


def _solve(system, question: str) -> dict:
    job_id, _ = system.service.submit(Problem(question=question))
    system.service.wait([job_id], timeout=60)
    return system.service.job(job_id)


def test_a_rerun_job_is_answered_from_the_cache_and_usage_shows_what_it_saved(scripted, tmp_path):
    with embedded_system(tmp_path, _greedy_pool(scripted.base_url), recursion=False) as system:
        first = _solve(system, "What is 6 * 7?")
        worker_calls = len(scripted.calls) - len(scripted.calls_for("scripted-conductor"))
        again = _solve(system, "What is 6 * 7?")
        usage = system.service.usage()

    assert first["status"] == again["status"] == "done"
    assert len(scripted.calls) - len(scripted.calls_for("scripted-conductor")) == worker_calls, (
        "the second job's worker steps never reached a model"
    )
    assert again["answer"] == first["answer"]
    assert usage["cache"]["hits"] == worker_calls > 0
    assert usage["cache"]["tokens"] > 0


def test_the_cache_can_be_turned_off(scripted, tmp_path):
    with embedded_system(tmp_path, _greedy_pool(scripted.base_url), recursion=False, call_cache="off") as system:
        _solve(system, "What is 6 * 7?")
        _solve(system, "What is 6 * 7?")
        assert system.service.usage()["cache"]["hits"] == 0
    assert len(scripted.calls_for("scripted-worker-alpha")) + len(scripted.calls_for("scripted-worker-beta")) >= 2


@pytest.mark.slow
def test_the_local_model_answers_a_repeated_greedy_call_once(tmp_path):
    model = "local/smollm2-135m-instruct"
    if not (MODEL_HOME / "models" / model.split("/")[1] / "config.json").exists():
        pytest.fail("the local model is missing: run `make model` (the test command does)")
    spec = {"model": model, "max_tokens": 24, "temperature": 0.0}
    pool = Pool.model_validate({"conductor": spec, "workers": [{**spec, "name": "w", "description": "d"}]})
    engine = make_engine(f"sqlite:///{tmp_path / 'c.db'}")
    upgrade(engine)
    gateway = Gateway(pool, model_home=MODEL_HOME, cache=StoreCallCache(session_factory(engine)))

    first = gateway.call_worker("w", HI)
    again = gateway.call_worker("w", HI)

    assert first.text and not first.cached and first.completion_tokens > 0
    assert again.cached and again.text == first.text and again.latency_s < first.latency_s


def test_the_default_caches_what_we_serve_ourselves():
    assert Settings.model_fields["call_cache"].default == "self-hosted"
