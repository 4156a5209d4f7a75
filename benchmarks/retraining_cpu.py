"""Report of the CPU retraining run (`make train-local`): per cycle, parse rate and mean reward on the
training rollouts, and parse rate, accuracy and tokens per question on the dev set; what the
Conductor learned beyond format (worker choice, workflow shapes and what they earned); parse rates
on benchmarks the loop never trained on. Prints a Markdown report and writes a PNG.

    python benchmarks/retraining_cpu.py [--results results/train-local] [--db .conductor/train/conductor.db]
"""

from __future__ import annotations

import argparse
import json
import sqlite3
from collections import defaultdict
from pathlib import Path


def load(results: Path) -> tuple[list[dict], dict]:
    cycles = json.loads((results / "cycles.json").read_text())
    summary_path = results / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
    events = [json.loads(line) for line in (results / "events.jsonl").read_text().splitlines() if line.strip()]
    kinds = [e.get("event") for e in events]
    # The warm-up's gate comes before any iteration; a run that continued from an existing policy (the shipped
    # adapter) has none, and its first gate is cycle 1's.
    first_gate = kinds.index("gate") if "gate" in kinds else None
    warm = events[first_gate] if first_gate is not None and "iteration" not in kinds[:first_gate] else None
    return cycles, {"summary": summary, "warmup_gate": warm}


def continued_from(cycles: list[dict]) -> dict | None:
    """Without a warm-up in the run: the policy it started from, as cycle 1's gate measured it."""
    return cycles[0]["gate"].get("active") if cycles else None


def rows(cycles: list[dict], warmup_gate: dict | None) -> list[dict]:
    out = []
    if warmup_gate:
        for who, label in (("active", "0 (base)"), ("candidate", "0 (warm-up)")):
            d = warmup_gate[who]
            out.append({"cycle": label, "train_parse": None, "train_reward": None, **_dev(d)})
    elif start := continued_from(cycles):
        out.append({"cycle": f"0 ({start['version']})", "train_parse": None, "train_reward": None, **_dev(start)})
    for c in cycles:
        its = c["iterations"]
        out.append(
            {
                "cycle": str(c["cycle"]),
                "train_parse": sum(i["rollouts"]["parse_rate"] for i in its) / len(its),
                # Per Conductor round, as the trainer saw it: an unparseable plan earns 0 even when the
                # fallback worker then answered (its chain's reward is the fallback's, not the plan's).
                "train_reward": sum(i["train"]["reward_mean"] for i in its) / len(its),
                **_dev(c["gate"]["candidate"]),
                "promoted": c["gate"]["passed"],
                "seconds": cycle_seconds(c),
            }
        )
    return out


def cycle_seconds(cycle: dict) -> dict[str, float]:
    """Wall seconds of one cycle by phase (summed over its iterations, the gate apart); {} for records written
    before the loop timed its phases."""
    out: dict[str, float] = {}
    for it in cycle["iterations"]:
        for phase, s in it.get("seconds", {}).items():
            out[phase] = out.get(phase, 0.0) + s
    for who, s in cycle["gate"].get("seconds", {}).items():
        out[f"gate_{who}"] = s
    return out


def _dev(d: dict) -> dict:
    return {"dev_parse": d["parse_rate"], "dev_accuracy": d["accuracy"], "dev_tokens": d["tokens_per_question"]}


