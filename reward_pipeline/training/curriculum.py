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
    "vegetable": ("carrot", "potato", "onion", "cabbage", "pea", "spinach", "lettuce", "broccoli"),
    "shape": ("circle", "square", "triangle", "rectangle", "oval", "hexagon", "star", "diamond"),
    "tool": ("hammer", "saw", "drill", "wrench", "screwdriver", "shovel", "axe", "pliers"),
    "room of a house": ("kitchen", "bedroom", "bathroom", "hallway", "attic", "cellar", "garage", "lounge"),
    "flower": ("rose", "tulip", "daisy", "lily", "sunflower", "daffodil", "orchid", "poppy"),
    "day of the week": ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"),
}

#: openings of a category question; more than one, so no single phrasing marks the kind
_CHOICE_STEMS = (
    "Which of these is {a} {category}?",
    "Which one of the following is {a} {category}?",
    "Which word names {a} {category}?",
    "One of these is {a} {category}. Which one?",
)

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
    ("Name the planet closest to the Sun.", "Mercury", ()),
    ("Which ocean lies between Europe and America?", "Atlantic", ("Atlantic Ocean", "the Atlantic")),
    ("The Eiffel Tower stands in which city?", "Paris", ()),
    ("Which country has the city of Sydney?", "Australia", ()),
    ("Tell me the colour of a ripe tomato.", "red", ()),
    ("How many wheels does a bicycle have?", "2", ("two",)),
    ("Name the longest river in Africa.", "Nile", ("the Nile",)),
    ("Which metal is liquid at room temperature?", "mercury", ()),
    ("Who was the first person to walk on the Moon?", "Neil Armstrong", ("Armstrong",)),
    ("In which country are the pyramids of Giza?", "Egypt", ()),
    ("Which animal has a trunk?", "elephant", ("an elephant", "the elephant")),
    ("A baby cow is called what?", "calf", ("a calf",)),
    ("Which gas do humans breathe in to live?", "oxygen", ()),
    ("Name the season that comes after summer.", "autumn", ("fall",)),
    # Counts, superlatives and "which one" questions are knowledge too: the list and letter questions
    # open with "How many" and "the largest", and a bank mostly of "What is the capital/colour of" facts
    # taught the Conductor that such openings mean a program.
    ("How many seconds are in a minute?", "60", ("sixty",)),
    ("How many days are in a leap year?", "366", ()),
    ("How many legs does an insect have?", "6", ("six",)),
    ("How many players are on a football team on the field?", "11", ("eleven",)),
    ("How many continents are on Earth?", "7", ("seven",)),
    ("How many colours are in a rainbow?", "7", ("seven",)),
    ("How many strings does a standard guitar have?", "6", ("six",)),
    ("How many eyes does a person have?", "2", ("two",)),
    ("How many arms does an octopus have?", "8", ("eight",)),
    ("How many planets are in our solar system?", "8", ("eight",)),
    ("How many years are in a century?", "100", ("one hundred", "a hundred")),
    ("How many weeks are in a year?", "52", ("fifty-two",)),
    ("How many corners does a triangle have?", "3", ("three",)),
    ("How many fingers are on one hand?", "5", ("five",)),
    ("How many letters are in the English alphabet?", "26", ("twenty-six",)),
    ("What is the largest animal on land?", "elephant", ("the elephant", "African elephant")),
    ("What is the largest country in the world by area?", "Russia", ()),
    ("What is the largest desert in Africa?", "Sahara", ("the Sahara", "Sahara Desert")),
    ("What is the smallest planet in our solar system?", "Mercury", ()),
    ("What is the fastest land animal?", "cheetah", ("the cheetah", "a cheetah")),
    ("What is the hottest planet in our solar system?", "Venus", ()),
    ("What is the longest river in South America?", "Amazon", ("the Amazon", "Amazon River")),
    ("Which is the biggest bone in the human body?", "femur", ("the femur", "thigh bone")),
    ("Which is the tallest mountain in the world?", "Mount Everest", ("Everest",)),
    ("Which is the coldest continent?", "Antarctica", ()),
    ("Which is the largest bird in the world?", "ostrich", ("the ostrich",)),
    ("Which planet has the most famous rings?", "Saturn", ()),
    ("Which planet is closest to Earth in size?", "Venus", ()),
    ("What is the third planet from the Sun?", "Earth", ()),
    ("What do pandas mostly eat?", "bamboo", ()),
    ("What do spiders spin?", "webs", ("web", "a web", "silk")),
    ("What do hens lay?", "eggs", ("egg",)),
    ("What is the main ingredient of guacamole?", "avocado", ("avocados",)),
    ("What is the chemical formula of water?", "H2O", ()),
    ("What is the symbol for the element oxygen?", "O", ()),
    ("What is the currency of Japan?", "yen", ("the yen", "Japanese yen")),
    ("What is the currency of the United States?", "dollar", ("US dollar", "the dollar")),
    ("What language do people speak in Germany?", "German", ()),
    ("What language do people speak in Italy?", "Italian", ()),
    ("What language do people speak in Mexico?", "Spanish", ()),
    ("Which continent is France in?", "Europe", ()),
    ("Which continent is China part of?", "Asia", ()),
    ("On which continent is Brazil?", "South America", ()),
    ("Which country is home to the kangaroo?", "Australia", ()),
    ("Which country gave the Statue of Liberty to the United States?", "France", ()),
    ("In which city is the Colosseum?", "Rome", ()),
    ("In which city is Big Ben?", "London", ()),
    ("Who discovered penicillin?", "Alexander Fleming", ("Fleming",)),
    ("Who developed the theory of relativity?", "Albert Einstein", ("Einstein",)),
    ("Who invented the telephone?", "Alexander Graham Bell", ("Bell", "Graham Bell")),
    ("Who wrote Hamlet?", "William Shakespeare", ("Shakespeare",)),
    ("Who was the first President of the United States?", "George Washington", ("Washington",)),
    ("What is a baby horse called?", "foal", ("a foal", "colt", "filly")),
    ("What is a baby frog called?", "tadpole", ("a tadpole",)),
    ("What is a group of wolves called?", "pack", ("a pack",)),
    ("What do you call a baby bear?", "cub", ("a cub",)),
    ("What colour is a ripe strawberry?", "red", ()),
    ("What colour are most leaves in summer?", "green", ()),
    ("What colour is milk?", "white", ()),
    ("What is the opposite of east?", "west", ()),
    ("Which day comes after Monday?", "Tuesday", ()),
    ("Which month comes before March?", "February", ()),
    ("Which season is the coldest?", "winter", ()),
    ("What do we call the Moon when it is a full circle?", "full moon", ("a full moon",)),
    ("What force pulls things towards the ground?", "gravity", ()),
    ("What part of the plant takes in water from the soil?", "roots", ("root", "the roots")),
    ("What organ do we use to breathe?", "lungs", ("lung", "the lungs")),
    ("What organ do we think with?", "brain", ("the brain",)),
    ("What is the hardest natural substance?", "diamond", ("diamonds",)),
    ("What is the boiling point of water in degrees Fahrenheit?", "212", ("212 degrees",)),
    ("Name the author of Harry Potter.", "J. K. Rowling", ("J.K. Rowling", "Rowling", "JK Rowling")),
    ("Name the ocean on the west coast of the United States.", "Pacific", ("Pacific Ocean", "the Pacific")),
    ("Name the animal that gives us wool.", "sheep", ("a sheep",)),
    ("Name the metal used in most electric wires.", "copper", ()),
    ("Tell me which animal is called the ship of the desert.", "camel", ("the camel", "a camel")),
    ("Tell me the name of our galaxy.", "Milky Way", ("the Milky Way",)),
)

