"""The mixed curriculum and its route warm-up: which plans become examples is decided by reward."""

from __future__ import annotations

import gzip
import json
import random
import re
from pathlib import Path

import pytest

from conductor.config.pool import load_pool
from conductor.domain.parser import parse_workflow
from conductor.domain.plan_grammar import PlanGrammar
from conductor.domain.problem import Problem
from conductor.domain.prompts import QUESTION_REF
from conductor.domain.tools import run_tool
from conductor.sandbox import run_tool_program
from reward_pipeline.training.curriculum import FAMILIES, mixed_dev, mixed_problems
from reward_pipeline.training.routes import (
    RouteTrial,
    build_route_examples,
    load_trials,
    pool_subsets,
    try_routes,
)

DATA = Path(__file__).resolve().parents[3] / "reward_pipeline" / "evaluation" / "data"
HELDOUT = DATA / "mixed_heldout.jsonl"
VALIDATION = DATA / "mixed_validation.jsonl"
POOL = load_pool(Path(__file__).resolve().parents[3] / "conductor" / "config" / "pools" / "local.yaml")


def tool(model: str, messages: list[dict]) -> str:
    return run_tool(model, messages, execute=run_tool_program)


def test_the_curriculum_has_six_kinds_reproducible_from_its_seed() -> None:
    problems = mixed_problems(5, seed=3)
    assert sorted({p.metadata["family"] for p in problems}) == sorted(FAMILIES)
    assert [p.question for p in problems] == [p.question for p in mixed_problems(5, seed=3)]
    assert {p.id for p in problems}.isdisjoint({p.id for p in mixed_dev()})


def test_every_candidate_program_computes_its_reference_in_the_python_tool() -> None:
    for p in mixed_problems(30, seed=11):  # every template of every kind, most drawn more than once
        program = p.metadata.get("program")
        if program is None:
            assert p.metadata["family"] in ("choice", "facts")
            continue
        assert tool("tool/python", [{"role": "user", "content": program}]) == p.answer, p


def test_the_held_out_file_uses_templates_the_generator_never_writes() -> None:
    held = [json.loads(line) for line in HELDOUT.read_text().splitlines()]
    assert len(held) == 120
    assert {h["metadata"]["family"] for h in held} == set(FAMILIES)
    generated = mixed_problems(200, seed=0) + mixed_problems(200, seed=1)
    # No held-out question is generated, nor shares its first five words with a generated one (arithmetic
    # aside: its held-out file predates the curriculum and was written from templates of its own).
    assert {h["question"] for h in held}.isdisjoint({p.question for p in generated})
    starts = {" ".join(p.question.split()[:5]) for p in generated if p.metadata["family"] != "arithmetic"}
    for h in held:
        if h["metadata"]["family"] != "arithmetic":
            assert " ".join(h["question"].split()[:5]) not in starts, h["question"]


def test_the_validation_file_shares_no_template_word_or_fact_with_the_generator_or_the_held_out_file() -> None:
    val = [json.loads(line) for line in VALIDATION.read_text().splitlines()]
    held = [json.loads(line) for line in HELDOUT.read_text().splitlines()]
    assert len(val) == 120
    assert {f: sum(v["metadata"]["family"] == f for v in val) for f in FAMILIES} == dict.fromkeys(FAMILIES, 20)
    generated = [p.question for p in mixed_problems(200, seed=0) + mixed_problems(200, seed=1)]
    # Its arithmetic too has templates of its own: no question of the three sources starts alike.
    starts = {" ".join(q.split()[:5]) for q in generated + [h["question"] for h in held]}
    for v in val:
        assert " ".join(v["question"].split()[:5]) not in starts, v["question"]
    # Its words are in neither bank, so no letter, list or word question repeats a word a model was tuned on.
    seen_words = {w.lower() for q in generated + [h["question"] for h in held] for w in re.findall(r"[A-Za-z]+", q)}
    for v in val:
        if v["metadata"]["family"] in ("letters", "transform"):
            assert not set(re.findall(r"[a-z]{6,}", v["question"])) <= seen_words, v["question"]
    # Every reference is what its question asks (the string kinds recomputed here, not copied from the script).
    for v in val:
        if v["question"].startswith("Write the word"):
            assert v["answer"] == v["question"].split()[3][::-1]
        if v["question"].startswith("Which word would come last"):
            assert v["answer"] == max(v["question"].split(": ")[1].rstrip("?").split(", "))


