"""What `conductor solve` prints of a job's workflows: every round, and why a fallback answered."""

from __future__ import annotations

from conductor.cli.main import _workflow_lines


def _round(index, kind, status, answer, steps, parse_error=None):
    return {"index": index, "kind": kind, "status": status, "answer": answer, "parse_error": parse_error,
            "steps": [{"index": i, "worker": w, "access": [], "subtask": t} for i, (w, t) in enumerate(steps)]}  # fmt: skip


def test_a_fallback_after_a_calculator_miss_says_what_the_plan_answered():
    view = {
        "chains": [
            {
                "parent_step_id": None,
                "sample": 0,
                "rounds": [
                    _round(0, "plan", "done", "40", [("calculator", "12 * 3 + 4")]),
                    _round(1, "fallback", "done", "Jupiter.", [("smol-precise", "Which planet is largest?")]),
                ],
            }
        ]
    }

    assert _workflow_lines(view) == [
        "  sample 0 round 0 (plan): done",
        "    step 0 [calculator] access=[]: '12 * 3 + 4'",
        "  sample 0 round 1 (fallback): done - the plan's answer '40' was a tool miss",
        "    step 0 [smol-precise] access=[]: 'Which planet is largest?'",
    ]


def test_a_fallback_after_unparseable_plans_shows_their_parse_errors_instead():
    view = {
        "chains": [
            {
                "parent_step_id": None,
                "sample": 0,
                "rounds": [
                    _round(0, "plan", "unparseable", None, [], parse_error="missing_block"),
                    _round(1, "fallback", "done", "4", [("smol-precise", "2 + 2?")]),
                ],
            }
        ]
    }

    assert _workflow_lines(view)[0] == "  sample 0 round 0 (plan): unparseable - missing_block"
    assert _workflow_lines(view)[1] == "  sample 0 round 1 (fallback): done"
