"""Knowledge questions written from small tables of facts, in many phrasings.

A hand-written bank of a hundred-odd facts taught every adapter that *those* questions go to a model,
and a knowledge question it had not met -- a new opening, "How many ..." or "Which is the largest ..."
as list and letter questions open -- fell to the route most kinds take, a program. What carries to an
unseen question is the shape all knowledge questions share and the computable ones lack: nothing in
the question to compute on. So each fact here is asked in several relations and openings (what, which,
name, how many, "... is called what?", reversed), about a thousand questions in all, and the route
trials still decide which route earns reward on each: a model that knows the answer, or nothing.

No fact of the held-out or the validation file is in these tables (a test checks the questions; the
relations -- capitals, languages, sides of shapes -- overlap, and were chosen after reading both files).
"""

from __future__ import annotations

from collections.abc import Iterator

#: (question, answer, aliases)
Fact = tuple[str, str, tuple[str, ...]]

#: country, capital, main language, continent (aliases after a bar)
COUNTRIES = (
    ("France", "Paris", "French", "Europe"),
    ("Germany", "Berlin", "German", "Europe"),
    ("Spain", "Madrid", "Spanish", "Europe"),
    ("Japan", "Tokyo", "Japanese", "Asia"),
    ("Russia", "Moscow", "Russian", "Europe|Asia"),
    ("Egypt", "Cairo", "Arabic", "Africa"),
    ("Greece", "Athens", "Greek", "Europe"),
    ("Portugal", "Lisbon", "Portuguese", "Europe"),
    ("Mexico", "Mexico City", "Spanish", "North America"),
    ("India", "New Delhi|Delhi", "Hindi|English", "Asia"),
    ("Argentina", "Buenos Aires", "Spanish", "South America"),
    ("Peru", "Lima", "Spanish", "South America"),
    ("Norway", "Oslo", "Norwegian", "Europe"),
    ("Thailand", "Bangkok", "Thai", "Asia"),
    ("South Korea", "Seoul", "Korean", "Asia"),
    ("Cuba", "Havana", "Spanish", "North America"),
    ("Ireland", "Dublin", "English|Irish", "Europe"),
    ("Austria", "Vienna", "German", "Europe"),
    ("Finland", "Helsinki", "Finnish", "Europe"),
    ("Denmark", "Copenhagen", "Danish", "Europe"),
    ("Hungary", "Budapest", "Hungarian", "Europe"),
    ("Chile", "Santiago", "Spanish", "South America"),
    ("Iran", "Tehran", "Persian|Farsi", "Asia"),
    ("Vietnam", "Hanoi", "Vietnamese", "Asia"),
    ("Morocco", "Rabat", "Arabic", "Africa"),
    ("Australia", "Canberra", "English", "Australia|Oceania"),
    ("New Zealand", "Wellington", "English", "Oceania|Australia"),
    ("Turkey", "Ankara", "Turkish", "Asia|Europe"),
    ("Ethiopia", "Addis Ababa", "Amharic", "Africa"),
    ("Colombia", "Bogota|Bogotá", "Spanish", "South America"),
    ("Indonesia", "Jakarta", "Indonesian", "Asia"),
    ("Switzerland", "Bern|Berne", "German|French", "Europe"),
    ("Scotland", "Edinburgh", "English", "Europe"),
    ("Ukraine", "Kyiv|Kiev", "Ukrainian", "Europe"),
)

#: animal, its young, the sound it makes, its legs
ANIMALS = (
    ("dog", "puppy", "bark|woof", "4"),
    ("cat", "kitten", "meow|miaow|purr", "4"),
    ("cow", "calf", "moo", "4"),
    ("horse", "foal|colt|filly", "neigh", "4"),
    ("pig", "piglet", "oink", "4"),
    ("duck", "duckling", "quack", "2"),
    ("hen", "chick", "cluck", "2"),
    ("frog", "tadpole", "croak|ribbit", "4"),
    ("owl", "owlet", "hoot", "2"),
    ("goose", "gosling", "honk", "2"),
    ("deer", "fawn", "bellow", "4"),
    ("swan", "cygnet", "hiss", "2"),
    ("bear", "cub", "growl|roar", "4"),
    ("kangaroo", "joey", "cough", "2"),
    ("tiger", "cub", "roar", "4"),
    ("wolf", "pup|cub", "howl", "4"),
    ("donkey", "foal", "bray|hee-haw", "4"),
    ("mouse", "pup|pinkie", "squeak", "4"),
)

