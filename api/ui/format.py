"""Jinja filters: how numbers read on the explorer's pages."""

from __future__ import annotations

from typing import Any

from jinja2 import Environment


def usd(value: float | None) -> str:
    if value is None:
        return "-"
    return f"${value:.4f}" if value < 1 else f"${value:,.2f}"


def tokens(value: int | None) -> str:
    if value is None:
        return "-"
    return f"{value / 1000:.1f}k" if value >= 10_000 else str(value)


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 60:
        return f"{seconds:.1f} s"
    if seconds < 3600:
        return f"{seconds // 60:.0f} min {seconds % 60:.0f} s"
    return f"{seconds // 3600:.0f} h {(seconds % 3600) // 60:.0f} min"


def polyline(points: list[dict[str, Any]], key: str, width: int, height: int) -> str:
    """SVG polyline points for one series, scaled to its own range (missing values skipped)."""
    values = [(p["x"], float(p[key])) for p in points if isinstance(p.get(key), int | float)]
    if not values:
        return ""
    lo, hi = min(v for _, v in values), max(v for _, v in values)
    span_x = max(len(points) - 1, 1)
    pad = 8

    def y(v: float) -> float:
        return height - pad - (v - lo) / (hi - lo or 1) * (height - 2 * pad)

    return " ".join(f"{pad + x / span_x * (width - 2 * pad):.1f},{y(v):.1f}" for x, v in values)


def install(env: Environment) -> None:
    env.filters.update(usd=usd, tokens=tokens, duration=duration, polyline=polyline)
