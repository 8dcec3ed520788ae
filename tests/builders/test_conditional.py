"""DominoTree builders against brute force, against each other, and against the released chain."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from hf_treegen.builders import BuildSettings, ConditionalBuilder, MarginalBuilder
from hf_treegen.builders.conditional import (conditional_dense, conditional_frontier, conditional_heap,
                                             nodes_from_dense)
from hf_treegen.drafters.dflash import DraftBlock
from hf_treegen.drafters.dflash2 import SelectorBlock, SelectorScorer
from hf_treegen.drafters.dspark import MarkovBlock, MarkovScorer
from hf_treegen.drafters.domino import CorrectionScorer, DominoBlock
from tests.helpers import tiny_dflash2, tiny_domino, tiny_dspark, tiny_target


def make_block(drafter, seed, depth=None, dtype=torch.float32, scale=3.0):
    g = torch.Generator().manual_seed(seed)
    cfg = drafter.config
    depth = depth or cfg.num_draft_positions
    logits = torch.randn(depth, cfg.vocab_size, generator=g) * scale
    hidden = torch.randn(depth, cfg.hidden_size, generator=g).to(dtype)
    return DominoBlock(logits=logits, hidden=hidden, anchor_token=int(torch.randint(0, cfg.vocab_size, (1,), generator=g)),
                       drafter=drafter)


def brute_force(scorer: CorrectionScorer, k: int) -> dict[tuple, float]:
    """Every node of the k-ary conditional tree (to the scorer's depth), with its path score."""
    out = {}

    def expand(prefix, score, state, row):
        if row >= scorer.depth:
            return
        logp = scorer.child_logprobs(row, state)[0]
        values, index = logp.topk(min(k, logp.numel()))
        for lp, idx in zip(values.tolist(), index.tolist()):
            token = int(scorer.row(row).cand[idx])
            path = prefix + (token,)
            out[path] = score + lp
            expand(path, score + lp, scorer.child_states(state, torch.tensor([token])), row + 1)

    expand((), 0.0, scorer.root_state, 0)
    return out


def prefixes_with_scores(root, nodes):
    paths = {0: ()}
    result = {}
    for i, (parent, token, depth, score) in enumerate(nodes, start=1):
        paths[i] = paths[parent] + (token,)
        assert len(paths[i]) == depth
        result[paths[i]] = score
    return result


@pytest.fixture(scope="module")
def small():
    model = tiny_target("qwen3", torch.float32, vocab=6, hidden=32)
    return tiny_domino(model, block_size=4, std=0.6)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 100_000), budget=st.integers(1, 25), k=st.integers(1, 6), m=st.integers(1, 6),
       depth=st.integers(1, 4), temperature=st.sampled_from([0.7, 1.0]))
def test_heap_and_frontier_are_the_brute_force_top_b(small, seed, budget, k, m, depth, temperature):
    block = make_block(small, seed)
    scorer = CorrectionScorer(block, top_m=m, temperature=temperature, max_depth=depth)
    everything = brute_force(scorer, k)
    ranked = sorted(everything, key=lambda p: -everything[p])[:budget]
    heap = prefixes_with_scores(block.anchor_token, conditional_heap(scorer, budget, k))
    frontier_nodes = conditional_frontier(scorer, budget, k)
    frontier = prefixes_with_scores(block.anchor_token, frontier_nodes)
    dense = prefixes_with_scores(block.anchor_token, nodes_from_dense(*conditional_dense(scorer, budget, k), budget))
    assert set(heap) == set(ranked) == set(frontier) == set(dense)
    for path in ranked:
        assert heap[path] == pytest.approx(everything[path], rel=1e-6, abs=1e-5)
        assert frontier[path] == pytest.approx(everything[path], rel=1e-6, abs=1e-5)
        assert dense[path] == pytest.approx(everything[path], rel=1e-6, abs=1e-5)


def test_frontier_equals_heap_node_for_node_at_smollm2_like_sizes():
    model = tiny_target("llama", torch.float32, vocab=2048, hidden=64)
    drafter = tiny_domino(model, block_size=16)
    for seed in range(10):
        scorer = CorrectionScorer(make_block(drafter, seed, scale=2.0), top_m=64, temperature=1.0, max_depth=16)
        heap = conditional_heap(scorer, 16, 8)
        frontier = conditional_frontier(scorer, 16, 8)
        dense = nodes_from_dense(*conditional_dense(scorer, 16, 8), 16)  # the CUDA-graph builder, run eagerly
        for fast in (frontier, dense):
            assert [(p, t, d) for p, t, d, _ in heap] == [(p, t, d) for p, t, d, _ in fast]
            assert [s for *_, s in heap] == pytest.approx([s for *_, s in fast], abs=1e-5)


