"""Warm-up examples for a pool whose routes differ: candidate plans tried on each problem, kept by reward.

For every training problem and a random subset of the pool (renumbered: the paper's pool
randomisation, so a plan must follow the descriptions it is shown, not remembered ids), the
candidates are the one-step plans each worker of that subset could run: a model answers the question;
the calculator computes the problem's candidate expression; python runs its candidate program. Each
candidate is *run* (the tools in their sandbox, the models by batched greedy or sampled generation at
the worker's own settings) and scored by the problem's verifier. Only candidates that earned reward 1
become examples, one drawn uniformly among them. No rule, label or prompt line names the route of a
kind: a facts question goes to a model because no tool's candidate answered it, a letter count to
python because the models' answers were wrong and the program's right (rejection sampling with the
reference as the filter, as in expert iteration).

Replan examples teach the paper's recursion on the same verified material: shown a workflow and its
failed result (a tool that found nothing to run, a model's wrong answer), the target is a verified
workflow; shown a verified workflow and its answer, the target is three empty lists (keep it).
"""

from __future__ import annotations

import gzip
import json
import random
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from conductor.config.pool import Pool, WorkerSpec
from conductor.domain.errors import VerifierError
from conductor.domain.problem import Problem
from conductor.domain.prompts import (
    QUESTION_REF,
    WorkerCard,
    build_plan_messages,
    build_replan_messages,
    build_step_messages,
    expand_question,
)
from conductor.domain.workflow import PlanOrder, Workflow
from reward_pipeline.verifiers.routing import verifier_for

__all__ = [
    "ANSWER_HINT",
    "RouteExamples",
    "RouteTrial",
    "build_route_examples",
    "load_trials",
    "pool_subsets",
    "resample_unsolved",
    "try_routes",
]

ANSWER_HINT = "Give the final answer."
#: A model's one-step candidate: the question itself.
MODEL_SUBTASK = f"{QUESTION_REF} {ANSWER_HINT}"

#: Answers a batch of subtasks as one worker: (worker, subtasks) -> responses, in order.
Answerer = Callable[[WorkerSpec, list[str]], list[str]]
#: Runs a tool worker on a step's messages (the gateway's own tool path).
ToolRunner = Callable[[str, list[dict[str, Any]]], str]


@dataclass
class RouteTrial:
    """One candidate one-step route of one problem, run and scored."""

    worker: str
    subtask: str  #: as the Conductor writes it ({question} where the question goes)
    answer: str
    correct: bool


@dataclass
class RouteExamples:
    examples: list[dict[str, Any]]
    stats: dict[str, Any] = field(default_factory=dict)


def _candidates(problem: Problem, workers: Sequence[WorkerSpec]) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for w in workers:
        if not w.is_tool:
            out.append((w.name, MODEL_SUBTASK))
        elif w.model == "tool/calculator" and isinstance(problem.metadata.get("expression"), str):
            out.append((w.name, problem.metadata["expression"]))
        elif w.model == "tool/python" and isinstance(problem.metadata.get("program"), str):
            out.append((w.name, problem.metadata["program"]))
        # A tool handed the question itself: right only where the question states its expression ("What is
        # 7 * 34?"); its misses are the failed results the replan examples start from.
        if w.is_tool:
            out.append((w.name, QUESTION_REF))
    return out


def _record(
    trials: dict[str, list[RouteTrial]], worker: str, items: list[tuple[Problem, str]], answers: list[str]
) -> None:
    """Scores each answer by its problem's verifier and appends it to that problem's trials."""
    for (p, subtask), text in zip(items, answers, strict=True):
        verifier = verifier_for(p)
        try:
            correct = bool(verifier and p.answer is not None and verifier.verify(text, p).correct)
        except VerifierError:
            correct = False  # a reference the verifier cannot use earns no route anything
        trials[str(p.id)].append(RouteTrial(worker, subtask, text, correct))


