"""The worker pool as configuration: which models exist, how to call them, what they cost, their limits.

Loaded from YAML and validated with errors that name the bad field. Position in `workers`
is the "Model i" index the Conductor sees; when the Conductor is `in_pool` it is shown last.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from conductor.config.mcp_servers import McpServerSpec
from conductor.domain.errors import ConfigError
from conductor.domain.mcp_tools import MCP_PROVIDER, split_model, undescribed
from conductor.domain.plan_grammar import PlanGrammar
from conductor.domain.prompts import WorkerCard, build_plan_messages, build_replan_messages
from conductor.domain.tools import TOOL_PROVIDER, TOOLS
from conductor.domain.workflow import PlanOrder, Workflow

CONFIG_DIR = Path(__file__).resolve().parent
BUNDLED = CONFIG_DIR / "pools"
DEFAULT_POOL = BUNDLED / "local.yaml"
CONDUCTOR_WORKER_NAME = "conductor"


class Limits(BaseModel):
    """Limits that hold across every process and machine (kept in Redis)."""

    model_config = ConfigDict(extra="forbid")
    rpm: int | None = Field(None, gt=0, description="Requests per minute.")
    rps: int | None = Field(None, gt=0, description="Requests per second (smooths bursts within the minute).")
    tpm: int | None = Field(None, gt=0, description="Tokens (prompt + completion) per minute.")
    concurrency: int | None = Field(None, gt=0, description="Calls in flight at once.")


class Price(BaseModel):
    model_config = ConfigDict(extra="forbid")
    input_per_token: float = Field(ge=0, description="USD per prompt token.")
    output_per_token: float = Field(ge=0, description="USD per completion token.")


class ModelSpec(BaseModel):
    """How to call one model through litellm."""

    model_config = ConfigDict(extra="forbid")
    model: str = Field(
        min_length=3,
        description="litellm model string, e.g. openai/gpt-5, hosted_vllm/qwen, local/smollm2-135m-instruct; "
        "or a tool worker, e.g. tool/calculator, or a tool of an MCP server the pool declares, mcp/<server>/<tool>",
    )
    api_base: str | None = None
    api_key_env: str | None = Field(
        None, description="Name of the environment variable holding the key (never the key)."
    )
    max_tokens: int = Field(512, gt=0, le=200_000)
    temperature: float = Field(0.2, ge=0, le=2)
    reasoning_effort: Literal["minimal", "low", "medium", "high"] | None = None
    timeout_s: float = Field(120.0, gt=0)
    retries: int = Field(2, ge=0, le=10)
    price: Price | None = Field(None, description="Overrides litellm's local cost map.")
    limits: Limits = Field(default_factory=Limits)

    @field_validator("model")
    @classmethod
    def _has_provider(cls, v: str) -> str:
        if "/" not in v:
            raise ValueError("must be '<provider>/<model>' as litellm expects, e.g. 'openai/gpt-5'")
        return v

    @property
    def provider(self) -> str:
        return self.model.split("/", 1)[0]


class WorkerSpec(ModelSpec):
    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.:-]+$")
    description: str = Field(
        min_length=1,
        description="What the Conductor is told this model is good at; an MCP tool's defaults to the tool's own "
        "description, as its server lists it.",
    )
    fallback: str | None = Field(None, description="Worker to call when this one fails after its retries.")

    @field_validator("model")
    @classmethod
    def _known_tool(cls, v: str) -> str:
        provider, _, name = v.partition("/")
        if provider == TOOL_PROVIDER and name not in TOOLS:
            raise ValueError(f"unknown tool {name!r}; tools: {sorted(TOOLS)}")
        if provider == MCP_PROVIDER:
            split_model(v)
        return v

    @model_validator(mode="before")
    @classmethod
    def _mcp_tool_described_by_its_server(cls, data: Any) -> Any:
        # A placeholder until the server is asked (the gateway replaces it), so every worker has a description.
        model = data.get("model") if isinstance(data, dict) else None
        if isinstance(model, str) and model.startswith(f"{MCP_PROVIDER}/") and not data.get("description"):
            with contextlib.suppress(ValueError):  # a malformed model string is the model field's error
                return {**data, "description": undescribed(model)}
        return data

    @property
    def is_tool(self) -> bool:
        return self.provider in (TOOL_PROVIDER, MCP_PROVIDER)

    @property
    def is_mcp_tool(self) -> bool:
        return self.provider == MCP_PROVIDER


class ConductorSpec(ModelSpec):
    description: str = "The Conductor itself: hands its subtask to a fresh workflow of its own."
    temperature: float = Field(1.0, ge=0, le=2)
    max_tokens: int = Field(1024, gt=0)
    in_pool: bool = Field(False, description="Show the Conductor as a worker (recursive workflows).")
    policy_version: str = Field("base", description="Checkpoint id of the served policy, stored with every plan.")
    adapter: str | None = Field(
        None,
        description="LoRA adapter directory served on top of a `local/` model (relative paths: against "
        "conductor/config/); vLLM serves adapters under their own model name instead.",
    )
    replans: bool = Field(
        True,
        description="Offer this Conductor a replan round after each answer (with `recursion` on); false for a "
        "Conductor trained on first plans only, which would rewrite the same workflow and double the cost.",
    )
    max_steps: int | None = Field(
        None,
        ge=1,
        le=16,
        description="Most steps a plan of this Conductor may have, below the global `max_steps`: a Conductor "
        "trained on short workflows is held to the lengths it learned (its grammar and prompt say so too).",
    )
    prompt: Literal["full", "compact"] = Field(
        "full",
        description="`full`: the paper's prompt with rules and four few-shot workflows; `compact`: pool, "
        "question and the output contract only, for a Conductor trained on the format (shorter, cheaper).",
    )
    plan_order: PlanOrder = Field(
        "workers-first",
        description="The order this Conductor writes a plan's lists in (its grammar and prompt hold it): "
        "`workers-first` (model_id, subtasks, access_list: the paper's) or `subtasks-first`. A warm-up writes "
        "its examples in this order and records it; an adapter whose record says another order is refused.",
    )

    @field_validator("model")
    @classmethod
    def _not_a_tool(cls, v: str) -> str:
        if v.startswith((f"{TOOL_PROVIDER}/", f"{MCP_PROVIDER}/")):
            raise ValueError("the Conductor must be a model; tools can only be workers")
        return v

    def adapter_path(self) -> Path | None:
        if not self.adapter:
            return None
        path = Path(self.adapter)
        return path if path.is_absolute() else (CONFIG_DIR / path).resolve()

    # A round's prompt and grammar as this Conductor is asked and held: its prompt style and plan order travel
    # together, so every caller (rounds, the gate's probe, estimates, benchmarks) asks it the same way.
    def plan_messages(self, question: str, cards: list[WorkerCard], *, max_steps: int) -> list[dict[str, Any]]:
        return build_plan_messages(question, cards, max_steps=max_steps, style=self.prompt, order=self.plan_order)

    def replan_messages(
        self, question: str, cards: list[WorkerCard], *, previous: Workflow, previous_answer: str, max_steps: int
    ) -> list[dict[str, Any]]:
        return build_replan_messages(
            question,
            cards,
            previous=previous,
            previous_answer=previous_answer,
            max_steps=max_steps,
            style=self.prompt,
            order=self.plan_order,
        )

    def plan_grammar(self, pool_size: int, *, max_steps: int, replan: bool) -> PlanGrammar:
        """The plans the parser will accept from one round, sized to this Conductor's token cap."""
        return PlanGrammar.for_round(
            pool_size,
            max_steps=max_steps,
            max_tokens=self.max_tokens,
            prompt_style=self.prompt,
            replan=replan,
            order=self.plan_order,
        )


