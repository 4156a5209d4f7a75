"""A scripted group judge for the scripted server: reads the answers the way a judge model would."""

from __future__ import annotations

import json
import re
from collections.abc import Callable

from tests.support.scripted_llm import Reply

JUDGE_MODEL = "scripted-judge"  #: as requests name it (the pool says `openai/scripted-judge`)

_ANSWER_RE = re.compile(r"## Answer ([A-Z])\n(?:Workflow: [^\n]*\n)?<answer>\n(.*?)\n</answer>", re.DOTALL)


def shown_answers(messages: list[dict]) -> dict[str, str]:
    """Letter -> answer text, as the judge prompt showed them."""
    user = next(m["content"] for m in messages if m["role"] == "user")
    return {m.group(1): m.group(2) for m in _ANSWER_RE.finditer(user)}


def judge_reply(messages: list[dict], score_of: Callable[[str], float], *, spread: bool = False) -> Reply:
    """Scores every shown answer with `score_of(answer)` and answers in the JSON form asked for.

    `spread`: where every answer scored the same, the first shown scores 1.0 and the rest 0.0, so
    that the group has reward variance whatever its answers were."""
    scores = {letter: score_of(answer) for letter, answer in shown_answers(messages).items()}
    if spread and len(scores) > 1 and len(set(scores.values())) == 1:
        first = min(scores)
        scores = {letter: 1.0 if letter == first else 0.0 for letter in scores}
    lines = [f"{letter}: looks {'good' if s >= 0.5 else 'weak'}." for letter, s in scores.items()]
    return Reply("\n".join(lines) + "\n" + json.dumps(scores))


def judge_worker(base_url: str, **overrides: object) -> dict:
    """The pool entry of the scripted judge (priced, so its cost is counted like any call)."""
    return {
        "name": "judge",
        "model": f"openai/{JUDGE_MODEL}",
        "description": "grades answers (not for planning)",
        "api_base": base_url,
        "retries": 0,
        "timeout_s": 10.0,
        "price": {"input_per_token": 1e-6, "output_per_token": 2e-6},
        **overrides,
    }