@pytest.mark.parametrize("arch", ["llama", "qwen3"])
def test_m_equal_vocab_and_k_one_reproduces_the_released_greedy_chain(arch):
    model = tiny_target(arch, torch.float32)
    drafter = tiny_domino(model, std=0.3)
    vocab = model.config.vocab_size
    settings_ = BuildSettings(budget=7, topk=1, top_m=vocab, temperature=1.0, max_depth=7)
    for seed in range(10):
        block = make_block(drafter, seed, scale=1.0)
        tree = ConditionalBuilder(settings_)(block, block.anchor_token)
        assert tree.tokens[1:].tolist() == drafter.released_greedy_chain(block, length=7)
        assert tree.parents.tolist() == list(range(-1, 7))


@pytest.mark.parametrize("temperature", [1.0, 0.7])
@pytest.mark.parametrize("draft_vocab", [False, True], ids=["full_vocab", "draft_vocab"])
def test_scoring_over_the_whole_vocabulary_gives_the_released_softmax(draft_vocab, temperature):
    """With M = the (draft) vocabulary, a node's children get the released Domino's probabilities:
    softmax((base logits + the correction of the node's own state) / T) over every token."""
    from tests.vocab_helpers import sparse_vocab

    model = tiny_target("llama", torch.float32)
    drafter = tiny_domino(model, std=0.3)
    if draft_vocab:
        drafter.set_draft_vocab(sparse_vocab(model.config.vocab_size, keep_every=3))
    columns = drafter.draft_logits(torch.zeros(1, model.config.hidden_size)).shape[1]
    g = torch.Generator().manual_seed(5)
    block = drafter.make_block(torch.randn(7, model.config.hidden_size, generator=g), anchor_token=11,
                               logits=torch.randn(7, columns, generator=g) * 2)
    scorer = CorrectionScorer(block, top_m=columns, temperature=temperature, max_depth=7)
    state = drafter.gru_step(drafter.zero_state(), torch.tensor([block.anchor_token]))  # the released state
    scored = scorer.root_state  # the scorer's state of the same path
    for row in range(1, 4):  # row 0 is left uncorrected
        token = torch.tensor([int(scorer.row(row - 1).cand[row])])  # any path: here each depth's second column
        state, scored = drafter.gru_step(state, token), scorer.child_states(scored, token)
        released = block.logits[row] + drafter.correction(block.hidden[row: row + 1], state, block.token_ids)[0]
        expected = torch.log_softmax(released / temperature, dim=-1)  # (Vd,)
        assert torch.equal(scorer.row(row).cand, block.target_ids(torch.arange(columns)))
        assert torch.allclose(scorer.child_logprobs(row, scored)[0], expected, atol=1e-5)


@pytest.mark.parametrize("top_m", [256, 12])
def test_domino_chain_builder_follows_the_corrected_argmax(top_m):
    """The chain builder's lean rollout (an argmax per depth) takes the path and scores of the full
    per-depth ranking, and with M = V the released greedy chain; it stops at the budget."""
    from hf_treegen.builders.chain import ChainBuilder
    from hf_treegen.builders.static_corrected import greedy_corrected_chain

    model = tiny_target("llama", torch.float32)
    drafter = tiny_domino(model, std=0.3)
    for seed in range(8):
        block = make_block(drafter, seed, scale=1.0)
        settings_ = BuildSettings(budget=5, topk=1, top_m=top_m, temperature=1.0, max_depth=7)
        tree = ChainBuilder(settings_)(block, block.anchor_token)
        ids, logps = greedy_corrected_chain(CorrectionScorer(block, top_m, 1.0, 7))
        assert tree.tokens[1:].tolist() == [row[0] for row in ids[:5]]
        assert tree.scores[1:].tolist() == pytest.approx(torch.tensor([row[0] for row in logps[:5]]).cumsum(0).tolist(),
                                                        abs=1e-5)
        if top_m == model.config.vocab_size:
            assert tree.tokens[1:].tolist() == drafter.released_greedy_chain(block, length=5)


