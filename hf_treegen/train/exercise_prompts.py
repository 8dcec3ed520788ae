"""Short programming requests for drafter distillation, written for this project.

The prompts of :mod:`hf_treegen.train.prompts` hand the target a passage of documentation or a stdlib
function and ask about it, so the answers lean on the text in the prompt. Most users of a small code
assistant ask short questions instead: "write a function that ...", "what is ... in Python?", "how do
I ... ?". The target then answers from what it knows, in its own habitual shape (a sentence, a code
block, a short explanation after it), and a drafter that never saw those answers accepts fewer tokens
on them. This module writes such requests from hand-written task, concept and how-to lists, each
asked in a few phrasings. The answers come from the target itself, as for every other prompt.

Held out from evaluation twice over: a built-in evaluation or demo prompt is never emitted
(:func:`hf_treegen.train.prompts.is_eval_prompt`), and neither is a task, concept or chore whose topic
words all appear in one of them (:func:`hf_treegen.train.families.same_topic_as_eval`), so training never
sees a rewording of a benchmark request. Determinism matches :func:`hf_treegen.train.chat_prompts.chat_prompts`:
for a given seed the list is fixed, a shorter list is a prefix of a longer one, and ids are content hashes.
"""

from __future__ import annotations

from .families import Family, family_prompts
from .prompts import Prompt

#: What a function should do, as the end of "a function that ...".
FUNCTION_TASKS: tuple[str, ...] = (
    "returns the product of all numbers in a list", "checks whether a number is even",
    "returns the minimum and maximum of a list as a tuple", "counts the lines in a string",
    "converts a number of seconds into hours, minutes and seconds", "returns the median of a list of numbers",
    "checks whether a string contains only digits", "rotates a list by k positions",
    "returns the intersection of two lists without duplicates", "converts kilometres to miles",
    "checks whether a number is a perfect square", "returns the n-th triangular number",
    "splits a full name into first and last name", "returns the most common element of a list",
    "checks whether all elements of a list are unique", "converts a binary string to an integer",
    "returns the index of the smallest element in a list", "counts the uppercase letters in a string",
    "generates all prime numbers below n with the sieve of Eratosthenes", "returns the running total of a list",
    "removes all whitespace from a string", "checks whether a string is a valid email address with a simple rule",
    "computes the area of a circle from its radius", "returns the distance between two points in the plane",
    "converts a dictionary into a list of key-value pairs sorted by value", "inverts a dictionary",
    "merges two dictionaries, summing the values of shared keys", "returns the words of a sentence sorted by length",
    "checks whether a list of numbers is strictly increasing", "truncates a string to n characters with an ellipsis",
    "counts the number of set bits in an integer", "returns the least common multiple of two numbers",
    "checks whether a number is a power of two", "returns the nth row of Pascal's triangle",
    "pads a number with leading zeros to a given width", "converts a Roman numeral to an integer",
    "converts an integer to a Roman numeral", "computes compound interest", "returns the mode of a list",
    "finds all pairs in a list that add up to a target sum", "returns the cumulative product of a list",
    "checks whether brackets in a string are balanced", "removes the vowels from a string",
    "converts snake_case to camelCase", "converts camelCase to snake_case", "returns the initials of a name",
    "counts how many times a substring occurs in a string", "checks whether a string is a valid hexadecimal colour code",
    "returns the difference in days between two dates", "returns the day of the week for a date",
    "generates a random password of a given length", "shuffles a list without changing the original",
    "returns every k-th element of a list", "interleaves two lists", "splits a list into two halves",
    "returns the dot product of two vectors", "multiplies two matrices", "returns the diagonal of a square matrix",
    "normalises a list of numbers to the range 0 to 1", "computes the standard deviation of a list",
    "finds the missing number in a list containing 1 to n", "returns the first non-repeating character of a string",
    "compresses a string with run-length encoding", "decodes a run-length encoded string",
    "checks whether a sentence contains every letter of the alphabet", "returns the ASCII codes of a string",
    "implements the Caesar cipher", "converts a list of tuples into a dictionary", "deep-merges two nested dictionaries",
    "returns the depth of a nested list", "removes None values from a dictionary", "finds the longest common prefix of some strings",
    "returns the common elements of three lists", "returns a list without its first and last elements",
    "counts the files with a given extension in a folder", "writes a list of dictionaries to a JSON file",
    "reads a JSON file and returns its data", "returns the size of a file in a human-readable form",
    "checks whether a path points to an existing directory", "returns the current date as a formatted string",
    "parses a date string in day/month/year format", "validates that a password has a digit and an uppercase letter",
    "returns the number of days in a given month", "sorts a list of tuples by their second element",
    "returns the k largest numbers in a list", "computes the moving average of a list with a window size",
    "checks whether a number is an Armstrong number", "returns the binary representation of an integer",
    "converts a hexadecimal string to bytes", "returns the nth power of a number without using **",
    "finds the peak element of a list", "returns the sum of all numbers in a nested list",
    "counts the distinct words in a text, ignoring case", "returns the longest increasing run in a list",
    "checks whether a tic-tac-toe board has a winner", "rounds a number to the nearest multiple of five",
    "converts a list of numbers into a comma-separated string", "returns a dictionary of word lengths",
    "wraps a string into lines of at most a given width", "returns True if a list contains a given value",
    "finds the position of a value in a list, or -1 if it is missing", "swaps the keys and values of a dictionary",
    "counts the even and odd numbers in a list", "computes the body mass index from height and weight",
    "returns the cube root of a number", "retries a function call up to three times when it raises an exception",
    "times how long another function takes to run", "memoises the results of a slow function",
)

