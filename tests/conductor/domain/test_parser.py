"""Specification of parse_workflow: what a Conductor completion must look like to become a Workflow.

Every rejection has its own kind, and the property tests pin down the contract the
training reward and the executor rely on: valid plans round-trip exactly, garbage only ever
raises PlanParseError, and nothing inside a completion is executed.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import conductor.domain.parser as parser_module
from conductor.domain.errors import PlanParseError
from conductor.domain.parser import ERROR_KINDS, MAX_COMPLETION_CHARS, extract_block, parse_workflow
from conductor.domain.workflow import Step, Workflow

PROPS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def block(model_id: str, subtasks: str, access_list: str, tag: str = "python") -> str:
    return f"```{tag}\nmodel_id = {model_id}\nsubtasks = {subtasks}\naccess_list = {access_list}\n```"


def kind_of(completion: str, **kw) -> str:
    kw.setdefault("pool_size", 3)
    with pytest.raises(PlanParseError) as info:
        parse_workflow(completion, **kw)
    assert info.value.kind in ERROR_KINDS
    return info.value.kind


# ------------------------------------------------------------------ valid plans


def test_all_access_forms():
    text = "I will plan, solve, then check.\n" + block(
        "[0, 1, 2, 1]", "['plan', 'solve', 'check', 'answer']", "[[], 'all', [0, 1], (2,)]"
    )
    wf = parse_workflow(text, pool_size=3)
    assert [s.worker for s in wf.steps] == [0, 1, 2, 1]
    assert [s.subtask for s in wf.steps] == ["plan", "solve", "check", "answer"]
    assert [s.access for s in wf.steps] == [(), "all", (0, 1), (2,)]
    assert wf.steps[1].dependencies() == (0,)
    assert wf.roots() == (0,)


def test_tuples_comments_extra_statements_and_last_assignment_wins():
    text = (
        "```python\n"
        "# the plan\n"
        "import os  # never executed\n"
        "model_id = [2]\n"
        "model_id = (0, 1)  # revised\n"
        "subtasks: list = ('solve it', 'check it')\n"
        "print('hello')\n"
        "access_list = [[], 'all']\n"
        "if True:\n"
        "    model_id = [5, 5]\n"
        "```"
    )
    wf = parse_workflow(text, pool_size=2)
    assert wf == Workflow.from_lists([0, 1], ["solve it", "check it"], [[], "all"])


def test_multiline_lists_and_double_quotes():
    text = (
        "Plan:\n```python\n"
        "model_id = [\n    0,\n    0,\n]\n"
        'subtasks = [\n    "a",\n    "b",\n]\n'
        'access_list = [[], "all"]\n'
        "```\n"
    )
    assert len(parse_workflow(text, pool_size=1).steps) == 2


@pytest.mark.parametrize("tag", ["python", "py", "Python", "python3", ""])
def test_accepted_fence_tags(tag):
    wf = parse_workflow(block("[0]", "['x']", "[[]]", tag=tag), pool_size=1)
    assert wf.steps == (Step(0, 0, "x", ()),)


def test_python_block_preferred_over_later_bare_block():
    text = block("[1]", "['py']", "[[]]") + "\n\n" + block("[0]", "['bare']", "[[]]", tag="")
    assert parse_workflow(text, pool_size=2).steps[0].subtask == "py"


def test_other_language_blocks_ignored():
    text = block("[1]", "['py']", "[[]]") + '\n```json\n{"model_id": [0]}\n```\n'
    assert parse_workflow(text, pool_size=2).steps[0].subtask == "py"


def test_last_python_block_wins():
    text = block("[0]", "['first']", "[[]]") + "\nOn reflection:\n" + block("[1]", "['second']", "[[]]")
    assert parse_workflow(text, pool_size=2).steps[0].subtask == "second"


def test_unclosed_final_block_counts():
    text = "thinking...\n```python\nmodel_id = [0]\nsubtasks = ['x']\naccess_list = [[]]\n"
    assert parse_workflow(text, pool_size=1).steps[0].subtask == "x"


def test_fences_glued_to_code_and_prose():
    text = "Here is my plan: ```python\nmodel_id = [0]\nsubtasks = ['x']\naccess_list = ['all']```\nDone."
    assert parse_workflow(text, pool_size=1).steps[0].access == "all"


def test_python_fence_inside_unclosed_block_starts_over():
    text = "```\nsome notes that never close\n```python\nmodel_id = [0]\nsubtasks = ['x']\naccess_list = [[]]\n```"
    assert parse_workflow(text, pool_size=1).steps[0].subtask == "x"


def test_empty_lists_accepted_only_when_allowed():
    text = block("[]", "[]", "[]")
    assert parse_workflow(text, pool_size=3, allow_empty=True) == Workflow(())
    assert parse_workflow(text, pool_size=3, allow_empty=True).is_empty
    assert kind_of(text) == "empty_workflow"


def test_duplicate_access_entries_are_harmless():
    wf = parse_workflow(block("[0, 0]", "['a', 'b']", "[[], [0, 0]]"), pool_size=1)
    assert wf.steps[1].dependencies() == (0,)


def test_invalid_arguments_are_programming_errors():
    with pytest.raises(ValueError):
        parse_workflow(block("[0]", "['x']", "[[]]"), pool_size=0)
    with pytest.raises(ValueError):
        parse_workflow(block("[0]", "['x']", "[[]]"), pool_size=1, max_steps=0)


# ------------------------------------------------------------------ every rejection kind

REJECTIONS = [
    ("just prose, no code", "missing_block", "no fenced code block"),
    ("```json\n{}\n```", "missing_block", "no fenced code block"),
    ("```python\nmodel_id = [0\n```", "syntax", "not valid Python"),
    ("```python\nmodel_id = [" + "[" * 300 + "]" * 300 + "]\n```", "syntax", "not valid Python"),
    ("```python\nmodel_id = [" + "-" * 20000 + "1]\n```", "syntax", "nested too deeply"),
    ("```python\nmodel_id = [\x00]\n```", "syntax", "not valid Python"),
    (block("[0]", "['x']", "[[]]").replace("access_list", "access"), "missing_list", "access_list"),
    ("```python\nsubtasks = ['x']\n```", "missing_list", "model_id, access_list"),
    (block("__import__('os').system('true')", "['x']", "[[]]"), "not_literal", "model_id is not a plain literal"),
    (block("[0]", "[open('/etc/passwd').read()]", "[[]]"), "not_literal", "subtasks[0]"),
    (block("[0] * 2", "['x', 'y']", "[[], []]"), "not_literal", "'[0] * 2'"),
    (block("[0, 1]", "['x', 'y']", "[[], [n for n in range(1)]]"), "not_literal", "access_list[1]"),
    (block("3", "['x']", "[[]]"), "not_a_list", "model_id must be a list, got '3'"),
    (block("[0]", "'x'", "[[]]"), "not_a_list", "subtasks must be a list"),
    (block("[0]", "['x']", "{0: []}"), "not_a_list", "access_list must be a list"),
    (block("[0, 1]", "['x']", "[[], []]"), "unequal_lengths", "model_id has 2, subtasks has 1, access_list has 2"),
    (block("[0] * 6", "['x'] * 6", "[[]] * 6"), "not_literal", "model_id"),
    (block(str([0] * 6), str(["x"] * 6), str([[]] * 6)), "too_many_steps", "6 steps, at most 5"),
    (block("[]", "[]", "[]"), "empty_workflow", "empty"),
    (block("['0']", "['x']", "[[]]"), "bad_worker", "model_id[0] must be an int model number, got str '0'"),
    (block("[0, True]", "['x', 'y']", "[[], []]"), "bad_worker", "model_id[1] must be an int model number, got bool"),
    (block("[1.0]", "['x']", "[[]]"), "bad_worker", "got float 1.0"),
    (block("[0, 3]", "['x', 'y']", "[[], []]"), "unknown_worker", "model_id[1] is 3, but the pool has models 0..2"),
    (block("[-1]", "['x']", "[[]]"), "unknown_worker", "model_id[0] is -1"),
    (block("[0x" + "f" * 5000 + "]", "['x']", "[[]]"), "unknown_worker", "int of 20000 bits"),
    (block("[0]", "['   ']", "[[]]"), "bad_subtask", "subtasks[0] is empty"),
    (block("[0]", "[42]", "[[]]"), "bad_subtask", "subtasks[0] must be a string, got int 42"),
    (block("[0]", "[None]", "[[]]"), "bad_subtask", "got NoneType None"),
    (block("[0]", "['x' * 2]", "[[]]"), "not_literal", "subtasks[0]"),
    (block("[0]", repr(["x" * 16_001]), "[[]]"), "bad_subtask", "16001 characters"),
    (block("[0]", "['x']", "['ALL']"), "bad_access", 'access_list[0] must be "all", [] or a list'),
    (block("[0]", "['x']", "[None]"), "bad_access", "got None"),
    (block("[0]", "['x']", "[{0}]"), "bad_access", "got {0}"),
    (block("[0, 0]", "['x', 'y']", "[[], [[0]]]"), "bad_access", "access_list[1] contains list [0]"),
    (block("[0, 0]", "['x', 'y']", "[[], ['0']]"), "bad_access", "contains str '0'"),
    (block("[0, 0]", "['x', 'y']", "[[], [True]]"), "bad_access", "contains bool True"),
    (block("[0, 0]", "['x', 'y']", "[[], [-1]]"), "bad_access", "negative step index -1"),
    (block("[0, 0]", "['x', 'y']", "[[0], []]"), "self_reference", "access_list[0] refers to step 0 itself"),
    (block("[0, 0]", "['x', 'y']", "[[], [0, 1]]"), "self_reference", "access_list[1] refers to step 1 itself"),
    (block("[0, 0]", "['x', 'y']", "[[2], []]"), "forward_reference", "later step 2; step 0 can only see no steps"),
    (block("[0, 0, 0]", "['x', 'y', 'z']", "[[], [2], []]"), "forward_reference", "step 1 can only see step 0"),
    (block("[0, 0]", "['x', 'y']", "[[], [10**3]]"), "not_literal", "10**3"),
    (block("[0, 0]", "['x', 'y']", "[[], [" + "9" * 30 + "]]"), "forward_reference", "9" * 30),
]


@pytest.mark.parametrize(
    ("completion", "kind", "detail"), REJECTIONS, ids=[f"{k}-{i}" for i, (_, k, _) in enumerate(REJECTIONS)]
)
def test_rejections(completion, kind, detail):
    with pytest.raises(PlanParseError) as info:
        parse_workflow("Some reasoning first.\n" + completion, pool_size=3)
    assert info.value.kind == kind
    assert detail in info.value.detail
    assert str(info.value) == f"{kind}: {info.value.detail}"


def test_every_documented_kind_is_exercised():
    assert {k for _, k, _ in REJECTIONS} == set(ERROR_KINDS)
    for kind in ERROR_KINDS:
        assert f"``{kind}``" in parser_module.__doc__


def test_code_in_a_completion_is_never_executed(tmp_path: Path):
    marker = tmp_path / "pwned"
    payloads = [
        f"__import__('os').system('touch {marker}')",
        f"[__import__('pathlib').Path('{marker}').touch()]",
        f"[(lambda: open('{marker}', 'w'))()]",
    ]
    for payload in payloads:
        for position in range(3):
            lists = ["[0]", "['x']", "[[]]"]
            lists[position] = payload
            assert kind_of(block(*lists)) == "not_literal"
        assert kind_of(f"```python\nimport os\nos.system('touch {marker}')\n```") == "missing_list"
    assert not marker.exists()


def test_parser_source_has_no_eval_or_exec():
    source = Path(parser_module.__file__).read_text()
    code = re.sub(r"literal_eval", "", source)
    assert not re.search(r"(?<![\w.])(eval|exec|compile|__import__)\s*\(", code)


def test_huge_completion_is_capped_but_tail_block_still_found():
    text = "x" * (5 * MAX_COMPLETION_CHARS) + "\n" + block("[0]", "['x']", "[[]]")
    assert parse_workflow(text, pool_size=1).steps[0].subtask == "x"
    # Only the tail is read: an opener further back than the cap is not seen, and the lone
    # closing fence then reads as an empty block.
    huge_block = block("[0]", "['x']", "[[]]").replace("```python\n", "```python\n" + "a = 1\n" * MAX_COMPLETION_CHARS)
    assert kind_of(huge_block) == "missing_list"


def test_non_string_completion():
    assert kind_of(None) == "missing_block"  # type: ignore[arg-type]


# ------------------------------------------------------------------ properties

prose = st.text(alphabet=st.characters(blacklist_characters="`", blacklist_categories=("Cs",)), max_size=200)
subtask_text = st.text(min_size=1, max_size=60).filter(lambda s: s.strip())


@st.composite
def workflows(draw, max_steps: int = 5):
    pool_size = draw(st.integers(1, 6))
    n = draw(st.integers(1, max_steps))
    workers = draw(st.lists(st.integers(0, pool_size - 1), min_size=n, max_size=n))
    subtasks = draw(st.lists(subtask_text, min_size=n, max_size=n))
    access: list = []
    for i in range(n):
        if draw(st.booleans()):
            access.append("all")
        else:
            access.append(
                draw(
                    st.permutations(list(range(i))).flatmap(
                        lambda p: st.sampled_from([p[:k] for k in range(len(p) + 1)])
                    )
                )
            )
    return pool_size, Workflow.from_lists(workers, subtasks, access)


@PROPS
@given(workflows(), prose, prose)
def test_rendered_workflows_round_trip_inside_prose(drawn, before, after):
    pool_size, wf = drawn
    completion = f"{before}\n{wf.to_python()}\n{after}"
    assert parse_workflow(completion, pool_size=pool_size) == wf


garbage_fragments = st.sampled_from(
    [
        "```python\n",
        "```py\n",
        "```\n",
        "```",
        "\n",
        "model_id = ",
        "subtasks = ",
        "access_list = ",
        "[",
        "]",
        "(",
        ")",
        "{",
        "}",
        ",",
        "'all'",
        "'x'",
        "0",
        "1",
        "-",
        "9" * 50,
        "0x" + "f" * 40,
        "True",
        "None",
        "1.5",
        "1j",
        "__import__('os')",
        ".system('true')",
        "lambda: 0",
        "*",
        "**",
        "\\",
        "'",
        '"',
        "\x00",
        "\ud800",
        "#",
        "if x:\n    ",
        "  ",
        "print(1)\n",
        "\r\n",
        "\u2028",
        "b'x'",
        "...",
        "[0]*3",
    ]
)
garbage = st.one_of(
    st.text(max_size=300),
    st.lists(garbage_fragments, max_size=60).map("".join),
    st.tuples(st.text(max_size=50), st.lists(garbage_fragments, max_size=40).map("".join)).map(
        lambda t: f"{t[0]}\n```python\n{t[1]}\n```"
    ),
)


@PROPS
@given(garbage, st.integers(1, 5), st.booleans())
def test_garbage_never_raises_anything_but_plan_parse_error(text, pool_size, allow_empty):
    try:
        wf = parse_workflow(text, pool_size=pool_size, allow_empty=allow_empty)
    except PlanParseError as exc:
        assert exc.kind in ERROR_KINDS
        assert exc.detail
    else:
        assert isinstance(wf, Workflow)
        assert allow_empty or wf.steps
        for step in wf.steps:
            assert 0 <= step.worker < pool_size
            assert all(0 <= d < step.index for d in step.dependencies())


def lists_source(wf: Workflow) -> list[list[str]]:
    """Each list as element source strings, so a test can corrupt one element."""
    lists = wf.to_lists()
    return [[repr(x) for x in lists[name]] for name in ("model_id", "subtasks", "access_list")]


def render(columns: list[list[str] | None]) -> str:
    names = ("model_id", "subtasks", "access_list")
    lines = [f"{name} = [{', '.join(col)}]" for name, col in zip(names, columns, strict=True) if col is not None]
    return "Reasoning.\n```python\n" + "\n".join(lines) + "\n```\n"


MUTATIONS = [
    "drop_list",
    "unequal",
    "worker_out_of_range",
    "worker_huge",
    "worker_not_int",
    "forward_ref",
    "self_ref",
    "negative_ref",
    "too_many",
    "weird_access",
    "weird_subtask",
    "code_payload",
]


@PROPS
@given(workflows(max_steps=4), st.sampled_from(MUTATIONS), st.data())
def test_mutations_give_the_right_kind(drawn, mutation, data):
    pool_size, wf = drawn
    cols: list = lists_source(wf)
    n = len(wf.steps)
    i = data.draw(st.integers(0, n - 1), label="step")
    if mutation == "drop_list":
        cols[data.draw(st.integers(0, 2))] = None
        expected = "missing_list"
    elif mutation == "unequal":
        col = data.draw(st.integers(0, 2))
        cols[col] = cols[col][:-1] if data.draw(st.booleans()) else [*cols[col], cols[col][-1]]
        expected = "unequal_lengths"
    elif mutation == "worker_out_of_range":
        cols[0][i] = str(data.draw(st.one_of(st.integers(pool_size, 10**6), st.integers(-(10**6), -1))))
        expected = "unknown_worker"
    elif mutation == "worker_huge":
        cols[0][i] = data.draw(st.sampled_from(["9" * 4000, "0x" + "f" * 20000, "-" + "1" * 300]))
        expected = "unknown_worker"
    elif mutation == "worker_not_int":
        cols[0][i] = data.draw(
            st.sampled_from(["'0'", "1.0", "True", "False", "None", "[0]", "(0,)", "{0: 1}", "1j", "b'0'", "..."])
        )
        expected = "bad_worker"
    elif mutation == "forward_ref":
        if i == n - 1:
            cols = [[*c, c[-1]] for c in cols]
            cols[2][-1] = "'all'"
        cols[2][i] = repr([data.draw(st.integers(i + 1, 10**9))])
        expected = "forward_reference"
    elif mutation == "self_ref":
        cols[2][i] = repr(sorted({*range(i), i}))
        expected = "self_reference"
    elif mutation == "negative_ref":
        cols[2][i] = repr([data.draw(st.integers(-(10**9), -1))])
        expected = "bad_access"
    elif mutation == "too_many":
        extra = data.draw(st.integers(1, 3))
        cols = [c + [c[-1]] * extra for c in cols]
        cols[2] = [*cols[2][:n], *["'all'"] * extra]
        return _expect(render(cols), "too_many_steps", pool_size, max_steps=n + extra - 1)
    elif mutation == "weird_access":
        cols[2][i] = data.draw(
            st.sampled_from(
                [
                    "'none'",
                    "'ALL'",
                    "None",
                    "0",
                    "{0}",
                    "{'a': 1}",
                    "[[0]]",
                    "[0.0]",
                    "[[]]",
                    "['0']",
                    "[None]",
                    "1.5",
                    "b'all'",
                ]
            )
        )
        expected = "bad_access"
    elif mutation == "weird_subtask":
        cols[1][i] = data.draw(
            st.sampled_from(["''", "'   '", "0", "None", "['x']", "b'x'", "{'x'}", "('x',)", "True"])
        )
        expected = "bad_subtask"
    else:
        col = data.draw(st.integers(0, 2))
        cols[col][i] = data.draw(
            st.sampled_from(
                [
                    "__import__('os')",
                    "__import__('os').system('true')",
                    "eval('1')",
                    "x",
                    "open('f')",
                    "(lambda: 0)()",
                    "1 + 1",
                    "[0] * 2",
                ]
            )
        )
        expected = "not_literal"
    _expect(render(cols), expected, pool_size)


def _expect(completion: str, kind: str, pool_size: int, max_steps: int = 5) -> None:
    with pytest.raises(PlanParseError) as info:
        parse_workflow(completion, pool_size=pool_size, max_steps=max_steps)
    assert info.value.kind == kind, info.value


blocks = st.one_of(
    workflows().map(lambda d: d[1].to_python()),
    st.sampled_from(
        [
            block("[9]", "['x']", "[[]]"),
            block("[0]", "['x']", "[[0]]"),
            block("[0, 0]", "['x']", "[[], []]"),
            "```python\nmodel_id = [0\n```",
            "```python\nprint('no lists')\n```",
            block("[]", "[]", "[]"),
        ]
    ),
)


def outcome(text: str):
    try:
        return parse_workflow(text, pool_size=6)
    except PlanParseError as exc:
        return exc.kind, exc.detail


@PROPS
@given(st.lists(st.tuples(prose, blocks), min_size=1, max_size=4), prose)
def test_only_the_last_block_counts(pieces, tail):
    text = "\n".join(f"{p}\n{b}" for p, b in pieces) + "\n" + tail
    assert outcome(text) == outcome(pieces[-1][1])
    assert extract_block(text) == extract_block(pieces[-1][1])
