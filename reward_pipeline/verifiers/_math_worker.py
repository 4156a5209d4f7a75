"""Child process that runs math-verify for `math_equiv.MathVerifier` (JSON lines on stdin/stdout).

Started with ``python -m reward_pipeline.verifiers._math_worker [memory_bytes]``. Each request
``{"gold": str, "pred": str, "float_rounding": int}`` gets one reply line
``{"equal": bool, "gold": [...], "pred": [...]}`` or ``{"error": "..."}``. math-verify's own
``signal.alarm`` timeouts are disabled (``None``); the parent enforces a wall-clock timeout by
killing this process.
"""

from __future__ import annotations

import json
import logging
import os
import resource
import sys
from collections.abc import Sequence
from typing import Any


def _parse_gold(parse, gold: str) -> list:
    # MATH-style references are bare LaTeX: boxing them makes math-verify read the whole thing.
    for text in (f"\\boxed{{{gold}}}", f"${gold}$", gold):
        parsed = parse(text, parsing_timeout=None)
        if parsed:
            return parsed
    return []


def _parse_pred(parse, pred: str, first: Sequence[str] = (), then: Sequence[str] = ()) -> list:
    # Formulas after "the answer is" written without delimiters: math-verify cannot see them
    # and would settle for an earlier delimited formula (a restated equation) instead.
    for formula in first:
        parsed = parse(f"${formula}$", parsing_timeout=None)
        if parsed:
            return parsed
    parsed = parse(pred, parsing_timeout=None)
    if parsed:
        return parsed
    for formula in then:
        parsed = parse(f"${formula}$", parsing_timeout=None)
        if parsed:
            return parsed
    if len(pred) > 300:
        return parsed
    # A bare expression ("\dfrac12") has no anchor math-verify recognises without delimiters.
    for text in (f"${pred}$", f"\\boxed{{{pred}}}"):
        parsed = parse(text, parsing_timeout=None)
        if parsed:
            return parsed
    return []


def _check(parse, verify, req: dict[str, Any]) -> dict[str, Any]:
    gold = _parse_gold(parse, req["gold"])
    if not gold:
        return {"error": "could not parse the reference answer", "gold": [], "pred": []}
    pred = _parse_pred(parse, req["pred"], req.get("first", []), req.get("then", []))
    equal = bool(pred) and verify(gold, pred, float_rounding=int(req.get("float_rounding", 6)), timeout_seconds=None)
    return {"equal": bool(equal), "gold": [str(x) for x in gold], "pred": [str(x) for x in pred]}


def main() -> None:
    # Replies go to a private copy of stdout; anything a library prints lands on stderr instead.
    out = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    if len(sys.argv) > 1 and int(sys.argv[1]) > 0:
        limit = int(sys.argv[1])
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    logging.disable(logging.WARNING)  # math-verify warns on every call that timeouts are off
    from math_verify import parse, verify

    out.write(json.dumps({"ready": True}) + "\n")
    for line in sys.stdin:
        try:
            reply = _check(parse, verify, json.loads(line))
        except Exception as e:
            reply = {"error": f"{type(e).__name__}: {e}"[:500], "gold": [], "pred": []}
        out.write(json.dumps(reply) + "\n")


if __name__ == "__main__":
    main()