class Pool(BaseModel):
    model_config = ConfigDict(extra="forbid")
    conductor: ConductorSpec
    workers: list[WorkerSpec] = Field(min_length=1)
    providers: dict[str, Limits] = Field(default_factory=dict, description="Limits per provider (all its models).")
    fallback_worker: str | None = Field(
        None, description="Worker that answers alone when every plan failed to parse (settings may override)."
    )
    mcp_servers: dict[str, McpServerSpec] = Field(
        default_factory=dict, description="MCP servers by name, whose tools workers call as mcp/<server>/<tool>."
    )

    @model_validator(mode="after")
    def _check_names(self) -> Pool:
        names = [w.name for w in self.workers]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"duplicate worker names: {dupes}")
        if CONDUCTOR_WORKER_NAME in names:
            raise ValueError(f"worker name {CONDUCTOR_WORKER_NAME!r} is reserved for the Conductor")
        for w in self.workers:
            if w.fallback is not None and w.fallback not in names:
                raise ValueError(f"workers.{w.name}.fallback: unknown worker {w.fallback!r}")
            if w.fallback == w.name:
                raise ValueError(f"workers.{w.name}.fallback: a worker cannot fall back to itself")
        if self.fallback_worker is not None and self.fallback_worker not in names:
            raise ValueError(f"fallback_worker: unknown worker {self.fallback_worker!r}")
        for w in self.workers:
            if w.is_mcp_tool and (server := split_model(w.model)[0]) not in self.mcp_servers:
                raise ValueError(
                    f"workers.{w.name}.model: unknown MCP server {server!r}; mcp_servers: {sorted(self.mcp_servers)}"
                )
        return self

    # -- what the Conductor sees ------------------------------------------------------
    def step_cap(self, max_steps: int) -> int:
        """The most steps a plan may have: the global cap, lowered by the Conductor's own."""
        return min(max_steps, self.conductor.max_steps or max_steps)

    def cards(self) -> list[WorkerCard]:
        cards = [WorkerCard(w.name, w.description, w.is_tool) for w in self.workers]
        if self.conductor.in_pool:
            cards.append(WorkerCard(CONDUCTOR_WORKER_NAME, self.conductor.description))
        return cards

    def is_conductor_index(self, index: int) -> bool:
        return self.conductor.in_pool and index == len(self.workers)

    def worker(self, name: str) -> WorkerSpec:
        for w in self.workers:
            if w.name == name:
                return w
        raise ConfigError(f"unknown worker {name!r}; pool has {[w.name for w in self.workers]}")

    def answer_writer(self, tool: str, preferred: str | None = None) -> str | None:
        """The model worker that writes a formatted final answer from a tool's result (a program cannot be
        asked for JSON or a function call): the tool's own fallback, else `preferred` (the settings'
        fallback worker), the pool's fallback worker, the first model of the pool; None for a pool of tools
        only, where the Conductor writes it."""
        for name in (self.worker(tool).fallback, preferred, self.fallback_worker, *(w.name for w in self.workers)):
            if name and not self.worker(name).is_tool:
                return name
        return None

    def name_of(self, index: int) -> str:
        return CONDUCTOR_WORKER_NAME if self.is_conductor_index(index) else self.workers[index].name


