"""Write reward_pipeline/evaluation/data/mixed_heldout.jsonl: 20 questions of each of the six kinds of
the mixed curriculum, in templates, words and facts that `reward_pipeline.training.curriculum` never
writes (the arithmetic ones are the first 20 of arith_words_heldout.jsonl). Run once; the file is
committed, and nothing trains on it.

    python scripts/make_mixed_heldout.py
"""

from __future__ import annotations

import json
import random

from mixed_file import DATA, N, category_options, fact_row, make_rows, write_interleaved

# Words the training generator's bank does not hold.
WORDS = (
    "elephant mississippi coconut pineapple telephone cinnamon broccoli butterfly committee raspberry "
    "tennessee grasshopper peppermint bookkeeper hippopotamus spaghetti assessment balloonist chocolate "
    "apartment avocado blueberry dinosaur envelope flamingo horizon hurricane invisible jellyfish "
    "lemonade macaroni nightingale orchestra panorama referee satellite skeleton telescope tornado "
    "vanilla woodpecker accordion"
).split()
FACTS = (
    ("Which city is the capital of Sweden?", "Stockholm", []),
    ("Name the capital city of Poland.", "Warsaw", []),
    ("The capital of Belgium is which city?", "Brussels", []),
    ("Which city is the capital of the Netherlands?", "Amsterdam", []),
    ("What is the largest planet in our solar system?", "Jupiter", []),
    ("Which planet is known as the Red Planet?", "Mars", []),
    ("What is the chemical symbol for gold?", "Au", []),
    ("What colour do you get by mixing blue and yellow?", "green", []),
    ("Which animal is the largest mammal on Earth?", "blue whale", ["whale", "the blue whale"]),
    ("What is the main language spoken in Brazil?", "Portuguese", []),
    ("Which continent is Kenya in?", "Africa", []),
    ("What do cows drink?", "water", []),
    ("How many sides does a hexagon have?", "6", ["six"]),
    ("How many minutes are there in an hour?", "60", ["sixty"]),
    ("Which bird is a symbol of peace?", "dove", ["the dove", "a dove"]),
    ("What is the freezing point of water in degrees Celsius?", "0", ["zero", "0 degrees"]),
    ("Who painted the Mona Lisa?", "Leonardo da Vinci", ["da Vinci", "Leonardo"]),
    ("What is the name of the young of a sheep?", "lamb", ["a lamb"]),
    ("Which instrument has 88 keys?", "piano", ["the piano", "a piano"]),
    ("What is the closest star to Earth?", "Sun", ["the Sun"]),
)
CATEGORIES = {
    "kind of bird": ("sparrow", "eagle", "robin", "owl", "parrot", "pigeon"),
    "kind of tree": ("oak", "pine", "maple", "birch", "willow", "cedar"),
    "kind of metal": ("iron", "copper", "silver", "gold", "tin", "zinc"),
    "kind of sport": ("tennis", "football", "hockey", "golf", "rugby", "cricket"),
    "kind of clothing": ("shirt", "jacket", "sock", "scarf", "coat", "glove"),
    "kind of weather": ("rain", "snow", "fog", "hail", "sleet", "thunder"),
}


def letters(rng: random.Random, i: int) -> dict:
    word = WORDS[i % len(WORDS)]
    letter = rng.choice(word)
    form = i % 2
    q = (
        f"In the word {word}, how many times can you find the letter {letter}?"
        if form == 0
        else f"Tell me the number of '{letter}' characters in \"{word}\"."
    )
    return {"question": q, "answer": str(word.count(letter)), "kind": "math"}


def lists(rng: random.Random, i: int) -> dict:
    xs = [rng.randint(2, 120) for _ in range(rng.randint(4, 7))]
    shown = " ".join(map(str, xs))
    form = i % 4
    if form == 0:
        return {"question": f"Numbers: {shown}. Which one is the biggest?", "answer": str(max(xs)), "kind": "math"}
    if form == 1:
        return {"question": f"Add up all of these: {shown}.", "answer": str(sum(xs)), "kind": "math"}
    if form == 2:
        return {"question": f"Which is the lowest value among {shown}?", "answer": str(min(xs)), "kind": "math"}
    words = rng.sample(WORDS, 4)
    return {
        "question": f"Which of these words comes first in a dictionary: {' / '.join(words)}?",
        "answer": sorted(words)[0],
        "kind": "text",
    }


def transform(rng: random.Random, i: int) -> dict:
    word = WORDS[(i * 7 + 3) % len(WORDS)]
    form = i % 3
    if form == 0:
        return {"question": f"Spell {word} backwards.", "answer": word[::-1], "kind": "text"}
    if form == 1:
        return {"question": f"What is the last letter of {word}?", "answer": word[-1], "kind": "text"}
    return {
        "question": f"Take the word {word} and drop its first two letters. What is left?",
        "answer": word[2:],
        "kind": "text",
    }


def choice(rng: random.Random, i: int) -> dict:
    category, options, letter = category_options(rng, CATEGORIES, i)
    body = "\n".join(f"({'ABCD'[k]}) {o}" for k, o in enumerate(options))
    return {
        "question": f"Pick the option that is a {category}.\n{body}\nAnswer with the letter.",
        "answer": letter,
        "kind": "mc",
        "choices": options,
    }


def facts(rng: random.Random, i: int) -> dict:
    return fact_row(FACTS[i])


def main() -> None:
    rng = random.Random(20261205)
    arith = [json.loads(line) for line in (DATA / "arith_words_heldout.jsonl").read_text().splitlines()[:N]]
    rows = {"arithmetic": [{**a, "metadata": {"family": "arithmetic"}} for a in arith]}
    rows |= make_rows(
        rng, {"letters": letters, "lists": lists, "transform": transform, "choice": choice, "facts": facts}, N
    )
    write_interleaved(DATA / "mixed_heldout.jsonl", "heldout-mixed", rows, N)


if __name__ == "__main__":
    main()
