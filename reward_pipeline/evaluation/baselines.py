"""Evaluation methods as job options: the Conductor and the baselines it is compared with.

Every method runs through the same service, pool, gateway and queue; a method is only the
`options` (and `samples`) its jobs are submitted with. Baselines are fixed workflows (no
Conductor call), written with the question in every subtask because a worker never sees the
original question, only its subtask and the steps its access list allows.

Method specs (``--methods`` takes a comma-separated list):

``conductor``                 the Conductor as configured (plan, recursion per settings).
``router``                    the Conductor restricted to one step, no replan: it only picks a
                              worker and writes its prompt (a router baseline).
``single:WORKER``             one step: WORKER answers the question.
``moa[:AGGREGATOR]``          Mixture-of-Agents: every model worker of the pool answers independently ([]),
                              then AGGREGATOR (default: the first worker) sees them all ("all")
                              and writes the final answer.
``self-reflect[:WORKER[:K]]`` WORKER answers, then revises its own answer K times (default 2),
                              each revision seeing everything before it ("all").
``best-of-n[:WORKER[:N]]``    N independent answers from WORKER (default N=5) as N samples of
                              one job; the answer is their majority vote, computed in Python after
                              the job finishes from the verifier's extraction of each sample
                              (final number, choice letter, math expression; normalised code for
                              code). Ties go to the earliest sample.
``tool-route[:WORKER[:TOOL[:N]]]`` WORKER writes the arithmetic expression for the question (not
                              its value; a Python program when TOOL is the python tool), then TOOL (default: the pool's first tool worker) computes
                              it ("all"): the route a Conductor can learn on a pool with a calculator,
                              fixed, so it can be told apart from the choosing of it. With N > 1, N
                              samples of that route and their majority vote, as best-of-n (a writer
                              at temperature 0 writes the same expression N times).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from conductor.config.pool import Pool
from conductor.domain.errors import InputError
from conductor.domain.problem import Problem
from conductor.domain.prompts import expression_route_subtasks, program_route_subtasks

__all__ = ["METHOD_NAMES", "Method", "parse_method", "parse_methods"]

METHOD_NAMES = ("conductor", "router", "single", "moa", "self-reflect", "best-of-n", "tool-route")
DEFAULT_REFLECTIONS = 2
DEFAULT_N = 5

AGGREGATE = (
    "You have been given the responses of several models to the question below. Some of them may be "
    "wrong. Evaluate them critically, then write one correct, complete answer to the question in the "
    "format it asks for.\n\nQuestion:\n{question}"
)
REFLECT = (
    "Review your previous answer to the question below step by step. Find and fix any mistake, then "
    "give your improved, complete final answer in the format the question asks for.\n\nQuestion:\n{question}"
)


@dataclass(frozen=True)
class Method:
    """One evaluation method: how to submit a problem, and whether its answer is a vote."""

    label: str  #: canonical spec, the key results are stored under
    kind: str  #: one of METHOD_NAMES
    worker_index: int | None = None
    aggregator_index: int | None = None  #: moa's aggregator, tool-route's tool
    n: int = 1  #: reflections (self-reflect) or samples (best-of-n, tool-route)
    pool_size: int = 0
    tool_model: str = ""  #: tool-route's tool (`tool/python` is handed a program, others an expression)
    proposers: tuple[int, ...] = ()  #: moa's proposers: the pool's model workers

    @property
    def vote(self) -> bool:
        return self.kind == "best-of-n" or (self.kind == "tool-route" and self.n > 1)

    def job_args(self, problem: Problem) -> dict[str, Any]:
        """`JobSpec` fields (options and samples) for this problem."""
        q = problem.question
        if self.kind == "conductor":
            return {"options": {}, "samples": 1}
        if self.kind == "router":
            return {"options": {"max_steps": 1, "recursion": False}, "samples": 1}
        if self.kind == "single":
            return {"options": {"workflow": _lists([self.worker_index], [q], [[]])}, "samples": 1}
        if self.kind == "best-of-n":
            return {"options": {"workflow": _lists([self.worker_index], [q], [[]])}, "samples": self.n}
        if self.kind == "moa":
            # Every model of the pool proposes (a tool handed the question has nothing to compute).
            proposers = list(self.proposers) or list(range(self.pool_size))
            k = len(proposers)
            return {
                "options": {
                    "workflow": _lists(
                        [*proposers, self.aggregator_index],
                        [q] * k + [AGGREGATE.format(question=q)],
                        [[] for _ in range(k)] + ["all"],
                    )
                },
                "samples": 1,
            }
        if self.kind == "self-reflect":
            w = self.worker_index
            return {
                "options": {
                    "workflow": _lists(
                        [w] * (self.n + 1), [q] + [REFLECT.format(question=q)] * self.n, [[]] + ["all"] * self.n
                    )
                },
                "samples": 1,
            }
        if self.kind == "tool-route":
            return {
                "options": {
                    "workflow": _lists(
                        [self.worker_index, self.aggregator_index],
                        program_route_subtasks(q) if self.tool_model == "tool/python" else expression_route_subtasks(q),
                        [[], "all"],
                    )
                },
                "samples": self.n,
            }
        raise AssertionError(self.kind)


def _lists(model_id: list[Any], subtasks: list[str], access: list[Any]) -> dict[str, list]:
    return {"model_id": model_id, "subtasks": subtasks, "access_list": access}


def parse_methods(text: str, pool: Pool) -> list[Method]:
    """`parse_method` for each comma-separated spec, duplicates dropped."""
    methods: dict[str, Method] = {}
    for spec in (p.strip() for p in text.split(",")):
        if spec:
            m = parse_method(spec, pool)
            methods.setdefault(m.label, m)
    if not methods:
        raise InputError("no evaluation method given")
    return list(methods.values())


def parse_method(spec: str, pool: Pool) -> Method:
    """A method from its spec (see the module doc); raises InputError naming what is wrong."""
    name, *args = [p.strip() for p in spec.split(":")]
    name = name.lower()
    names = [w.name for w in pool.workers]

    def worker(arg: str | None) -> tuple[str, int]:
        if not arg:
            return names[0], 0
        if arg not in names:
            raise InputError(f"method {spec!r}: unknown worker {arg!r}; the pool has {', '.join(names)}")
        return arg, names.index(arg)

    def count(arg: str | None, default: int, what: str) -> int:
        if not arg:
            return default
        if not re.fullmatch(r"\d+", arg) or not 1 <= int(arg) <= 64:
            raise InputError(f"method {spec!r}: {what} must be an integer from 1 to 64, got {arg!r}")
        return int(arg)

    def at_most(n: int) -> None:
        if len(args) > n:
            raise InputError(f"method {spec!r}: too many ':' parts")

    if name in ("conductor", "router"):
        at_most(0)
        return Method(name, name)
    if name == "single":
        at_most(1)
        if not args or not args[0]:
            raise InputError(f"method {spec!r}: say which worker, e.g. single:{names[0]}")
        w, i = worker(args[0])
        return Method(f"single:{w}", "single", worker_index=i)
    if name == "moa":
        at_most(1)
        w, i = worker(args[0] if args else None)
        label = "moa" if i == 0 else f"moa:{w}"
        models = tuple(k for k, spec in enumerate(pool.workers) if not spec.is_tool)
        return Method(label, "moa", aggregator_index=i, pool_size=len(names), proposers=models)
    if name in ("self-reflect", "reflect", "self_reflect"):
        at_most(2)
        w, i = worker(args[0] if args else None)
        k = count(args[1] if len(args) > 1 else None, DEFAULT_REFLECTIONS, "the number of revisions")
        return Method(f"self-reflect:{w}:{k}", "self-reflect", worker_index=i, n=k)
    if name in ("best-of-n", "bon", "best_of_n"):
        at_most(2)
        w, i = worker(args[0] if args else None)
        n = count(args[1] if len(args) > 1 else None, DEFAULT_N, "n")
        return Method(f"best-of-n:{w}:{n}", "best-of-n", worker_index=i, n=n)
    if name == "tool-route":
        at_most(3)
        return _tool_route(spec, pool, args, n=count(args[2] if len(args) > 2 else None, 1, "n"))
    raise InputError(f"unknown method {spec!r}; known: {', '.join(METHOD_NAMES)}")


def _tool_route(spec: str, pool: Pool, args: list[str], *, n: int) -> Method:
    """`tool-route[:WORKER[:TOOL[:N]]]`: a model worker (default: the first) and a tool worker (default:
    the first); N samples voted when N > 1."""
    names = [w.name for w in pool.workers]
    tools = [w.name for w in pool.workers if w.is_tool]
    if not tools:
        raise InputError(f"method {spec!r}: the pool has no tool worker to compute the expression")
    writer = args[0] if args and args[0] else next((n for n in names if n not in tools), "")
    tool = args[1] if len(args) > 1 and args[1] else tools[0]
    if writer not in names or writer in tools:
        raise InputError(
            f"method {spec!r}: {writer!r} is not a model worker of the pool; a model writes the expression"
        )
    if tool not in tools:
        raise InputError(f"method {spec!r}: {tool!r} is not a tool worker; the pool's tools: {', '.join(tools)}")
    return Method(
        f"tool-route:{writer}:{tool}" + (f":{n}" if n > 1 else ""),
        "tool-route",
        worker_index=names.index(writer),
        aggregator_index=names.index(tool),
        n=n,
        tool_model=pool.worker(tool).model,
    )
