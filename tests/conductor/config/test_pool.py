"""Pool files: every bundled pool loads; every malformed one fails with an error naming the bad field."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from conductor.config.pool import BUNDLED, CONDUCTOR_WORKER_NAME, Pool, load_pool
from conductor.domain.errors import ConfigError

BAD = sorted((Path(__file__).parent / "bad_pools").glob("*.yaml"))
BUNDLED_POOLS = sorted(BUNDLED.glob("*.yaml"))


def _expected(path: Path) -> str:
    match = re.match(r"# expect: (.+)\n", path.read_text())
    assert match, f"{path.name} must start with '# expect: <part of the error>'"
    return match.group(1)


@pytest.mark.parametrize("path", BAD, ids=[p.stem for p in BAD])
def test_a_malformed_pool_fails_with_a_precise_error(path):
    with pytest.raises(ConfigError) as info:
        load_pool(path)

    message = str(info.value)
    assert _expected(path) in message
    assert message.startswith(f"{path}: "), "the error names the file"


def test_every_kind_of_mistake_has_an_example():
    assert len(BAD) >= 15


def test_every_error_in_a_file_is_reported_at_once(tmp_path):
    path = tmp_path / "pool.yaml"
    path.write_text(
        "conductor: {model: hosted_vllm/c}\n"
        "workers:\n"
        "  - {name: a, model: openai/x, description: d, temperature: 9}\n"
        "  - {name: b, model: y, description: d, max_token: 3}\n"
    )

    with pytest.raises(ConfigError) as info:
        load_pool(path)

    message = str(info.value)
    for part in ("workers[0](a).temperature", "workers[1](b).model", "workers[1](b).max_token"):
        assert part in message


def test_a_missing_file_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="pool file not found"):
        load_pool(tmp_path / "nope.yaml")


@pytest.mark.parametrize("path", BUNDLED_POOLS, ids=[p.stem for p in BUNDLED_POOLS])
def test_every_bundled_pool_loads(path):
    pool = load_pool(path)

    assert pool.workers and all(w.description for w in pool.workers)
    assert CONDUCTOR_WORKER_NAME not in [w.name for w in pool.workers]
    assert "api_key:" not in path.read_text(), "keys never go in pool files"


def test_bundled_pools_load_by_bare_name():
    assert load_pool("frontier.yaml") == load_pool(BUNDLED / "frontier.yaml")
    assert {p.name for p in BUNDLED_POOLS} >= {"local.yaml", "frontier.yaml", "open_weights.yaml"}


def test_the_frontier_pool_is_the_papers_kind_of_pool():
    pool = load_pool("frontier.yaml")

    models = [w.model for w in pool.workers]
    assert len(models) == 7
    assert {"openai/gpt-5", "gemini/gemini-2.5-pro", "deepseek/deepseek-reasoner"} <= set(models)
    assert any(m.startswith("anthropic/claude-sonnet-4") for m in models)
    hosted = [w for w in pool.workers if w.provider not in ("hosted_vllm", "local")]
    assert all(w.api_key_env and w.api_key_env.isupper() for w in hosted), "hosted APIs name their key variable"
    assert set(pool.providers) >= {w.provider for w in hosted}, "every hosted provider has limits"
    assert all(w.temperature == 0.2 and w.max_tokens == 4096 for w in pool.workers)  # the paper's worker settings


def test_the_open_weights_pool_runs_on_vllm_servers():
    pool = load_pool("open_weights.yaml")

    assert pool.conductor.provider == "hosted_vllm" and pool.conductor.api_base
    assert pool.conductor.policy_version
    assert all(w.provider == "hosted_vllm" and w.api_base for w in pool.workers)
    assert all(w.limits.concurrency for w in pool.workers)


def test_models_list_shows_the_pool_as_the_conductor_sees_it(tmp_path):
    from typer.testing import CliRunner

    from conductor.cli.main import app

    result = CliRunner().invoke(
        app, ["models", "list", "--pool", "frontier.yaml"], env={"CONDUCTOR_HOME": str(tmp_path)}
    )

    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    row = next(line for line in lines if "claude-sonnet-4 " in line)
    assert re.search(r"\b1\b.*anthropic/claude-sonnet-4-20250514.*anthropic.*4096.*0\.2.*\$3 / \$15.*rpm=50", row)
    assert re.search(r"\b0\b.*gpt-5 .*openai/gpt-5 .*\$1\.25 / \$10", result.output), "price from litellm's map"
    assert re.search(r"- .*conductor .*hosted_vllm/conductor .*self-hosted", result.output)


def test_models_list_names_a_bad_pool_file(tmp_path):
    from typer.testing import CliRunner

    from conductor.cli.main import app

    bad = BAD[0]
    result = CliRunner().invoke(app, ["models", "list", "--pool", str(bad)], env={"CONDUCTOR_HOME": str(tmp_path)})

    assert result.exit_code == 2 and _expected(bad) in result.output


def test_a_conductor_step_cap_lowers_the_global_one_and_never_raises_it():
    local = load_pool(BUNDLED / "local.yaml")

    assert local.conductor.max_steps == 3, "the local Conductor is held to the 1-3 steps its warm-up taught"
    assert local.step_cap(5) == 3
    assert local.step_cap(2) == 2, "a lower global cap still wins"
    uncapped = local.model_copy(update={"conductor": local.conductor.model_copy(update={"max_steps": None})})
    assert uncapped.step_cap(5) == 5


def test_the_local_pool_offers_the_python_tool_after_the_workers_its_adapter_learned():
    local = load_pool(BUNDLED / "local.yaml")

    names = [w.name for w in local.workers]
    assert names == ["smol-precise", "smol-creative", "calculator", "python"], "indices the shipped adapter uses"
    python = local.worker("python")
    assert python.is_tool and python.model == "tool/python"
    assert "not a model" in python.description


def test_a_pool_declares_mcp_servers_whose_tools_are_workers(tmp_path):
    path = tmp_path / "pool.yaml"
    path.write_text(
        "conductor: {model: hosted_vllm/conductor}\n"
        "workers:\n"
        "  - {name: clock, model: mcp/time/get_current_time, timeout_s: 5}\n"
        "  - {name: search, model: mcp/docs/search/v2, description: searches the manuals}\n"
        "mcp_servers:\n"
        "  time: {command: python, args: [-m, mcp_server_time], env: {TZ: UTC}}\n"
        "  docs: {url: 'https://docs.example/mcp', headers_env: {Authorization: DOCS_TOKEN}, connect_timeout_s: 5}\n"
    )

    pool = load_pool(path)

    clock, search = pool.workers
    assert clock.is_tool and clock.is_mcp_tool and search.is_mcp_tool
    assert clock.description == "The tool 'get_current_time' of the MCP server 'time'.", "until its server says more"
    assert search.description == "searches the manuals"
    assert pool.mcp_servers["time"].args == ["-m", "mcp_server_time"]
    assert pool.mcp_servers["docs"].address == "https://docs.example/mcp"
    with pytest.raises(ConfigError, match="DOCS_TOKEN"):
        pool.mcp_servers["docs"].http_headers()


def test_a_formatted_answer_after_a_tool_is_written_by_a_model_worker():
    """The tool's own fallback if it is a model, else the preferred worker, the pool's fallback worker, the
    first model of the pool; a pool of tools only leaves it to the Conductor (None)."""
    local = load_pool("local.yaml")  # fallback_worker: smol-precise
    assert local.answer_writer("python") == "smol-precise"
    assert local.answer_writer("calculator", preferred="smol-creative") == "smol-creative"
    assert local.answer_writer("calculator", preferred="python") == "smol-precise", "a tool cannot write it"
    pool = local.model_copy(update={"fallback_worker": None})
    assert pool.answer_writer("python") == "smol-precise", "the first model"
    tools = {
        "conductor": {"model": "openai/c"},
        "workers": [{"name": "calc", "model": "tool/calculator", "description": "c"}],
    }
    assert Pool.model_validate(tools).answer_writer("calc") is None


def test_an_adapter_is_served_in_the_plan_order_it_was_trained_in(tmp_path):
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    warmup = {"id": "warmup-1", "config": {"plan_order": "subtasks-first"}}
    grpo = {"id": "grpo-2", "config": {"iterations": 2}}  # a GRPO child inherits its warm-up's order
    (adapter / "record.json").write_text(json.dumps({"checkpoint": "grpo-2", "lineage": [grpo, warmup]}))
    local = (BUNDLED / "local.yaml").read_text().replace("adapter: adapters/smollm2-conductor", f"adapter: {adapter}")
    served_as_trained = tmp_path / "right.yaml"
    served_as_trained.write_text(
        local.replace("  prompt: compact\n", "  prompt: compact\n  plan_order: subtasks-first\n")
    )
    served_otherwise = tmp_path / "wrong.yaml"
    served_otherwise.write_text(local)

    assert load_pool(served_as_trained).conductor.plan_order == "subtasks-first"
    with pytest.raises(ConfigError, match=r"trained writing plans 'subtasks-first'.*plan_order: subtasks-first"):
        load_pool(served_otherwise)
    # the order is the paper's where none is set, and an adapter whose record does not say is not second-guessed
    assert load_pool().conductor.plan_order == "workers-first"