def scripted_answers(right: set[str]):  # type: ignore[no-untyped-def]
    """A model worker that is right exactly on the questions in ``right`` (the answer copied from the
    reference), and says something useless otherwise."""
    by_question: dict[str, Problem] = {}

    def answer(worker, subtasks: list[str]) -> list[str]:  # type: ignore[no-untyped-def]
        out = []
        for s in subtasks:
            p = next((p for q, p in by_question.items() if s.startswith(q)), None)
            out.append(f"The answer is {p.answer}." if p is not None and p.id in right else "I am not sure.")
        return out

    return answer, by_question


def test_only_routes_that_earned_reward_become_plans_and_a_tool_wins_a_tie_with_a_model() -> None:
    problems = mixed_problems(3, seed=5)
    facts = [p for p in problems if p.metadata["family"] == "facts"]
    letters = [p for p in problems if p.metadata["family"] == "letters"]
    answer, index = scripted_answers({facts[0].id, letters[0].id})
    index.update({p.question: p for p in problems})
    trials = try_routes(problems, POOL, answer=answer, tool=tool)
    assert [t.correct for t in trials[str(facts[1].id)]].count(True) == 0  # nobody knew this one
    assert any(t.correct and t.worker == "smol-precise" for t in trials[str(letters[0].id)])
    assert any(t.correct and t.worker == "python" for t in trials[str(letters[0].id)])
    assert not any(t.correct for t in trials[str(letters[0].id)] if t.subtask == QUESTION_REF)

    built = build_route_examples(problems, trials, POOL, n=60, max_steps=3, seed=0, randomise_pool=False)
    names = [w.name for w in POOL.workers]
    for ex in built.examples:
        question = ex["prompt"][1]["content"].split("Question: ", 1)[1].split("\n")[0]
        p = next(p for p in problems if p.question.strip() == question)
        wf = parse_workflow(ex["completion"][0]["content"], pool_size=len(names), max_steps=3)
        worker = names[wf.steps[0].worker]
        assert any(t.correct and t.worker == worker for t in trials[str(p.id)]), (p.question, worker)
        if p.id == letters[0].id:
            assert worker == "python"  # right both ways: the route that spends no tokens
    assert any(k.startswith("facts:model:") for k in built.stats["routes"])
    assert not any(k.startswith("facts:tool") for k in built.stats["routes"])


def test_each_kind_weighs_the_same_in_the_examples_however_many_problems_it_has() -> None:
    # Arithmetic with ten times the problems of the facts and solved by a tool every time: drawn by problem it
    # would fill nine plans in ten; drawn by kind, each solved kind gets about half.
    problems = mixed_problems(20, seed=4)
    arithmetic = [p for p in problems if p.metadata["family"] == "arithmetic"]
    facts = [p for p in problems if p.metadata["family"] == "facts"][:2]
    chosen = arithmetic + facts
    answer, index = scripted_answers({p.id for p in facts})
    index.update({p.question: p for p in chosen})
    trials = try_routes(chosen, POOL, answer=answer, tool=tool)

    def kinds(balance: bool) -> dict[str, int]:
        built = build_route_examples(
            chosen, trials, POOL, n=200, max_steps=3, seed=0, randomise_pool=False, balance_kinds=balance
        )
        counts: dict[str, int] = {}
        for key, count in built.stats["routes"].items():
            counts[key.split(":")[0]] = counts.get(key.split(":")[0], 0) + count
        return counts

    balanced, by_problem = kinds(True), kinds(False)
    assert 80 <= balanced["facts"] <= 120 and balanced["arithmetic"] + balanced["facts"] == 200
    assert by_problem["facts"] < 40


