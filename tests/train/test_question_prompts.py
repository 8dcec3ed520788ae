"""Short questions for drafter data: seeded, prefix-stable, every family used, grammatical fills, no eval
text and no rewording of a benchmark request."""

from hf_treegen.bench.prompts import all_eval_texts
from hf_treegen.train import question_prompts as qp
from hf_treegen.train.data_cli import source_prompts
from hf_treegen.train.families import same_topic_as_eval
from hf_treegen.train.prompts import is_eval_prompt, prompt_id


def test_seeded_and_prefix_stable():
    full = qp.question_prompts(seed=0)
    assert qp.question_prompts(seed=0) == full
    assert qp.question_prompts(30, seed=0) == full[:30]
    assert [p.text for p in qp.question_prompts(seed=1)] != [p.text for p in full]


def test_every_family_in_the_first_round():
    first_round = qp.question_prompts(len(qp.FAMILIES), seed=0)
    assert {p.template for p in first_round} == {f"question-{family}" for family, _, _ in qp.FAMILIES}


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


def test_generate_data_source():
    prompts, left_out = source_prompts("questions", 20, seed=0)
    assert left_out == 0
    assert prompts == qp.question_prompts(20, seed=0)
