#!/usr/bin/env python3
"""Write the held-out arithmetic word problems (reward_pipeline/evaluation/data/arith_words_heldout.jsonl).

Twelve templates that share no wording with the retraining generator (`reward_pipeline/training/problems.py`
writes "What is a + b?", apples, stickers, egg boxes and marble bags, one operation each); half of these
take two operations. Nothing in training reads this file: it measures whether what the Conductor
learned carries over to word problems it never saw. Reproducible: `python scripts/make_heldout_arithmetic.py`.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "reward_pipeline" / "evaluation" / "data" / "arith_words_heldout.jsonl"
SEED = 20_261_203


def problem(rng: random.Random, form: int) -> tuple[str, int]:
    a, b, c, d, e = rng.randint(12, 90), rng.randint(3, 30), rng.randint(2, 9), rng.randint(2, 11), rng.randint(2, 5)
    if form == 0:
        return (
            f"A baker makes {a} loaves in the morning and {b} in the afternoon. How many loaves does she make in total?",
            a + b,
        )
    if form == 1:
        return (
            f"A train carries {a} passengers. At the first stop {b} people get off. How many passengers are left on the train?",
            a - b,
        )
    if form == 2:
        return f"Each ticket costs {c} dollars. How much do {b} tickets cost?", c * b
    if form == 3:
        return f"{c * b} pencils are shared equally among {c} students. How many pencils does each student get?", b
    if form == 4:
        return (
            f"Mia reads {b} pages on Monday and twice as many on Tuesday. How many pages does she read on the two days together?",
            3 * b,
        )
    if form == 5:
        return (
            f"A farmer has {c} fields with {b} trees in each. He cuts down {d} trees. How many trees are left?",
            c * b - d,
        )
    if form == 6:
        return (
            f"Jake saves {c} dollars every week for {b} weeks, then spends {d} dollars on a game. How many dollars does he have left?",
            c * b - d,
        )
    if form == 7:
        return (
            f"A library had {a} books. It bought {b} new books and gave away {d} old ones. How many books does it have now?",
            a + b - d,
        )
    if form == 8:
        return f"A shop sells {c} boxes of {b} cookies and {d} loose cookies. How many cookies does it sell?", c * b + d
    if form == 9:
        return (
            f"The temperature was {a} degrees at noon and dropped by {d} degrees by night. What was the temperature at night?",
            a - d,
        )
    if form == 10:
        return (
            f"A school orders {c} packs of {b} markers for each of its {e} classrooms. How many markers does it order?",
            c * b * e,
        )
    return f"Ben had {a} marbles. He lost {d} and then found {b}. How many marbles does he have now?", a - d + b


def main() -> None:
    rng = random.Random(SEED)
    forms = [i % 12 for i in range(60)]
    rng.shuffle(forms)  # the first N of the file mix the templates
    OUT.parent.mkdir(parents=True, exist_ok=True)
    with OUT.open("w") as f:
        for i, form in enumerate(forms):
            question, answer = problem(rng, form)
            f.write(
                json.dumps(
                    {"id": f"heldout-arith-{i:02d}", "question": question, "answer": str(answer), "kind": "math"}
                )
                + "\n"
            )
    print(f"wrote {len(forms)} problems to {OUT}")


if __name__ == "__main__":
    main()