_LETTERS = "aeiourstnlm"


def _program_answer(program: str) -> str:
    # The generator's own candidate program, evaluated once with no builtins beyond what it uses: the
    # reference is the program's value, so reference and candidate cannot disagree by a typo.
    value = eval(program, {"__builtins__": {"sorted": sorted, "max": max, "min": min, "sum": sum, "len": len}})
    return str(value)


def _quote(rng: random.Random, word: str) -> str:
    # How a word is set off in the question varies, so the Conductor learns to lift it out of any of them.
    return rng.choice((word, f"'{word}'", f'"{word}"'))


#: Letter-count phrasings ({w}: the word, quoted or not; {l}: the letter).
_LETTER_TEMPLATES = (
    "How many times does the letter '{l}' appear in the word {w}?",
    "Count the letter {l} in the word {w}.",
    "How many {l}'s are in {w}?",
    "Count how often {l} occurs in {w}.",
    "The word {w}: how many of its letters are {l}?",
    "Find the number of occurrences of the letter {l} in {w}.",
    "How often is the letter {l} used in spelling {w}?",
    "If you spell {w}, how many times do you write {l}?",
)
#: Whole-word counts: (template, program over the bare word).
_WORD_COUNTS = (
    ("How many letters does the word {w} have?", "len('{word}')"),
    ("Count the letters in {w}.", "len('{word}')"),
    ("How many vowels are in the word {w}?", "sum(c in 'aeiou' for c in '{word}')"),
    ("Count the vowels (a, e, i, o, u) in {w}.", "sum(c in 'aeiou' for c in '{word}')"),
)


