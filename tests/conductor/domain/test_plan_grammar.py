"""The plan grammar: every sentence it admits is a plan the parser accepts, the plans the warm-up and
the few-shots write are sentences of it, and the defects that broke plans are outside it."""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conductor.domain.parser import parse_workflow
from conductor.domain.plan_grammar import PlanGrammar
from conductor.domain.prompts import QUESTION_REF, few_shot_examples
from conductor.domain.workflow import Workflow

COMPACT = PlanGrammar.for_round(3, max_steps=4, max_tokens=256, prompt_style="compact", replan=False)
REPLAN = PlanGrammar.for_round(3, max_steps=4, max_tokens=256, prompt_style="full", replan=True)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.from_regex(COMPACT.regex(), fullmatch=True))
def test_every_sentence_of_the_grammar_parses(text):
    workflow = parse_workflow(text, pool_size=3, max_steps=4)

    assert 1 <= len(workflow.steps) <= 4


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.from_regex(REPLAN.regex(), fullmatch=True))
def test_a_replan_sentence_parses_and_may_keep_the_answer(text):
    workflow = parse_workflow(text, pool_size=3, max_steps=4, allow_empty=True)

    assert len(workflow.steps) <= 4


def test_the_plans_the_prompts_and_warm_up_write_are_sentences():
    plans = [wf for _, wf in few_shot_examples(3, max_steps=4)]
    plans.append(
        Workflow.from_lists([0, 2], [f"Write the expression. Question: {QUESTION_REF}", "Compute it."], [[], "all"])
    )
    plans.append(Workflow.from_lists([1], ['It\'s "quoted" and has a back\\slash\nand a newline'], [[]]))

    for wf in plans:
        assert COMPACT.matches(wf.to_python()), wf.to_python()


@pytest.mark.parametrize(
    ("defect", "text"),
    [
        ("unequal lengths", "model_id = [0, 1]\nsubtasks = ['a']\naccess_list = [[], 'all']"),
        ("unknown worker", "model_id = [3]\nsubtasks = ['a']\naccess_list = [[]]"),
        ("forward reference", "model_id = [0, 1]\nsubtasks = ['a', 'b']\naccess_list = [[1], []]"),
        ("self reference", "model_id = [0, 1]\nsubtasks = ['a', 'b']\naccess_list = [[], [1]]"),
        ("blank subtask", "model_id = [0]\nsubtasks = ['  ']\naccess_list = [[]]"),
        ("escape Python cannot read", "model_id = [0]\nsubtasks = ['\\N']\naccess_list = [[]]"),
        (
            "too many steps",
            "model_id = [0, 0, 0, 0, 0]\nsubtasks = ['a', 'b', 'c', 'd', 'e']\naccess_list = [[], [], [], [], []]",
        ),
        ("empty plan where one is needed", "model_id = []\nsubtasks = []\naccess_list = []"),
        ("unclosed string", "model_id = [0]\nsubtasks = ['a]\naccess_list = [[]]"),
    ],
)
def test_the_defects_that_broke_plans_are_outside_the_grammar(defect, text):
    assert not COMPACT.matches(f"```python\n{text}\n```"), defect


def test_subtasks_are_bounded_in_words_that_share_a_budget_so_the_plan_closes_before_the_token_cap():
    grammar = PlanGrammar.for_round(3, max_steps=5, max_tokens=100, prompt_style="compact", replan=False)
    limits = [grammar.subtask_words(n) for n in range(1, 6)]
    longest = "word " * (limits[1] - 1) + "word"

    assert limits == sorted(limits, reverse=True)
    assert all(n * limits[n - 1] <= grammar.max_plan_words for n in range(1, 6))
    assert grammar.matches(f"```python\nmodel_id = [0, 1]\nsubtasks = ['{longest}', 'b']\naccess_list = [[], []]\n```")
    assert not grammar.matches(
        f"```python\nmodel_id = [0, 1]\nsubtasks = ['{longest} more', 'b']\naccess_list = [[], []]\n```"
    )


