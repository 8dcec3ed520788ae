"""Everyday chat prompts for drafter distillation, written for this project.

The documentation and standard-library prompts of :mod:`hf_treegen.train.prompts` teach a drafter how
the target talks about Python. Most chats are not about Python, and a drafter that never saw the
target answer "how do I ..." about a kitchen or a job interview accepts fewer tokens there. This
module fills that gap without any downloaded text: hand-written request templates, each with slots
filled from hand-written topic lists (activities, household tasks, plain-science questions, things to
write, pairs to compare, ...). The answers come from the target itself, as for every other prompt.

Determinism matches :func:`hf_treegen.train.prompts.train_prompts`: for a given seed the list is fixed,
a shorter list is a prefix of a longer one, and prompt ids are content hashes. The fixed benchmark and
demo prompts (:func:`hf_treegen.bench.prompts.all_eval_texts`) are never emitted.
"""

from __future__ import annotations

import itertools
import random

from .prompts import Prompt, is_eval_prompt, prompt_id

#: Slot name -> values. Every value reads naturally in each template that uses the slot.
TOPICS: dict[str, tuple[str, ...]] = {
    "activity": (
        "running a first 5 km race", "learning to juggle", "painting with watercolours", "starting a vegetable garden",
        "baking bread at home", "taking better phone photos", "writing a personal journal", "learning chess",
        "going camping with children", "cycling to work", "practising yoga at home", "learning to swim as an adult",
        "keeping a small aquarium", "birdwatching", "knitting a first scarf", "planning a road trip",
        "hosting a dinner party", "volunteering in the community", "reading more books", "learning the guitar",
        "making pottery", "starting to meditate", "building a model railway", "growing herbs on a balcony",
        "organising a family reunion", "training for a half marathon", "learning to draw faces",
        "making homemade pasta", "going on a first solo trip", "teaching a child to ride a bike",
    ),
    "task": (
        "remove a coffee stain from a white shirt", "fold a fitted sheet", "unclog a kitchen sink",
        "fix a squeaky door", "hang a picture straight", "descale a kettle", "iron a dress shirt",
        "change a flat bicycle tyre", "boil an egg so the yolk stays soft", "sharpen a kitchen knife",
        "write a weekly budget", "pack a suitcase without wrinkling clothes", "defrost a freezer",
        "repot a houseplant", "make a simple tomato sauce", "clean a computer keyboard", "wrap a gift neatly",
        "plan meals for a week", "write a cover letter", "prepare for a phone interview",
        "set up a home office", "keep a sourdough starter alive", "cook rice without it sticking",
        "patch a hole in a wall", "remember people's names", "back up photos from a phone",
        "choose a ripe avocado", "make cold brew coffee", "organise a messy wardrobe", "train a puppy to sit",
        "write a polite complaint email", "calm down before an exam", "split a restaurant bill fairly",
        "start a conversation at a networking event", "keep cut flowers fresh longer",
    ),
    "habit": (
        "drinking enough water", "stretching every morning", "cycling", "reading before bed", "eating breakfast",
        "swimming", "keeping a gratitude journal", "taking short breaks at work", "cooking at home",
        "spending time outdoors", "learning a musical instrument", "doing puzzles", "gardening",
        "limiting screen time in the evening", "walking after meals", "volunteering", "strength training",
        "keeping a tidy desk", "writing to-do lists", "getting up at the same time every day",
    ),
    "question": (
        "leaves change colour in autumn", "bread rises", "ice floats on water", "the moon has phases",
        "we have seasons", "cats purr", "onions make people cry", "the sea is salty", "we get hiccups",
        "rainbows appear after rain", "metal feels colder than wood", "birds fly south in winter",
        "popcorn pops", "we yawn", "thunder follows lightning", "bees make honey", "a boat floats",
        "our ears pop on a plane", "apples turn brown after cutting", "the sunset is red",
        "dogs pant", "milk goes sour", "soap removes grease", "stars twinkle", "we dream",
    ),
    "writing": (
        "a birthday message for a grandmother", "a short welcome note for a new team member",
        "an apology to a friend for missing their party", "a two-line poem about the mountains",
        "a haiku about rain", "a short story opening about a lost key", "a note asking a landlord to fix the heating",
        "a farewell message for a retiring colleague", "a product description for a handmade candle",
        "a short speech for a best friend's wedding", "a postcard from a seaside holiday",
        "a reminder to the team about Friday's meeting", "a limerick about a clumsy penguin",
        "a congratulations note for a new graduate", "a short review of a favourite cafe",
        "an invitation to a garden barbecue", "a riddle about a clock", "a get-well-soon card for a neighbour",
        "a short bio for a personal website", "a four-line poem about winter mornings",
    ),
    "occasion": (
        "a child's birthday party", "a long train journey", "a quiet Sunday afternoon", "a team-building day",
        "a first date", "a snowy weekend", "a picnic in the park", "a school fundraiser", "a family game night",
        "a neighbourhood street party", "a summer evening with friends", "a trip to the beach with toddlers",
        "a retirement celebration", "a week without the internet", "a visit from relatives",
    ),
    "thing": (
        "a good pair of running shoes", "a second-hand car", "a laptop for a student", "a tent for two people",
        "a first houseplant", "a family dog", "a winter coat", "a cookbook for beginners", "an electric kettle",
        "a mattress", "a backpack for daily commuting", "a birthday present for a teenager",
        "a camera for travel photos", "a desk chair", "a pair of binoculars",
    ),
    "place": (
        "a small fishing village", "a busy market at dawn", "an old library", "a forest after rain",
        "a train station at night", "a mountain lake", "a city park in spring", "a bakery in the morning",
        "a quiet beach in winter", "a museum on a rainy day", "a desert at sunset", "a snowy street",
    ),
    "feeling": (
        "nervous before a presentation", "lonely after moving to a new city", "unmotivated to exercise",
        "stressed about exams", "bored at work", "stuck on a creative project", "tired all the time",
        "anxious about a job interview", "overwhelmed by housework", "frustrated learning a new skill",
    ),
    "number": ("two", "three", "four", "five"),
    "dish": (
        "a mushroom risotto", "pancakes for breakfast", "a lentil curry", "a Greek salad", "banana bread",
        "a simple omelette", "roast vegetables", "chicken noodle soup", "a fruit smoothie", "guacamole",
        "a vegetarian chilli", "oatmeal cookies", "a potato gratin", "fried rice", "a lemon cake",
        "hummus", "a tuna sandwich", "a pumpkin pie", "spaghetti carbonara", "a berry crumble",
    ),
    "animal": (
        "octopuses", "penguins", "honeybees", "elephants", "hedgehogs", "owls", "dolphins", "ants", "wolves",
        "sea turtles", "bats", "koalas", "hummingbirds", "giraffes", "crows", "jellyfish", "beavers", "camels",
    ),
    "pet": (
        "a hamster", "a goldfish", "a rescue dog", "an older cat", "a rabbit", "a budgie", "a tortoise",
        "a guinea pig", "a kitten", "a puppy",
    ),
    "device": (
        "a refrigerator", "a microwave oven", "a thermostat", "a solar panel", "a bicycle gear", "a compass",
        "a smoke detector", "an electric car", "a dishwasher", "a touch screen", "a pressure cooker",
        "a heat pump", "a lighthouse", "a hot-air balloon", "a barcode scanner",
    ),
    "concept": (
        "inflation", "compound interest", "photosynthesis", "gravity", "how vaccines work", "the water cycle",
        "supply and demand", "a food chain", "evolution", "an eclipse", "the greenhouse effect", "recycling",
        "a budget deficit", "tides", "erosion", "the immune system", "electric current", "a credit score",
        "renewable energy", "plate tectonics",
    ),
    "trip": (
        "a week at the seaside", "a city break in winter", "a long-haul flight", "a camping weekend",
        "a skiing holiday", "a business trip", "a road trip with a dog", "a visit to a national park",
        "a summer music festival", "a backpacking trip around Europe",
    ),
    "trait": (
        "more patient", "more organised", "more confident", "more productive in the morning", "a better listener",
        "more creative", "calmer in traffic", "more punctual", "kinder to myself", "more focused",
    ),
    "event": (
        "adopting a cat", "moving to another country", "starting a new job", "buying a first home",
        "going back to university", "starting a small business", "becoming a parent", "running a marathon",
        "learning to drive", "renting out a spare room", "changing careers", "getting a first credit card",
    ),
}