def _letters(rng: random.Random, i: int) -> Problem:
    word = rng.choice(WORDS)
    if rng.random() < 0.25:
        template, program = rng.choice(_WORD_COUNTS)
        q = template.format(w=_quote(rng, word))
        return _problem("letters", i, q, program.format(word=word), kind="math")
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
    q = rng.choice(_LETTER_TEMPLATES).format(l=letter, w=_quote(rng, word))
    program = f"'{word}'.count('{letter}')"
    return _problem("letters", i, q, program, kind="math")


def _numbers(rng: random.Random) -> list[int]:
    return [rng.randint(1, 130) for _ in range(rng.randint(3, 7))]


#: Number-list questions: (templates, program over the list literal ``{xs}``). {shown}: the numbers as written.
_LIST_QUESTIONS: tuple[tuple[tuple[str, ...], str], ...] = (
    (
        (
            "What is the largest number in this list: {shown}?",
            "Find the maximum of {shown}.",
            "Here are some numbers: {shown}. What is the greatest?",
            "Of {shown}, which number is the highest?",
        ),
        "max({xs})",
    ),
    (
        (
            "What is the smallest number in the list {shown}?",
            "Find the minimum of {shown}.",
            "Here are some numbers: {shown}. What is the least?",
            "Of {shown}, which number is the lowest?",
        ),
        "min({xs})",
    ),
    (
        (
            "What is the sum of the numbers {shown}?",
            "Compute the total of {shown}.",
            "What do {shown} add up to?",
            "Sum these numbers: {shown}.",
        ),
        "sum({xs})",
    ),
    (
        ("How many numbers are in the list {shown}?", "Count the numbers in {shown}."),
        "len({xs})",
    ),
    (
        ("What is the difference between the largest and smallest of {shown}?", "Find the range of {shown}."),
        "max({xs}) - min({xs})",
    ),
    (
        ("What is the second largest number among {shown}?", "Find the second biggest of {shown}."),
        "sorted({xs})[-2]",
    ),
    (
        ("How many even numbers are in {shown}?", "Count the even numbers among {shown}."),
        "len([x for x in {xs} if x % 2 == 0])",
    ),
)


def _word_list_question(rng: random.Random) -> tuple[str, str]:
    words = rng.sample(WORDS, rng.randint(3, 5))
    shown = rng.choice((", ", " ", " / ", "; ")).join(words)
    quoted = ", ".join(f"'{w}'" for w in words)
    form = rng.randrange(3)
    if form == 0:
        q = rng.choice(("Sort these words alphabetically: {s}.", "Put these words in alphabetical order: {s}."))
        return q.format(s=shown), f"', '.join(sorted([{quoted}]))"
    if form == 1:
        q = rng.choice(
            ("Alphabetically, which word is first: {s}?", "Of the words {s}, which is earliest in A-Z order?")
        )
        return q.format(s=shown), f"min([{quoted}])"
    q = rng.choice(("Alphabetically, which word is last: {s}?", "Of the words {s}, which is latest in A-Z order?"))
    return q.format(s=shown), f"max([{quoted}])"


