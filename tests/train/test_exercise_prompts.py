"""Short programming requests for drafter data: each fill asked once before any twice, no eval text and no
rewording of a benchmark request (what every family source promises is in test_families.py)."""

from hf_treegen.bench.prompts import all_eval_texts
from hf_treegen.train import exercise_prompts as ep
from hf_treegen.train.families import same_topic_as_eval
from hf_treegen.train.prompts import is_eval_prompt, prompt_id


def test_each_fill_asked_once_before_any_twice():
    # the function family's first pass names every kept task exactly once
    tasks = [t for t in ep.FUNCTION_TASKS if not same_topic_as_eval({"task": t})]
    texts = [p.text for p in ep.exercise_prompts(seed=0) if p.template == "exercise-function"]
    first_pass = texts[:len(tasks)]
    assert sorted(next(t for t in tasks if t in text) for text in first_pass) == sorted(tasks)


def test_ids_unique_filled_and_held_out():
    prompts = ep.exercise_prompts(seed=0)
    assert len(prompts) > 1000
    assert len({p.id for p in prompts}) == len(prompts)
    assert all(p.id == prompt_id(p.text) and p.source == "exercise" for p in prompts)
    assert not any("{" in p.text or "}" in p.text for p in prompts)
    assert not any(is_eval_prompt(p.text) for p in prompts)
    assert not all_eval_texts() & {p.text for p in prompts}


def test_rewordings_of_benchmark_requests_are_left_out():
    # every topic word of these appears in one built-in prompt, so they would train on the benchmark
    assert same_topic_as_eval({"task": "removes duplicates from a list"})
    assert same_topic_as_eval({"task": "returns the k largest numbers in a list"})  # "second largest number"
    assert same_topic_as_eval({"howto": "checks whether a year is a leap year"})
    # neighbouring tasks are fine
    assert not same_topic_as_eval({"task": "returns the cube root of a number"})
    assert not same_topic_as_eval({"concept": "a closure"})


def test_rewordings_never_reach_the_prompt_list(monkeypatch):
    families = (("function", ep.FUNCTION_TEMPLATES,
                 ({"task": "tells whether a year is a leap year"}, {"task": "returns the cube root of a number"})),)
    monkeypatch.setattr(ep, "FAMILIES", families)
    texts = [p.text for p in ep.exercise_prompts(seed=0)]
    assert len(texts) == len(ep.FUNCTION_TEMPLATES)
    assert all("cube root" in text for text in texts)
