"""Built-in evaluation prompt sets (``builtin:NAME``), written for this project and held out from
training: ``hf_treegen.train.prompts`` never emits any text listed here.

``code``: write or complete a function; ``explain``: explain a Python concept; ``chat``: everyday
questions. ``python-qa`` is a short mixed set used by the demo and the quick benchmarks.
"""

from __future__ import annotations

CODE = (
    "Write a Python function that returns the square of a number.",
    "Write a function that checks whether a string is a palindrome.",
    "Write a Python class for a stack with push and pop.",
    "Write a function that counts the words in a text file.",
    "Write a function that returns the n-th Fibonacci number iteratively.",
    "Write a function that removes duplicates from a list while keeping the order.",
    "Write a function that merges two sorted lists into one sorted list.",
    "Write a function that returns the largest of three numbers.",
    "Complete this function:\ndef is_prime(n):\n    \"\"\"Return True if n is a prime number.\"\"\"",
    "Write a function that reverses the words in a sentence.",
    "Write a function that converts a temperature from Celsius to Fahrenheit.",
    "Write a function that flattens a list of lists.",
    "Write a function that counts how often each character appears in a string.",
    "Write a function that checks whether two strings are anagrams.",
    "Write a function that returns the sum of the digits of an integer.",
    "Write a function that finds the second largest number in a list.",
    "Complete this function:\ndef chunk(items, size):\n    \"\"\"Split items into lists of at most size elements.\"\"\"",
    "Write a function that capitalises the first letter of every word in a string.",
    "Write a function that returns the factorial of n using recursion.",
    "Write a function that checks whether a year is a leap year.",
    "Write a function that computes the average of a list of numbers, returning 0 for an empty list.",
    "Write a function that returns all even numbers from a list.",
    "Write a function that converts a list of strings to integers, skipping invalid ones.",
    "Write a function that returns the longest word in a sentence.",
    "Complete this function:\ndef clamp(x, low, high):\n    \"\"\"Limit x to the range [low, high].\"\"\"",
    "Write a function that counts the vowels in a string.",
    "Write a function that transposes a matrix given as a list of lists.",
    "Write a function that returns the greatest common divisor of two numbers.",
    "Write a function that groups a list of words by their first letter.",
    "Write a function that reads a CSV file and returns its rows as dictionaries.",
    "Write a function that checks whether a list is sorted in ascending order.",
    "Write a binary search function for a sorted list.",
)

EXPLAIN = (
    "Explain in two sentences what a Python list comprehension is.",
    "Explain what a Python generator is, with a short example.",
    "What does the `with` statement do in Python?",
    "Explain recursion to a beginner in three sentences.",
    "What is the difference between a tuple and a list?",
    "Explain what a Python decorator does.",
    "What is the difference between `is` and `==` in Python?",
    "Explain what `*args` and `**kwargs` mean in a function definition.",
    "What is a Python virtual environment and why is it useful?",
    "Explain the difference between a module and a package in Python.",
    "What does `if __name__ == \"__main__\":` do?",
    "Explain what a lambda function is in Python.",
    "What is the difference between a shallow copy and a deep copy?",
    "Explain how exceptions are handled with try and except.",
    "What is a dictionary in Python and when should you use one?",
    "Explain what list slicing is, with an example.",
    "What is the purpose of the `self` parameter in a method?",
    "Explain the difference between a class attribute and an instance attribute.",
    "What are Python type hints and do they change how code runs?",
    "Explain what an iterator is in Python.",
    "What does the `global` keyword do?",
    "Explain what a set is in Python and give one use for it.",
    "What is the difference between `append` and `extend` on a list?",
    "Explain what f-strings are in Python.",
    "What is a docstring and where does it go?",
    "Explain what the `enumerate` function does.",
    "What is the difference between a process and a thread?",
    "Explain what `zip` does with two lists.",
    "What does it mean that strings are immutable in Python?",
    "Explain what a default argument is, and the pitfall with mutable defaults.",
    "What is the difference between `return` and `print` in a function?",
    "Explain what a context manager is.",
)

CHAT = (
    "Give three tips for writing readable code.",
    "How do I read a text file line by line in Python?",
    "Summarise what the os.path module is for.",
    "How do I sort a list of dictionaries by a key?",
    "What are some good habits for a healthy morning routine?",
    "Suggest a simple recipe for a vegetable soup.",
    "How can I improve my concentration while studying?",
    "What should I pack for a weekend hiking trip?",
    "Give me three ideas for a rainy-day activity at home.",
    "How do I politely decline an invitation?",
    "What is a good way to start learning a new language?",
    "Explain why the sky is blue in simple words.",
    "How often should I water a cactus?",
    "Write a short thank-you note to a colleague.",
    "What are the benefits of regular walking?",
    "How can I save money on groceries?",
    "Suggest a name for a friendly grey cat.",
    "What is the difference between weather and climate?",
    "How do I make a good cup of tea?",
    "Give me a short motivational message for a Monday.",
    "What are three things to check before buying a used bicycle?",
    "How can I get better sleep?",
    "Describe autumn in two sentences.",
    "What are good questions to ask at the end of a job interview?",
    "How do I keep houseplants alive while on holiday?",
    "Plan a simple three-day workout schedule for a beginner.",
    "What is a polite way to ask a neighbour to lower their music?",
    "Give me three tips for public speaking.",
    "How do I clean a cast-iron pan?",
    "Write a two-line poem about the sea.",
    "What should I do if I feel overwhelmed at work?",
    "How do I choose a good book to read?",
)

BUILTIN_PROMPTS: dict[str, tuple[str, ...]] = {
    "code": CODE,
    "explain": EXPLAIN,
    "chat": CHAT,
    "python-qa": (EXPLAIN[0], CODE[0], EXPLAIN[4], CHAT[0], CHAT[2], CHAT[1], EXPLAIN[1], CODE[1], EXPLAIN[2],
                  EXPLAIN[26], CODE[2], CHAT[3], EXPLAIN[3], CODE[3]),
}


def builtin_prompts(name: str) -> tuple[str, ...]:
    try:
        return BUILTIN_PROMPTS[name]
    except KeyError:
        raise ValueError(f"Unknown builtin prompt set {name!r}; available: {', '.join(BUILTIN_PROMPTS)}.") from None


def all_eval_texts() -> frozenset[str]:
    return frozenset(t for texts in BUILTIN_PROMPTS.values() for t in texts)
