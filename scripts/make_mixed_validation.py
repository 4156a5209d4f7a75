"""Write reward_pipeline/evaluation/data/mixed_validation.jsonl: 20 questions of each of the six kinds of
the mixed curriculum, in templates, words and facts that neither `reward_pipeline.training.curriculum` nor
the held-out file (`make_mixed_heldout.py`) uses. Run once; the file is committed, and nothing trains on it.

Why a second unseen file: the gate's dev set is drawn from the training generator (its facts are training
facts), so it cannot see whether a candidate sends *new* knowledge questions to a tool, and choosing
between candidates on the held-out file would spend it. Candidates are compared here; the held-out file
then measures the one chosen.

    python scripts/make_mixed_validation.py
"""

from __future__ import annotations

import random

from mixed_file import DATA, N, category_options, fact_row, make_rows, write_interleaved

# Words neither the training generator's bank nor the held-out file holds (a test checks).
WORDS = (
    "happiness bubblegum marshmallow dragonfly waterfall snowflake lighthouse grandmother cucumber hedgehog "
    "watermelon toothbrush peacock cappuccino pepperoni tambourine nonsense kettle puffin jigsaw sweetheart "
    "caravan lollipop parrotfish mushroom sandcastle porcupine cheerleader raccoon goldfish"
).split()

#: (question, answer, aliases): knowledge questions in openings of their own, numbers among the answers
FACTS = (
    ("Which country is famous for the Great Wall?", "China", []),
    ("How many wheels are on a tricycle?", "3", ["three"]),
    ("How many days are there in September?", "30", ["thirty"]),
    ("Which country is shaped like a boot?", "Italy", []),
    ("Which sea creature has eight arms?", "octopus", ["an octopus", "the octopus"]),
    ("Name the capital of the United States.", "Washington", ["Washington, D.C.", "Washington DC"]),
    ("Which animal is known for its black and white stripes?", "zebra", ["a zebra", "the zebra"]),
    ("A young goat is called what?", "kid", ["a kid"]),
    ("What colour is a polar bear's fur?", "white", []),
    ("In which country would you find the city of Toronto?", "Canada", []),
    ("Who wrote the play Macbeth?", "William Shakespeare", ["Shakespeare"]),
    ("A pentagon has how many sides?", "5", ["five"]),
    ("Which bird cannot fly and lives in Antarctica?", "penguin", ["the penguin", "a penguin", "penguins"]),
    ("Which is the smallest continent?", "Australia", ["Oceania"]),
    ("Which fruit keeps the doctor away, according to the saying?", "apple", ["an apple", "apples"]),
    ("Which country has a red maple leaf on its flag?", "Canada", []),
    ("The first meal of the day is called what?", "breakfast", []),
    ("Snow White lived with how many dwarfs?", "7", ["seven"]),
    ("Where do fish live?", "water", ["in water", "the sea", "in the sea"]),
    ("Which big cat has a mane?", "lion", ["the lion", "a lion"]),
)
CATEGORIES = {
    "insect": ("ant", "bee", "beetle", "moth", "wasp", "ladybird"),
    "gemstone": ("ruby", "emerald", "sapphire", "pearl", "opal", "topaz"),
    "footwear": ("boot", "sandal", "slipper", "sneaker", "clog", "loafer"),
    "kitchen utensil": ("ladle", "whisk", "fork", "spatula", "grater", "peeler"),
    "building": ("church", "hospital", "barn", "museum", "temple", "factory"),
    "fish": ("cod", "trout", "tuna", "herring", "carp", "sardine"),
}
#: (template, operation): one- and two-step word problems in settings of their own
ARITHMETIC = (
    ("A baker made {a} rolls in the morning and {b} in the afternoon. How many rolls did she make that day?", "a+b"),
    ("A parking lot held {a} cars. Then {b} cars drove away. How many cars are still parked?", "a-b"),
    ("Each crate holds {c} melons. How many melons fill {d} crates?", "c*d"),
    ("{e} stickers are split evenly between {d} friends. How many stickers does each friend receive?", "e/d"),
    (
        "A farmer collects {c} eggs every day for {d} days and then sells {b} of them. "
        "How many eggs does the farmer have left?",
        "c*d-b",
    ),
)


