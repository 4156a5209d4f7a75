"""A mixed curriculum: six kinds of question whose best route through the local pool differs.

The local pool has two 135M models, a calculator and a Python interpreter. Which of them answers a
question best depends on the question: a model knows some facts and everyday categories, computes
badly and cannot see letters inside its tokens; the calculator computes exactly but reads no words;
Python counts letters, reverses words and sorts lists exactly, but knows nothing. A Conductor that
sends every question one way is therefore wrong on some kind, and reward alone can tell it which
route pays where.

Every problem carries its ``family`` (the kind, for reports: never shown to the Conductor) and, where
a program computes its answer, that ``program`` (a Python expression) and, for arithmetic, the same
``expression`` for the calculator. These are *candidate inputs* the warm-up tries and keeps only when
the tool then returns the reference (see :mod:`reward_pipeline.training.routes`); whether a kind goes
to a tool or to a model is decided by which candidates the reward keeps, not by the family.

The held-out file (``reward_pipeline/evaluation/data/mixed_heldout.jsonl``, written by
``scripts/make_mixed_heldout.py``) uses templates, words and facts this module never writes.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path

from conductor.domain.problem import Problem
from reward_pipeline.training.expressions import expression_problems, operator_count
from reward_pipeline.training.problems import arithmetic

__all__ = ["DEV_PER_FAMILY", "FAMILIES", "curriculum_expressions", "mixed_dev", "mixed_problems"]

FAMILIES = ("arithmetic", "letters", "lists", "transform", "choice", "facts")

WORDS = (
    "apple banana cherry orange lemon garden window kitchen pencil rabbit turtle monkey dolphin parrot "
    "butter cookie summer winter spring autumn yellow purple silver market bottle button candle castle "
    "dragon flower forest island jacket ladder letter mirror needle pepper pillow pocket rocket saddle "
    "school sister soccer spider stripe tomato tunnel valley wallet basket bridge camera carrot circle "
    "coffee doctor engine family farmer finger guitar hammer helmet insect jungle kitten lizard marble "
    "meadow muffin napkin number office parent pirate planet poster puzzle riddle river salmon shadow "
    "shovel singer spoon square stream street sugar table teacher ticket tiger travel umbrella village "
    "violin water wizard yogurt zebra balloon blanket cabbage chicken cupboard giraffe hamster kangaroo "
    "library mountain notebook octopus pajamas penguin pumpkin sandwich scissors strawberry tortoise "
    "volcano whistle"
).split()

#: category (singular, for "Which of these is a ...?") -> members; distractors come from other categories
CATEGORIES: dict[str, tuple[str, ...]] = {
    "fruit": ("apple", "banana", "mango", "pear", "grape", "peach", "cherry", "plum"),
    "animal": ("dog", "horse", "cow", "lion", "rabbit", "sheep", "tiger", "bear"),
    "colour": ("red", "blue", "green", "yellow", "purple", "orange", "pink", "brown"),
    "vehicle": ("car", "bus", "truck", "bicycle", "train", "boat", "airplane", "motorcycle"),
    "musical instrument": ("piano", "guitar", "violin", "drum", "flute", "trumpet", "harp", "cello"),
    "piece of furniture": ("chair", "table", "sofa", "bed", "desk", "shelf", "wardrobe", "stool"),
    "body part": ("hand", "foot", "elbow", "knee", "nose", "ear", "shoulder", "finger"),
    "drink": ("water", "milk", "tea", "coffee", "juice", "lemonade", "soda", "cocoa"),
}

OPPOSITES = (
    ("hot", "cold"),
    ("big", "small"),
    ("up", "down"),
    ("fast", "slow"),
    ("happy", "sad"),
    ("day", "night"),
    ("open", "closed"),
    ("wet", "dry"),
    ("light", "dark"),
    ("full", "empty"),
    ("young", "old"),
    ("loud", "quiet"),
)

#: (question, answer, aliases): facts a small model knows some of the time
FACTS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("What is the capital of France?", "Paris", ()),
    ("What is the capital of Italy?", "Rome", ()),
    ("What is the capital of Germany?", "Berlin", ()),
    ("What is the capital of Spain?", "Madrid", ()),
    ("What is the capital of Japan?", "Tokyo", ()),
    ("What is the capital of England?", "London", ()),
    ("What is the capital of Russia?", "Moscow", ()),
    ("What is the capital of China?", "Beijing", ("Peking",)),
    ("What is the capital of Egypt?", "Cairo", ()),
    ("What is the capital of Greece?", "Athens", ()),
    ("What is the capital of Canada?", "Ottawa", ()),
    ("What is the capital of Portugal?", "Lisbon", ()),
    ("What is the capital of Ireland?", "Dublin", ()),
    ("What is the capital of Norway?", "Oslo", ()),
    ("What is the capital of Austria?", "Vienna", ()),
    ("What colour is grass?", "green", ()),
    ("What colour is the sky on a clear day?", "blue", ()),
    ("What colour is snow?", "white", ()),
    ("What colour is a ripe banana?", "yellow", ()),
    ("What colour is coal?", "black", ()),
    ("What animal says moo?", "cow", ("a cow",)),
    ("What animal barks?", "dog", ("a dog",)),
    ("What animal says meow?", "cat", ("a cat",)),
    ("Which animal is known as the king of the jungle?", "lion", ("the lion",)),
    ("What do bees make?", "honey", ()),
    ("What is frozen water called?", "ice", ()),
    ("What star is at the centre of our solar system?", "Sun", ("the Sun",)),
    ("Which planet do we live on?", "Earth", ()),
    ("What is the largest ocean on Earth?", "Pacific", ("Pacific Ocean", "the Pacific Ocean")),
    ("What gas do plants take in from the air?", "carbon dioxide", ("CO2",)),
    ("How many days are in a week?", "7", ("seven",)),
    ("How many legs does a spider have?", "8", ("eight",)),
    ("How many months are in a year?", "12", ("twelve",)),
    ("How many legs does a dog have?", "4", ("four",)),
    ("How many hours are in a day?", "24", ("twenty-four", "twenty four")),
    ("What language is spoken in France?", "French", ()),
    ("What language is spoken in Spain?", "Spanish", ()),
    ("What is the opposite of north?", "south", ()),
    ("What season comes after winter?", "spring", ()),
    ("What do you call a baby dog?", "puppy", ("a puppy",)),
    ("What do you call a baby cat?", "kitten", ("a kitten",)),
    ("Which organ pumps blood through the body?", "heart", ("the heart",)),
    ("What is the boiling point of water in degrees Celsius?", "100", ("100 degrees", "100 degrees Celsius")),
    ("Who wrote Romeo and Juliet?", "William Shakespeare", ("Shakespeare",)),
    ("What is the tallest animal in the world?", "giraffe", ("the giraffe", "a giraffe")),
    ("What shape has three sides?", "triangle", ("a triangle",)),
    ("What do caterpillars turn into?", "butterflies", ("butterfly", "a butterfly", "moths")),
    ("Which month comes after June?", "July", ()),
)

_LETTERS = "aeiourstnlm"


def _program_answer(program: str) -> str:
    # The generator's own candidate program, evaluated once with no builtins beyond what it uses: the
    # reference is the program's value, so reference and candidate cannot disagree by a typo.
    value = eval(program, {"__builtins__": {"sorted": sorted, "max": max, "min": min, "sum": sum, "len": len}})
    return str(value)


def _letters(rng: random.Random, i: int) -> Problem:
    word = rng.choice(WORDS)
    # Half the questions ask for a letter the word has twice or more where it has one (a model that guesses
    # "1" is then wrong), some for one it lacks: 0 is an answer too.
    repeated = sorted({c for c in word if word.count(c) > 1})
    draw = rng.random()
    if draw < 0.5 and repeated:
        letter = rng.choice(repeated)
    elif draw < 0.85:
        letter = rng.choice(word)
    else:
        letter = rng.choice(_LETTERS)
    form = rng.randrange(3)
    if form == 0:
        q = f"How many times does the letter '{letter}' appear in the word '{word}'?"
    elif form == 1:
        q = f"Count the letter {letter} in the word {word}."
    else:
        q = f"How many {letter}'s are in '{word}'?"
    program = f"'{word}'.count('{letter}')"
    return _problem("letters", i, q, program, kind="math")


def _numbers(rng: random.Random) -> list[int]:
    return [rng.randint(1, 99) for _ in range(rng.randint(3, 6))]


def _lists(rng: random.Random, i: int) -> Problem:
    form = rng.randrange(5)
    xs = _numbers(rng)
    shown = ", ".join(map(str, xs))
    if form == 0:
        q, program = f"What is the largest number in this list: {shown}?", f"max([{shown}])"
    elif form == 1:
        q, program = f"What is the smallest number in the list {shown}?", f"min([{shown}])"
    elif form == 2:
        q, program = f"What is the sum of the numbers {shown}?", f"sum([{shown}])"
    elif form == 3:
        q, program = f"How many numbers are in the list {shown}?", f"len([{shown}])"
    else:
        words = rng.sample(WORDS, rng.randint(3, 4))
        quoted = ", ".join(f"'{w}'" for w in words)
        q = f"Sort these words alphabetically: {', '.join(words)}."
        program = f"', '.join(sorted([{quoted}]))"
        return _problem("lists", i, q, program, kind="text")
    return _problem("lists", i, q, program, kind="math")


def _transform(rng: random.Random, i: int) -> Problem:
    form = rng.randrange(3)
    word = rng.choice(WORDS)
    if form == 0:
        q, program = f"Reverse the word '{word}'.", f"'{word}'[::-1]"
    elif form == 1:
        n = rng.randint(1, min(5, len(word)))
        ordinal = ("first", "second", "third", "fourth", "fifth")[n - 1]
        q, program = f"What is the {ordinal} letter of the word '{word}'?", f"'{word}'[{n - 1}]"
    else:
        words = rng.sample(WORDS, 3)
        phrase = " ".join(words)
        q = f"Write the first letter of each word in '{phrase}'."
        program = f"''.join(w[0] for w in '{phrase}'.split())"
    return _problem("transform", i, q, program, kind="text")


def _choice(rng: random.Random, i: int) -> Problem:
    letters = "ABCD"
    if rng.random() < 0.7:
        category = rng.choice(list(CATEGORIES))
        right = rng.choice(CATEGORIES[category])
        others = [c for c in CATEGORIES if c != category]
        wrong = [rng.choice(CATEGORIES[c]) for c in rng.sample(others, 3)]
        stem = f"Which of these is a {category}?"
    else:
        word, right = rng.choice(OPPOSITES)
        pool = [b for a, b in OPPOSITES if b != right] + [a for a, _ in OPPOSITES if a != word]
        wrong = rng.sample(pool, 3)
        stem = f"What is the opposite of '{word}'?"
    options = [right, *wrong]
    rng.shuffle(options)
    answer = letters[options.index(right)]
    q = stem + " " + " ".join(f"{letters[k]}) {o}" for k, o in enumerate(options))
    return Problem(
        id=f"mix-choice-{i}",
        question=q,
        answer=answer,
        kind="mc",
        choices=options,
        metadata={"family": "choice"},
    )


def _facts(rng: random.Random, i: int) -> Problem:
    q, answer, aliases = rng.choice(FACTS)
    return Problem(
        id=f"mix-facts-{i}",
        question=q,
        answer=answer,
        kind="text",
        metadata={"family": "facts", "aliases": list(aliases)},
    )


def _problem(family: str, i: int, question: str, program: str, *, kind: str) -> Problem:
    return Problem(
        id=f"mix-{family}-{i}",
        question=question,
        answer=_program_answer(program),
        kind=kind,  # type: ignore[arg-type]
        metadata={"family": family, "program": program},
    )


def _arithmetic(seed: int) -> Callable[[random.Random, int], Problem]:
    def make(rng: random.Random, i: int) -> Problem:
        p = arithmetic(1, seed=seed * 100_003 + i, prefix="mix-arith")[0]
        expression = p.metadata["expression"]
        return p.model_copy(
            update={"metadata": {"family": "arithmetic", "expression": expression, "program": expression}}
        )

    return make


def mixed_problems(n_per_family: int, *, seed: int, families: tuple[str, ...] = FAMILIES) -> list[Problem]:
    """``n_per_family`` problems of each family, reproducible from ``seed``, shuffled together.

    Ids carry the seed so a dev set (another seed) and a training set never share one.
    """
    makers: dict[str, Callable[[random.Random, int], Problem]] = {
        "arithmetic": _arithmetic(seed),
        "letters": _letters,
        "lists": _lists,
        "transform": _transform,
        "choice": _choice,
        "facts": _facts,
    }
    rng = random.Random(seed)
    out: list[Problem] = []
    for family in families:
        for i in range(n_per_family):
            p = makers[family](rng, i)
            out.append(p.model_copy(update={"id": f"{p.id}-s{seed}"}))
    rng.shuffle(out)
    return out


def curriculum_expressions(data_dir: Path, n: int) -> list[Problem]:
    """``n`` GSM8K *train* word problems of one or two operations with their verified expression, as
    arithmetic of the curriculum (the calculator's and python's candidate input is that expression)."""
    if n <= 0:
        return []
    short = expression_problems(data_dir / "gsm8k_train.jsonl")
    ones = [p for p in short if operator_count(p.metadata["expression"]) == 1][: n // 2]
    twos = [p for p in short if operator_count(p.metadata["expression"]) == 2][: n - len(ones)]
    out = []
    for p in ones + twos:
        e = p.metadata["expression"]
        out.append(p.model_copy(update={"metadata": {**p.metadata, "family": "arithmetic", "program": e}}))
    return out


#: The mixed dev set: this many of each kind, from a seed no training set uses (its facts come from the
#: same bank as training's: the held-out file has facts of its own).
DEV_PER_FAMILY = 4
DEV_SEED = 99_991


def mixed_dev() -> list[Problem]:
    """The fixed dev set of a mixed run's gate (24 problems)."""
    return mixed_problems(DEV_PER_FAMILY, seed=DEV_SEED)
