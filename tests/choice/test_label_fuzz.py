"""Property-based fuzzing of label sets: compiled choice equals serial decoding for any label set.

Labels are drawn from pieces that make tokenization awkward (shared prefixes, labels that are
prefixes of others, digits inside brackets, spaces, punctuation the separator also uses, non-ASCII),
so that a label can be one token in one place and several in another. The reference is stock
generate() with the serial constrained processor, token for token.
"""

import pytest
import torch
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from hf_treegen.choice import ChoiceGrammar, compiled_select, serial_select
from tests.helpers import bpe_tokenizer, tiny_target

PIECES = ["[", "]", "1", "2", "12", "al", "alpha", "beta", " ", ",", ", ", "-", "é", "data", "s", "x", "\u4e2d"]


@pytest.fixture(scope="module")
def setup():
    tok = bpe_tokenizer()
    model = tiny_target("llama", dtype=torch.float64, vocab=320, std=0.15)
    model.generation_config.eos_token_id = tok.eos_token_id
    model.generation_config.pad_token_id = tok.pad_token_id
    return tok, model


label = st.lists(st.sampled_from(PIECES), min_size=1, max_size=4).map("".join).filter(lambda s: s.strip() != "")


@st.composite
def label_sets(draw):
    labels = draw(st.lists(label, min_size=1, max_size=7, unique=True))
    num_select = draw(st.integers(1, min(3, len(labels))))
    terminator = draw(st.sampled_from([None, "\n", "."]))
    prompt = draw(st.lists(st.integers(3, 319), min_size=1, max_size=10))
    width = draw(st.sampled_from([None, 1, 2, "auto"]))
    return labels, num_select, terminator, prompt, width


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=label_sets())
def test_compiled_equals_serial_for_any_label_set(setup, case):
    tok, model = setup
    labels, num_select, terminator, prompt, width = case
    try:
        grammar = ChoiceGrammar(tok, labels, num_select, separator=", ", terminator=terminator)
    except ValueError as err:
        # the only label sets a grammar may refuse: a label the separator or terminator makes ambiguous
        assert "separator" in str(err) or "terminator" in str(err), err
        event("refused: no stable spelling")
        return
    ids = torch.tensor([prompt])
    serial = serial_select(model, ids, grammar)
    compiled = compiled_select(model, ids, grammar, width=width)
    event(f"decided with {compiled.forwards} forwards, {compiled.guarded} guarded")
    assert compiled.token_ids == serial.token_ids, (labels, num_select, terminator, width)
    assert compiled.labels == serial.labels
    assert len(set(compiled.labels)) == len(compiled.labels) == num_select