#: Functions to complete: (signature, one-line docstring).
SIGNATURES: tuple[tuple[str, str], ...] = (
    ("def mean(values)", "Return the arithmetic mean of values."),
    ("def count_words(text)", "Return a dict mapping each word of text to its count."),
    ("def is_even(n)", "Return True if n is even."),
    ("def reverse_string(s)", "Return s reversed."),
    ("def unique(items)", "Return the items without duplicates, in their original order."),
    ("def safe_divide(a, b, default=0)", "Return a / b, or default when b is zero."),
    ("def first(items, predicate)", "Return the first item for which predicate is true, or None."),
    ("def pairwise_sums(numbers)", "Return the sums of neighbouring numbers."),
    ("def parse_bool(text)", "Convert strings like 'yes', 'no', 'true' and 'false' to a bool."),
    ("def slugify(title)", "Turn a title into a lowercase, dash-separated URL slug."),
    ("def percent(part, whole)", "Return part as a percentage of whole, rounded to one decimal."),
    ("def window(items, size)", "Yield every run of size consecutive items."),
    ("def to_celsius(fahrenheit)", "Convert a temperature in Fahrenheit to Celsius."),
    ("def histogram(values)", "Return a dict counting how often each value occurs."),
    ("def nth_largest(numbers, n)", "Return the n-th largest number."),
    ("def only_letters(text)", "Return text with everything but letters removed."),
    ("def digits(n)", "Return the decimal digits of a non-negative integer as a list."),
    ("def dedent_lines(lines)", "Remove the common leading whitespace from a list of lines."),
    ("def invert(mapping)", "Return a dict mapping each value to its key."),
    ("def all_equal(items)", "Return True if every item equals the first one."),
    ("def hamming(a, b)", "Return the number of positions where strings a and b differ."),
    ("def compose(f, g)", "Return a function that computes f(g(x))."),
    ("def read_numbers(path)", "Read one number per line from a file and return them as floats."),
    ("def kebab_to_title(name)", "Turn 'some-name' into 'Some Name'."),
    ("def scale(vector, factor)", "Multiply every component of vector by factor."),
    ("def split_on_blank_lines(text)", "Split text into paragraphs separated by blank lines."),
    ("def bounded_append(items, value, limit)", "Append value, dropping the oldest items beyond limit."),
    ("def ordinal(n)", "Return n with its English ordinal suffix, e.g. 1st, 2nd, 3rd."),
    ("def word_frequencies(path)", "Return the ten most common words of a text file."),
    ("def gcd_list(numbers)", "Return the greatest common divisor of all numbers."),
)

