"""Short questions for drafter data: every kept item in every phrasing, filled texts, no eval text and no
rewording of a benchmark request (what every family source promises is in test_families.py)."""

from hf_treegen.bench.prompts import all_eval_texts
from hf_treegen.train import question_prompts as qp
from hf_treegen.train.families import same_topic_as_eval
from hf_treegen.train.prompts import is_eval_prompt, prompt_id


def test_every_kept_item_in_every_phrasing():
    prompts = qp.question_prompts(seed=0)
    expected = sum(len(templates) * sum(not same_topic_as_eval(fill) for fill in fills)
                   for _, templates, fills in qp.FAMILIES)
    assert len(prompts) == expected > 1000


def test_ids_unique_filled_and_held_out():
    prompts = qp.question_prompts(seed=0)
    assert len({p.id for p in prompts}) == len(prompts)
    assert all(p.id == prompt_id(p.text) and p.source == "question" for p in prompts)
    assert not any("{" in p.text or "}" in p.text for p in prompts)
    assert not any(is_eval_prompt(p.text) for p in prompts)
    assert not all_eval_texts() & {p.text for p in prompts}
    # "writing a CV" shares every topic word with "Give three tips for writing readable code"
    assert not any("writing a CV" in p.text for p in prompts)
