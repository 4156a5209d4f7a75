"""Expressions for the warm-up's verified calculator plans, composed from GSM8K's annotated solutions."""

from __future__ import annotations

import json

from reward_pipeline.training.expressions import (
    compose_expression,
    expression_problems,
    grounded,
    operator_count,
    verified,
)

NATALIA = (
    "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\n"
    "Natalia sold 48+24 = <<48+24=72>>72 clips altogether in April and May.\n#### 72"
)


def test_a_later_step_that_uses_an_earlier_result_gets_that_step_written_in():
    assert compose_expression(NATALIA) == "48 + 48 / 2"


def test_an_expression_is_written_one_way_with_only_the_brackets_precedence_needs():
    assert compose_expression("<<3+4=7>> then <<7*2=14>>\n#### 14") == "(3 + 4) * 2"
    assert compose_expression("<<12x3=36>>\n#### 36") == "12 * 3"


def test_a_solution_without_annotations_has_no_expression():
    assert compose_expression("She has 3 + 4 = 7 apples.\n#### 7") is None


def test_the_calculator_decides_whether_an_expression_is_kept():
    assert verified("48+(48/2)", "72")
    assert not verified("48+(48/2)", "73")
    assert not verified("forty-eight", "48")


def test_an_expression_must_use_numbers_the_question_writes_or_words_stand_for():
    question = "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May."

    assert grounded("48+(48/2)", question)  # "half" is the 2
    assert not grounded("48+36", question)  # 36 is nowhere to copy from: a result the solution computed


def test_operators_are_counted_between_numbers_not_signs():
    assert operator_count("48+(48/2)") == 2
    assert operator_count("-3 * 4") == 1


def test_only_short_grounded_verified_problems_are_taken_with_their_expression(tmp_path):
    rows = [
        {
            "question": "Natalia sold clips to 48 of her friends in April, and half as many in May. Total?",
            "answer": NATALIA,
        },
        # three operations: longer than asked for
        {"question": "Ann has 2 bags of 3 and 4 bags of 5 and 1 more. Total?", "answer": "<<2*3+4*5+1=27>>27\n#### 27"},
        # an annotation that does not give the reference
        {"question": "Bo has 5 and 6 more. Total?", "answer": "<<5*6=30>>30\n#### 11"},
        {"question": "Cy has 7 and 8 more. Total?", "answer": "<<7+8=15>>15\n#### 15"},
    ]
    path = tmp_path / "gsm8k_train.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")

    problems = expression_problems(path, 10, operators=(1, 2))

    assert [p.metadata["expression"] for p in problems] == ["48 + 48 / 2", "7 + 8"]
    assert [p.answer for p in problems] == ["72", "15"]
    assert expression_problems(path, 1) == problems[:1]
    assert expression_problems(path, 10, operators=(1,)) == problems[1:]


def test_the_training_pool_can_add_short_gsm8k_problems_each_with_its_expression():
    from reward_pipeline.training.problems import training_problems
    from tests.conftest import DATA

    problems = training_problems(DATA, gsm8k=5, arith=5, seed=0, expressions=20)

    assert len(problems) == 30 and len({p.id for p in problems}) == 30
    added = [p for p in problems if p.metadata.get("source") == "gsm8k" and "expression" in p.metadata]
    assert len(added) == 20  # the first 5 GSM8K problems carry none
    assert all(verified(p.metadata["expression"], p.answer or "") for p in added)
    # half of one operation, though GSM8K's short problems are mostly of two
    assert sorted(operator_count(p.metadata["expression"]) for p in added) == [1] * 10 + [2] * 10


def test_code_questions_for_training_come_from_outside_the_mbpp_test_split():
    from reward_pipeline.training.problems import code_problems
    from tests.conftest import DATA

    problems = code_problems(DATA, 500)

    assert problems and all(p.kind == "code" and not 11 <= int(p.id or 0) <= 510 for p in problems)