#: Things to model as a class, with what the class should offer.
CLASSES: tuple[tuple[str, str], ...] = (
    ("a bank account", "deposit, withdraw and a balance"), ("a queue", "enqueue, dequeue and a length"),
    ("a rectangle", "area and perimeter"), ("a to-do list", "adding, completing and listing tasks"),
    ("a shopping cart", "adding items, removing items and a total price"), ("a 2D vector", "addition and length"),
    ("a temperature", "conversion between Celsius and Fahrenheit"), ("a library book", "borrowing and returning"),
    ("a counter", "increment, decrement and reset"), ("a timer", "start, stop and elapsed time"),
    ("a student", "a name, grades and an average grade"), ("a deck of cards", "shuffling and dealing"),
    ("a linked list", "append, search and a length"), ("an inventory", "stock levels and restocking"),
    ("a simple cache", "get, put and a maximum size"), ("a playlist", "adding songs, skipping and shuffling"),
)

#: Python concepts, as the object of "what is ...".
CONCEPTS: tuple[str, ...] = (
    "a for loop", "a while loop", "a function", "a class", "an object", "inheritance", "polymorphism",
    "encapsulation", "a method", "a constructor (`__init__`)", "a string", "an integer", "a float", "a boolean",
    "`None`", "a variable", "a keyword argument", "a positional argument", "a return value", "scope",
    "a closure", "a nested function", "a generator expression",
    "the `yield` keyword", "the `async` and `await` keywords", "a coroutine", "the GIL", "garbage collection",
    "reference counting", "a namespace", "an import statement", "the standard library", "pip", "a wheel",
    "`requirements.txt`", "PEP 8", "duck typing", "a dataclass", "a property", "a static method", "a class method",
    "an abstract base class", "a magic method", "operator overloading", "`__repr__`", "`__str__`", "a metaclass",
    "a named tuple", "an enum", "a frozenset", "bytes", "a bytearray", "unpacking", "the walrus operator",
    "a ternary expression", "short-circuit evaluation", "truthiness", "integer division", "the modulo operator",
    "a nonlocal variable", "a stack overflow", "an infinite loop", "a `break` statement",
    "a `continue` statement", "the `pass` statement", "an `else` clause on a loop", "an assertion",
    "a custom exception", "the `finally` block", "the `raise` statement", "a traceback", "logging",
    "a unit test", "a mock object", "a REPL", "a Jupyter notebook",
    "a hash function", "a hashable object", "a callback", "higher-order functions", "`map` and `filter`",
    "`functools.partial`", "a regular expression", "string formatting with `format`", "JSON", "pickling",
    "a file handle", "binary and text mode when opening a file", "encoding and decoding text", "Unicode",
)

#: Pairs of Python things people mix up.
CONCEPT_PAIRS: tuple[tuple[str, str], ...] = (
    ("`sort()`", "`sorted()`"), ("`remove`", "`pop` on a list"), ("`break`", "`continue`"),
    ("a function", "a method"), ("an argument", "a parameter"), ("`range`", "a list"), ("`input`", "`raw_input`"),
    ("Python 2", "Python 3"), ("`del`", "setting a variable to `None`"), ("a set", "a frozenset"),
    ("`str`", "`repr`"), ("`@staticmethod`", "`@classmethod`"), ("a generator", "a list"),
    ("`//`", "`/`"), ("`any`", "`all`"), ("`json.load`", "`json.loads`"), ("`import x`", "`from x import y`"),
    ("`try/except`", "`if` checks before an operation"), ("`pip`", "`conda`"), ("a syntax error", "an exception"),
    ("`isinstance`", "`type`"), ("a for loop", "a while loop"), ("a mutable", "an immutable object"),
    ("`__init__`", "`__new__`"), ("threads", "asyncio"), ("`bytes`", "`str`"),
)

#: Built-in functions and common methods, as "the `...` function".
BUILTINS: tuple[str, ...] = (
    "len", "range", "sorted", "reversed", "sum", "min", "max", "abs", "round", "map", "filter", "any", "all",
    "isinstance", "getattr", "setattr", "hasattr", "open", "input", "print", "type", "id", "hash", "iter",
    "next", "divmod", "pow", "chr", "ord", "bin", "hex", "format", "vars", "dir", "help", "callable",
    "str.split", "str.join", "str.strip", "str.replace", "str.startswith", "list.insert", "list.index",
    "dict.get", "dict.items", "dict.setdefault", "set.union", "set.add",
)