#: Things to compare: the ``{a}`` and ``{b}`` of a template.
PAIRS: tuple[tuple[str, str], ...] = (
    ("a cold", "the flu"), ("baking soda", "baking powder"), ("a hurricane", "a tornado"),
    ("a frog", "a toad"), ("a lake", "a pond"), ("a crocodile", "an alligator"), ("a virus", "bacteria"),
    ("a simile", "a metaphor"), ("a fruit", "a vegetable"), ("a rabbit", "a hare"), ("a debit card", "a credit card"),
    ("a moth", "a butterfly"), ("a star", "a planet"), ("jam", "jelly"), ("a violin", "a viola"),
    ("a republic", "a democracy"), ("weather forecasts", "climate models"), ("a mountain", "a hill"),
    ("sprinting", "jogging"), ("a latte", "a cappuccino"),
)

#: Request templates. ``{slot}`` fields come from :data:`TOPICS`; ``{a}`` and ``{b}`` from one of :data:`PAIRS`.
TEMPLATES: tuple[str, ...] = (
    "Give me {number} tips for {activity}.",
    "I want to try {activity}. Where should I start?",
    "What mistakes do beginners make when {activity}?",
    "Make a simple four-week plan for {activity}.",
    "How do I {task}?",
    "What is the easiest way to {task}?",
    "Explain step by step how to {task}.",
    "My friend asked me how to {task}. What should I tell them?",
    "What are the benefits of {habit}?",
    "Are there any downsides to {habit}?",
    "How can I make {habit} a daily habit?",
    "Can you explain why {question}?",
    "Explain to a ten-year-old why {question}.",
    "Write {writing}.",
    "Please write {writing}. Keep it short.",
    "What is the difference between {a} and {b}?",
    "How can I tell {a} from {b}?",
    "Suggest {number} ideas for {occasion}.",
    "How should I prepare for {occasion}?",
    "What should I look for when buying {thing}?",
    "Give me a short checklist for choosing {thing}.",
    "Describe {place} in a few sentences.",
    "Write a short paragraph that describes {place}.",
    "I feel {feeling}. What can I do?",
    "What would you say to a friend who feels {feeling}?",
    "Give me a simple recipe for {dish}.",
    "What can I serve with {dish}?",
    "Tell me {number} interesting facts about {animal}.",
    "Where do {animal} live, and what do they eat?",
    "How do I look after {pet}?",
    "What should I know before getting {pet}?",
    "How does {device} work?",
    "Explain how {device} works in a short paragraph.",
    "Explain {concept} in simple words.",
    "What is the simplest way to understand {concept}?",
    "Give me a packing list for {trip}.",
    "How can I save money on {trip}?",
    "How can I become {trait}?",
    "Give me {number} small daily habits that help me become {trait}.",
    "What should I know before {event}?",
    "Make a short checklist for {event}.",
    "List {number} things to do on {occasion}.",
    "Write {writing} in a friendly tone.",
    "What are the pros and cons of {habit}?",
)