def test_only_short_runs_of_characters_are_counted_so_a_mask_stays_cheap():
    # xgrammar 0.2.8 took ~2 s per mask inside (c|\\x){0,200} (vLLM decoded at 1.5 tok/s); a count of characters
    # may not exceed a word's length, and longer counts repeat whole space-led words.
    regex = COMPACT.regex()
    counts = [(m.start(), int(m.group(1))) for m in re.finditer(r"\{\d+,(\d+)\}", regex)]
    word_counts = [at for at, n in counts if n > COMPACT.max_word_chars]

    assert all(n <= COMPACT.max_word_chars for at, n in counts if at not in word_counts)
    assert word_counts and all(regex[:at].endswith(f"{{1,{COMPACT.max_word_chars}}})") for at in word_counts)


def test_a_word_cannot_run_on_so_an_early_close_cannot_fill_the_token_cap():
    run_on = "]" * (COMPACT.max_word_chars + 1)
    word = "]" * COMPACT.max_word_chars

    assert not COMPACT.matches(f"```python\nmodel_id = [0]\nsubtasks = ['{run_on}']\naccess_list = [[]]\n```")
    assert COMPACT.matches(f"```python\nmodel_id = [0]\nsubtasks = ['{word} {word}']\naccess_list = [[]]\n```")
    assert not REPLAN.matches(
        "x" * (REPLAN.max_word_chars + 1) + "\n```python\nmodel_id = []\nsubtasks = []\naccess_list = []\n```"
    )


def test_a_full_prompt_may_think_before_the_block_and_the_compact_one_may_not():
    block = "```python\nmodel_id = [0]\nsubtasks = ['Answer {question}']\naccess_list = [[]]\n```"
    full = PlanGrammar.for_round(3, max_steps=4, max_tokens=256, prompt_style="full", replan=False)

    assert full.matches("One step is enough.\n" + block)
    assert not COMPACT.matches("One step is enough.\n" + block)
    assert not full.matches("Use ``` fences.\n" + block)


def test_the_record_names_the_language_and_hashes_it():
    described = COMPACT.describe()

    assert described["kind"] == "regex" and described["pool_size"] == 3 and described["max_steps"] == 4
    assert re.fullmatch(r"[0-9a-f]{64}", described["sha256"])
    assert described["sha256"] != REPLAN.describe()["sha256"]


SUBTASKS_FIRST = PlanGrammar.for_round(
    3, max_steps=4, max_tokens=256, prompt_style="compact", replan=False, order="subtasks-first"
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.from_regex(SUBTASKS_FIRST.regex(), fullmatch=True))
def test_a_plan_written_subtasks_first_is_a_plan_the_parser_accepts(text):
    workflow = parse_workflow(text, pool_size=3, max_steps=4)

    assert text.startswith("```python\nsubtasks = [")
    assert 1 <= len(workflow.steps) <= 4


def test_each_order_admits_its_own_block_and_not_the_other():
    wf = Workflow.from_lists([2, 0], ["sum([1, 2])", f"Check {QUESTION_REF}"], [[], "all"])
    first_subtasks = wf.to_python("subtasks-first")

    assert first_subtasks.splitlines()[1:4] == [
        "subtasks = ['sum([1, 2])', 'Check {question}']",
        "model_id = [2, 0]",
        "access_list = [[], 'all']",
    ]
    assert SUBTASKS_FIRST.matches(first_subtasks) and not COMPACT.matches(first_subtasks)
    assert COMPACT.matches(wf.to_python()) and not SUBTASKS_FIRST.matches(wf.to_python())
    assert parse_workflow(first_subtasks, pool_size=3, max_steps=4) == wf


def test_a_replan_written_subtasks_first_keeps_its_answer_with_three_empty_lists_in_that_order():
    grammar = PlanGrammar.for_round(
        3, max_steps=4, max_tokens=256, prompt_style="compact", replan=True, order="subtasks-first"
    )
    keep = Workflow.from_lists([], [], []).to_python("subtasks-first")

    assert keep == "```python\nsubtasks = []\nmodel_id = []\naccess_list = []\n```"
    assert grammar.matches(keep)
    assert not grammar.matches(Workflow.from_lists([], [], []).to_python())


def test_the_default_order_is_the_papers_and_the_record_says_which():
    assert COMPACT.order == "workers-first" and COMPACT.describe()["order"] == "workers-first"
    assert SUBTASKS_FIRST.describe()["order"] == "subtasks-first"
    assert SUBTASKS_FIRST.describe()["sha256"] != COMPACT.describe()["sha256"]
    with pytest.raises(ValueError, match="plan order"):
        PlanGrammar(pool_size=3, order="ids-last")  # type: ignore[arg-type]
