"""Scripts for the scripted server: a Conductor that writes the workflow a question asks for."""

from __future__ import annotations

import re

from tests.support.scripted_llm import Reply, Script

WORKFLOWS = {
    # two independent steps, then one that sees both
    "fanout": ("[0, 1, 0]", '["part A", "part B", "combine"]', "[[], [], [0, 1]]"),
    # the same, every step on the first worker
    "fanout0": ("[0, 0, 0]", '["part A", "part B", "combine"]', "[[], [], [0, 1]]"),
    "chain": ("[0, 1]", '["solve", "check"]', '[[], "all"]'),
    "single": ("[0]", '["answer it"]', "[[]]"),
    "wide": ("[0, 1, 0, 1, 0]", '["a", "b", "c", "d", "merge"]', '[[], [], [], [], "all"]'),
}


def block(model_id: str, subtasks: str, access: str) -> str:
    return f"Let me plan.\n```python\nmodel_id = {model_id}\nsubtasks = {subtasks}\naccess_list = {access}\n```"


def question_of(messages: list[dict]) -> str:
    return "\n".join(m["content"] for m in messages if m["role"] == "user")


def conductor_reply(messages: list[dict]) -> Reply:
    """Plans per `[wf:NAME]` in the question; `[garbled]` makes unparseable plans; replans accept."""
    text = question_of(messages)
    if "You already ran this workflow" in text:
        if "[replan:redo]" in text and "redo-done" not in text:
            return Reply(block("[1]", '["redo-done: improve the previous answer"]', '["all"]'))
        return Reply(block("[]", "[]", "[]"))
    if "[garbled]" in text:
        return Reply("I think we should just answer directly without any code block.")
    m = re.search(r"\[wf:(\w+)\]", text)
    return Reply(block(*WORKFLOWS[m.group(1) if m else "single"]))


def planned_workers(delay_s: float) -> Script:
    """The Conductor plans by `conductor_reply`; every worker answers after `delay_s`, echoing its step."""

    def script(model: str, messages: list[dict], body: dict) -> Reply:
        if model.endswith("scripted-conductor"):
            return conductor_reply(messages)
        return Reply(f"did <{messages[-1]['content'][:20]}>", delay_s=delay_s)

    return script
