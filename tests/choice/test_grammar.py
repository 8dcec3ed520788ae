"""The choice grammar against brute force: the automaton accepts exactly the valid outputs."""

import itertools

import pytest

from hf_treegen.choice import ChoiceGrammar
from tests.helpers import bpe_tokenizer, byte_tokenizer

LABELS = ["[1]", "[2]", "[12]", "alpha", "al", "beta"]


@pytest.fixture(scope="module")
def tok():
    return bpe_tokenizer()


def all_outputs(g: ChoiceGrammar):
    """Every valid output, enumerated through the automaton's allowed sets."""
    out, stack = [], [((), g.initial)]
    while stack:
        path, state = stack.pop()
        if g.is_complete(state):
            out.append((path, g.chosen(state)))
            continue
        for token in g.allowed(state):
            stack.append((path + (token,), g.advance(state, token)))
    return out


@pytest.mark.parametrize("b", [1, 2, 3])
@pytest.mark.parametrize("terminator", [None, "\n"])
def test_outputs_are_the_in_context_tokenizations(tok, b, terminator):
    g = ChoiceGrammar(tok, LABELS, b, separator=", ", terminator=terminator)
    found = all_outputs(g)
    expected = {}
    for order in itertools.permutations(range(len(LABELS)), b):
        text = ", ".join(LABELS[i] for i in order) + (terminator or "")
        ids = tuple(tok(text, add_special_tokens=False)["input_ids"])
        if terminator is None:
            ids += (tok.eos_token_id,)
        expected[ids] = order
    assert {path: order for path, order in found} == expected
    assert len(found) == len(expected)


def test_separator_merge_is_spelled_in_context(tok):
    # this BPE merges "]," like SmolLM2 does, so the first label is spelled "[", "1", "],"
    g = ChoiceGrammar(tok, ["[1]", "[2]"], 2)
    merged = tok("],", add_special_tokens=False)["input_ids"]
    assert len(merged) == 1 and g.spelling((0,))[-1] == merged[0]
    assert g.output_tokens((0, 1)) == tuple(tok("[1], [2]", add_special_tokens=False)["input_ids"]) + (tok.eos_token_id,)


def test_prefix_labels_keep_both_hypotheses(tok):
    byte = byte_tokenizer()
    a, b, newline = (byte(c, add_special_tokens=False)["input_ids"][0] for c in ("a", "b", "\n"))
    g = ChoiceGrammar(byte, ["a", "ab"], 1, terminator="\n")
    state = g.advance(g.initial, a)
    assert len(state) == 2 and set(g.allowed(state)) == {b, newline}
    assert g.committed_labels(state) == frozenset()


def test_chosen_labels_cannot_repeat(tok):
    g = ChoiceGrammar(tok, LABELS, 2)
    for path, order in all_outputs(g):
        assert len(set(order)) == 2


@pytest.mark.parametrize("kwargs, message", [
    (dict(choices=["a", "b"], num_select=3), "more than the 2 choices"),
    (dict(choices=["a", "a"], num_select=1), "duplicate choice"),
    (dict(choices=["a", ""], num_select=1), "non-empty string"),
    (dict(choices=[], num_select=1), "choices is empty"),
    (dict(choices="ab", num_select=1), "list of label strings"),
    (dict(choices=["a", "b"], num_select=0), "positive integer"),
])
def test_bad_choices(tok, kwargs, message):
    with pytest.raises((ValueError, TypeError), match=message):
        ChoiceGrammar(tok, **kwargs)


def test_no_eos_needs_a_terminator():
    tok = byte_tokenizer()
    tok.eos_token = None
    with pytest.raises(ValueError, match="no eos_token_id"):
        ChoiceGrammar(tok, ["a", "b"], 1)
    ChoiceGrammar(tok, ["a", "b"], 1, terminator="\n")  # fine with a terminator