def test_with_routes_balanced_half_the_plans_name_a_model_however_many_kinds_a_tool_solves() -> None:
    # Three kinds a tool solves (arithmetic, letters, lists) and one only a model solved (facts): by kind, a
    # quarter of the plans name a model; balanced by route, about half, and still no fact goes to a tool (no
    # tool earned reward on one).
    problems = mixed_problems(6, seed=4)
    chosen = [p for p in problems if p.metadata["family"] in ("arithmetic", "letters", "lists", "facts")]
    facts = {p.id for p in chosen if p.metadata["family"] == "facts"}
    answer, index = scripted_answers(facts)
    index.update({p.question: p for p in chosen})
    trials = try_routes(chosen, POOL, answer=answer, tool=tool)

    def model_share(balance_routes: bool) -> float:
        built = build_route_examples(
            chosen, trials, POOL, n=400, max_steps=3, seed=1, subset_first=False, balance_routes=balance_routes
        )
        assert len(built.examples) == 400
        routes = built.stats["routes"]
        assert not any(k.startswith("facts:tool") for k in routes)
        return sum(c for k, c in routes.items() if ":model:" in k) / sum(routes.values())

    assert 0.15 < model_share(False) < 0.35
    assert 0.4 < model_share(True) < 0.6


def test_preferring_greedy_workers_a_question_both_models_answered_goes_to_the_temperature_0_one() -> None:
    # Both models answer every fact right: drawn at random, the fact plans name each about half the time (the
    # policy then spreads a model route over two ids); preferring the greedy worker, smol-precise (temperature
    # 0) every time a subset shows it.
    problems = [p for p in mixed_problems(8, seed=4) if p.metadata["family"] == "facts"]
    answer, index = scripted_answers({p.id for p in problems})
    index.update({p.question: p for p in problems})
    trials = try_routes(problems, POOL, answer=answer, tool=tool)
    precise = " ".join(POOL.worker("smol-precise").description.split())

    def precise_share(prefer_greedy: bool) -> float:
        built = build_route_examples(problems, trials, POOL, n=300, max_steps=3, seed=2, prefer_greedy=prefer_greedy)
        shown, named = 0, 0
        for ex in built.examples:
            lines = [line for line in ex["prompt"][1]["content"].splitlines() if line.startswith("Model ")]
            if any(line.endswith(precise) for line in lines):
                shown += 1
                wf = parse_workflow(ex["completion"][0]["content"], pool_size=len(lines), max_steps=3)
                named += lines[wf.steps[0].worker].endswith(precise)
        return named / shown

    assert 0.3 < precise_share(False) < 0.7
    assert precise_share(True) == 1.0


def test_plans_for_random_pool_subsets_name_the_workers_of_the_prompt_they_were_shown() -> None:
    problems = mixed_problems(2, seed=8)
    answer, index = scripted_answers({p.id for p in problems})
    index.update({p.question: p for p in problems})
    trials = try_routes(problems, POOL, answer=answer, tool=tool)
    built = build_route_examples(problems, trials, POOL, n=80, max_steps=3, seed=1)
    shown_sizes = set()
    for ex in built.examples:
        prompt = ex["prompt"][1]["content"]
        lines = [line for line in prompt.splitlines() if line.startswith("Model ")]
        shown_sizes.add(len(lines))
        text = ex["completion"][0]["content"]
        grammar = PlanGrammar.for_round(
            len(lines), max_steps=3, max_tokens=256, prompt_style="compact", replan="Workflow run:" in prompt
        )
        assert grammar.matches(text), text
        wf = parse_workflow(text, pool_size=len(lines), max_steps=3, allow_empty=True)
        for step in wf.steps:
            assert step.worker < len(lines)
            description = lines[step.worker]
            # The numbered line the plan points at is a worker that answered this question right.
            assert any(description.endswith(" ".join(w.description.split())) for w in POOL.workers)
    assert len(shown_sizes) > 1  # subsets of several sizes were shown


def test_string_questions_are_shown_without_python_as_often_as_the_pool_leaves_it_out() -> None:
    # The models solve one letter count in twenty, python all of them. The pool a plan is shown does not
    # depend on the question: a subset without python (about a quarter of draws) still makes a plan, the one
    # question a model solved, sent to that model. Drawn problem first, such plans were 10 of these 400.
    problems = [p for p in mixed_problems(20, seed=6) if p.metadata["family"] == "letters"]
    answer, index = scripted_answers({problems[0].id})
    index.update({p.question: p for p in problems})
    trials = try_routes(problems, POOL, answer=answer, tool=tool)
    python, calculator = (" ".join(POOL.worker(name).description.split()) for name in ("python", "calculator"))

    def share_without_python(subset_first: bool) -> float:
        built = build_route_examples(problems, trials, POOL, n=400, max_steps=3, seed=3, subset_first=subset_first)
        without_python = 0
        for ex in built.examples:
            lines = [line for line in ex["prompt"][1]["content"].splitlines() if line.startswith("Model ")]
            if not any(line.endswith(python) for line in lines):
                without_python += 1
                wf = parse_workflow(ex["completion"][0]["content"], pool_size=len(lines), max_steps=3, allow_empty=True)
                assert not any(lines[step.worker].endswith(calculator) for step in wf.steps)
                assert problems[0].question in ex["prompt"][1]["content"]
        return without_python / len(built.examples)

    assert 0.15 < share_without_python(subset_first=True) < 0.4
    assert share_without_python(subset_first=False) < 0.05  # the old draw, kept to reproduce older adapters