def arithmetic(rng: random.Random, i: int) -> dict:
    template, op = ARITHMETIC[i % len(ARITHMETIC)]
    c, d = rng.randint(3, 12), rng.randint(2, 9)
    a, b = rng.randint(20, 90), rng.randint(1, min(19, c * d - 1))  # c*d-b stays positive
    e = c * d  # a quotient that comes out whole
    value = {"a+b": a + b, "a-b": a - b, "c*d": c * d, "e/d": c, "c*d-b": c * d - b}[op]
    return {"question": template.format(a=a, b=b, c=c, d=d, e=e), "answer": str(value), "kind": "math"}


def letters(rng: random.Random, i: int) -> dict:
    word = WORDS[i % len(WORDS)]
    letter = rng.choice(word)
    form = i % 3
    if form == 0:
        q = f"How many {letter} letters are there in the word {word}?"
    elif form == 1:
        q = f"Look at '{word}'. How many times is {letter} in it?"
    else:
        q = f"What is the count of the letter {letter} in {word}?"
    return {"question": q, "answer": str(word.count(letter)), "kind": "math"}


def lists(rng: random.Random, i: int) -> dict:
    xs = [rng.randint(3, 140) for _ in range(rng.randint(4, 7))]
    shown = ", ".join(map(str, xs))
    form = i % 5
    if form == 0:
        return {"question": f"From the numbers {shown}, pick the largest.", "answer": str(max(xs)), "kind": "math"}
    if form == 1:
        return {"question": f"Give the total of {shown}.", "answer": str(sum(xs)), "kind": "math"}
    if form == 2:
        return {"question": f"Among {shown}, what is the smallest one?", "answer": str(min(xs)), "kind": "math"}
    if form == 3:
        return {"question": f"How many items does this list have: {shown}?", "answer": str(len(xs)), "kind": "math"}
    words = rng.sample(WORDS, 4)
    return {
        "question": f"Which word would come last in a dictionary: {', '.join(words)}?",
        "answer": sorted(words)[-1],
        "kind": "text",
    }


def transform(rng: random.Random, i: int) -> dict:
    word = WORDS[(i * 7 + 5) % len(WORDS)]
    form = i % 4
    if form == 0:
        return {"question": f"Write the word {word} backwards.", "answer": word[::-1], "kind": "text"}
    if form == 1:
        return {"question": f"{word.capitalize()} starts with which letter?", "answer": word[0], "kind": "text"}
    if form == 2:
        return {
            "question": f"Leave out the last two letters of {word}. What do you get?",
            "answer": word[:-2],
            "kind": "text",
        }
    return {"question": f"Which letter comes second in {word}?", "answer": word[1], "kind": "text"}


def choice(rng: random.Random, i: int) -> dict:
    category, options, letter = category_options(rng, CATEGORIES, i)
    body = "\n".join(f"{'ABCD'[k]}. {o}" for k, o in enumerate(options))
    return {
        "question": f"Choose the {category} from the list below.\n{body}\nAnswer A, B, C or D.",
        "answer": letter,
        "kind": "mc",
        "choices": options,
    }


def facts(rng: random.Random, i: int) -> dict:
    return fact_row(FACTS[i])


def main() -> None:
    makers = {
        "arithmetic": arithmetic,
        "letters": letters,
        "lists": lists,
        "transform": transform,
        "choice": choice,
        "facts": facts,
    }
    rows = make_rows(random.Random(20261207), makers, N)
    write_interleaved(DATA / "mixed_validation.jsonl", "validation-mixed", rows, N)


if __name__ == "__main__":
    main()
