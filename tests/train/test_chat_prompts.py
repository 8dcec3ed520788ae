"""Everyday chat prompts for drafter data: fixed for a seed, prefix-stable, every template used, no eval text."""

from hf_treegen.bench.prompts import CHAT
from hf_treegen.train import chat_prompts as cp
from hf_treegen.train.prompts import is_eval_prompt, prompt_id


def test_seeded_and_prefix_stable():
    full = cp.chat_prompts(seed=0)
    assert cp.chat_prompts(seed=0) == full
    assert cp.chat_prompts(25, seed=0) == full[:25]
    assert [p.text for p in cp.chat_prompts(seed=1)] != [p.text for p in full]
    assert sorted(p.text for p in cp.chat_prompts(seed=1)) == sorted(p.text for p in full)


def test_every_template_in_any_long_enough_prefix():
    first_round = cp.chat_prompts(len(cp.TEMPLATES), seed=0)
    assert {p.template for p in first_round} == {f"chat-{i:02d}" for i in range(len(cp.TEMPLATES))}
    # the name says which template made the text
    for p in cp.chat_prompts(seed=0)[:200]:
        template = cp.TEMPLATES[int(p.template.split("-")[1])]
        assert p.text.endswith(template.rsplit("}", 1)[-1])


def test_ids_unique_filled_and_held_out():
    prompts = cp.chat_prompts(seed=0)
    assert len(prompts) > 500
    assert len({p.id for p in prompts}) == len(prompts)
    assert all(p.id == prompt_id(p.text) and p.source == "chat" for p in prompts)
    assert not any("{" in p.text or "}" in p.text for p in prompts)
    assert all(p.text[0].isupper() for p in prompts)
    assert not any(is_eval_prompt(p.text) for p in prompts)
    assert not set(CHAT) & {p.text for p in prompts}
