"""`conductor train status` lines and `conductor train report` PNGs, read back from the store.

Three plots: reward by cycle and source (from each cycle's data), the importance-weight band
(min / mean / max per optimizer step, log scale) with the effective sample size beside it, and
the gate's decisions (candidate vs active dev accuracy per cycle, passed or not).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from conductor.store.models import TrainingCycle, TrainingStep

__all__ = ["CycleHealth", "cycle_lines", "load_history", "write_report"]


@dataclass(frozen=True)
class CycleHealth:
    id: int
    status: str
    trigger: str
    checkpoint_id: str | None
    stats: dict[str, Any]
    error: str | None
    steps: list[dict[str, Any]]

    @property
    def health(self) -> dict[str, Any]:
        return dict(self.stats.get("health") or {})

    @property
    def gate(self) -> dict[str, Any]:
        return dict(self.stats.get("gate") or {})


def load_history(sessions: sessionmaker[Session], limit: int | None = None) -> list[CycleHealth]:
    """Cycles oldest first (the newest `limit` of them), each with its stored optimizer steps."""
    with sessions() as s:
        q = select(TrainingCycle).order_by(TrainingCycle.id.desc())
        cycles = list(reversed(s.scalars(q.limit(limit) if limit else q).all()))
        steps: dict[int, list[dict[str, Any]]] = {c.id: [] for c in cycles}
        ids = list(steps)
        if ids:
            for st in s.scalars(select(TrainingStep).where(TrainingStep.cycle_id.in_(ids)).order_by(TrainingStep.id)):
                steps[st.cycle_id or 0].append(dict(st.metrics or {}))
        return [
            CycleHealth(c.id, c.status, c.trigger, c.checkpoint_id, dict(c.stats or {}), c.error, steps[c.id])
            for c in cycles
        ]


def _num(x: Any, fmt: str = ".3g") -> str:
    return "-" if x is None else format(float(x), fmt)


def cycle_lines(c: CycleHealth) -> list[str]:
    """What `train status` prints for one cycle: its head line, then its health."""
    gate = c.gate
    verdict = "" if not gate else ("gate passed" if gate.get("passed") else "gate failed")
    head = f"cycle {c.id}  {c.status:8}  trigger={c.trigger}  checkpoint={c.checkpoint_id or '-'}  {verdict}"
    lines = [(head + f"  {c.error or ''}").rstrip()]
    if c.stats.get("skipped"):
        lines.append(f"  skipped: {c.stats['skipped']}")
    h = c.health
    if not h:
        return lines
    zero = h.get("zero_variance_fraction")
    lines.append(
        f"  data: groups={h.get('groups')}  zero-variance={_num(zero and zero * 100, '.0f')}%  "
        f"staleness={h.get('staleness')}  dropped_stale={(c.stats.get('staleness_cap') or {}).get('dropped_rows', 0)}"
    )
    by_source = h.get("reward_by_source") or {}
    if by_source:
        parts = [f"{src} {_num(v['mean'], '.2f')} (n={v['rows']})" for src, v in by_source.items()]
        lines.append("  reward by source: " + ", ".join(parts))
    if "iw_mean" in h:
        lines.append(
            f"  importance weight min/mean/max={_num(h['iw_min'])}/{_num(h['iw_mean'])}/{_num(h['iw_max'])}  "
            f"ess={_num(h['ess'])}  capped={_num(h['capped_fraction'])}  clip={_num(h['clip_fraction'])}  "
            f"kl(behaviour||current)={_num(h['kl_behaviour_current'])}  steps={h.get('steps')}"
        )
    return lines


def write_report(sessions: sessionmaker[Session], out: Path, limit: int | None = None) -> list[Path]:
    """Write the three PNGs into `out`; returns their paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    history = load_history(sessions, limit)
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "reward_by_source.png", out / "importance_weights.png", out / "gate.png"]

    fig, ax = plt.subplots(figsize=(7, 4))
    sources = sorted({src for c in history for src in (c.health.get("reward_by_source") or {})})
    for src in sources:
        pts = [(c.id, c.health["reward_by_source"][src]["mean"]) for c in history
               if src in (c.health.get("reward_by_source") or {})]  # fmt: skip
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=src)
    ax.set(xlabel="cycle", ylabel="mean reward", title="Reward by cycle and source")
    if sources:
        ax.legend()
    fig.tight_layout()
    fig.savefig(paths[0])
    plt.close(fig)

    steps = [st for c in history for st in c.steps if "iw_mean" in st]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(7, 6), sharex=True)
    xs = list(range(1, len(steps) + 1))
    if steps:
        top.fill_between(xs, [st["iw_min"] for st in steps], [st["iw_max"] for st in steps], alpha=0.3,
                         label="importance weight min..max")  # fmt: skip
        top.plot(xs, [st["iw_mean"] for st in steps], label="mean")
        top.plot(xs, [st.get("ratio_mean", 1.0) for st in steps], linestyle="--", label="ratio mean")
        top.set_yscale("log")
        top.legend()
        bottom.plot(xs, [st["ess"] for st in steps], marker=".", label="ESS (normalised)")
        bottom.plot(xs, [st["capped_fraction"] for st in steps], label="capped fraction")
        bottom.plot(xs, [st["clip_fraction"] for st in steps], label="clip fraction")
        bottom.set_ylim(0, 1.05)
        bottom.legend()
    top.set(title="Importance weights and effective sample size per optimizer step")
    bottom.set(xlabel="optimizer step (all cycles)")
    fig.tight_layout()
    fig.savefig(paths[1])
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(7, 4))
    gated = [c for c in history if c.gate]
    for c in gated:
        cand = (c.gate.get("candidate") or {}).get("accuracy")
        active = (c.gate.get("active") or {}).get("accuracy")
        color = "tab:green" if c.gate.get("passed") else "tab:red"
        if cand is not None:
            ax.scatter([c.id], [cand], color=color, marker="o")
        if active is not None:
            ax.scatter([c.id], [active], color="grey", marker="x")
    skipped = [c.id for c in history if c.status == "skipped"]
    if skipped:
        ax.scatter(skipped, [0.0] * len(skipped), color="orange", marker="|", s=200, label="skipped")
        ax.legend()
    ax.set(xlabel="cycle", ylabel="dev accuracy", title="Gate: candidate (green passed, red failed) vs active (x)")
    fig.tight_layout()
    fig.savefig(paths[2])
    plt.close(fig)
    return paths
