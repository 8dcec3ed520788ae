"""The outlines peer and the unary shortcut."""

import random

import pytest
import torch

from hf_treegen.choice import ChoiceGrammar, compiled_select
from hf_treegen.choice.baselines import OutlinesChoice, permutation_regex, unary_select
from tests.helpers import byte_tokenizer, tiny_target


@pytest.fixture(scope="module")
def setup():
    tok = byte_tokenizer()  # one spelling per label: outlines' policy and ours coincide
    model = tiny_target("llama", dtype=torch.float32, vocab=259, std=0.15)
    model.generation_config.eos_token_id = tok.eos_token_id
    return tok, model


@pytest.mark.parametrize("b", [1, 2])
def test_compiled_equals_outlines(setup, b):
    tok, model = setup
    for seed in range(8):
        rng = random.Random(seed)
        labels = rng.sample(["[1]", "[2]", "[3]", "[12]", "alpha", "al", "beta"], rng.randint(max(2, b), 6))
        g = ChoiceGrammar(tok, labels, b, terminator="\n")
        prompt = torch.tensor([[rng.randrange(0, 250) for _ in range(rng.randint(3, 10))]])
        ours = compiled_select(model, prompt, g)
        theirs = OutlinesChoice(model, tok, g).select(prompt)
        assert theirs.labels == ours.labels, (seed, labels)
        assert theirs.token_ids == ours.token_ids


def test_permutation_regex_is_bounded(setup):
    tok, _ = setup
    g = ChoiceGrammar(tok, [f"[{i}]" for i in range(20)], 4)
    with pytest.raises(ValueError, match="limited"):
        permutation_regex(g)


def test_unary_is_one_forward_and_distinct(setup):
    tok, model = setup
    g = ChoiceGrammar(tok, ["[1]", "[2]", "[3]", "[4]"], 3)
    result = unary_select(model, torch.tensor([[5, 6, 7]]), g)
    assert result.forwards == 1 and len(set(result.indices)) == 3
