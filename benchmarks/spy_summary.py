"""Summarise a py-spy raw (collapsed) profile: where the GIL-holding samples went, by library and by
our own frame that called into it.

    python benchmarks/spy_summary.py results/py-spy.txt [--top 15]

Each sample is charged to the innermost frame of a known library (its self time in that
library, wherever it was called from), and separately to the innermost frame of this project
(the line of ours that spent it, the library work below it included).
"""

from __future__ import annotations

import argparse
from collections import Counter

#: (group, path fragments), first match wins, tested leaf-first on each frame
GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("SQLAlchemy", ("sqlalchemy/",)),
    ("psycopg", ("psycopg/", "psycopg_pool/")),
    ("sqlite3", ("sqlite3/",)),
    ("openai SDK", ("openai/",)),
    ("litellm", ("litellm/",)),
    ("httpx/httpcore", ("httpx/", "httpcore/", "h11/", "anyio/")),
    ("pydantic", ("pydantic/", "pydantic_core/")),
    ("Celery/kombu", ("celery/", "kombu/", "billiard/", "vine/", "amqp/")),
    ("redis-py", ("redis/",)),
    ("json", ("json/",)),
    ("logging", ("logging/",)),
    ("threading/queue", ("threading.py", "queue.py", "concurrent/")),
    ("conductor", ("conductor/", "tasks/", "schedulers/")),
)


def group_of(frame: str) -> str | None:
    for name, parts in GROUPS:
        if any(p in frame for p in parts):
            return name
    return None


def summarise(path: str, top: int) -> str:
    by_group: Counter[str] = Counter()
    ours: Counter[str] = Counter()
    leaves: Counter[str] = Counter()
    total = 0
    for line in open(path, encoding="utf-8"):
        stack, _, count = line.rstrip("\n").rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        total += n
        frames = stack.split(";")
        group = next((g for f in reversed(frames) if (g := group_of(f)) not in (None, "conductor")), None)
        mine = next((f for f in reversed(frames) if group_of(f) == "conductor"), None)
        by_group[group or ("conductor" if mine else "other")] += n
        if mine:
            ours[mine] += n
        leaves[frames[-1]] += n
    out = [f"{total} samples holding the GIL\n", "| library (self) | share |", "|---|---:|"]
    out += [f"| {g} | {n / total:.0%} |" for g, n in by_group.most_common()]
    out += ["", "| our innermost frame (inclusive) | share |", "|---|---:|"]
    out += [f"| `{f}` | {n / total:.1%} |" for f, n in ours.most_common(top)]
    out += ["", "| leaf frame (self) | share |", "|---|---:|"]
    out += [f"| `{f}` | {n / total:.1%} |" for f, n in leaves.most_common(top)]
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("path")
    ap.add_argument("--top", type=int, default=15)
    args = ap.parse_args()
    print(summarise(args.path, args.top))


if __name__ == "__main__":
    main()
