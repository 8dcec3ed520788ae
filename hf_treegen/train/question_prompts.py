"""Short questions about computing and everyday life, for drafter distillation; written for this project.

The exercise prompts (:mod:`hf_treegen.train.exercise_prompts`) ask for Python code and Python
concepts; the chat prompts (:mod:`hf_treegen.train.chat_prompts`) fill everyday templates. Users also
ask short, plain questions between the two: what a piece of computing jargon means, what a library is
for, what an error message is telling them, how to get better at something, why something in nature
happens. This module writes those from hand-written lists, each item asked in a few phrasings
(:mod:`hf_treegen.train.families`). The answers come from the target itself, as for every other prompt.

Held out like the exercise prompts: no built-in evaluation or demo prompt, and no item whose topic
words all appear in one of them. Items were also chosen to stay off the built-in prompts' topics
(no item about threads and processes, type hints or context managers, say), which the word test alone
would not catch. For a given seed the list is fixed, a shorter list is a prefix of a longer one, and
ids are content hashes.
"""

from __future__ import annotations

from .families import Family, family_prompts
from .prompts import Prompt

#: Computing ideas beyond Python itself, each a noun phrase.
COMPUTING: tuple[str, ...] = (
    "a hash table", "Big O notation", "an API", "Git", "a commit in Git", "a branch in Git", "a merge conflict",
    "SQL", "a primary key in a database", "a database index", "a REST API", "HTTP status codes", "a browser cookie",
    "DNS", "an IP address", "a CPU cache", "RAM", "an operating system", "a compiler", "an interpreter",
    "a linked list", "a binary tree", "a queue data structure", "a stack data structure", "quicksort", "merge sort",
    "a graph in computer science", "breadth-first search", "depth-first search", "dynamic programming",
    "a race condition", "a deadlock", "continuous integration", "Docker", "a virtual machine", "cloud computing",
    "encryption", "password hashing", "two-factor authentication", "open-source software", "a software licence",
    "machine learning", "a neural network", "overfitting", "a large language model", "floating-point rounding error",
    "a bit and a byte", "hexadecimal numbers", "a file system", "the command line", "an environment variable",
    "a shell script", "semantic versioning", "debugging", "refactoring", "technical debt", "code review",
    "an IDE", "object-oriented programming", "functional programming", "a pure function", "a side effect",
    "an edge case", "a memory leak", "caching", "latency", "a load balancer", "a web server", "HTML", "CSS",
    "JavaScript", "YAML", "a CSV file", "a URL", "HTTPS", "a firewall rule", "a backup strategy", "an algorithm",
    "a data structure", "a pointer", "a compiler error", "a linter", "a code formatter", "test-driven development",
    "an integration test", "a package manager", "a dependency", "a build system", "a configuration file",
    "a log file", "a cron job", "a webhook", "an SSH key", "a checksum", "data compression", "a UUID",
    "a timestamp", "UTC", "a regular expression engine", "a state machine", "a design pattern", "the singleton pattern",
    "an event loop", "a callback function", "a promise in JavaScript", "a database transaction", "a foreign key",
    "a NoSQL database", "a spreadsheet formula", "a pixel", "a vector image", "an array",
)
COMPUTING_TEMPLATES: tuple[str, ...] = (
    "What is {idea}?",
    "Explain {idea} in simple terms.",
    "Explain {idea} to a beginner, with an example.",
    "Why is {idea} useful?",
)

#: Python modules and well-known packages, as they are written in code.
LIBRARIES: tuple[str, ...] = (
    "collections", "itertools", "pathlib", "datetime", "re", "sys", "json", "csv", "random", "math", "statistics",
    "subprocess", "argparse", "logging", "unittest", "pytest", "dataclasses", "functools", "operator", "bisect",
    "shutil", "glob", "tempfile", "asyncio", "socket", "urllib", "requests", "numpy", "pandas", "matplotlib",
    "sqlite3", "pickle", "time", "timeit", "decimal", "fractions", "enum", "abc", "string", "zipfile", "hashlib",
    "uuid", "pprint", "secrets", "doctest", "struct", "base64", "gzip", "tkinter", "flask", "django", "scipy",
    "scikit-learn", "pillow", "beautifulsoup4", "click", "rich", "tqdm", "pydantic", "fastapi", "sqlalchemy",
)
LIBRARY_TEMPLATES: tuple[str, ...] = (
    "What is `{library}` used for in Python?",
    "Give a short example of using `{library}` in Python.",
    "What are the most useful parts of `{library}` for a beginner?",
)