def try_routes(
    problems: Sequence[Problem], pool: Pool, *, answer: Answerer, tool: ToolRunner
) -> dict[str, list[RouteTrial]]:
    """Every one-step candidate of every problem over the whole pool, run and scored: problem id -> trials."""
    trials: dict[str, list[RouteTrial]] = {str(p.id): [] for p in problems}
    by_worker: dict[str, list[tuple[Problem, str]]] = {}
    for p in problems:
        for name, subtask in _candidates(p, pool.workers):
            by_worker.setdefault(name, []).append((p, subtask))
    for name, items in by_worker.items():
        spec = pool.worker(name)
        texts = [expand_question(s, p.question) for p, s in items]
        if spec.is_tool:
            # The python tool starts a sandboxed process per program: a few at once keep the cores busy.
            with ThreadPoolExecutor(4) as ex:
                answers = list(ex.map(lambda t, m=spec.model: tool(m, build_step_messages(t, [])), texts))
        else:
            answers = answer(spec, texts)
        _record(trials, name, items, answers)
    return trials


def resample_unsolved(
    problems: Sequence[Problem], trials: dict[str, list[RouteTrial]], pool: Pool, *, answer: Answerer, samples: int
) -> int:
    """``samples`` more answers from each sampling model worker (temperature above 0) to every problem no
    trial has solved yet, appended to its trials: the number of problems they solved.

    One answer per route decides most problems (a tool is exact, a greedy model says the same thing twice),
    but a sampling model that misses once may be right on another draw: for a question only a model can
    answer, its route then earns reward and becomes an example. Spent on the problems nothing solved, whatever
    their kind: in the 2026-12-07 trials that was 127 of 200 facts and 129 of 200 choices, and the facts the
    examples taught were 44 distinct questions."""
    unsolved = [p for p in problems if not any(t.correct for t in trials[str(p.id)])]
    items = [(p, MODEL_SUBTASK) for p in unsolved for _ in range(samples)]
    texts = [expand_question(MODEL_SUBTASK, p.question) for p, _ in items]
    for spec in pool.workers:
        if not spec.is_tool and spec.temperature > 0 and items:
            _record(trials, spec.name, items, answer(spec, texts))
    return sum(1 for p in unsolved if any(t.correct for t in trials[str(p.id)]))


def load_trials(path: Path) -> dict[str, list[RouteTrial]]:
    """Trials a previous warm-up recorded (its ``route_trials.jsonl``, or gzipped as the docs keep them), to
    train again on the same rewards without running every route again."""
    out: dict[str, list[RouteTrial]] = {}
    data = path.read_bytes()
    text = (gzip.decompress(data) if path.suffix == ".gz" else data).decode("utf-8")
    for line in text.splitlines():
        row = json.loads(line)
        out.setdefault(str(row["problem"]), []).append(
            RouteTrial(row["worker"], row["subtask"], row["answer"], bool(row["correct"]))
        )
    return out


def pool_subsets(
    pool: Pool, rng: random.Random, *, keep: float = 0.7, full_share: float = 0.15, shuffle_share: float = 0.5
) -> list[WorkerSpec]:
    """A random subset of the pool (ids renumbered), with at least one model; with probability
    ``full_share`` the pool as deployed, so the production prompt is seen as it is.

    A subset is in a random order with probability ``shuffle_share``, otherwise in the pool's own order,
    as a deployment that drops a worker from its pool file shows it. With a 30% share of the pool as
    deployed and every subset shuffled, the adapter kept sending string questions to the id python has in
    the full pool: it learned ids more than it read descriptions."""
    if rng.random() < full_share:
        return list(pool.workers)
    while True:
        chosen = [w for w in pool.workers if rng.random() < keep]
        if any(not w.is_tool for w in chosen):
            if rng.random() < shuffle_share:
                rng.shuffle(chosen)
            return chosen


def _model_calls(pool: Pool, trial: RouteTrial) -> int:
    return 0 if pool.worker(trial.worker).is_tool else 1


def _temperature(pool: Pool, trial: RouteTrial) -> float:
    worker = pool.worker(trial.worker)
    return 0.0 if worker.is_tool else worker.temperature  # a tool computes: every tool ties


