"""The problem sets of the retraining loop: training problems, a fixed dev set training never sees,
and prompts from benchmarks the loop never trains on (to check the plans generalise).

Easy arithmetic is generated here (with its answer) because a 135M pool gets it right only some of
the time, and unevenly across workers: that variance is the correctness signal GRPO needs beyond
format, which alone saturates at reward 0.5.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

from conductor.domain.inputs import MBPP_TEST_IDS, read_problems
from conductor.domain.problem import Problem
from reward_pipeline.training.expressions import expression_problems, operator_count

#: Dev problems are taken from the *test* splits with these sizes; training uses train splits and
#: generated arithmetic with another seed, so the two never overlap.
DEV_GSM8K = 8
DEV_ARITHMETIC = 16
DEV_SEED = 99_991


def arithmetic(n: int, *, seed: int, prefix: str = "arith") -> list[Problem]:
    """`n` one-operation integer problems with their answers, reproducible from `seed`.

    Two forms in six state the expression ("What is 7 * 34?"); the rest are word problems, where
    a calculator alone finds nothing to compute and a 135M model alone computes badly, but the
    model writing the expression and the calculator evaluating it often succeed: the plans worth
    learning on the local pool. Each carries its expression in ``metadata`` (for the warm-up's
    verified calculator plans).
    """
    rng = random.Random(seed)
    out = []
    for i in range(n):
        a, b, c = rng.randint(2, 60), rng.randint(2, 40), rng.randint(2, 9)
        form = rng.randrange(6)
        if form == 0:
            q, ans, e = f"What is {a} + {b}?", a + b, f"{a} + {b}"
        elif form == 1:
            q, ans, e = f"What is {c} * {b}?", c * b, f"{c} * {b}"
        elif form == 2:
            q, ans, e = f"Tom has {a} apples and buys {b} more. How many apples does he have now?", a + b, f"{a} + {b}"
        elif form == 3:
            q, ans, e = (
                f"Sara had {a + b} stickers and gave {b} to a friend. How many stickers does she have left?",
                a,
                f"{a + b} - {b}",
            )
        elif form == 4:
            q, ans, e = f"A box holds {c} rows of {b} eggs. How many eggs are in the box?", c * b, f"{c} * {b}"
        else:
            q, ans, e = (
                f"There are {c} bags with {b} marbles in each bag. How many marbles are there in all?",
                c * b,
                f"{c} * {b}",
            )
        out.append(
            Problem(id=f"{prefix}-{seed}-{i}", question=q, answer=str(ans), kind="math", metadata={"expression": e})
        )
    return out


def _take(path: Path, n: int, *, skip: int = 0) -> list[Problem]:
    out: list[Problem] = []
    for _, item in read_problems(path):
        if isinstance(item, Problem):
            if skip:
                skip -= 1
                continue
            out.append(item)
            if len(out) >= n:
                break
    return out


def code_problems(data_dir: Path, n: int) -> list[Problem]:
    """The first ``n`` MBPP problems outside its test split (its prompt, train and validation splits): code
    questions for training, where no expression computes the answer."""
    out = [
        p
        for _, p in read_problems(data_dir / "mbpp_sanitized.json")
        if isinstance(p, Problem) and int(p.id or 0) not in MBPP_TEST_IDS
    ]
    return out[:n]


def training_problems(
    data_dir: Path, *, gsm8k: int, arith: int, seed: int, expressions: int = 0, code: int = 0
) -> list[Problem]:
    """GSM8K *train* problems plus generated arithmetic, shuffled with `seed`; with ``expressions``, also
    that many GSM8K *train* problems of one or two operations with their verified expression, half of
    them of one operation where the file has enough; with ``code``, that many MBPP code questions from
    outside its test split."""
    problems = _take(data_dir / "gsm8k_train.jsonl", gsm8k) + arithmetic(arith, seed=seed)
    if expressions:
        # As many one-operation problems as two-operation ones, as far as the file has them: GSM8K's short
        # problems are four-fifths two-operation, and a warm-up on them wrote brackets and a second
        # operation into one-operation questions.
        taken = {p.id for p in problems}
        short = [p for p in expression_problems(data_dir / "gsm8k_train.jsonl") if p.id not in taken]
        ones = [p for p in short if operator_count(p.metadata["expression"]) == 1][: expressions // 2]
        twos = [p for p in short if operator_count(p.metadata["expression"]) == 2]
        problems += ones + twos[: expressions - len(ones)]
    if code:
        problems += code_problems(data_dir, code)
    random.Random(seed).shuffle(problems)
    return problems


def dev_problems(data_dir: Path) -> list[Problem]:
    """The fixed dev set of the evaluation gate: GSM8K *test* items and arithmetic of its own seed."""
    return _take(data_dir / "gsm8k_test.jsonl", DEV_GSM8K) + arithmetic(DEV_ARITHMETIC, seed=DEV_SEED, prefix="dev")


def unseen_benchmark_prompts(data_dir: Path, n: int = 8) -> Iterator[tuple[str, Problem]]:
    """Questions from benchmarks the loop never trains on (parse rate only)."""
    for name, file in (
        ("mmlu", "mmlu_test.jsonl.gz"),
        ("humaneval", "HumanEval.jsonl.gz"),
        ("math500", "math500_test.jsonl"),
        ("aime24", "aime24.jsonl"),
    ):
        for p in _take(data_dir / file, n):
            yield name, p
