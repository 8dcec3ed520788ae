"""DraftTree: derived masks and positions against brute force; invariants refused with clear errors."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from hf_treegen import DraftTree


@st.composite
def random_trees(draw):
    n = draw(st.integers(1, 24))
    parents = [-1] + [draw(st.integers(0, i - 1)) for i in range(1, n)]
    tokens = [draw(st.integers(0, 5))]
    used = {}
    for i in range(1, n):
        siblings = used.setdefault(parents[i], set())
        token = draw(st.integers(0, 200).filter(lambda t: t not in siblings))
        siblings.add(token)
        tokens.append(token)
    return DraftTree(torch.tensor(tokens), torch.tensor(parents), torch.zeros(n))


@settings(max_examples=60, deadline=None)
@given(random_trees(), st.integers(0, 50))
def test_mask_depths_positions_match_brute_force(tree, start):
    mask = tree.ancestor_mask()
    for i in range(tree.num_nodes):
        ancestors = set(tree.path_to(i))  # includes i and the root
        assert {j for j in range(tree.num_nodes) if mask[i, j]} == ancestors
        assert int(tree.depths[i]) == len(ancestors) - 1
        assert int(tree.position_ids(start)[i]) == start + len(ancestors) - 1
        for token, child in tree.children(i).items():
            assert tree.child(i, token) == child and int(tree.parents[child]) == i


def test_chain_layout():
    tree = DraftTree.chain(7, [1, 2, 3], [-0.1, -0.3, -0.6])
    assert tree.tokens.tolist() == [7, 1, 2, 3]
    assert tree.parents.tolist() == [-1, 0, 1, 2]
    assert tree.depths.tolist() == [0, 1, 2, 3]
    assert tree.num_drafted == 3
    assert torch.equal(tree.ancestor_mask(), torch.tril(torch.ones(4, 4, dtype=torch.bool)))


@pytest.mark.parametrize(
    "tokens, parents, message",
    [
        ([1, 2], [0, 0], "parent -1"),
        ([1, 2, 3], [-1, 2, 0], "topological"),
        ([1, 2, 2], [-1, 0, 0], "distinct tokens"),
        ([], [], "non-zero length"),
    ],
)
def test_invalid_trees_are_refused(tokens, parents, message):
    with pytest.raises(ValueError, match=message):
        DraftTree(torch.tensor(tokens, dtype=torch.long), torch.tensor(parents, dtype=torch.long),
                  torch.zeros(len(tokens)))