#: Python error messages, as a user pastes them.
ERRORS: tuple[str, ...] = (
    "TypeError: 'int' object is not subscriptable", "IndexError: list index out of range", "KeyError: 'name'",
    "NameError: name 'total' is not defined", "IndentationError: unexpected indent",
    "AttributeError: 'NoneType' object has no attribute 'append'",
    "ValueError: invalid literal for int() with base 10: 'abc'", "ZeroDivisionError: division by zero",
    "ModuleNotFoundError: No module named 'requests'", "RecursionError: maximum recursion depth exceeded",
    "UnboundLocalError: local variable 'count' referenced before assignment",
    "FileNotFoundError: [Errno 2] No such file or directory: 'data.txt'",
    'TypeError: can only concatenate str (not "int") to str', "SyntaxError: invalid syntax",
    "UnicodeDecodeError: 'utf-8' codec can't decode byte 0xff", "TypeError: unhashable type: 'list'",
    "ImportError: cannot import name 'main' from 'app'", "PermissionError: [Errno 13] Permission denied",
    "TypeError: greet() missing 1 required positional argument: 'name'", "AssertionError",
    "RuntimeError: dictionary changed size during iteration", "TabError: inconsistent use of tabs and spaces",
    "json.decoder.JSONDecodeError: Expecting value: line 1 column 1", "TypeError: 'str' object is not callable",
    "ValueError: too many values to unpack (expected 2)", "AttributeError: 'list' object has no attribute 'split'",
    "TypeError: 'NoneType' object is not iterable", "OverflowError: math range error",
    "SyntaxError: EOL while scanning string literal", "TypeError: unsupported operand type(s) for +: 'int' and 'str'",
)
ERROR_TEMPLATES: tuple[str, ...] = (
    "What does this Python error mean?\n{error}",
    "I got `{error}` in Python. How do I fix it?",
    "Why does Python raise `{error}`, and how can I avoid it?",
)

#: Things people want to get better at, each a gerund phrase.
SKILLS: tuple[str, ...] = (
    "writing clear emails", "staying focused when working from home", "keeping a tidy kitchen", "typing faster",
    "making friends in a new city", "taking notes in lectures", "giving feedback to a colleague",
    "running short meetings", "remembering what I read", "managing my time at university",
    "staying calm in an argument",
    "writing a good essay", "preparing for a driving test", "naming variables well", "writing good commit messages",
    "learning Python faster", "reading other people's code", "writing unit tests", "finding bugs faster",
    "asking good questions on programming forums", "preparing for a coding interview", "documenting a small project",
    "learning to touch type", "saying no without feeling guilty", "keeping in touch with old friends",
    "cooking for one person", "packing light for a trip", "planning a weekly shop", "sticking to a new habit",
    "waking up early", "keeping a plant alive", "drawing simple cartoons", "taking better holiday photos",
    "learning song lyrics", "memorising a speech", "negotiating a salary", "writing a short story",
    "making small talk", "tidying a cluttered garage", "studying with flashcards", "cutting down on phone use",
    "keeping a clean inbox", "writing a CV", "organising digital photos", "estimating how long a task will take",
    "learning to bake cakes", "growing tomatoes", "keeping a running streak going", "decorating a small room",
    "helping a child with homework", "teaching an old dog new tricks", "planning a garden", "learning chess openings",
)
SKILL_TEMPLATES: tuple[str, ...] = (
    "Give three tips for {skill}.",
    "How can I get better at {skill}?",
    "What are common mistakes people make when {skill}?",
)

#: Things with benefits worth asking about, each a noun phrase.
BENEFITS: tuple[str, ...] = (
    "learning to cook", "a standing desk", "drinking green tea", "keeping a diary", "learning a second language",
    "public libraries", "cycling to school", "napping in the afternoon", "composting kitchen waste",
    "playing board games with children", "reading aloud to children", "using a password manager",
    "version control for a solo project", "automated tests", "code comments", "learning to touch type",
    "swimming twice a week", "eating more fibre", "spending time in nature",
    "learning a musical instrument as an adult",
    "volunteering", "a weekly review of my goals", "buying second-hand clothes", "meal prepping on Sundays",
    "working in short focused blocks", "taking the stairs", "having a pet", "learning first aid",
    "writing things down by hand", "doing crosswords", "dancing", "gardening with children", "a monthly budget",
    "yoga for office workers", "pair programming", "open-plan offices", "a four-day working week",
    "learning to code as a teenager", "keeping a reading list", "living near a park",
)
BENEFIT_TEMPLATES: tuple[str, ...] = (
    "What are the benefits of {benefit}?",
    "What are the pros and cons of {benefit}?",
)