def _preferred(pool: Pool, good: list[RouteTrial], *, prefer_greedy: bool) -> list[RouteTrial]:
    """Among the routes that earned reward, those an example may name: the fewest model calls (at equal reward
    the cheaper route: a tool spends no tokens; a choice by cost, whatever the kind of question), and with
    ``prefer_greedy`` of those the models at the lowest temperature."""
    cheapest = min(_model_calls(pool, t) for t in good)
    good = [t for t in good if _model_calls(pool, t) == cheapest]
    if prefer_greedy:
        coolest = min(_temperature(pool, t) for t in good)
        good = [t for t in good if _temperature(pool, t) == coolest]
    return good


def _cards(workers: Sequence[WorkerSpec]) -> list[WorkerCard]:
    return [WorkerCard(w.name, w.description, w.is_tool) for w in workers]


def _one_step(workers: Sequence[WorkerSpec], trial: RouteTrial) -> Workflow:
    index = [w.name for w in workers].index(trial.worker)
    return Workflow.from_lists([index], [trial.subtask], [[]])


def _family(problem: Problem) -> str:
    return str(problem.metadata.get("family", problem.kind))


def _replan_example(
    problem: Problem,
    workers: Sequence[WorkerSpec],
    target: RouteTrial,
    mine: list[RouteTrial],
    good: list[RouteTrial],
    rng: random.Random,
    max_steps: int,
    order: PlanOrder,
) -> tuple[list[dict[str, Any]], str, bool]:
    """A replan round on verified material: shown the verified route and its answer, keep it (three empty
    lists); shown a failed one (when the subset had one, half the time), a verified route. -> (prompt,
    completion, kept)."""
    bad = [t for t in mine if not t.correct]
    keep = not bad or rng.random() < 0.5
    previous = target if keep else rng.choice(bad)
    prompt = build_replan_messages(
        problem.question,
        _cards(workers),
        previous=_one_step(workers, previous),
        previous_answer=previous.answer,
        max_steps=max_steps,
        style="compact",
        order=order,
    )
    if keep:
        return prompt, Workflow.from_lists([], [], []).to_python(order), True
    return prompt, _one_step(workers, rng.choice(good)).to_python(order), False