@pytest.mark.parametrize("domino", [True, False])
def test_chain_builder_builds_several_blocks_at_once_as_it_builds_each(domino):
    from hf_treegen.builders.chain import ChainBuilder

    model = tiny_target("llama", torch.float32)
    drafter = tiny_domino(model, std=0.3)
    blocks = [make_block(drafter, seed, scale=1.0) for seed in range(5)]
    if not domino:
        blocks = [DraftBlock(logits=b.logits, hidden=b.hidden) for b in blocks]
    roots = [3, 1, 4, 1, 5]
    builder = ChainBuilder(BuildSettings(budget=6, topk=1, top_m=16, temperature=0.7, max_depth=7))
    together = builder.build_all(blocks, roots)
    for tree, block, root in zip(together, blocks, roots):
        alone = builder(block, root)
        assert tree.tokens.tolist() == alone.tokens.tolist() and tree.tokens[0] == root
        assert tree.num_nodes == 7 and tree.scores.tolist() == pytest.approx(alone.scores.tolist(), abs=1e-5)


def test_zero_correction_equals_the_marginal_tree():
    model = tiny_target("qwen3", torch.float32)
    drafter = tiny_domino(model)
    with torch.no_grad():
        drafter.w2.zero_()
    for seed in range(10):
        block = make_block(drafter, seed)
        for m in (16, 256):  # also with a candidate pool smaller than the vocabulary
            s = BuildSettings(budget=16, topk=16, top_m=m, temperature=1.0, max_depth=7)
            cond = ConditionalBuilder(s)(block, block.anchor_token)
            marg = MarginalBuilder(s)(block, block.anchor_token)
            assert cond.tokens.tolist() == marg.tokens.tolist()
            assert cond.parents.tolist() == marg.parents.tolist()
            assert torch.allclose(cond.scores, marg.scores, atol=1e-5)


def test_conditional_strategies_refuse_a_dflash_drafter():
    from tests.helpers import tiny_drafter

    model = tiny_target("llama")
    with pytest.raises(ValueError, match="needs a drafter with a sequential head"):
        model.generate(torch.tensor([[1, 2, 3]]), assistant_model=tiny_drafter(model), tree_strategy="conditional",
                       max_new_tokens=3)


def test_static_buffers_of_the_graph_builder_take_each_rounds_tables():
    """The CUDA-graph builder replays on static buffers refilled every round; run eagerly on the CPU,
    buffers made from one block and loaded with another give the other block's tree."""
    from hf_treegen.builders.conditional import _StaticScorer

    model = tiny_target("llama", torch.float32, vocab=2048, hidden=64)
    drafter = tiny_domino(model, block_size=16)
    first = CorrectionScorer(make_block(drafter, 0, scale=2.0), top_m=64, temperature=1.0, max_depth=16)
    static = _StaticScorer(first)
    for seed in range(1, 6):
        scorer = CorrectionScorer(make_block(drafter, seed, scale=2.0), top_m=64, temperature=1.0, max_depth=16)
        static.load(scorer)
        replayed = nodes_from_dense(*conditional_dense(static, 16, 8), 16)
        heap = conditional_heap(scorer, 16, 8)
        assert [(p, t, d) for p, t, d, _ in heap] == [(p, t, d) for p, t, d, _ in replayed]


# ------------------------------------------------------------------ DFlash2's candidate selector
@pytest.fixture(scope="module")
def small_dflash2():
    model = tiny_target("qwen3", torch.float32, vocab=7, hidden=32)
    return tiny_dflash2(model, block_size=5, std=0.6, top_k=5)


def selector_block(drafter, seed, scale=3.0):
    g = torch.Generator().manual_seed(seed)
    cfg = drafter.config
    logits = torch.randn(cfg.num_draft_positions, cfg.vocab_size, generator=g) * scale
    hidden = torch.randn(cfg.num_draft_positions, cfg.hidden_size, generator=g)
    anchor = int(torch.randint(0, cfg.vocab_size, (1,), generator=g))
    return SelectorBlock(logits=logits, hidden=hidden, anchor_token=anchor, drafter=drafter)


def selector_path_logprob(block, path, temperature) -> float:
    """log P(path) under DFlash2's selector, from its definition: at each position a softmax over the
    top-k base candidates of (l[c] + <P[prev] * (W h), S[c]>) / T."""
    sel = block.drafter.candidate_selector
    total, prev = 0.0, block.anchor_token
    for d, token in enumerate(path):
        unary, cand = block.logits[d].topk(sel.top_k)
        code = sel.predecessor_codebook.weight[prev] * sel.hidden_projection(block.hidden[d])
        scores = (unary + sel.successor_codebook.weight[cand] @ code) / temperature
        where = (cand == token).nonzero()
        if where.numel() == 0:
            return float("-inf")
        total += float(torch.log_softmax(scores, dim=-1)[where[0, 0]])
        prev = token
    return total


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 100_000), budget=st.integers(1, 25), k=st.integers(1, 5), depth=st.integers(1, 4),
       temperature=st.sampled_from([0.7, 1.0]))
