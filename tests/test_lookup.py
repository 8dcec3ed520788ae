"""Context lookup: the continuation it copies and how it is grafted onto a draft tree."""

import math

import torch

from hf_treegen.datastore import TokenDatastore
from hf_treegen.lookup import (choose_chain, context_continuation, copied_continuation, graft_chain, inside_continuations,
                               likely_nodes, lookup_chain)
from hf_treegen.tree import DraftTree


def ids(*tokens):
    return torch.tensor(tokens)


def test_the_longest_repeated_suffix_wins_over_a_more_recent_shorter_one():
    #            5  6  7  8 ... then "6 7" recurs followed by 1, and the suffix is "5 6 7"
    seq = ids(5, 6, 7, 8, 9, 6, 7, 1, 2, 5, 6, 7)
    assert context_continuation(seq, 3) == [8, 9, 6]


def test_the_most_recent_occurrence_of_the_suffix_is_copied():
    seq = ids(1, 2, 3, 0, 1, 2, 4, 0, 1, 2)
    assert context_continuation(seq, 2, longest=3) == [4, 0]


def test_max_tokens_and_the_end_of_the_sequence_cap_the_continuation():
    seq = ids(4, 5, 6, 4, 5)
    assert context_continuation(seq, 10) == [6, 4, 5]
    assert context_continuation(seq, 1) == [6]


def test_nothing_is_proposed_without_a_repeat_of_the_shortest_length():
    assert context_continuation(ids(1, 2, 3, 4, 5), 4) == []
    assert context_continuation(ids(1, 2, 3, 2), 4) == []  # "2" repeats, but one token is below the shortest n
    assert context_continuation(ids(1, 2, 3, 2), 4, shortest=1) == [3, 2]
    assert context_continuation(ids(7), 4) == [] and context_continuation(ids(7, 7), 4) == []


def small_tree():
    # root 9 -> 1 -> 2, root -> 3
    return DraftTree(torch.tensor([9, 1, 3, 2]), torch.tensor([-1, 0, 0, 1]), torch.tensor([0.0, -0.1, -2.0, -0.5]))


def test_a_graft_follows_matching_children_and_appends_the_rest_after_every_built_node():
    tree = small_tree()
    grafted = graft_chain(tree, [1, 2, 5, 6])
    assert grafted.num_nodes == 6
    assert torch.equal(grafted.tokens[:4], tree.tokens) and torch.equal(grafted.parents[:4], tree.parents)
    assert grafted.tokens[4:].tolist() == [5, 6] and grafted.parents[4:].tolist() == [3, 4]
    assert grafted.path_to(5) == [0, 1, 3, 4, 5]
    assert all(math.isinf(s) and s < 0 for s in grafted.scores[4:].tolist())
    assert grafted.best_path() == [1, 2, 5, 6]  # the only continuation below node 3 is the grafted one
    assert grafted.first_nodes(4).tokens.tolist() == tree.tokens.tolist()


def test_a_graft_that_branches_at_the_root_or_adds_nothing():
    tree = small_tree()
    branched = graft_chain(tree, [4, 4])
    assert branched.parents[4:].tolist() == [0, 4] and branched.child(0, 4) == 4
    assert graft_chain(tree, [1, 2]) is tree
    assert graft_chain(tree, []) is tree


def test_a_graft_under_a_node_hangs_below_it():
    tree = small_tree()
    grafted = graft_chain(tree, [2, 7, 8], under=1)  # node 1 already has child 2 (node 3): follow it, then append
    assert grafted.parents[4:].tolist() == [3, 4] and grafted.path_to(5) == [0, 1, 3, 4, 5]
    assert graft_chain(tree, [5], under=2).parents[4:].tolist() == [2]


def test_likely_nodes_are_the_drafted_nodes_above_the_gate_likeliest_first():
    tree = small_tree()  # path probabilities: node 1 0.90, node 3 0.61, node 2 0.14
    assert likely_nodes(tree, 0.3, 5) == [1, 3]
    assert likely_nodes(tree, 0.1, 5) == [1, 3, 2]
    assert likely_nodes(tree, 0.1, 1) == [1]
    assert likely_nodes(tree, 0.95, 5) == []
    assert likely_nodes(DraftTree.root_only(4), 0.0, 5) == []  # the root is no drafted node