def test_a_pool_subset_always_keeps_a_model() -> None:
    rng = random.Random(0)
    for _ in range(200):
        chosen = pool_subsets(POOL, rng)
        assert any(not w.is_tool for w in chosen)


def test_pool_subsets_come_in_the_pools_own_order_and_shuffled() -> None:
    # A deployment that drops a worker keeps the others' order; a shuffled subset makes ids carry nothing.
    # Counted on three-worker subsets, where a shuffle keeps the order only one time in six: all shuffled
    # puts about 17% in order, none shuffled 100%, half and half about 58%.
    rng = random.Random(0)
    names = [w.name for w in POOL.workers]
    in_order = []
    for _ in range(400):
        chosen = [names.index(w.name) for w in pool_subsets(POOL, rng)]
        if len(chosen) == 3:
            in_order.append(chosen == sorted(chosen))
    assert len(in_order) > 100
    assert 0.35 < sum(in_order) / len(in_order) < 0.85


def test_replan_examples_keep_a_right_answer_and_correct_a_failed_one() -> None:
    p = Problem(
        id="x",
        question="How many r's are in 'strawberry'?",
        answer="3",
        kind="math",
        metadata={"program": "'strawberry'.count('r')"},
    )
    trials = {
        "x": [
            RouteTrial("calculator", QUESTION_REF, "No arithmetic expression found", False),
            RouteTrial("python", "'strawberry'.count('r')", "3", True),
        ]
    }
    built = build_route_examples([p], trials, POOL, n=40, max_steps=3, seed=2, replan_share=1.0, randomise_pool=False)
    assert built.stats["replans"]["keep"] > 0 and built.stats["replans"]["correct"] > 0
    for ex in built.examples:
        prompt = ex["prompt"][1]["content"]
        wf = parse_workflow(ex["completion"][0]["content"], pool_size=len(POOL.workers), max_steps=3, allow_empty=True)
        if "<answer>\n3\n</answer>" in prompt:
            assert wf.is_empty
        else:
            assert "No arithmetic expression found" in prompt
            assert POOL.workers[wf.steps[0].worker].name == "python"


def test_a_pool_served_subtasks_first_gets_examples_written_and_asked_for_in_that_order() -> None:
    problems = mixed_problems(3, seed=5)
    answer, index = scripted_answers({p.id for p in problems if p.metadata["family"] == "facts"})
    index.update({p.question: p for p in problems})
    trials = try_routes(problems, POOL, answer=answer, tool=tool)
    pool = POOL.model_copy(update={"conductor": POOL.conductor.model_copy(update={"plan_order": "subtasks-first"})})
    grammar = PlanGrammar.for_round(
        4, max_steps=3, max_tokens=256, prompt_style="compact", replan=True, order="subtasks-first"
    )

    plans = build_route_examples(problems, trials, pool, n=60, max_steps=3, seed=0, replan_share=0.3)
    same_draws = build_route_examples(problems, trials, POOL, n=60, max_steps=3, seed=0, replan_share=0.3)

    assert plans.stats == same_draws.stats  # the order changes how a plan is written, not which
    for ex, other in zip(plans.examples, same_draws.examples, strict=True):
        text = ex["completion"][0]["content"]
        assert text.startswith("```python\nsubtasks = [") and grammar.matches(text)
        assert "defining subtasks, model_id and access_list" in ex["prompt"][1]["content"]
        assert parse_workflow(text, pool_size=4, max_steps=3, allow_empty=True) == parse_workflow(
            other["completion"][0]["content"], pool_size=4, max_steps=3, allow_empty=True
        )
    facts = [ex for ex in plans.examples if "<answer>" not in ex["prompt"][1]["content"]]
    assert any(ex["completion"][0]["content"].startswith("```python\nsubtasks = ['{question} ") for ex in facts)