def worker_choice(db: Path) -> list[dict]:
    """For each training iteration's policy: share of steps given to each worker, plans by number of
    steps and how often each was right, which worker ran the last step (the one that answers), and how
    often a single-step workflow on each worker was right."""
    con = sqlite3.connect(db)
    q = """
    select r.id, r.policy_version, r.n_steps, rw.correct, s.step_index, s.worker_name,
           coalesce(json_extract(j.problem, '$.metadata.family'), '-')
    from rounds r join steps s on s.round_id = r.id join jobs j on j.id = r.job_id
    left join rewards rw on rw.chain_id = r.chain_id and rw.source = 'verifier'
    where r.kind = 'plan' and r.parse_status = 'ok' and json_extract(j.options, '$.train') is not null
    order by r.created_at, s.step_index
    """
    plans: dict[str, dict[int, tuple[int, bool, list[str]]]] = {}
    kind_of: dict[int, str] = {}
    for round_id, version, n_steps, correct, _, worker, kind in con.execute(q):
        by_round = plans.setdefault(version, {})
        by_round.setdefault(round_id, (n_steps, bool(correct), []))[2].append(worker)
        kind_of[round_id] = kind
    out = []
    for version, by_round in plans.items():
        steps: dict[str, int] = defaultdict(int)
        single: dict[str, list[int]] = defaultdict(lambda: [0, 0])
        by_size: dict[int, list[int]] = defaultdict(lambda: [0, 0])
        last: dict[str, int] = defaultdict(int)
        for n_steps, correct, workers in by_round.values():
            for w in workers:
                steps[w] += 1
            size = min(n_steps, 3)
            by_size[size][0] += int(correct)
            by_size[size][1] += 1
            last[workers[-1]] += 1
            if n_steps == 1:
                single[workers[0]][0] += int(correct)
                single[workers[0]][1] += 1
        total = sum(steps.values())
        routes: dict[str, int] = defaultdict(int)
        by_kind: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        for round_id, (_, _, workers) in by_round.items():
            routes[route_of(workers)] += 1
            by_kind[kind_of[round_id]][route_of(workers)] += 1
        out.append(
            {
                "policy": version,
                "plans": len(by_round),
                "steps": total,
                "share": {w: round(n / total, 2) for w, n in sorted(steps.items())},
                "right_by_steps": {("3+" if k == 3 else str(k)): f"{c}/{n}" for k, (c, n) in sorted(by_size.items())},
                "last_step": {w: round(n / len(by_round), 2) for w, n in sorted(last.items())},
                "single_step_accuracy": {w: f"{c}/{n}" for w, (c, n) in sorted(single.items())},
                "routes": {r: round(n / len(by_round), 2) for r, n in sorted(routes.items())},
                #: plans per route for each kind of question (the mixed curriculum's families; "-": none)
                "routes_by_kind": {k: dict(sorted(v.items())) for k, v in sorted(by_kind.items())},
            }
        )
    return out


def _route_counts(routes: dict[str, int]) -> str:
    """`a model 3, python 5`: a cell of the per-kind table, each route named by its last words."""
    short = {r: r.replace("one step, ", "").replace("the ", "") for r in ROUTES}
    return ", ".join(f"{short.get(r, r)} {n}" for r, n in routes.items()) or "-"


#: The one-step route of each tool of the local pool.
TOOL_ROUTES = {"calculator": "one step, the calculator", "python": "one step, python"}
ROUTES = (
    "one step, a model",
    "one step, the calculator",
    "one step, python",
    "model -> calculator",
    "model -> python",
    "other multi-step",
)


def route_of(workers: list[str]) -> str:
    """The route a plan takes: one model answers, a tool runs what the Conductor wrote, a model's work is
    finished by a tool, or else."""
    if len(workers) == 1:
        return TOOL_ROUTES.get(workers[0], "one step, a model")
    if workers[-1] in TOOL_ROUTES and workers[0] not in TOOL_ROUTES:
        return f"model -> {workers[-1]}"
    return "other multi-step"


def baseline(path: Path | None, summary: dict) -> dict | None:
    """The best single worker's dev accuracy with its 95% interval: measured by the run itself
    (`dev_baselines` in summary.json), or from a `conductor eval` results.json on the dev set."""
    if path is not None and path.exists():
        cells = json.loads(path.read_text())["summary"]["overall"]
    else:
        cells = summary.get("dev_baselines") or []
    singles = [c for c in cells if str(c["method"]).startswith("single:") and c["accuracy"] is not None]
    if not singles:
        return None
    best = max(singles, key=lambda c: c["accuracy"])
    return {"method": best["method"], "accuracy": best["accuracy"], "ci": (best["ci_low"], best["ci_high"])}