def test_inside_continuations_copy_what_followed_the_drafted_path_to_each_likely_node():
    tree = small_tree()  # root 9 -> 1 -> 2 (nodes 1, 3), root -> 3 (node 2)
    history = torch.tensor([1, 2, 6, 5, 5, 3, 9])  # ends with the root token
    # "9 1" never occurred, so node 1 finds nothing; "1 2" did, followed by 6 5 5: under node 3
    assert inside_continuations(tree, history, 2, min_probability=0.3) == [(3, [6, 5])]
    assert inside_continuations(tree, history, 2, min_probability=0.7) == []  # node 3 too unlikely to be reached
    assert inside_continuations(tree, history, 2, min_probability=0.3, max_nodes=1) == []  # node 1 only
    store = TokenDatastore.from_sequences([[4, 1, 2, 8, 8]])
    fresh = torch.tensor([7, 9])  # the path is new to the context: the datastore's continuation
    assert inside_continuations(tree, fresh, 3, store, min_probability=0.3) == [(3, [8, 8])]
    assert inside_continuations(DraftTree.root_only(9), history, 2) == []


def test_a_copy_that_disagrees_with_the_drafter_inside_the_tree_becomes_a_second_branch():
    tree = small_tree()
    history = torch.tensor([9, 1, 7, 4, 3, 9])  # after "9 1" came 7, where the drafter guesses 2
    [(node, tokens)] = inside_continuations(tree, history, 2, min_probability=0.3)
    assert (node, tokens) == (1, [7, 4])
    grafted = graft_chain(tree, tokens, under=node)
    assert grafted.children(1) == {2: 3, 7: 4} and grafted.path_to(5) == [0, 1, 4, 5]


def test_a_chain_engine_gets_the_agreeing_longer_guess_or_the_drafters_if_it_is_sure():
    # both start with the same token: the longer one (a tie keeps the lookup)
    assert choose_chain([5, 6], 0.2, [5, 7, 8]) == [5, 7, 8]
    assert choose_chain([5, 6, 9], 0.2, [5, 7]) == [5, 6, 9]
    assert choose_chain([5, 6], 0.9, [5, 7]) == [5, 7]
    # they disagree: a sure drafter keeps its path, an unsure one gives way
    assert choose_chain([5, 6], 0.6, [4, 4, 4]) == [5, 6]
    assert choose_chain([5, 6], 0.4, [4, 4, 4]) == [4, 4, 4]
    assert choose_chain([5, 6], 0.4, [4], keep_from=0.3) == [5, 6]
    # one side has nothing
    assert choose_chain([5, 6], 0.1, []) == [5, 6]
    assert choose_chain([], 0.0, [4, 4]) == [4, 4]


def test_a_chain_engine_reads_the_drafters_odds_from_the_tree_and_copies_context_first():
    history = ids(3, 4, 5, 6, 3, 4)  # ... 3 4 repeats: context lookup offers 5 6
    store = TokenDatastore.from_sequences([[3, 4, 9, 9]])  # would offer 9 9
    sure = DraftTree.chain(4, [7, 8], [math.log(0.6), math.log(0.3)])
    unsure = DraftTree.chain(4, [7, 8], [math.log(0.4), math.log(0.2)])
    assert copied_continuation(history, 2, store) == [5, 6]
    assert lookup_chain(sure, [7, 8], history, 2, store) == [7, 8]
    assert lookup_chain(unsure, [7, 8], history, 2, store) == [5, 6]
    fresh = ids(1, 2, 3, 4)  # no repeat in its own text: the datastore's continuation
    assert copied_continuation(fresh, 2, store) == [9, 9]
    assert lookup_chain(unsure, [7, 8], fresh, 2, None) == [7, 8]  # nothing copied: the drafter's path