def build_route_examples(
    problems: Sequence[Problem],
    trials: dict[str, list[RouteTrial]],
    pool: Pool,
    *,
    n: int,
    max_steps: int,
    seed: int,
    replan_share: float = 0.0,
    randomise_pool: bool = True,
    balance_kinds: bool = True,
    subset_first: bool = True,
    balance_routes: bool = False,
    prefer_greedy: bool = False,
) -> RouteExamples:
    """``n`` prompt/completion pairs (TRL's conversational format): first-round plans, and with
    ``replan_share`` that share of replan rounds. A problem none of whose candidates in the drawn subset
    earned reward contributes nothing that time (another problem is drawn).

    With ``balance_kinds`` a kind is drawn first (uniformly among the kinds some route solved), then a
    problem of it: each kind weighs the same whatever its number of problems or how often its routes
    earned reward. Drawn by problem instead, the kinds the tools solve every time (arithmetic alone has
    320 problems) made 86% of the first-round plans, and the adapter then handed facts to python.

    The pool subset is drawn before the problem, and the problem among those of its kind that some worker
    *of that subset* solved: a deployment's pool does not depend on the question. Drawn the other way round
    (problem first, subset redrawn until a route of it had earned reward), a string question was almost
    never shown without python (the models solve few of them, so nearly every such draw was thrown away):
    under 4% of the string plans, and the adapter then sent string questions to the calculator when python
    was left out. ``subset_first=False`` draws the old way (the shipped adapter was trained so).

    With ``balance_routes`` half the examples have a model as their verified route and half a tool: each
    example first draws the route class it will have, and a draw whose rewarded route is of the other class is
    thrown away. Balanced by kind only, four of the six kinds are solved by a tool, so two thirds of the plans
    name one, and a question unlike every training question tends to the majority: on the validation file 9
    of 20 knowledge questions went to python. The class of a route is what reward chose for that draw (the
    worker's own card says whether it is a tool); nothing says which kind belongs to which class. Tried on
    2026-12-07 (README): the adapter trained so still sent 9 of 20 of those questions to python.

    With ``prefer_greedy``, among model workers that earned reward on the same question the one that decodes
    at the lowest temperature is the target: its right answer repeats on every call, a sampling worker's was
    one lucky draw (the expected reward differs though the trial's reward does not). A plan's route is one
    token: drawn at random between two such models, the examples spread a model route over two ids while a
    tool route sits on one, and a tool's id can then be the likeliest token although the models together are
    likelier (`benchmarks/route_probs.py`).

    Plans are written in the pool Conductor's ``plan_order``, the order it will be served in."""
    rng = random.Random(seed)
    order = pool.conductor.plan_order
    by_kind: dict[str, list[Problem]] = {}
    solvers: dict[str, set[str]] = {}
    for p in problems:
        solvers[str(p.id)] = {t.worker for t in trials[str(p.id)] if t.correct}
        if solvers[str(p.id)]:
            by_kind.setdefault(_family(p), []).append(p)
    kinds = sorted(by_kind)
    solved_anywhere = [p for kind in kinds for p in by_kind[kind]]
    examples: list[dict[str, Any]] = []
    routes: dict[str, int] = {}
    replans = {"correct": 0, "keep": 0}
    attempts = 0
    wanted: bool | None = None
    while len(examples) < n and attempts < 50 * n:
        attempts += 1
        if not kinds:
            break
        # The class is drawn once per example and kept until a draw of that class succeeds (a coin per attempt
        # would keep the class that is easier to draw more often); drawn only when asked, so the default's
        # draws stay in the order the shipped adapters were trained on.
        if balance_routes and wanted is None:
            wanted = rng.choice((True, False))  # True: a tool route
        if subset_first:
            workers = pool_subsets(pool, rng) if randomise_pool else list(pool.workers)
            names = {w.name for w in workers}
            within = by_kind[kinds[rng.randrange(len(kinds))]] if balance_kinds else solved_anywhere
            solvable = [p for p in within if solvers[str(p.id)] & names]
            if not solvable:
                continue  # no problem of this kind was solved by a worker of this subset
            problem = solvable[rng.randrange(len(solvable))]
        else:  # as until 2026-12-07 (the draws in the same order: the adapters trained then reproduce)
            if balance_kinds:
                within = by_kind[kinds[rng.randrange(len(kinds))]]
                problem = within[rng.randrange(len(within))]
            else:
                problem = problems[rng.randrange(len(problems))]
            workers = pool_subsets(pool, rng) if randomise_pool else list(pool.workers)
            names = {w.name for w in workers}
        mine = [t for t in trials[str(problem.id)] if t.worker in names]
        good = [t for t in mine if t.correct]
        if not good:
            continue
        cards = _cards(workers)
        good = _preferred(pool, good, prefer_greedy=prefer_greedy)
        target = rng.choice(good)
        if wanted is not None and pool.worker(target.worker).is_tool != wanted:
            continue
        family = _family(problem)
        if rng.random() < replan_share:
            prompt, completion, keep = _replan_example(problem, workers, target, mine, good, rng, max_steps, order)
            replans["keep" if keep else "correct"] += 1
        else:
            prompt = build_plan_messages(problem.question, cards, max_steps=max_steps, style="compact", order=order)
            completion = _one_step(workers, target).to_python(order)
            key = f"{family}:{'tool' if pool.worker(target.worker).is_tool else 'model'}:{target.worker}"
            routes[key] = routes.get(key, 0) + 1
        examples.append({"prompt": prompt, "completion": [{"role": "assistant", "content": completion}]})
        wanted = None
    solved = sum(1 for p in problems if any(t.correct for t in trials[str(p.id)]))
    return RouteExamples(
        examples,
        {
            "problems": len(problems),
            "solved_by_some_route": solved,
            "routes": dict(sorted(routes.items())),
            "replans": replans,
        },
    )