def markdown(table: list[dict], choice: list[dict], unseen: dict) -> str:
    f = lambda v: "-" if v is None else (f"{v:.2f}" if isinstance(v, float) else str(v))  # noqa: E731
    lines = [
        "| cycle | train parse | train reward | dev parse | dev accuracy | dev tokens/q | promoted |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in table:
        lines.append(
            f"| {r['cycle']} | {f(r['train_parse'])} | {f(r['train_reward'])} | {f(r['dev_parse'])} | "
            f"{f(r['dev_accuracy'])} | {r['dev_tokens']:.0f} | {f(r.get('promoted', ''))} |"
        )
    timed = [r for r in table if r.get("seconds")]
    if timed:
        phases = sorted({p for r in timed for p in r["seconds"]})
        lines += ["", "Where each cycle's time went (wall seconds):", ""]
        lines += ["| cycle | " + " | ".join(phases) + " | total |", "|---|" + "---|" * (len(phases) + 1)]
        for r in timed:
            sec = r["seconds"]
            cells = " | ".join(f"{sec.get(p, 0.0):.0f}" for p in phases)
            lines.append(f"| {r['cycle']} | {cells} | {sum(sec.values()):.0f} |")
    lines += [
        "",
        "What each training policy wrote (parsed plans only): plans right/total by number of steps, share of",
        "steps per worker, which worker ran the last step, single-step workflows right/total per worker:",
        "",
    ]
    lines += [
        f"- {c['policy']}: plans={c['plans']} right_by_steps={c['right_by_steps']} share={c['share']} "
        f"last_step={c['last_step']} single={c['single_step_accuracy']} routes={c.get('routes')}"
        for c in choice
    ]
    kinds = sorted({k for c in choice for k in c.get("routes_by_kind", {})} - {"-"})
    if kinds:
        lines += ["", "Plans per route and kind in each training policy's rollouts:", ""]
        lines += ["| policy | " + " | ".join(kinds) + " |", "|---|" + "---|" * len(kinds)]
        for c in choice:
            cells = [_route_counts(c["routes_by_kind"].get(k, {})) for k in kinds]
            lines.append(f"| {c['policy']} | " + " | ".join(cells) + " |")
    if unseen:
        lines += ["", "| benchmark never trained on | " + " | ".join(unseen) + " |", "|---|" + "---|" * len(unseen)]
        benches = sorted({b for v in unseen.values() for b in v})
        for b in benches:
            lines.append(f"| {b} parse rate | " + " | ".join(f(unseen[v][b]["parse_rate"]) for v in unseen) + " |")
    return "\n".join(lines)


def plot_iterations(choice: list[dict], iterations: list[dict], best: dict | None, out: Path) -> None:
    """Per GRPO iteration: mean reward, dev accuracy of the policy gated after it against the best single
    worker (a line with its interval), and the share of plans per route."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4))
    x = [i["iteration"] for i in iterations]
    reward = [(i["iteration"], i["reward_mean"]) for i in iterations if i["reward_mean"] is not None]
    a.plot([k for k, _ in reward], [v for _, v in reward], "o-", label="train mean reward (T=1)")
    dev = [(i["iteration"], i["dev_accuracy"]) for i in iterations if i.get("dev_accuracy") is not None]
    if dev:
        a.plot([k for k, _ in dev], [v for _, v in dev], "s-", label="dev accuracy (gated policy, T=0.3)")
    if best is not None:
        a.axhline(best["accuracy"], color="gray", ls="--", label=f"best single worker ({best['method']})")
        if best.get("ci"):
            a.axhspan(best["ci"][0], best["ci"][1], color="gray", alpha=0.15)
    a.set_ylim(0, 1.05)
    a.set_xlabel("GRPO iteration (0: the warm-up)")
    a.set_xticks(x)
    a.legend(fontsize=8)
    a.set_title("reward and dev accuracy")
    bottom = [0.0] * len(choice)
    labels = [f"iteration {k}\n(...{c['policy'][-6:]})" for k, c in enumerate(choice, start=1)]
    for route in ROUTES:
        share = [c.get("routes", {}).get(route, 0.0) for c in choice]
        b.bar(range(len(choice)), share, bottom=bottom, label=route)
        bottom = [p + q for p, q in zip(bottom, share, strict=True)]
    b.set_xticks(range(len(choice)), labels)
    b.set_ylabel("share of parsed training plans")
    b.set_title("routes of the plans sampled in each iteration's rollouts")
    b.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def iteration_table(cycles: list[dict], warmup_gate: dict | None) -> list[dict]:
    """Per GRPO iteration, its training reward and (after a cycle's last one) the gated policy's dev
    accuracy; iteration 0 is the warm-up's gate, where the run has one, else the policy the run started from
    (as cycle 1's gate measured it)."""
    out = []
    start = warmup_gate["candidate"] if warmup_gate else continued_from(cycles)
    if start:
        out.append({"iteration": 0, "reward_mean": None, "dev_accuracy": start["accuracy"]})
    for c in cycles:
        for k, it in enumerate(c["iterations"]):
            last = k == len(c["iterations"]) - 1
            out.append(
                {
                    "iteration": len(out) + (0 if start else 1),
                    "reward_mean": it["rollouts"]["reward_mean"],
                    "dev_accuracy": c["gate"]["candidate"]["accuracy"] if last else None,
                }
            )
    return out


def plot(table: list[dict], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [r["cycle"] for r in table]
    x = range(len(labels))
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    a.plot(x, [r["dev_parse"] for r in table], "o-", label="dev parse rate")
    a.plot(x, [r["dev_accuracy"] for r in table], "s-", label="dev accuracy")
    a.plot(x, [r["train_parse"] for r in table], "^--", label="train parse rate (T=1)")
    a.plot(x, [r["train_reward"] for r in table], "v--", label="train mean reward")
    a.set_xticks(list(x), labels, rotation=30)
    a.set_ylim(0, 1.05)
    a.set_xlabel("cycle")
    a.legend(fontsize=8)
    a.set_title("SmolLM2-135M Conductor: warm-up then GRPO cycles")
    b.bar(list(x), [r["dev_tokens"] for r in table])
    b.set_xticks(list(x), labels, rotation=30)
    b.set_title("dev tokens per question (all model calls)")
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", type=Path, default=Path("results/train-local"))
    ap.add_argument("--db", type=Path, default=Path(".conductor/train/conductor.db"))
    ap.add_argument(
        "--baseline",
        type=Path,
        default=None,
        help="results.json of `conductor eval` on the dev set (default: the run's own)",
    )
    args = ap.parse_args()
    cycles, extra = load(args.results)
    table = rows(cycles, extra["warmup_gate"])
    choice = worker_choice(args.db) if args.db.exists() else []
    best = baseline(args.baseline, extra["summary"])
    report = markdown(table, choice, extra["summary"].get("unseen", {}))
    if best is not None:
        report += (
            f"\n\nBest single worker on the dev set: {best['method']} at {best['accuracy']:.2f} (95% CI {best['ci']})."
        )
    (args.results / "report.md").write_text(report + "\n")
    plot(table, args.results / "retraining.png")
    plot_iterations(choice, iteration_table(cycles, extra["warmup_gate"]), best, args.results / "iterations.png")
    print(report)
    print(
        f"\nwrote {args.results / 'report.md'}, {args.results / 'retraining.png'} and {args.results / 'iterations.png'}"
    )


if __name__ == "__main__":
    main()
