"""What the scripts that write the unseen mixed files share: a category question's options, and one file
of rows interleaved by kind."""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from pathlib import Path

DATA = Path(__file__).resolve().parents[1] / "reward_pipeline" / "evaluation" / "data"
N = 20  # questions of each kind
Row = dict
Maker = Callable[[random.Random, int], Row]


def category_options(rng: random.Random, categories: dict[str, tuple[str, ...]], i: int) -> tuple[str, list[str], str]:
    """The i-th category (in turn), four options (one of it, three of other categories) and the right letter."""
    cats = list(categories)
    category = cats[i % len(cats)]
    right = rng.choice(categories[category])
    wrong = [rng.choice(categories[c]) for c in rng.sample([c for c in cats if c != category], 3)]
    options = [right, *wrong]
    rng.shuffle(options)
    return category, options, "ABCD"[options.index(right)]


def fact_row(fact: tuple[str, str, list[str]]) -> Row:
    question, answer, aliases = fact
    return {"question": question, "answer": answer, "kind": "text", "metadata": {"aliases": aliases}}


def write_interleaved(path: Path, id_prefix: str, rows_by_family: dict[str, list[Row]], n: int) -> None:
    """Rows interleaved by kind, so the first N of the file (make demo) hold every kind."""
    ordered = [rows_by_family[f][i] for i in range(n) for f in rows_by_family]
    with path.open("w", encoding="utf-8") as out:
        for k, row in enumerate(ordered):
            out.write(json.dumps({"id": f"{id_prefix}-{k:03d}", **row}) + "\n")


def make_rows(rng: random.Random, makers: dict[str, Maker], n: int) -> dict[str, list[Row]]:
    """``n`` rows of each family, each tagged with its family, drawn from one rng in family order."""
    out: dict[str, list[Row]] = {}
    for family, make in makers.items():
        for i in range(n):
            row = make(rng, i)
            row["metadata"] = {**row.get("metadata", {}), "family": family}
            out.setdefault(family, []).append(row)
    return out
