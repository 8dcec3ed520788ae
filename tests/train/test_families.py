"""What every request-family prompt source promises: a seeded order, a shorter list a prefix of a longer
one, every family in the first round, and the same list through ``generate-data --source``."""

import pytest

from hf_treegen.train import exercise_prompts as ep
from hf_treegen.train import question_prompts as qp
from hf_treegen.train.data_cli import source_prompts

# (generate-data --source name, the module, its prompt function, its Prompt.source)
SOURCES = [("exercises", ep, ep.exercise_prompts, "exercise"), ("questions", qp, qp.question_prompts, "question")]


@pytest.mark.parametrize("name, module, make, source", SOURCES, ids=[s[0] for s in SOURCES])
def test_seeded_and_prefix_stable(name, module, make, source):
    full = make(seed=0)
    assert make(seed=0) == full
    assert make(30, seed=0) == full[:30]
    assert [p.text for p in make(seed=1)] != [p.text for p in full]


@pytest.mark.parametrize("name, module, make, source", SOURCES, ids=[s[0] for s in SOURCES])
def test_every_family_in_the_first_round(name, module, make, source):
    first_round = make(len(module.FAMILIES), seed=0)
    assert {p.template for p in first_round} == {f"{source}-{family}" for family, _, _ in module.FAMILIES}


@pytest.mark.parametrize("name, module, make, source", SOURCES, ids=[s[0] for s in SOURCES])
def test_generate_data_source(name, module, make, source):
    prompts, left_out = source_prompts(name, 25, seed=0)
    assert left_out == 0
    assert prompts == make(25, seed=0)