#: shape, sides
SHAPES = (
    ("triangle", "3"),
    ("square", "4"),
    ("rectangle", "4"),
    ("octagon", "8"),
    ("heptagon", "7"),
    ("decagon", "10"),
    ("nonagon", "9"),
    ("dodecagon", "12"),
)

#: how many of the first are in the second
UNITS = (
    ("seconds", "a minute", "60"),
    ("hours", "a day", "24"),
    ("days", "a week", "7"),
    ("months", "a year", "12"),
    ("years", "a decade", "10"),
    ("years", "a century", "100"),
    ("years", "a millennium", "1000"),
    ("centimetres", "a metre", "100"),
    ("grams", "a kilogram", "1000"),
    ("metres", "a kilometre", "1000"),
    ("eggs", "a dozen", "12"),
    ("days", "a fortnight", "14"),
    ("weeks", "a year", "52"),
    ("millimetres", "a centimetre", "10"),
    ("minutes", "a day", "1440"),
)

#: element, symbol
ELEMENTS = (
    ("oxygen", "O"),
    ("hydrogen", "H"),
    ("carbon", "C"),
    ("iron", "Fe"),
    ("silver", "Ag"),
    ("sodium", "Na"),
    ("helium", "He"),
    ("nitrogen", "N"),
    ("copper", "Cu"),
    ("lead", "Pb"),
)

#: thing, colour
COLOURS = (
    ("a lemon", "yellow"),
    ("an emerald", "green"),
    ("a crow", "black"),
    ("a flamingo", "pink"),
    ("chocolate", "brown"),
    ("a pumpkin", "orange"),
    ("a cherry", "red"),
    ("a lime", "green"),
    ("a swan", "white"),
    ("a carrot", "orange"),
    ("the sea", "blue"),
    ("a ruby", "red"),
    ("a school bus in America", "yellow"),
    ("a fire engine", "red"),
    ("charcoal", "black"),
)

#: work, who made it
WORKS = (
    ("Oliver Twist", "Charles Dickens|Dickens"),
    ("Pride and Prejudice", "Jane Austen|Austen"),
    ("The Starry Night", "Vincent van Gogh|van Gogh"),
    ("the Moonlight Sonata", "Ludwig van Beethoven|Beethoven"),
    ("On the Origin of Species", "Charles Darwin|Darwin"),
    ("The Magic Flute", "Wolfgang Amadeus Mozart|Mozart"),
    ("Don Quixote", "Miguel de Cervantes|Cervantes"),
    ("The Adventures of Tom Sawyer", "Mark Twain|Twain"),
    ("War and Peace", "Leo Tolstoy|Tolstoy"),
    ("the Odyssey", "Homer"),
    ("Othello", "William Shakespeare|Shakespeare"),
    ("The Jungle Book", "Rudyard Kipling|Kipling"),
)

#: planets in order from the Sun
PLANETS = ("Mercury", "Venus", "Earth", "Mars", "Jupiter", "Saturn", "Uranus", "Neptune")
MONTHS = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)
DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
ORDINALS = (
    "first",
    "second",
    "third",
    "fourth",
    "fifth",
    "sixth",
    "seventh",
    "eighth",
    "ninth",
    "tenth",
    "eleventh",
    "twelfth",
)
NUMBER_WORDS = {
    "2": "two",
    "3": "three",
    "4": "four",
    "6": "six",
    "7": "seven",
    "8": "eight",
    "9": "nine",
    "10": "ten",
    "12": "twelve",
    "14": "fourteen",
    "24": "twenty-four",
    "52": "fifty-two",
    "60": "sixty",
    "100": "one hundred",
    "1000": "one thousand",
    "1440": "",
}


def _fact(question: str, answers: str) -> Fact:
    first, *rest = answers.split("|")
    words = NUMBER_WORDS.get(first)
    return question, first, tuple(rest) + ((words,) if words else ())