#: Everyday Python chores, as the end of "How do I ... in Python?".
HOWTOS: tuple[str, ...] = (
    "reverse a string", "check if a key exists in a dictionary", "remove an item from a list by value",
    "convert a string to a number", "get the current date and time", "measure how long code takes to run",
    "write text to a file", "append a line to a file", "list the files in a folder", "create a folder",
    "delete a file", "copy a file", "check if a file exists", "read a JSON file", "write a CSV file",
    "parse command-line arguments", "read environment variables", "make an HTTP request",
    "generate a random number", "pick a random element from a list", "round a number to two decimals",
    "format a number with thousands separators", "split a string on commas", "join a list of strings",
    "check if a string starts with a prefix", "find the index of an item in a list", "count items in a list",
    "get the keys of a dictionary as a list", "merge two dictionaries", "sort a dictionary by value",
    "remove duplicates from a list", "flatten a nested dictionary", "iterate over two lists at once",
    "loop over a dictionary", "copy a list", "concatenate two lists", "convert a list to a set",
    "catch several exceptions at once", "raise my own exception", "define a function with optional arguments",
    "return several values from a function", "write a multi-line string", "comment out several lines",
    "check the Python version", "install a package", "run a shell command", "sleep for a few seconds",
    "exit a program early", "print without a newline", "read user input as an integer", "debug a script",
    "profile a slow function", "use a regular expression to find numbers in text", "zip a folder",
    "work with dates in different time zones", "compare two floats safely", "check the type of a variable",
    "make a class printable", "sort a list in descending order", "get the last element of a list",
)

# Phrasings; each slot names the list that fills it.
FUNCTION_TEMPLATES: tuple[str, ...] = (
    "Write a Python function that {task}.",
    "Write a function that {task}.",
    "Implement a Python function that {task}. Include a docstring.",
    "Write a short Python function that {task}, and show how to call it.",
    "How would I write a function in Python that {task}?",
    "Write a Python function that {task}, then explain how it works.",
    "Write a Python function with type hints that {task}.",
)
SIGNATURE_TEMPLATES: tuple[str, ...] = (
    'Complete this function:\n{signature}:\n    """{doc}"""',
    'Implement this Python function:\n\n```python\n{signature}:\n    """{doc}"""\n```',
)
CLASS_TEMPLATES: tuple[str, ...] = (
    "Write a Python class for {thing} with {offers}.",
    "Create a simple Python class that represents {thing}, with {offers}.",
)
CONCEPT_TEMPLATES: tuple[str, ...] = (
    "Explain what {concept} is in Python.",
    "What is {concept} in Python? Give a short example.",
    "Explain {concept} to a beginner in two sentences.",
    "When should I use {concept} in Python?",
    "What are common mistakes with {concept} in Python?",
)
PAIR_TEMPLATES: tuple[str, ...] = (
    "What is the difference between {a} and {b} in Python?",
    "When should I use {a} instead of {b}?",
)
BUILTIN_TEMPLATES: tuple[str, ...] = (
    "Explain what `{name}` does in Python, with an example.",
    "How do I use `{name}` in Python?",
)
HOWTO_TEMPLATES: tuple[str, ...] = (
    "How do I {howto} in Python?",
    "What is the simplest way to {howto} in Python?",
    "Show me how to {howto} in Python.",
)

#: (template family, its phrasings, its fills). A fill maps slot names to values.
FAMILIES: tuple[Family, ...] = (
    ("function", FUNCTION_TEMPLATES, tuple({"task": task} for task in FUNCTION_TASKS)),
    ("signature", SIGNATURE_TEMPLATES, tuple({"signature": s, "doc": d} for s, d in SIGNATURES)),
    ("class", CLASS_TEMPLATES, tuple({"thing": t, "offers": o} for t, o in CLASSES)),
    ("concept", CONCEPT_TEMPLATES, tuple({"concept": concept} for concept in CONCEPTS)),
    ("pair", PAIR_TEMPLATES, tuple({"a": a, "b": b} for a, b in CONCEPT_PAIRS)),
    ("builtin", BUILTIN_TEMPLATES, tuple({"name": name} for name in BUILTINS)),
    ("howto", HOWTO_TEMPLATES, tuple({"howto": howto} for howto in HOWTOS)),
)


def exercise_prompts(n: int | None = None, *, seed: int = 0) -> list[Prompt]:
    """``n`` short programming requests (all of them for None), in a seeded order.

    Every task, concept and chore is asked in each phrasing of its family; all of them are asked once
    before any is asked twice. Families are dealt round-robin so any prefix mixes them;
    ``Prompt.template`` is ``exercise-<family>``.
    """
    return family_prompts(FAMILIES, "exercise", n, seed)