def test_selector_trees_are_the_brute_force_top_b(small_dflash2, seed, budget, k, depth, temperature):
    block = selector_block(small_dflash2, seed)
    scorer = SelectorScorer(block, temperature=temperature, max_depth=depth)
    assert_head_trees_are_the_top_b(scorer, lambda path: selector_path_logprob(block, path, temperature), budget, k)


def assert_head_trees_are_the_top_b(scorer, path_logprob, budget: int, k: int) -> None:
    """The scorer's law is the head's own (``path_logprob`` of every path of the k-ary tree), and the heap
    and frontier builders keep exactly the ``budget`` best paths, with their scores."""
    everything = brute_force(scorer, k)
    with torch.no_grad():
        for path, score in everything.items():
            assert score == pytest.approx(path_logprob(path), rel=1e-6, abs=1e-5)  # fp32 sums of deep paths
    ranked = sorted(everything, key=lambda p: -everything[p])[:budget]
    heap = prefixes_with_scores(None, conditional_heap(scorer, budget, k))
    frontier = prefixes_with_scores(None, conditional_frontier(scorer, budget, k))
    assert set(heap) == set(ranked) == set(frontier)
    for path in ranked:
        assert frontier[path] == pytest.approx(everything[path], rel=1e-6, abs=1e-5)


def test_selector_chain_is_the_reference_rollout(small_dflash2):
    from hf_treegen.builders.chain import ChainBuilder

    for seed in range(8):
        block = selector_block(small_dflash2, seed)
        settings_ = BuildSettings(budget=4, topk=1, top_m=64, temperature=1.0, max_depth=4)
        tree = ChainBuilder(settings_)(block, block.anchor_token)
        assert tree.tokens[1:].tolist() == small_dflash2.released_greedy_chain(block)
        conditional = ConditionalBuilder(settings_)(block, block.anchor_token)  # k = 1: the same path
        assert conditional.tokens.tolist() == tree.tokens.tolist()


# ------------------------------------------------------------------ DSpark's Markov head
@pytest.fixture(scope="module", params=["vanilla", "gated"])
def small_dspark(request):
    model = tiny_target("qwen3", torch.float32, vocab=6, hidden=32)
    return tiny_dspark(model, block_size=4, std=0.6, head=request.param)


def dspark_path_logprob(block, path, temperature) -> float:
    """log P(path) under DSpark's Markov head over the whole vocabulary, from its definition: at row k a
    softmax of (U_k + W2 g_k(W1[prev])) / T."""
    head, total, prev = block.drafter.markov_head, 0.0, block.anchor_token
    for d, token in enumerate(path):
        bias = head.markov_w2(head.codes(block.hidden[d : d + 1], torch.tensor([prev])))[0]
        total += float(torch.log_softmax((block.logits[d] + bias) / temperature, dim=-1)[token])
        prev = token
    return total


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 100_000), budget=st.integers(1, 25), k=st.integers(1, 6), depth=st.integers(1, 4),
       temperature=st.sampled_from([0.7, 1.0]))
def test_markov_trees_are_the_brute_force_top_b(small_dspark, seed, budget, k, depth, temperature):
    g = torch.Generator().manual_seed(seed)
    cfg = small_dspark.config
    block = MarkovBlock(logits=torch.randn(4, cfg.vocab_size, generator=g) * 3,
                        hidden=torch.randn(4, cfg.hidden_size, generator=g),
                        anchor_token=int(torch.randint(0, cfg.vocab_size, (1,), generator=g)), drafter=small_dspark)
    # M = V: the head's own law over the whole vocabulary
    scorer = MarkovScorer(block, top_m=cfg.vocab_size, temperature=temperature, max_depth=depth)
    assert_head_trees_are_the_top_b(scorer, lambda path: dspark_path_logprob(block, path, temperature), budget, k)
    with torch.no_grad():
        chain = ConditionalBuilder(BuildSettings(budget=depth, topk=1, top_m=cfg.vocab_size, temperature=1.0,
                                                 max_depth=depth))(block, block.anchor_token)
    assert chain.tokens[1:].tolist() == small_dspark.released_greedy_chain(block, length=depth)