def test_recorded_trials_are_read_back_alike_plain_or_gzipped_as_the_docs_keep_them(tmp_path: Path) -> None:
    night = (
        Path(__file__).resolve().parents[3] / "docs" / "orchestration" / "train_local_night" / "route_trials.jsonl.gz"
    )
    plain = tmp_path / "route_trials.jsonl"
    plain.write_bytes(gzip.decompress(night.read_bytes()))

    trials = load_trials(night)

    assert trials == load_trials(plain)
    assert sum(len(t) for t in trials.values()) == len(plain.read_text().splitlines()) > 1000
    assert {t.worker for ts in trials.values() for t in ts} == {w.name for w in POOL.workers}


@pytest.mark.slow
def test_route_trials_with_the_real_local_model(tmp_path: Path) -> None:
    from conductor.config.settings import Settings
    from conductor.inference.local_model import model_dir
    from reward_pipeline.training.batch_answers import BatchAnswerer

    base = model_dir(Settings().model_cache)
    problems = [p for p in mixed_problems(1, seed=4)]
    small = POOL.model_copy(
        update={"workers": [w.model_copy(update={"max_tokens": 24}) if not w.is_tool else w for w in POOL.workers]}
    )
    trials = try_routes(problems, small, answer=BatchAnswerer(base, batch_size=8), tool=tool)
    for p in problems:
        models = [t for t in trials[str(p.id)] if t.worker.startswith("smol")]
        assert len(models) == 2 and all(t.answer for t in models)
        if p.metadata.get("program"):
            assert any(t.correct for t in trials[str(p.id)] if t.worker == "python")


def test_model_trials_go_through_the_gateway_to_the_pools_workers_in_order() -> None:
    from conductor.inference.gateway import Gateway
    from reward_pipeline.training.batch_answers import GatewayAnswerer
    from tests.support.pools import scripted_pool
    from tests.support.scripted_llm import Reply, ScriptedLLMServer

    server = ScriptedLLMServer(lambda model, messages, body: Reply(f"echo {messages[-1]['content']}")).start()
    try:
        pool = scripted_pool(server.base_url)
        answer = GatewayAnswerer(Gateway(pool, model_home=Path(".")), concurrency=4)
        subtasks = [f"question {i}" for i in range(10)]
        assert answer(pool.workers[0], subtasks) == [f"echo {s}" for s in subtasks]
    finally:
        server.stop()


def test_problems_no_route_solved_are_asked_again_of_the_sampling_models_only() -> None:
    from reward_pipeline.training.routes import resample_unsolved

    problems = mixed_problems(2, seed=6)
    facts = [p for p in problems if p.metadata["family"] == "facts"]
    answer, index = scripted_answers(set())  # the first answers: every model wrong
    index.update({p.question: p for p in problems})
    trials = try_routes(problems, POOL, answer=answer, tool=tool)
    before = {k: len(v) for k, v in trials.items()}
    asked: list[tuple[str, int]] = []

    def second_draw(worker, subtasks: list[str]) -> list[str]:  # type: ignore[no-untyped-def]
        # Right on the second draw of the first fact only.
        asked.append((worker.name, len(subtasks)))
        out = []
        for i, s in enumerate(subtasks):
            p = index[next(q for q in index if s.startswith(q))]
            out.append(f"The answer is {p.answer}." if p.id == facts[0].id and i % 3 == 1 else "No idea.")
        return out

    unsolved = [p for p in problems if not any(t.correct for t in trials[str(p.id)])]
    assert facts[0] in unsolved and all(p.metadata["family"] in ("facts", "choice") for p in unsolved)
    assert resample_unsolved(problems, trials, POOL, answer=second_draw, samples=3) == 1
    # Only smol-creative samples (smol-precise is greedy: it would say the same again), three per unsolved problem.
    assert asked == [("smol-creative", 3 * len(unsolved))]
    for p in problems:
        added = trials[str(p.id)][before[str(p.id)] :]
        assert len(added) == (3 if p in unsolved else 0)
        assert all(t.worker == "smol-creative" for t in added)
    built = build_route_examples(problems, trials, POOL, n=40, max_steps=3, seed=0, randomise_pool=False)
    assert built.stats["routes"].get("facts:model:smol-creative", 0) > 0
