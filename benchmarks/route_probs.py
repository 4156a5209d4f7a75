"""Where the Conductor's first step goes, as probabilities: per kind, the mean probability of each worker id.

    python benchmarks/route_probs.py [--questions reward_pipeline/evaluation/data/mixed_validation.jsonl]
        [--n 20] [--pool conductor/config/pools/local.yaml] [--adapter DIR] [--out results/route_probs]

For each question, the next-token distribution after ``model_id = [`` in the plan the warm-up teaches
(compact prompt, the whole pool as deployed), restricted to the pool's ids: the probability that the first
step goes to each worker. Per kind it prints the mean of each, the mass on tools, the questions whose tool
mass is over a half, and **the expected number of plans that name a tool at the Conductor's sampling
temperature** (each question's distribution sharpened to ``p ** (1 / T)``) beside the same number were the
model workers one id (their probabilities summed): a plan's route is one token, and two model workers that
the warm-up's examples name alike split a model route between two ids while a tool route sits on one.

A Conductor served subtasks first (its card's ``plan_order``) decides its route on the subtask it writes
before any id: the question itself (``'{question}``, which every model route of the warm-up writes) or code.
For it the script reads the probability that the plan's first subtask opens with the question, token by token
after ``subtasks =``, at temperature 1 and at the Conductor's (each token's distribution sharpened), and the
id it then gives that subtask (the next token after the whole model subtask and ``model_id = [``). A plan
whose first subtask is not the question is counted as a tool's (a model handed a paraphrase would be too).

Why: a sampled `conductor eval` of 20 questions of a kind moves by several plans from run to run; this is one
forward pass a question, deterministic, in seconds, so candidates can be screened on the route they give each
kind without spending an eval (on the validation file's facts the shipped adapter's expectation was 9.9
plans to a tool, and its eval sent 9).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path

from conductor.config.pool import Pool, load_pool
from conductor.config.settings import Settings
from conductor.domain.inputs import read_problems
from conductor.domain.problem import Problem
from conductor.domain.prompts import WorkerCard
from conductor.inference.local_backend import LocalModel
from conductor.inference.local_model import local_model_path
from reward_pipeline.training.routes import MODEL_SUBTASK

VALIDATION = Path(__file__).resolve().parents[1] / "reward_pipeline" / "evaluation" / "data" / "mixed_validation.jsonl"
#: What the plan holds before the first worker id (``Workflow.to_python``).
PLAN_PREFIX = "```python\nmodel_id = ["
#: Subtasks first: every plan opens so; what follows is the route (the question itself, or code).
SUBTASKS_PREFIX = "```python\nsubtasks ="
QUESTION_OPENING = " ['{question}"


def sharpened(probs: list[float], temperature: float) -> list[float]:
    """The distribution a sampler at ``temperature`` draws from (greedy: all mass on the likeliest)."""
    if temperature <= 0:
        top = max(range(len(probs)), key=probs.__getitem__)
        return [1.0 if i == top else 0.0 for i in range(len(probs))]
    weights = [p ** (1.0 / temperature) for p in probs]
    total = sum(weights)
    return [w / total for w in weights]


def id_tokens(model: LocalModel, cards: list[WorkerCard]) -> list[int]:
    """The token of each worker id. The ids must be one token each (SmolLM2 writes a digit a token), or the
    first token would not tell "1" from "10"."""
    tokens = [model.tokenizer.encode(str(i), add_special_tokens=False) for i in range(len(cards))]
    if any(len(t) != 1 for t in tokens):
        raise SystemExit(f"route_probs reads one token a worker id; this pool's {len(cards)} ids are not")
    return [t[0] for t in tokens]


def route_probs(model: LocalModel, pool: Pool, ids: list[int], question: str, *, max_steps: int) -> list[float]:
    """P(first step's worker = i) for each id of ``pool``, renormalised over the ids (as the plan grammar
    masks every other token there)."""
    import torch

    messages = pool.conductor.plan_messages(question, pool.cards(), max_steps=max_steps)
    text = model.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True) + PLAN_PREFIX
    inputs = model.tokenizer(text, return_tensors="pt")
    with torch.no_grad():
        logits = model.model(**inputs).logits[0, -1]
    chosen = torch.softmax(logits.float(), dim=-1)[ids]
    return (chosen / chosen.sum()).tolist()


def question_first(
    model: LocalModel, pool: Pool, ids: list[int], question: str, *, max_steps: int, temperature: float
) -> dict[str, object]:
    """For a Conductor served subtasks first: the probability that its first subtask opens with the question
    (at temperature 1 and at ``temperature``), and the ids it gives that subtask (renormalised over the ids)."""
    import torch

    messages = pool.conductor.plan_messages(question, pool.cards(), max_steps=max_steps)
    prompt = model.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)

    def encode(text: str) -> list[int]:
        return list(model.tokenizer.encode(text, add_special_tokens=False))

    head, prefix = encode(prompt), encode(SUBTASKS_PREFIX)
    # The whole one-step model plan up to its id: its opening tokens are the route, its last position the id.
    step = encode(f"{SUBTASKS_PREFIX} [{MODEL_SUBTASK!r}]\nmodel_id = [")
    route = encode(SUBTASKS_PREFIX + QUESTION_OPENING)[len(prefix) :]
    if step[: len(prefix) + len(route)] != prefix + route:
        raise SystemExit("the tokenizer merges the plan's opening with the subtask: the route is not read apart")
    with torch.no_grad():
        logits = model.model(input_ids=torch.tensor([head + step])).logits[0].float()
    # The logits at position k predict token k + 1: those of the route tokens start one before them.
    first = len(head) + len(prefix) - 1
    steps, token = logits[first : first + len(route)], torch.tensor(route)[:, None]
    p1 = torch.softmax(steps, dim=-1).gather(1, token).prod().item()
    pt = torch.softmax(steps / max(temperature, 1e-6), dim=-1).gather(1, token).prod().item()
    last = logits[-1]
    chosen = torch.softmax(last.float(), dim=-1)[ids]
    return {"question_first": p1, "question_first_at_t": pt, "ids_given_question": (chosen / chosen.sum()).tolist()}


def summarise_question_first(cards: list[WorkerCard], rows: list[dict], temperature: float) -> dict[str, float]:
    """A plan's first step goes to a tool when its subtask is not the question, or when it is and the id
    then written is a tool's (a tool handed a question in words finds nothing to run)."""
    n = len(rows)
    tools = [i for i, c in enumerate(cards) if c.is_tool]
    out = {c.name: sum(r["ids_given_question"][i] for r in rows) / n for i, c in enumerate(cards)}
    out["question_first"] = sum(r["question_first"] for r in rows) / n
    out["over_half_to_tools"] = sum(1 for r in rows if r["question_first"] < 0.5)
    expected = 0.0
    for r in rows:
        to_tool = sum(sharpened(r["ids_given_question"], temperature)[i] for i in tools)
        expected += 1 - r["question_first_at_t"] * (1 - to_tool)
    out["expected_to_tools"] = expected
    return out