def _lists(rng: random.Random, i: int) -> Problem:
    if rng.random() < 0.25:
        q, program = _word_list_question(rng)
        return _problem("lists", i, q, program, kind="text")
    xs = _numbers(rng)
    shown = rng.choice((", ", " ", "; ")).join(map(str, xs))
    templates, program = rng.choice(_LIST_QUESTIONS)
    q = rng.choice(templates).format(shown=shown)
    return _problem("lists", i, q, program.format(xs=f"[{', '.join(map(str, xs))}]"), kind="math")


_ORDINALS = ("first", "second", "third", "fourth", "fifth")


def _transform(rng: random.Random, i: int) -> Problem:
    form = rng.randrange(6)
    word = rng.choice(WORDS)
    w = _quote(rng, word)
    if form == 0:
        q = rng.choice(("Reverse the word {w}.", "Write {w} in reverse order.", "What is {w} written back to front?"))
        return _problem("transform", i, q.format(w=w), f"'{word}'[::-1]", kind="text")
    if form == 1:
        n = rng.randint(1, min(5, len(word)))
        q = rng.choice(("What is the {o} letter of the word {w}?", "Give the {o} letter of {w}."))
        return _problem("transform", i, q.format(o=_ORDINALS[n - 1], w=w), f"'{word}'[{n - 1}]", kind="text")
    if form == 2:
        n = rng.randint(1, 3)
        if n == 1:
            q = rng.choice(("Give the final letter of {w}.", "Which letter does {w} end with?"))
        else:
            q = rng.choice(("Give the last {n} letters of {w}.", "Which {n} letters does {w} end with?"))
        return _problem("transform", i, q.format(w=w, n=n), f"'{word}'[-{n}:]", kind="text")
    if form == 3:
        n = rng.randint(2, 4)
        q = rng.choice(("Give the first {n} letters of {w}.", "Which {n} letters does {w} start with?"))
        return _problem("transform", i, q.format(w=w, n=n), f"'{word}'[:{n}]", kind="text")
    if form == 4:
        n = rng.randint(1, 3)
        q, program = rng.choice(
            (
                ("Remove the first {n} letter(s) from {w}. What remains?", f"'{word}'[{n}:]"),
                ("Delete the last {n} letter(s) of {w}.", f"'{word}'[:-{n}]"),
            )
        )
        return _problem("transform", i, q.format(w=w, n=n), program, kind="text")
    words = rng.sample(WORDS, rng.randint(2, 4))
    phrase = " ".join(words)
    q = rng.choice(("Write the first letter of each word in '{p}'.", 'Give the initials of "{p}".'))
    return _problem("transform", i, q.format(p=phrase), f"''.join(w[0] for w in '{phrase}'.split())", kind="text")


def _choice(rng: random.Random, i: int) -> Problem:
    letters = "ABCD"
    if rng.random() < 0.7:
        category = rng.choice(list(CATEGORIES))
        right = rng.choice(CATEGORIES[category])
        others = [c for c in CATEGORIES if c != category]
        wrong = [rng.choice(CATEGORIES[c]) for c in rng.sample(others, 3)]
        article = "an" if category[0] in "aeiou" else "a"
        stem = rng.choice(_CHOICE_STEMS).format(a=article, category=category)
    else:
        word, right = rng.choice(OPPOSITES)
        pool = [b for a, b in OPPOSITES if b != right] + [a for a, _ in OPPOSITES if a != word]
        wrong = rng.sample(pool, 3)
        stem = f"What is the opposite of '{word}'?"
    options = [right, *wrong]
    rng.shuffle(options)
    answer = letters[options.index(right)]
    if rng.random() < 0.5:
        q = stem + " " + " ".join(f"{letters[k]}) {o}" for k, o in enumerate(options))
    else:  # options on lines of their own, as exam papers set them
        q = stem + "\n" + "\n".join(f"({letters[k]}) {o}" for k, o in enumerate(options)) + "\nReply with A, B, C or D."
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
