"""Everyday chat prompts for drafter distillation, written for this project.

The documentation and standard-library prompts of :mod:`hf_treegen.train.prompts` teach a drafter how
the target talks about Python. Most chats are not about Python, and a drafter that never saw the
target answer "how do I ..." about a kitchen or a job interview accepts fewer tokens there. This
module fills that gap without any downloaded text: hand-written request templates, each with slots
filled from hand-written topic lists (activities, household tasks, plain-science questions, things to
write, pairs to compare, ...). The templates cover many everyday request shapes: how-to questions,
short emails and messages, polite rewrites, dilemmas, definitions and word meanings, well-known history,
geography and travel, study, fitness and money basics, small word problems, recommendations and
brainstorming. The answers come from the target itself, as for every other prompt.

Determinism matches :func:`hf_treegen.train.prompts.train_prompts`: for a given seed the list is fixed,
a shorter list is a prefix of a longer one, and prompt ids are content hashes. The fixed benchmark and
demo prompts (:func:`hf_treegen.bench.prompts.all_eval_texts`) are never emitted.
"""

from __future__ import annotations

import itertools
import random

from .prompts import Prompt, deal_round_robin

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
    "city": (
        "Paris", "Rome", "Tokyo", "New York", "London", "Barcelona", "Amsterdam", "Prague", "Vienna", "Lisbon",
        "Istanbul", "Kyoto", "Sydney", "Cape Town", "Rio de Janeiro", "Vancouver", "Edinburgh", "Dublin",
        "Copenhagen", "Singapore", "Buenos Aires", "Marrakesh", "Budapest", "Berlin", "Athens", "Florence",
        "Venice", "Seoul", "Montreal", "San Francisco",
    ),
    "country": (
        "Japan", "Italy", "Norway", "Mexico", "Egypt", "Peru", "Iceland", "New Zealand", "Canada", "India",
        "Kenya", "Portugal", "Greece", "Morocco", "Vietnam", "Australia", "Brazil", "Switzerland", "Thailand",
        "Chile", "Ireland", "Spain", "South Korea", "Finland", "Argentina",
    ),
    "aspect": (
        "geography", "climate", "traditional food", "largest cities", "main languages", "wildlife", "festivals",
        "traditional music", "architecture", "favourite sports", "best-known landmarks", "traditional crafts",
        "national parks", "rivers and mountains", "famous writers",
    ),
    "word": (
        "serendipity", "ubiquitous", "ephemeral", "pragmatic", "resilient", "meticulous", "nostalgia",
        "ambiguous", "benevolent", "candid", "diligent", "eloquent", "frugal", "gregarious", "inevitable",
        "lethargic", "mundane", "nonchalant", "obsolete", "paradox", "quaint", "reluctant", "sceptical",
        "tenacious", "versatile", "whimsical", "zealous", "empathy", "procrastinate", "hindsight", "wanderlust",
        "meander", "jargon", "euphemism", "altruism", "cosy",
    ),
    "term": (
        "a leap year", "a time zone", "a palindrome", "a carbon footprint", "a placebo", "a black hole",
        "a mortgage", "an index fund", "a pension", "a fossil", "a glacier", "a satellite", "a firewall",
        "a password manager", "a podcast", "a calorie", "a sonnet", "a haiku", "a thesaurus", "a tariff",
        "a solstice", "an equinox", "a constellation", "a metronome", "a spreadsheet", "a peninsula",
        "an archipelago", "a fjord", "a river delta", "a coral reef",
    ),
    "subject": (
        "algebra", "chemistry", "world history", "physics", "geography", "biology", "statistics", "music theory",
        "geometry", "economics", "English literature", "computer science", "art history", "French", "Spanish",
        "German", "Latin", "astronomy", "philosophy", "psychology", "calculus", "trigonometry", "accounting",
        "sociology", "Italian", "Japanese",
    ),
    "genre": (
        "mystery", "science fiction", "fantasy", "historical fiction", "adventure", "detective", "coming-of-age",
        "dystopian", "cosy mystery", "spy", "western", "magical realism", "space opera", "family saga",
        "fairy-tale retelling", "survival", "time-travel", "humorous", "sports", "heist",
    ),
    "reader": (
        "a teenager", "an adult who rarely reads", "a book club", "a long flight", "a beach holiday",
        "a rainy weekend", "someone new to the genre", "a reluctant reader", "a student learning English",
        "a train commute", "a winter evening", "a busy parent", "a summer reading list", "my grandfather",
        "a friend who mostly watches films",
    ),
    "sentence": (
        "Send me the report now.", "You forgot to reply to my email again.", "Turn the music down.",
        "I can't come to your party.", "This isn't what I asked for.", "Move your car, it's blocking my driveway.",
        "Stop being late to meetings.", "I need the money you borrowed back.", "Your presentation was too long.",
        "Clean up the kitchen after you use it.", "I don't want to work this weekend.",
        "Why haven't you finished this yet?", "We won't be offering you the job.", "The food was cold.",
        "Don't call me after nine.", "You made a mistake in the invoice.", "I'm not lending you my car.",
        "Answer my question.", "Your dog keeps barking at night.", "I won't be able to help with the move.",
        "Fix the heating.", "I want a refund.", "Stop interrupting me.", "Pay the rent on time.",
        "This meeting is a waste of time.",
    ),
    "dilemma": (
        "rent a flat or buy one", "take a gap year or go straight to university", "learn Spanish or French",
        "buy a new phone or repair my old one", "take the job with more pay or the one closer to home",
        "study in the evening or early in the morning", "get a cat or a dog", "cook at home or use a meal kit",
        "pay off my loan early or build up savings first", "drive or take the train for a weekend trip",
        "buy an e-reader or keep reading paper books", "join a gym or exercise at home",
        "move to a big city or stay in my small town", "ask for a raise now or wait until my review",
        "go to the party or stay in and rest", "buy a used car or a new one", "learn the piano or the guitar",
        "throw a big birthday party or have a small dinner", "paint the room myself or hire a painter",
        "take a beach holiday or a city break", "work from home or go to the office",
        "read the book first or watch the film first", "keep my old laptop or upgrade it",
        "take evening classes or learn online",
    ),
    "person": (
        "Marie Curie", "Leonardo da Vinci", "Isaac Newton", "Ada Lovelace", "Galileo Galilei",
        "Wolfgang Amadeus Mozart", "Florence Nightingale", "Charles Darwin", "Albert Einstein",
        "William Shakespeare", "Jane Austen", "Nikola Tesla", "Louis Pasteur", "Amelia Earhart",
        "Ludwig van Beethoven", "Johannes Gutenberg", "Rosalind Franklin", "Alexander Graham Bell",
        "Vincent van Gogh", "Frida Kahlo", "Charles Dickens", "Archimedes", "Johann Sebastian Bach", "Michelangelo",
        "Gregor Mendel", "Alan Turing", "Mary Anning", "Roald Amundsen", "Jules Verne", "Hans Christian Andersen",
    ),
    "history": (
        "the first Moon landing", "the fall of the Berlin Wall", "the invention of the printing press",
        "the Renaissance", "the Industrial Revolution", "the sinking of the Titanic",
        "the building of the Great Wall of China", "the first powered flight by the Wright brothers",
        "the signing of the Magna Carta", "the first voyage around the world", "the discovery of penicillin",
        "the opening of the Panama Canal", "the building of the pyramids of Giza",
        "the eruption of Mount Vesuvius in AD 79", "the California Gold Rush", "the invention of the telephone",
        "the first modern Olympic Games", "the Apollo 13 mission", "the discovery of the structure of DNA",
        "the Great Fire of London", "the first ascent of Mount Everest", "the launch of Sputnik",
        "the opening of the Channel Tunnel", "the deciphering of Egyptian hieroglyphs",
        "the invention of the World Wide Web", "the building of the Eiffel Tower",
    ),
    "listener": (
        "a ten-year-old", "a six-year-old", "a curious teenager", "a classmate who missed the lesson",
        "my grandmother", "a friend who never liked history at school", "a group of primary school children",
        "someone learning English", "a tourist visiting a museum", "my younger brother",
        "a student preparing for a quiz", "a friend who loves adventure stories", "someone who prefers short answers",
        "a class of secondary school students", "a science fan",
    ),
    "sport": (
        "tennis", "basketball", "cricket", "rugby", "volleyball", "golf", "table tennis", "badminton",
        "ice hockey", "baseball", "handball", "water polo", "curling", "fencing", "rowing", "archery", "squash",
        "netball", "lacrosse", "American football", "football", "field hockey", "snooker", "ten-pin bowling",
    ),
    "hobby": (
        "photography", "woodworking", "calligraphy", "rock climbing", "sewing", "stargazing", "origami",
        "playing board games", "beekeeping", "fishing", "embroidery", "hiking", "sketching", "sailing",
        "doing jigsaw puzzles", "geocaching", "ballroom dancing", "singing in a choir", "learning a new language",
        "crochet",
    ),
    "lifestyle": (
        "works long hours", "lives in a small flat", "is on a tight budget", "has young children",
        "wants to meet new people", "loves being outdoors", "sits at a computer all day", "is retired",
        "travels a lot for work", "gets bored easily", "likes quiet evenings at home", "wants to be more creative",
        "has never been sporty", "lives in a big city", "only has weekends free",
    ),
    "job": (
        "a nurse", "an electrician", "a software developer", "a primary school teacher", "a chef", "an architect",
        "a librarian", "an airline pilot", "a vet", "a plumber", "a graphic designer", "a park ranger",
        "a pharmacist", "a journalist", "a carpenter", "a physiotherapist", "a translator", "an accountant",
        "a firefighter", "a marine biologist", "a baker", "a museum curator", "a dentist", "a data analyst",
        "a gardener", "a train driver", "a social worker", "a photographer", "a lab technician", "an event planner",
    ),
    "email": (
        "to my manager asking for next Friday off", "to a teacher explaining that my child was ill yesterday",
        "to a neighbour about a parcel I took in for them", "to a colleague thanking them for their help on a project",
        "to a landlord asking when the boiler will be repaired", "to a shop asking about an order that has not arrived",
        "to a friend inviting them to dinner on Saturday", "to a club saying I can no longer come on Tuesdays",
        "to a hotel asking for a late check-out", "to a client confirming a meeting on Monday at ten",
        "to my team announcing that the office will be closed on Friday", "to a plumber asking for a quote",
        "to a former teacher asking for a reference", "to a restaurant booking a table for six",
        "to a coworker asking to swap shifts", "to my sister congratulating her on her new job",
        "to a dentist's office moving an appointment to next week", "to a customer apologising for a late delivery",
        "to my book club suggesting the next book", "to a tutor asking about maths lessons for my son",
        "to the school asking about the date of parents' evening", "to a new neighbour welcoming them to the street",
        "to a gym cancelling my membership", "to a landlord giving one month's notice",
        "to a friend thanking them for a birthday present", "to a library asking to renew a book",
        "to a colleague asking for feedback on my slides", "to my manager saying I will be ten minutes late",
    ),
    "conflict": (
        "my flatmate never does the dishes", "a friend keeps cancelling plans at the last minute",
        "my neighbour parks in front of my garage", "a colleague takes credit for my work",
        "my brother hasn't paid back money he borrowed", "my teenager spends hours on their phone",
        "two friends in my group have fallen out", "my manager keeps giving me urgent tasks late on Fridays",
        "my partner and I can't agree on where to go on holiday", "a classmate never helps with our group project",
        "my parents want me to visit every weekend", "my friend is always late",
        "the family upstairs is noisy at night", "a friend keeps giving me advice I didn't ask for",
        "my coworker talks loudly on the phone in our open office", "my roommate keeps eating my food",
        "my best friend has forgotten my birthday", "my team can't agree on a deadline",
    ),
    "day": (
        "a rainy Saturday at home with two children", "a productive day working from home", "a relaxing day off",
        "a day of revising for exams", "a lazy Sunday with a little exercise", "a day of spring cleaning",
        "a moving day", "the day before a long trip", "a day at the zoo with a toddler",
        "a surprise birthday for my partner", "a first day in a new city", "a day at the beach with friends",
        "a study day in the library", "a day of cooking meals for the week", "a garden clean-up day",
        "a snow day with the kids", "a day of job hunting", "a quiet day to recover after a busy week",
        "a day of sightseeing on foot", "a hiking day in the hills",
    ),
    "exercise": (
        "running", "lifting weights", "swimming laps", "doing push-ups", "cycling longer distances", "pilates",
        "rowing on a machine", "skipping with a rope", "hill walking", "dancing for fitness",
        "bodyweight workouts at home", "walking for fitness", "bouldering", "resistance-band training",
        "aqua aerobics", "Nordic walking",
    ),
    "wellness": (
        "sleep better", "drink less coffee", "sit less during the day", "eat more vegetables",
        "wind down after a stressful day", "improve my posture at a desk", "protect my back when lifting boxes",
        "rest my eyes when using screens", "stay hydrated in hot weather", "get more energy in the afternoon",
        "cut down on sugary snacks", "wake up feeling rested", "avoid getting sunburned",
        "stay comfortable on a long flight", "move more when I work from home", "keep warm at home in winter",
    ),
    "money": (
        "build an emergency fund", "stop impulse buying", "save for a holiday", "pay off a credit card",
        "understand my payslip", "start investing small amounts", "save for a house deposit", "track my spending",
        "lower my electricity bill", "cut my grocery bill", "split household costs with a flatmate",
        "teach my kids about money", "start saving for retirement", "plan for big yearly expenses",
        "get a better deal on my phone contract", "choose a savings account", "avoid late payment fees",
        "stick to a budget", "cut back on monthly subscriptions", "save money on my commute",
    ),
    "sum": (
        "if a recipe for four people needs 300 grams of flour, how much do I need for six people?",
        "a shirt costs 40 pounds and is 25 percent off. What is the sale price?",
        "if I walk at five kilometres an hour, how long does it take to walk twelve kilometres?",
        "three friends share a bill of 87 pounds equally and add a ten percent tip. How much does each person pay?",
        "a train leaves at 9:45 and the journey takes two and a half hours. When does it arrive?",
        "a rectangular garden is 8 metres long and 5 metres wide. How much fencing goes all the way around it?",
        "if a car uses 6 litres of fuel per 100 kilometres, how much fuel does it need for 350 kilometres?",
        "I save 15 pounds a week. How many weeks will it take to save 400 pounds?",
        "a room is 4 metres by 3.5 metres. How many square metres of carpet do I need?",
        "24 apples are shared between 5 children as evenly as possible. How many does each get, and how many are left?",
        "a phone plan costs 12 pounds a month plus 30 pounds to set up. What does it cost for a full year?",
        "a plant is 15 centimetres tall and grows 2 centimetres a week. How tall will it be in 6 weeks?",
        "a jug holds 1.5 litres. How many 250 millilitre glasses can I fill from it?",
        "if I read 20 pages a day, how many days will it take to finish a 350-page book?",
        "a shop sells pens at 3 for 2 pounds. How much do 12 pens cost?",
        "my bus comes every 12 minutes and one left at 8:05. When is the first bus after 8:30?",
        "a cake bakes for 45 minutes and needs 30 minutes to cool. When should it go in the oven to be served at 7 pm?",
        "a bike ride is 18 kilometres long and I have done two thirds of it. How far is left?",
        "if a tap drips 10 millilitres a minute, how much water is wasted in a day?",
        "a pack of 6 yoghurts costs 2.40 pounds. What does one yoghurt cost?",
        "it was minus 3 degrees this morning and the temperature rose by 11 degrees. What is it now?",
        "a school trip for 28 pupils needs one adult for every 7 pupils. How many adults are needed?",
        "a litre of paint covers 10 square metres. How much do I need for two coats on a wall 4 metres by 2.5 metres?",
        "I leave home at 7:50 and the walk to work takes 35 minutes. What time do I arrive?",
        "a jacket cost 60 pounds and then the price went up by 10 percent. What does it cost now?",
        "if a printer prints 18 pages a minute, how long does it take to print 270 pages?",
    ),
    "naming": (
        "a new bakery", "a family cat", "a book club", "a quiz team", "a small garden centre",
        "a podcast about cooking", "a hiking group", "a pet goldfish", "a children's football team", "a coffee van",
        "a knitting circle", "a monthly board game night", "a houseplant", "a second-hand bookshop",
        "a dog-walking business", "a school newspaper", "a family group chat", "a running club", "a sailing boat",
        "a friendly robot in a children's story", "a dragon in a bedtime story", "a fantasy kingdom",
        "a yoga studio", "a cleaning company", "a craft market stall", "a travel blog", "a new puppy",
        "a community garden",
    ),
    "choice": (
        "a tablet and a laptop for taking notes at university", "gas and induction hobs",
        "an e-reader and paper books", "buying and leasing a car", "a tent and a campervan for a summer holiday",
        "a standing desk and a normal desk", "a fixed-rate and a variable-rate mortgage",
        "trains and planes for travelling around Europe", "a gym membership and home workouts",
        "wool and synthetic hiking socks", "a cat and a rabbit as a first pet", "electric and petrol lawnmowers",
        "paper maps and phone navigation when hiking", "cast-iron and non-stick frying pans",
        "renting and buying a home", "a dishwasher and washing up by hand", "LED and halogen bulbs",
        "group and private swimming lessons for children", "buses and bikes for a city commute",
        "a real and an artificial Christmas tree", "an air fryer and a regular oven",
        "a smartwatch and a simple fitness band", "hardback and paperback books", "cloth and disposable nappies",
        "a head torch and a handheld torch for camping",
    ),
    "custom": (
        "shake hands when they meet", "blow out candles on a birthday cake", "clink glasses when they make a toast",
        "say 'bless you' when someone sneezes", "decorate trees in winter", "carve pumpkins at Halloween",
        "throw coins into fountains", "wear wedding rings on the fourth finger", "send greeting cards",
        "knock on wood for luck", "set off fireworks at New Year", "make New Year's resolutions",
        "give chocolate eggs at Easter", "hang up stockings at Christmas", "bow to greet each other in Japan",
        "eat pancakes on Shrove Tuesday", "fly kites at spring festivals",
        "leave a lost tooth under the pillow for the tooth fairy", "wave goodbye",
    ),
    "made": (
        "chocolate", "cheese", "glass", "paper", "a pencil", "soap", "butter", "yoghurt", "denim", "tea",
        "maple syrup", "sea salt", "a violin", "olive oil", "steel", "chewing gum", "ice cream", "a bicycle",
        "wool yarn", "rubber", "a crayon", "peanut butter", "tofu", "rope", "a cricket bat", "pasta", "a candle",
        "a surfboard",
    ),
    "landmark": (
        "the Great Barrier Reef", "Mount Everest", "the Grand Canyon", "the Amazon rainforest", "the Sahara Desert",
        "the Dead Sea", "Niagara Falls", "the River Nile", "Victoria Falls", "the Great Wall of China",
        "the Eiffel Tower", "Stonehenge", "Machu Picchu", "the Colosseum", "the Taj Mahal", "Uluru", "Mount Fuji",
        "the Acropolis", "Petra", "the Statue of Liberty", "Angkor Wat", "Yellowstone National Park",
        "the Matterhorn", "Lake Baikal", "the Mariana Trench", "the Serengeti", "Ha Long Bay", "Iguazu Falls",
        "Table Mountain", "the Alhambra",
    ),
    "ingredient": (
        "leftover rice", "a tin of chickpeas", "half a cabbage", "some stale bread", "a bag of spinach",
        "a lot of courgettes", "very ripe bananas", "leftover roast chicken", "a block of tofu",
        "a few eggs and some cheese", "frozen peas", "a tin of tomatoes", "sweet potatoes", "a packet of noodles",
        "a box of mushrooms", "a tin of tuna", "a bunch of carrots", "leftover mashed potato", "a jar of pesto",
        "red lentils",
    ),
    "giftee": (
        "my dad", "my mum", "a coworker", "my grandmother", "my grandfather", "a ten-year-old", "my best friend",
        "a new neighbour", "my child's teacher", "my sister", "my brother", "a teenager", "my uncle", "my aunt",
        "my partner",
    ),
    "interest": (
        "loves gardening", "enjoys cooking", "likes hiking", "reads a lot", "is learning to paint",
        "loves football", "plays board games", "enjoys puzzles", "listens to a lot of music", "is into photography",
        "loves the beach", "is learning the guitar", "likes baking", "loves animals", "enjoys camping",
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
    "What should I see on a first visit to {city}?",
    "Plan {number} days in {city} for a first-time visitor.",
    "What local food should I try in {city}?",
    "Tell me briefly about the {aspect} of {country}.",
    "What should a first-time visitor to {country} know about local customs?",
    'What does the word "{word}" mean?',
    'Use the word "{word}" in {number} example sentences.',
    "What is {term}? Answer in two sentences.",
    "Give me {number} study tips for {subject}.",
    "I have an exam in {subject} next week. How should I revise?",
    "Recommend a few {genre} books for {reader}.",
    "Give me an idea for a short {genre} story.",
    "What makes a good {genre} story?",
    'Rewrite this more politely: "{sentence}"',
    'Make this sound friendlier but keep the meaning: "{sentence}"',
    "Should I {dilemma}? Help me think it through.",
    "I can't decide whether to {dilemma}. What questions should I ask myself?",
    "Who was {person}, and what are they best known for?",
    "Tell me {number} surprising facts about {person}.",
    "Give me a short summary of {history}.",
    "Explain {history} to {listener}.",
    "Explain the basic rules of {sport}.",
    "Give me {number} tips for a beginner learning {sport}.",
    "Is {hobby} a good hobby for someone who {lifestyle}?",
    "What does a typical day look like for {job}?",
    "Give me {number} interview questions for a job as {job}, with tips for answering them.",
    "What skills do I need to become {job}?",
    "Write a short email {email}.",
    "Write a friendly text message {email}.",
    "How should I handle it when {conflict}?",
    "Summarise this situation in one sentence and suggest a next step: {conflict}.",
    "Help me plan {day}, hour by hour.",
    "Give me {number} tips for a beginner who wants to start {exercise}.",
    "Give me {number} simple ways to {wellness}.",
    "I'm new to managing money. How can I {money}?",
    "Give me {number} practical steps to {money}.",
    "Solve this and explain each step in words: {sum}",
    "Brainstorm {number} names for {naming}.",
    "Compare {choice}, and tell me which suits most people better.",
    "What are the main trade-offs between {choice}?",
    "Why do people {custom}? Where did the tradition come from?",
    "Describe in simple steps how {made} is made.",
    "Why is {landmark} famous?",
    "Tell me {number} facts about {landmark} that most people don't know.",
    "Give me {number} quick meal ideas that use {ingredient}.",
    "Suggest a thoughtful gift on a small budget for {giftee} who {interest}.",
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
    return deal_round_robin(by_template, "chat", n)
