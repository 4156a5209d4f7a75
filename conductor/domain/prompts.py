"""The prompts: the Conductor's plan and replan prompts, and the messages a worker step receives.

The plan prompt follows the paper: the question, the numbered worker pool ("Model i:
description"), the meaning of the three lists, four few-shot workflows (dropping them cost
the paper 7-9 points) and the instruction to think briefly and end with one fenced python
block. It is kept compact because the default local Conductor (SmolLM2-135M) has an 8k
context and a small model follows short prompts better; a 3-worker plan prompt is well under
1,500 tokens.

Few-shot worker indices are written for a 3-model pool and reduced modulo the actual pool
size, so an example never names a model that is not there; examples longer than
``max_steps`` are left out rather than shown breaking the rule they illustrate.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from conductor.domain.workflow import PLAN_ORDERS, PlanOrder, Workflow

__all__ = [
    "EXPRESSION_HINT",
    "MAX_PREVIOUS_ANSWER_CHARS",
    "PROGRAM_HINT",
    "QUESTION_REF",
    "WorkerCard",
    "build_plan_messages",
    "build_replan_messages",
    "build_step_messages",
    "expand_question",
    "expression_route_subtasks",
    "few_shot_examples",
    "program_route_subtasks",
]

#: The previous answer shown in a replan prompt is clipped (head and tail kept: math answers
#: end with the boxed result, code answers with the code) so one verbose worker cannot
#: overflow the Conductor's context.
MAX_PREVIOUS_ANSWER_CHARS = 6_000

#: Written in a subtask, stands for the whole question; the worker receives the full text. Copying a
#: long question into a plan was what broke and bloated plans: of 20 first-round plans of the earlier
#: adapter on unseen prompts, 15 copied the question (most of them twice) and 8 of those 15 failed to
#: parse, against 1 of the 5 that copied nothing.
QUESTION_REF = "{question}"

#: What a model is asked for when a tool computes after it. Measured on 20 word problems: SmolLM2-135M at
#: temperature 0 wrote an expression that evaluates to the answer 12 times with this wording, 7 and 5
#: with two others, and answered correctly itself 5 times.
EXPRESSION_HINT = (
    "Write the arithmetic expression that computes the answer, using only numbers and + - * / ( ). Do not compute it."
)


def expression_route_subtasks(question: str) -> list[str]:
    """The two subtasks of the expression route: a model writes the expression, the next step (a tool
    such as the calculator, or a model) computes it from what it sees."""
    return [f"{EXPRESSION_HINT} Question: {question}", "Compute the expression above."]


#: What a model is asked for when the python tool runs after it.
PROGRAM_HINT = (
    "Write a short Python expression or program that computes the answer (print it, or end with the "
    "expression). Reply with the code only."
)


def program_route_subtasks(question: str) -> list[str]:
    """The two subtasks of the program route: a model writes the code, the python tool runs it."""
    return [f"{PROGRAM_HINT} Question: {question}", "Run the code above."]


@dataclass(frozen=True)
class WorkerCard:
    """A worker as the Conductor sees it; its position in the pool is its "Model i" number."""

    name: str
    description: str
    is_tool: bool = False  #: a program (e.g. the calculator), which cannot follow a free-form instruction


_SYSTEM = (
    "You are the Conductor. You solve problems by writing a short workflow that delegates "
    "steps to worker models. The workers do the solving; the response of the last step is "
    "the final answer."
)

_RULES = (
    "Write a workflow of 1 to {max_steps} steps as three Python lists of equal length:\n"
    "- model_id: for each step, the number of the model that runs it.\n"
    "- subtasks: for each step, a clear instruction for that model. A model sees only its subtask and the "
    "steps it can access, never the original question, so include the details it needs; write "
    "{{question}} in a subtask to insert the whole question there.\n"
    '- access_list: for each step, the earlier steps whose subtask and response it sees: "all" (every '
    "earlier step), [] (none), or a list of earlier step numbers such as [0, 2]. Steps that cannot see "
    "each other run in parallel.\n"
    "The last step must give the final answer. Use one step for easy questions and more steps (plan, "
    "solve, check) for hard ones."
)

# (question, model_id written for a 3-model pool, subtasks, access_list)
_FEW_SHOTS: tuple[tuple[str, list[int], list[str], list], ...] = (
    (
        "Which planet is known as the Red Planet?",
        [0],
        ["Which planet is known as the Red Planet? Answer with its name only."],
        [[]],
    ),
    (
        "Find the sum of all positive divisors of 36.",
        [1, 2],
        [
            "Find the sum of all positive divisors of 36. Reason step by step and put the final answer in \\boxed{}.",
            "Check the solution above step by step. Fix any mistake and put the final answer in \\boxed{}.",
        ],
        [[], "all"],
    ),
    (
        "Write a Python function is_palindrome(s) that ignores case and non-alphanumeric characters.",
        [2, 0, 1],
        [
            (
                "Plan an algorithm for is_palindrome(s): True if s reads the same backwards, ignoring case and "
                "non-alphanumeric characters. List the edge cases. Do not write code."
            ),
            "Implement is_palindrome(s) in Python following the plan. Reply with the code only.",
            (
                "Review the code against the plan and the edge cases, fix any bug, and reply with the final "
                "complete function in a python code block."
            ),
        ],
        [[], "all", "all"],
    ),
    (
        "Is 221 a prime number?",
        [0, 1, 2],
        [
            "Is 221 prime? Test divisibility by every prime up to 15. Answer yes or no.",
            "Is 221 prime? Try to factor it. Answer yes or no.",
            (
                "Two solvers checked whether 221 is prime. Compare their work, resolve any disagreement "
                "and give the final answer: yes or no."
            ),
        ],
        [[], [], [0, 1]],
    ),
)


def few_shot_examples(pool_size: int, *, max_steps: int = 5) -> list[tuple[str, Workflow]]:
    """The (question, workflow) examples shown for a pool of ``pool_size`` models."""
    if pool_size < 1:
        raise ValueError("the worker pool is empty")
    examples = []
    for question, model_id, subtasks, access in _FEW_SHOTS:
        if len(model_id) > max_steps:
            continue
        examples.append((question, Workflow.from_lists([m % pool_size for m in model_id], subtasks, access)))
    return examples


#: The compact prompt's instruction: the output contract only. A Conductor trained on the format
#: needs no rules or few-shot examples, and every prompt token costs training and serving time.
_COMPACT_TASK = (
    "Write a workflow of 1 to {max_steps} steps for the question: one python code block defining "
    "{lists}. In a subtask, {{question}} stands for the whole question."
)


#: The compact replan's instruction: keep the answer (three empty lists) or write a corrective workflow.
_COMPACT_REPLAN = (
    "If the answer is right, keep it: write three empty lists. Otherwise write a new workflow of 1 to "
    "{max_steps} steps that answers the question: one python code block defining {lists}."
)


def build_plan_messages(
    question: str,
    workers: Sequence[WorkerCard],
    *,
    max_steps: int = 5,
    style: str = "full",
    order: PlanOrder = "workers-first",
) -> list[dict]:
    """System + user messages asking the Conductor for a workflow for ``question``.

    ``style="compact"`` drops the rules and few-shot workflows (for a Conductor trained on the format);
    its contract names the lists in ``order``, the order its grammar holds the plan to.
    """
    _check(workers, max_steps)
    if style == "compact":
        task = _COMPACT_TASK.format(max_steps=max_steps, lists=_list_names(order))
        user = f"{_pool(workers)}\n\nQuestion: {question.strip()}\n\n{task}"
        return [{"role": "system", "content": _SYSTEM}, {"role": "user", "content": user}]
    shots = "\n\n".join(
        f"Question: {q}\n{wf.to_python(order)}" for q, wf in few_shot_examples(len(workers), max_steps=max_steps)
    )
    user = (
        f"{_pool(workers)}\n\n{_RULES.format(max_steps=max_steps)}\n\n"
        f"Examples:\n\n{shots}\n\n"
        f"Question: {question.strip()}\n\n"
        "Think briefly about which models and steps this question needs, then end your answer with "
        f"ONE fenced python code block that defines {_list_names(order)}."
    )
    return [{"role": "system", "content": _SYSTEM}, {"role": "user", "content": user}]


def build_replan_messages(
    question: str,
    workers: Sequence[WorkerCard],
    *,
    previous: Workflow,
    previous_answer: str,
    max_steps: int = 5,
    style: str = "full",
    order: PlanOrder = "workers-first",
) -> list[dict]:
    """Messages offering the Conductor to correct or improve its earlier workflow's answer.

    The Conductor answers with a new workflow, or with three empty lists to keep the answer.
    In the new round a step whose access is "all" also sees the previous final answer; the
    executor must supply it, this prompt only promises it. ``style="compact"`` is the output contract
    only, for a Conductor trained on replans (the warm-up's replan examples use it).
    """
    _check(workers, max_steps)
    if style == "compact":
        user = (
            f"{_pool(workers)}\n\nQuestion: {question.strip()}\n\n"
            f"Workflow run:\n{previous.to_python(order)}\n\n"
            f"Its final answer:\n<answer>\n{_clip(previous_answer.strip())}\n</answer>\n\n"
            f"{_COMPACT_REPLAN.format(max_steps=max_steps, lists=_list_names(order))}"
        )
        return [{"role": "system", "content": _SYSTEM}, {"role": "user", "content": user}]
    user = (
        f"{_pool(workers)}\n\n{_RULES.format(max_steps=max_steps)}\n\n"
        f"Question: {question.strip()}\n\n"
        f"You already ran this workflow for the question:\n{previous.to_python(order)}\n\n"
        f"Its final answer was:\n<answer>\n{_clip(previous_answer.strip())}\n</answer>\n\n"
        "Decide whether this answer is correct and complete.\n"
        "- If it is, keep it: answer with three empty lists "
        f"({', '.join(f'{name} = []' for name in PLAN_ORDERS[order])}).\n"
        "- If not, write a new workflow that corrects or improves it. In the new workflow a step with "
        'access "all" also sees the previous final answer above (plus every earlier step of the new '
        "workflow); a step with [] or a list of step numbers does not see it.\n"
        f"Think briefly, then end your answer with ONE fenced python code block that defines {_list_names(order)}."
    )
    return [{"role": "system", "content": _SYSTEM}, {"role": "user", "content": user}]


def build_step_messages(subtask: str, context: Sequence[tuple[str, str]]) -> list[dict]:
    """A worker's messages: the visible earlier (subtask, response) pairs as chat turns, then its subtask."""
    messages: list[dict] = []
    for earlier_subtask, response in context:
        messages.append({"role": "user", "content": earlier_subtask})
        messages.append({"role": "assistant", "content": response})
    messages.append({"role": "user", "content": subtask})
    return messages


def expand_question(text: str, question: str) -> str:
    """A subtask as its worker receives it: every question reference replaced by the question itself."""
    return text.replace(QUESTION_REF, question.strip()) if QUESTION_REF in text else text


def _list_names(order: PlanOrder) -> str:
    first, second, third = PLAN_ORDERS[order]
    return f"{first}, {second} and {third}"


def _pool(workers: Sequence[WorkerCard]) -> str:
    # One line per model: a description with newlines would blur where the next model starts.
    lines = [f"Model {i}: {' '.join(w.description.split()) or w.name}" for i, w in enumerate(workers)]
    return "Available models:\n" + "\n".join(lines)


def _check(workers: Sequence[WorkerCard], max_steps: int) -> None:
    if not workers:
        raise ValueError("the worker pool is empty")
    if max_steps < 1:
        raise ValueError(f"max_steps must be >= 1, got {max_steps}")


def _clip(text: str) -> str:
    if len(text) <= MAX_PREVIOUS_ANSWER_CHARS:
        return text
    half = MAX_PREVIOUS_ANSWER_CHARS // 2
    return f"{text[:half]}\n[... {len(text) - 2 * half} characters omitted ...]\n{text[-half:]}"