def load_pool(path: str | Path | None = None) -> Pool:
    path = Path(path) if path else DEFAULT_POOL
    if not path.exists() and not path.is_absolute() and (BUNDLED / path).exists():
        path = BUNDLED / path
    try:
        raw = yaml.safe_load(path.read_text())
    except FileNotFoundError as exc:
        raise ConfigError(f"pool file not found: {path}") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from exc
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping with 'conductor' and 'workers'")
    try:
        pool = Pool.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(f"{path}: {_explain(exc, raw)}") from exc
    _check_plan_order(path, pool.conductor)
    return pool


def trained_plan_order(adapter: Path) -> str | None:
    """The plan order the adapter's warm-up wrote its examples in, from the ``record.json`` an export leaves
    beside it (a GRPO checkpoint inherits its warm-up ancestor's); None where no record says."""
    try:
        record = json.loads((adapter / "record.json").read_text())
    except (OSError, ValueError):
        return None
    for entry in record.get("lineage", []):
        order = (entry.get("config") or {}).get("plan_order")
        if order:
            return str(order)
    return None


def _check_plan_order(path: Path, conductor: ConductorSpec) -> None:
    # Served in another order than it was trained in, a policy still writes plans the grammar accepts, but
    # at the position where it learned to decide something else: its routes would be quietly wrong.
    adapter = conductor.adapter_path()
    trained = trained_plan_order(adapter) if adapter is not None else None
    if trained is not None and trained != conductor.plan_order:
        raise ConfigError(
            f"{path}: conductor.plan_order is {conductor.plan_order!r}, but the adapter {adapter} was trained "
            f"writing plans {trained!r} (its record.json): set `plan_order: {trained}`"
        )


def _explain(exc: ValidationError, raw: dict) -> str:
    lines = []
    for err in exc.errors():
        loc = list(err["loc"])
        # workers.3.model reads better as workers[3](name).model
        if len(loc) >= 2 and loc[0] == "workers" and isinstance(loc[1], int):
            try:
                name = raw["workers"][loc[1]].get("name", "?")
            except (KeyError, IndexError, AttributeError, TypeError):
                name = "?"
            loc = [f"workers[{loc[1]}]({name})", *loc[2:]]
        lines.append(f"{'.'.join(str(p) for p in loc) or '(top)'}: {err['msg']}")
    return "; ".join(lines)