def _country_facts() -> Iterator[Fact]:
    for country, capital, language, continent in COUNTRIES:
        for q in (
            f"What is the capital city of {country}?",
            f"Which city is {country}'s capital?",
            f"Tell me the capital of {country}.",
            f"{country} has which city as its capital?",
        ):
            yield _fact(q, capital)
        city = capital.split("|")[0]
        for q in (f"{city} is the capital of which country?", f"Which country has {city} as its capital?"):
            yield _fact(q, country)
        for q in (
            f"Which language do most people in {country} speak?",
            f"Name the main language of {country}.",
            f"People in {country} mostly speak which language?",
        ):
            yield _fact(q, language)
        for q in (
            f"On which continent is {country}?",
            f"{country} lies on which continent?",
            f"Name the continent {country} is part of.",
        ):
            yield _fact(q, continent)


def _animal_facts() -> Iterator[Fact]:
    for animal, young, sound, legs in ANIMALS:
        an = "an" if animal[0] in "aeiou" else "a"
        for q in (
            f"What do you call a young {animal}?",
            f"A baby {animal} is known as what?",
            f"Name the young of {an} {animal}.",
        ):
            yield _fact(q, young + "|" + "|".join(f"a {y}" for y in young.split("|")))
        for q in (f"What sound does {an} {animal} make?", f"Which noise does {an} {animal} make?"):
            yield _fact(q, sound)
        for q in (
            f"How many legs does {an} {animal} have?",
            f"Count the legs of {an} {animal}.",
            f"{an.capitalize()} {animal} walks on how many legs?",
        ):
            yield _fact(q, legs)


def _shape_facts() -> Iterator[Fact]:
    for shape, sides in SHAPES:
        an = "an" if shape[0] in "aeiou" else "a"
        for q in (
            f"How many sides has {an} {shape}?",
            f"Count the corners of {an} {shape}.",
            f"What is the number of sides of {an} {shape}?",
        ):
            yield _fact(q, sides)
    for shape, sides in SHAPES:
        if shape not in ("square", "rectangle"):
            yield _fact(f"What do you call a flat shape with {sides} straight sides?", shape)


def _unit_facts() -> Iterator[Fact]:
    for small, big, n in UNITS:
        for q in (
            f"How many {small} are in {big}?",
            f"How many {small} make {big}?",
            f"{big.capitalize()} has how many {small}?",
        ):
            yield _fact(q, n)


def _ordered_facts() -> Iterator[Fact]:
    for i, planet in enumerate(PLANETS):
        yield _fact(f"Which planet is {ORDINALS[i]} from the Sun?", planet)
        yield _fact(f"Counting from the Sun, which planet comes {ORDINALS[i]}?", planet)
    for i, month in enumerate(MONTHS):
        yield _fact(f"Which month is the {ORDINALS[i]} of the year?", month)
        yield _fact(f"Name the month that follows {MONTHS[i - 1]}.", month)
        yield _fact(f"What month comes just before {MONTHS[(i + 1) % 12]}?", month)
    for i, day in enumerate(DAYS):
        yield _fact(f"What day comes after {DAYS[i - 1]}?", day)
        yield _fact(f"Which day of the week comes before {DAYS[(i + 1) % 7]}?", day)


def _other_facts() -> Iterator[Fact]:
    for element, symbol in ELEMENTS:
        yield _fact(f"Give the chemical symbol of {element}.", symbol)
        yield _fact(f"Which element has the symbol {symbol}?", element)
    for thing, colour in COLOURS:
        yield _fact(f"What colour is {thing}?", colour)
        yield _fact(f"{thing[0].upper()}{thing[1:]} is usually which colour?", colour)
    for work, author in WORKS:
        yield _fact(f"Who created {work}?", author)
        yield _fact(f"{work[0].upper()}{work[1:]} is the work of which famous person?", author)
        yield _fact(f"Name the person behind {work}.", author)


def knowledge_facts() -> tuple[Fact, ...]:
    """Every question of the tables, in a fixed order."""
    return (*_country_facts(), *_animal_facts(), *_shape_facts(), *_unit_facts(), *_ordered_facts(), *_other_facts())
