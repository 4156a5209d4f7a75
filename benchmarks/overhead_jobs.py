"""The jobs both sides of the orchestration-overhead benchmark run, and the direct asyncio loop that
runs them without the system (see benchmarks/orchestration_overhead.py)."""

from __future__ import annotations

import asyncio
import statistics
import time
from dataclasses import dataclass, field
from typing import Any

FIXED: dict[str, dict[str, Any]] = {
    "single": {"model_id": [0], "subtasks": ["answer it"], "access_list": [[]]},
    "fanout": {
        "model_id": [0, 1, 0, 1],
        "subtasks": ["part A", "part B", "part C", "combine"],
        "access_list": [[], [], [], [0, 1, 2]],
    },
    "chain4": {
        "model_id": [0, 1, 0, 1],
        "subtasks": ["draft", "check", "improve", "final"],
        "access_list": [[], [0], [1], [2]],
    },
}
#: Job mixes: `mixed` cycles through every kind; `plan-fanout` is issue 18's shape, every job a
#: Conductor plan of two parallel steps and a combine step (no replan).
MIXES = {"mixed": ["single", "fanout", "chain4", "replan"], "plan-fanout": ["plan-fanout"]}
KINDS = list(MIXES["mixed"])
#: model calls on each kind's critical path, and in all
CRITICAL = {"single": 1, "fanout": 2, "chain4": 4, "replan": 3, "plan-fanout": 3}
CALLS = {"single": 1, "fanout": 4, "chain4": 4, "replan": 3, "plan-fanout": 4}


def _kind(i: int) -> str:
    return KINDS[i % len(KINDS)]


def idle_jobs() -> int:
    """Jobs run one at a time for the idle overhead: at least 8, for a median."""
    return max(8, len(KINDS) * 2)


def use_mix(name: str) -> None:
    """Run every mode on this mix from now on."""
    KINDS[:] = MIXES[name]


@dataclass
class Result:
    mode: str
    jobs: int
    seconds: float
    latencies: list[float]
    kinds: list[str]
    cpu_s: float | None = None
    idle_overhead_ms: float | None = None
    notes: dict[str, Any] = field(default_factory=dict)

    @property
    def jobs_per_s(self) -> float:
        return self.jobs / self.seconds

    @property
    def calls(self) -> int:
        return sum(CALLS[k] for k in self.kinds)


# -- (a) the direct asyncio loop ----------------------------------------------------------------
async def _direct(
    pool: Any, n: int, concurrency: int, *, serial: bool = False
) -> tuple[float, list[float], list[str], float]:
    """Seconds, job latencies, kinds, and the wall-clock time the jobs started."""
    import httpx

    from conductor.domain.parser import parse_workflow
    from conductor.domain.prompts import build_plan_messages, build_replan_messages, build_step_messages
    from conductor.domain.workflow import Workflow

    sem = asyncio.Semaphore(concurrency)
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    cards = pool.cards()
    async with httpx.AsyncClient(base_url=pool.conductor.api_base, limits=limits, timeout=60) as client:

        async def call(spec: Any, messages: list[dict]) -> str:
            body = {"model": spec.model.split("/", 1)[1], "messages": messages, "max_tokens": spec.max_tokens}
            async with sem:
                r = await client.post("/chat/completions", json=body)
            r.raise_for_status()
            return str(r.json()["choices"][0]["message"]["content"])

        async def run_workflow(wf: Workflow) -> str:
            outputs: dict[int, asyncio.Future[str]] = {}

            async def step(st: Any) -> str:
                deps = [await outputs[d] for d in st.dependencies()]
                context = [(wf.steps[d].subtask, out) for d, out in zip(st.dependencies(), deps, strict=True)]
                return await call(pool.workers[st.worker], build_step_messages(st.subtask, context))

            for st in wf.steps:
                outputs[st.index] = asyncio.ensure_future(step(st))
            results = await asyncio.gather(*outputs.values())
            return results[-1]

        async def job(i: int, t0: float) -> float:
            kind = _kind(i)
            if kind in FIXED:
                await run_workflow(Workflow.from_lists(**FIXED[kind]))
            elif kind == "plan-fanout":
                question = f"[wf:fanout] q{i}"
                text = await call(pool.conductor, build_plan_messages(question, cards, max_steps=5))
                await run_workflow(parse_workflow(text, pool_size=len(cards), max_steps=5))
            else:
                question = f"[wf:single] q{i}"
                text = await call(pool.conductor, build_plan_messages(question, cards, max_steps=5))
                wf = parse_workflow(text, pool_size=len(cards), max_steps=5)
                answer = await run_workflow(wf)
                text = await call(
                    pool.conductor,
                    build_replan_messages(question, cards, previous=wf, previous_answer=answer, max_steps=5),
                )
                parse_workflow(text, pool_size=len(cards), max_steps=5, allow_empty=True)
            return time.perf_counter() - t0

        started, wall = time.perf_counter(), time.time()
        if serial:
            lat = []
            for i in range(n):
                lat.append(await job(i, time.perf_counter()))
        else:
            lat = list(await asyncio.gather(*(job(i, started) for i in range(n))))
        return time.perf_counter() - started, lat, [_kind(i) for i in range(n)], wall


def direct_loop(pool: Any, n: int, concurrency: int, latency: float) -> Result:
    cpu0 = time.process_time()
    secs, lat, kinds, wall = asyncio.run(_direct(pool, n, concurrency))
    res = Result("(a) direct asyncio loop", n, secs, lat, kinds, cpu_s=time.process_time() - cpu0)
    res.notes["started_wall"] = wall
    _, idle, idle_kinds, _ = asyncio.run(_direct(pool, idle_jobs(), concurrency, serial=True))
    res.idle_overhead_ms = _overhead_ms(idle, idle_kinds, latency)
    return res


def _overhead_ms(latencies: list[float], kinds: list[str], latency: float) -> float:
    """Median over jobs of (job time minus model time on its critical path) per critical step."""
    per_step = [(t - CRITICAL[k] * latency) / CRITICAL[k] for t, k in zip(latencies, kinds, strict=True)]
    return statistics.median(per_step) * 1000