#: Everyday "why" questions, each the end of "why ...".
WHYS: tuple[str, ...] = (
    "the sky is dark at night", "we need sleep", "salt melts ice on roads", "a spoon looks bent in a glass of water",
    "some people are left-handed", "the ocean has waves", "plants need sunlight", "bread goes stale",
    "leaves are green", "we have fingerprints", "some cheeses have holes", "the wind blows",
    "planes can stay in the air",
    "dogs have wet noses", "my voice sounds different on a recording", "a rubbed balloon sticks to a wall",
    "a microwave heats food", "the moon looks bigger near the horizon", "we get goosebumps",
    "cats usually land on their feet", "coffee keeps people awake", "volcanoes erupt", "earthquakes happen",
    "snowflakes have six sides", "fireflies glow", "the Dead Sea is so salty",
    "we see lightning before we hear thunder",
    "hot air rises", "a rainbow is curved", "ice cubes crack in a drink", "our fingers wrinkle in the bath",
    "some animals hibernate", "the Earth has seasons of different lengths in different places", "fog forms",
    "metal rusts", "soap bubbles are round", "mountains have snow on top", "a candle flame points upwards",
    "the tides change twice a day", "tea leaves sink after a while", "cut grass smells so strong",
    "bicycles stay upright when moving", "glass is transparent", "fruit flies appear near old fruit",
)
WHY_TEMPLATES: tuple[str, ...] = (
    "Can you tell me why {why}?",
    "Explain in simple words why {why}.",
)

#: Everyday chores and how-tos, each the end of "how do I ...".
CHORES: tuple[str, ...] = (
    "get rid of fruit flies in the kitchen", "clean a shower head", "remove limescale from a tap",
    "get chewing gum off clothes", "keep bread fresh for longer", "stop my glasses from fogging up",
    "clean a stained mug", "freshen up a smelly pair of trainers", "get a stuck jar lid open",
    "stop a door from slamming", "tidy the cables behind my desk", "keep my phone battery healthy",
    "speed up a slow laptop", "choose a strong password", "set up a simple filing system for paperwork",
    "write a to-do list that I actually follow", "plan a birthday party on a budget",
    "make a packed lunch the night before",
    "cook pasta so it is not sticky", "store fresh herbs", "ripen an avocado faster", "reheat rice safely",
    "make a simple salad dressing", "cook a steak medium-rare", "make scrambled eggs creamy",
    "bake potatoes in the oven",
    "clean windows without streaks", "wash a wool jumper", "remove a red wine stain from a carpet",
    "get rid of a bad smell in the fridge", "prepare a room for painting", "choose paint colours for a small room",
    "keep a cat off the kitchen counter", "introduce a new cat to my dog", "help a puppy settle at night",
    "start running when I am out of shape", "warm up before exercise", "carry a heavy backpack comfortably",
    "read a nutrition label", "prepare for a long car journey with kids", "find cheap train tickets",
    "deal with jet lag", "pack a first-aid kit for hiking", "keep a journal when I have no time",
    "learn the names of the stars", "fall asleep on a plane", "write a thank-you card to a teacher",
)
CHORE_TEMPLATES: tuple[str, ...] = (
    "How do I {chore}?",
    "What is the best way to {chore}?",
)

#: (family, phrasings, fills): every item is asked in every phrasing of its family.
FAMILIES: tuple[Family, ...] = (
    ("computing", COMPUTING_TEMPLATES, tuple({"idea": idea} for idea in COMPUTING)),
    ("library", LIBRARY_TEMPLATES, tuple({"library": library} for library in LIBRARIES)),
    ("error", ERROR_TEMPLATES, tuple({"error": error} for error in ERRORS)),
    ("skill", SKILL_TEMPLATES, tuple({"skill": skill} for skill in SKILLS)),
    ("benefit", BENEFIT_TEMPLATES, tuple({"benefit": benefit} for benefit in BENEFITS)),
    ("why", WHY_TEMPLATES, tuple({"why": why} for why in WHYS)),
    ("chore", CHORE_TEMPLATES, tuple({"chore": chore} for chore in CHORES)),
)


def question_prompts(n: int | None = None, *, seed: int = 0) -> list[Prompt]:
    """``n`` short questions (all of them for None), in a seeded order.

    Every item is asked in each phrasing of its family, all once before any twice; families are dealt
    round-robin so any prefix mixes them. ``Prompt.template`` is ``question-<family>``.
    """
    return family_prompts(FAMILIES, "question", n, seed)