def _fills(template: str) -> list[dict[str, str]]:
    """Every slot assignment of ``template`` (the product of its slots' value lists)."""
    choices = [[{name: value} for value in values] for name, values in TOPICS.items() if "{" + name + "}" in template]
    if "{a}" in template:
        choices.append([{"a": a, "b": b} for a, b in PAIRS])
    return [{k: v for part in combo for k, v in part.items()} for combo in itertools.product(*choices)]


def _texts(template: str) -> list[str]:
    """The prompts one template makes, first letter capitalised."""
    texts = (template.format(**fields) for fields in _fills(template))
    return [text[0].upper() + text[1:] for text in texts]


def chat_prompts(n: int | None = None, *, seed: int = 0) -> list[Prompt]:
    """``n`` everyday chat prompts (all of them for None), in a seeded order.

    Templates with many slot combinations would dominate a plain shuffle, so prompts are dealt
    round-robin over templates (each template's own texts shuffled): any prefix covers every template.
    ``Prompt.template`` is ``chat-NN``, the index into :data:`TEMPLATES`.
    """
    rng = random.Random(f"chat:{seed}")
    by_template = []
    for number, template in enumerate(TEMPLATES):
        texts = _texts(template)
        rng.shuffle(texts)
        by_template.append([(text, f"chat-{number:02d}") for text in texts])
    rng.shuffle(by_template)
    out: list[Prompt] = []
    seen: set[str] = set()
    for round_ in itertools.zip_longest(*by_template):
        for item in round_:
            if item is None or item[0] in seen or is_eval_prompt(item[0]):
                continue
            text, name = item
            seen.add(text)
            out.append(Prompt(prompt_id(text), text, "chat", name))
            if n is not None and len(out) >= n:
                return out
    return out