def summarise(cards: list[WorkerCard], rows: list[dict], temperature: float) -> dict[str, float]:
    tools = [i for i, c in enumerate(cards) if c.is_tool]
    models = [i for i, c in enumerate(cards) if not c.is_tool]
    expected, merged = 0.0, 0.0
    for r in rows:
        p = r["probs"]
        expected += sum(sharpened(p, temperature)[i] for i in tools)
        one_model = [sum(p[i] for i in models)] + [p[i] for i in tools]
        merged += sum(sharpened(one_model, temperature)[1:])
    out = {c.name: sum(r["probs"][i] for r in rows) / len(rows) for i, c in enumerate(cards)}
    out["tools"] = sum(out[cards[i].name] for i in tools)
    out["over_half_to_tools"] = sum(1 for r in rows if sum(r["probs"][i] for i in tools) > 0.5)
    out["expected_to_tools"] = expected
    out["expected_to_tools_one_model_id"] = merged
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--questions", type=Path, default=VALIDATION, help="a mixed file with metadata.family")
    ap.add_argument("--n", type=int, default=20, help="questions of each kind (the first N of the file)")
    ap.add_argument("--pool", type=Path, default=None, help="pool YAML (default: the bundled local pool)")
    ap.add_argument("--adapter", type=Path, default=None, help="a candidate's adapter instead of the pool's")
    ap.add_argument("--out", type=Path, default=None, help="write route_probs.json (every question's row) here")
    args = ap.parse_args()
    settings = Settings()
    pool = load_pool(args.pool)
    adapter = args.adapter or pool.conductor.adapter_path()
    if not pool.conductor.model.startswith("local/"):
        raise SystemExit(f"route_probs reads a local Conductor's logits; this pool's is {pool.conductor.model}")
    model = LocalModel(str(local_model_path(settings.model_cache, pool.conductor.model)), str(adapter))
    cards = pool.cards()
    ids = id_tokens(model, cards)
    max_steps = pool.step_cap(settings.max_steps)
    temperature = pool.conductor.temperature
    subtasks_first = pool.conductor.plan_order == "subtasks-first"
    by_family: dict[str, list[dict]] = {}
    for _, p in read_problems(args.questions):
        if isinstance(p, Problem):
            rows = by_family.setdefault(str(p.metadata.get("family")), [])
            if len(rows) < args.n:
                row: dict = {"id": p.id, "question": p.question}
                if subtasks_first:
                    row |= question_first(model, pool, ids, p.question, max_steps=max_steps, temperature=temperature)
                else:
                    row["probs"] = route_probs(model, pool, ids, p.question, max_steps=max_steps)
                rows.append(row)
    print(f"adapter: {adapter}; sampling temperature {temperature}; plans {pool.conductor.plan_order}")
    if subtasks_first:
        summary = _table(
            cards,
            by_family,
            lambda rows: summarise_question_first(cards, rows, temperature),
            before=[("question as first subtask", "question_first", ".2f")],
            given=" (given it)",
            after=[("below 1/2", "over_half_to_tools", ".0f"), ("to a tool at T", "expected_to_tools", ".1f")],
        )
    else:
        summary = _table(
            cards,
            by_family,
            lambda rows: summarise(cards, rows, temperature),
            before=[],
            given="",
            after=[
                ("tools", "tools", ".2f"),
                ("tool mass > 1/2", "over_half_to_tools", ".0f"),
                ("to a tool at T", "expected_to_tools", ".1f"),
                ("one model id", "expected_to_tools_one_model_id", ".1f"),
            ],
        )
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        record = {
            "adapter": str(adapter),
            "temperature": temperature,
            "plan_order": pool.conductor.plan_order,
            "summary": summary,
            "rows": by_family,
        }
        (args.out / "route_probs.json").write_text(json.dumps(record, indent=1) + "\n")


Column = tuple[str, str, str]  # (header, summary key, format)


def _table(
    cards: list[WorkerCard],
    by_family: dict[str, list[dict]],
    summarise_kind: Callable[[list[dict]], dict[str, float]],
    *,
    before: list[Column],
    given: str,
    after: list[Column],
) -> dict[str, dict]:
    """Prints one row a kind (its columns, then each worker's mean, then the rest) and returns the summaries."""
    names = [c.name for c in cards]
    headers = [h for h, _, _ in before] + [" | ".join(names) + given] + [h for h, _, _ in after]
    print(f"| kind | n | {' | '.join(headers)} |")
    print("|---|---|" + "---|" * (len(before) + len(names) + len(after)))
    summary = {}
    for fam, rows in by_family.items():
        s = summary[fam] = summarise_kind(rows)
        cells = (
            [f"{s[k]:{f}}" for _, k, f in before]
            + [f"{s[n]:.2f}" for n in names]
            + [f"{s[k]:{f}}" for _, k, f in after]
        )
        print(f"| {fam} | {len(rows)} | {' | '.join(cells)} |")
    return summary


if __name__ == "__main__":
    main()
