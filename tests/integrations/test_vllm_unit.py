"""The vLLM proposer's bookkeeping without vLLM: settings, the best path of a tree, contexts found by
content, and engine steps simulated with rows whose features come from the HF target itself."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from hf_treegen.datastore import TokenDatastore
from hf_treegen.generation.options import TreeOptions
from hf_treegen.integrations.vllm import (ProposerSettings, RequestContexts, StepRows, TargetView,
                                          TreegenProposer)
from hf_treegen.target import FeatureTap
from hf_treegen.tree import DraftTree
from tests.helpers import tiny_drafter, tiny_target


def vllm_config(settings=None, k=4, prefix_caching=False, tp=1, hf_config=None, max_model_len=512):
    return SimpleNamespace(
        additional_config={"hf_treegen": settings} if settings is not None else {},
        cache_config=SimpleNamespace(enable_prefix_caching=prefix_caching),
        parallel_config=SimpleNamespace(tensor_parallel_size=tp),
        speculative_config=SimpleNamespace(num_speculative_tokens=k),
        model_config=SimpleNamespace(max_model_len=max_model_len, hf_config=hf_config, dtype=torch.float32),
    )


# ---------------------------------------------------------------------------------------- settings
def test_settings_from_additional_config_and_environment():
    got = ProposerSettings.from_vllm_config(vllm_config({"drafter": "d", "strategy": "conditional"}), environ={})
    assert got == ProposerSettings("d", TreeOptions("conditional"))
    env = {"HF_TREEGEN_DRAFTER": "e", "HF_TREEGEN_STRATEGY": "marginal@8+lookup3"}
    assert ProposerSettings.from_vllm_config(vllm_config(), environ=env) == \
        ProposerSettings("e", TreeOptions("marginal", budget=8, lookup=3))
    # the config wins over the environment
    assert ProposerSettings.from_vllm_config(vllm_config({"drafter": "d"}), environ=env).drafter == "d"
    # top_m and datastore join the written strategy; a datastore asks for lookup as generate()'s does
    got = ProposerSettings.from_vllm_config(vllm_config({"drafter": "d", "strategy": "conditional@12+lookup2",
                                                         "top_m": 16, "datastore": False}), environ={})
    assert got.options == TreeOptions("conditional", budget=12, top_m=16, lookup=2, datastore=False)
    got = ProposerSettings.from_vllm_config(vllm_config({"drafter": "d", "datastore": True}), environ={})
    assert got.options.lookup_tokens > 0


@pytest.mark.parametrize("settings, message", [
    ({}, "no drafter given"),
    ({"drafter": "d", "strategy": "adaptive"}, "not available"),
    ({"drafter": "d", "strategy": "auto"}, "not available"),
    ({"drafter": "d", "budgett": 3}, "unknown setting"),
    ({"drafter": "d", "lookup": 4}, "now written in the strategy, as everywhere else: e.g. {'strategy': 'chain\\+lookup4'}"),
    ({"drafter": "d", "budget": 4}, "now written in the strategy"),
    ({"drafter": "d", "strategy": "chain+lookup-1"}, "malformed suffix"),
    ({"drafter": "d", "strategy": "chain+lookup4+paths2"}, "vLLM verifies one chain per request"),
    ({"drafter": "d", "strategy": "chain+inside2"}, "vLLM verifies one chain per request"),
    ({"drafter": "d", "strategy": "chain+lookup4", "datastore": 3}, "datastore must be a TokenDatastore"),
    ({"drafter": "d", "strategy": "chain+lookup0", "datastore": True}, "tokens=0, which turns lookup off"),
    ({"drafter": "d", "top_m": 0}, "tree_top_m must be an int >= 1"),
    ({"drafter": "d", "min_path_prob": 1.0}, "min_path_prob must be a number in"),
    ({"drafter": "d", "min_path_prob": -0.1}, "min_path_prob must be a number in"),
    ({"drafter": "d", "min_path_prob": "0.2"}, "min_path_prob must be a number in"),
    ({"drafter": "d", "min_path_prob": "Auto"}, "or 'auto'"),
    ({"drafter": "d", "learn": True}, "the strategy has no lookup"),
    ({"drafter": "d", "strategy": "chain+lookup2", "learn": 2}, "learn must be true, false or"),
    ({"drafter": "d", "strategy": "chain+lookup2", "learn": "yes"}, "learn must be true, false or"),
    ({"drafter": "d", "strategy": "chain+lookup2", "learn_prompts": True}, "without learn"),
])
def test_bad_settings_say_what_to_change(settings, message):
    with pytest.raises(ValueError, match=message):
        ProposerSettings.from_vllm_config(vllm_config(settings), environ={})


def test_prefix_caching_and_tensor_parallel_are_refused():
    with pytest.raises(ValueError, match="enable_prefix_caching=False"):
        TreegenProposer(vllm_config({"drafter": "d"}, prefix_caching=True))
    with pytest.raises(ValueError, match="tensor_parallel_size=1"):
        TreegenProposer(vllm_config({"drafter": "d"}, tp=2))


def test_target_view_cuts_the_padded_vocabulary_and_shares_storage():
    config = SimpleNamespace(vocab_size=10)
    embed, head = torch.randn(16, 4), torch.randn(16, 4)  # vLLM pads vocab rows
    view = TargetView(config, embed, head)
    assert view.get_input_embeddings().weight.shape == (10, 4)
    assert view.get_output_embeddings().weight.data_ptr() == head.data_ptr()
    assert view.get_input_embeddings().weight.data_ptr() == embed.data_ptr()


# ---------------------------------------------------------------------------------------- best path
def test_best_path_follows_the_highest_scoring_child():
    # root -> a(5, -1.0) -> c(7, -1.5); root -> b(6, -0.5) -> d(8, -2.0), e(9, -0.9)
    tree = DraftTree(torch.tensor([0, 5, 6, 7, 8, 9]), torch.tensor([-1, 0, 0, 1, 2, 2]),
                     torch.tensor([0.0, -1.0, -0.5, -1.5, -2.0, -0.9]))
    assert tree.best_path() == [6, 9]
    assert tree.best_path(limit=1) == [6]
    assert DraftTree.chain(1, [2, 3, 4]).best_path(2) == [2, 3]
    assert DraftTree.root_only(1).best_path() == []
    assert tree.best_path(min_score=-0.9) == [6, 9]  # a bound equal to a score keeps the node
    assert tree.best_path(min_score=-0.8) == [6]  # the path stops before e, it does not turn to d
    assert tree.best_path(min_score=-0.1) == []


# ---------------------------------------------------------------------------------------- contexts
def test_contexts_are_found_by_content_and_claimed_once():
    contexts = RequestContexts()
    twin_a = SimpleNamespace(length=3, tokens=np.array([1, 2, 3]), last_step=1)
    twin_b = SimpleNamespace(length=3, tokens=np.array([1, 2, 3]), last_step=1)
    other = SimpleNamespace(length=3, tokens=np.array([1, 2, 4]), last_step=1)
    for ctx in (twin_a, twin_b, other):
        contexts.put(ctx)
    assert contexts.claim(np.array([1, 2, 4, 9]), 3) is other
    first, second = contexts.claim(np.array([1, 2, 3, 9]), 3), contexts.claim(np.array([1, 2, 3, 7]), 3)
    assert {id(first), id(second)} == {id(twin_a), id(twin_b)}
    assert contexts.claim(np.array([1, 2, 3, 7]), 3) is None  # both twins taken
    assert contexts.claim(np.array([1, 2, 3, 7]), 2) is None  # no context of that length
    contexts.put(twin_a)
    contexts.drop_idle(step=1 + 256)
    assert len(contexts) == 0


# ---------------------------------------------------------------------------------------- engine steps
class Rows:
    """Builds StepRows the way vLLM's forward lays them out, with features from the HF target."""

    def __init__(self, model, layer_ids, sequences):
        self.features = {}
        with FeatureTap(model, layer_ids) as tap:
            for name, seq in sequences.items():
                model(torch.tensor([seq]))
                self.features[name] = tap.take()  # (T, k*H) features of the true sequence

    def step(self, parts):
        """parts: [(name, positions, input_ids)] in batch order; rows whose id differs from the true
        sequence are rejected drafts (their features are noise, as the target would give for them)."""
        ids, positions, starts, feats = [], [], [0], []
        for name, pos, tokens in parts:
            ids += tokens
            positions += pos
            starts.append(starts[-1] + len(pos))
            true = self.features[name]
            feats.append(torch.stack([true[p] if p < true.shape[0] else torch.randn(true.shape[1]) for p in pos]))
        return StepRows(torch.tensor(ids), torch.tensor(positions), starts, torch.cat(feats))


def _proposer(model, drafter, k=3, **settings):
    settings.setdefault("min_path_prob", 0.0)  # whole chains unless a test says otherwise
    proposer = TreegenProposer(vllm_config({"drafter": "unused", **settings}, k=k, hf_config=model.config))
    proposer.use_drafter(drafter)
    return proposer


def _first_step(proposer, rows, name, sequence, prompt_length):
    """Prefill sequence[:prompt_length] as one request that emits sequence[prompt_length]; returns the
    chain proposed under that token."""
    prompt = sequence[:prompt_length]
    proposer.capture = SimpleNamespace(take=lambda: rows.step([(name, list(range(prompt_length)), prompt)]))
    tokens = sequence[: prompt_length + 1]
    return proposer.propose([[tokens[-1]]], np.array([len(tokens)]), _table([tokens], [len(tokens)]), None)[0]


def _table(sequences, lengths):
    table = np.zeros((len(sequences), 64), dtype=np.int32)
    for i, (seq, n) in enumerate(zip(sequences, lengths)):
        table[i, :n] = seq[:n]
    return table


def test_engine_steps_keep_each_requests_committed_context():
    model = tiny_target()
    drafter = tiny_drafter(model)
    rng = np.random.default_rng(0)
    a, b = rng.integers(1, 256, 20).tolist(), rng.integers(1, 256, 20).tolist()
    rows = Rows(model, drafter.config.target_layer_ids, {"a": a, "b": b})
    proposer = _proposer(model, drafter)

    class Capture:
        def take(self):
            return self.next

    proposer.capture = capture = Capture()
    # step 1: both prompts prefilled (a: 5 tokens, b: 7); each emits one token
    capture.next = rows.step([("a", list(range(5)), a[:5]), ("b", list(range(7)), b[:7])])
    drafts = proposer.propose([[a[5]], [b[7]]], np.array([6, 8]), _table([a, b], [6, 8]), None)
    assert [len(d) for d in drafts] == [3, 3]
    # step 2, batch reordered (b first): b's root + 3 drafts, 2 accepted (+1 bonus); a: root + 3 drafts,
    # none accepted. Rejected draft rows carry wrong ids.
    capture.next = rows.step([("b", [7, 8, 9, 10], [b[7], b[8], b[9], 0]), ("a", [5, 6, 7, 8], [a[5], 0, 0, 0])])
    drafts = proposer.propose([[b[8], b[9], b[10]], [a[6]]], np.array([11, 7]), _table([b, a], [11, 7]), None)
    assert [len(d) for d in drafts] == [3, 3]
    assert proposer.stats.rounds == 2 and proposer.stats.round_tokens == 4 and proposer.stats.lost_contexts == 0
    assert proposer.stats.undrafted_steps == 2  # each request's first token came from its prefill
    assert proposer.stats.tokens_per_step == (4 + 2) / (2 + 2)
    # each context now equals a session built directly from the true features of its committed positions
    for name, seq, length in (("a", a, 6), ("b", b, 10)):
        ctx = proposer.contexts.claim(np.array(seq), length)
        assert ctx is not None and ctx.length == length
        direct = drafter.new_session()
        direct.extend(rows.features[name][:length], torch.arange(length))
        torch.testing.assert_close(ctx.session.context[0].keys[:, :length], direct.context[0].keys[:, :length])
        torch.testing.assert_close(ctx.session.context[0].values[:, :length], direct.context[0].values[:, :length])
        proposer.contexts.put(ctx)


def test_a_domino_drafters_scoring_tables_are_made_at_load_not_in_the_first_step(monkeypatch):
    from hf_treegen.drafters.domino import DominoDrafter
    from tests.helpers import tiny_domino

    model = tiny_target()
    made = []
    real = DominoDrafter.scoring_tables
    monkeypatch.setattr(DominoDrafter, "scoring_tables", lambda self: made.append(1) or real(self))
    _proposer(model, tiny_domino(model))
    assert made  # built once by use_drafter; the engine's first step only reads the cache


def test_min_path_prob_cuts_the_drafters_path_where_it_becomes_unlikely():
    model = tiny_target()
    drafter = tiny_drafter(model)
    sequence = list(range(1, 12))
    rows = Rows(model, drafter.config.target_layer_ids, {"a": sequence})
    full = _proposer(model, drafter, k=3)
    chain = _first_step(full, rows, "a", sequence, 8)
    session = full.contexts.claim(np.array(sequence), 8).session
    path_scores = full.builder(session.draft(sequence[8], 8), sequence[8]).scores[1:].tolist()  # log path probs
    assert len(chain) == 3 and path_scores[0] > path_scores[1] > path_scores[2]
    between = math.exp((path_scores[1] + path_scores[2]) / 2)  # keeps two tokens, not the third
    assert _first_step(_proposer(model, drafter, k=3, min_path_prob=between), rows, "a", sequence, 8) == chain[:2]
    assert _first_step(_proposer(model, drafter, k=3, min_path_prob=0.99), rows, "a", sequence, 8) == []


def test_min_path_prob_auto_cuts_where_the_engine_steps_say_a_row_stops_paying():
    """One request decoded step by step against a simulated engine whose forward costs
    25 ms + 4 ms a row: whole chains while warming up, then the cut the measured steps give, with the
    rounds' expected and kept tokens recorded for the calibration."""
    model = tiny_target()
    drafter = tiny_drafter(model)
    sequence = torch.randint(1, 256, (64,), generator=torch.Generator().manual_seed(1)).tolist()
    rows = Rows(model, drafter.config.target_layer_ids, {"a": sequence})
    proposer = _proposer(model, drafter, k=3, min_path_prob="auto")
    now = [0.0]
    proposer.clock = lambda: now[0]
    proposer.capture = capture = SimpleNamespace(take=lambda: capture.next)
    length, emitted, cuts, lengths = 8, sequence[7:8], [], []  # length: the request's tokens so far
    capture.next = rows.step([("a", list(range(7)), sequence[:7])])  # the prompt's prefill
    while length + 4 < len(sequence):
        chain = proposer.propose([emitted], np.array([length]), _table([sequence], [length]), None)[0]
        cuts.append(proposer.stats.min_path_prob)
        lengths.append(len(chain))
        kept = next((i for i, t in enumerate(chain) if t != sequence[length + i]), len(chain))
        emitted = sequence[length: length + kept + 1]
        # the engine verifies root + chain: the rows of the next step, then emits kept + 1 tokens
        positions = list(range(length - 1, length + len(chain)))
        capture.next = rows.step([("a", positions, [sequence[length - 1]] + chain)])
        now[0] += 0.025 + 0.004 * len(positions)
        length += kept + 1
    cutoff = proposer.path_cutoff
    assert cutoff.row_seconds == pytest.approx(0.004)
    # warm-up: the first step (prefill) is not timed, then 7 decode steps; whole and half chains in turn
    assert cuts[:8] == [0.0] * 8 and lengths[:8] == [3, 1] * 4
    # then probes (uncut, whole or half chains in turn) every 16 steps, and in between the measured cut,
    # under which this random drafter's paths fall: with 4 ms a row, its doubtful tokens do not pay
    assert [i for i, c in enumerate(cuts) if c == 0][8:] == [16, 32, 48] and lengths[16] + lengths[32] == 4
    assert all(c > 0.3 for i, c in enumerate(cuts[8:], start=8) if i % 16) and sum(lengths[8:]) <= 8
    measured = [c for c in cuts[8:] if c > 0]
    assert measured and measured[-1] == pytest.approx(cutoff.measured_cutoff())
    assert len(cutoff.rounds) == proposer.stats.rounds
    assert cutoff.rounds[0][0] > 0 and cutoff.rounds[0][1] >= 0


def test_expected_kept_sums_the_chains_path_probabilities():
    from hf_treegen.integrations.vllm import expected_kept

    tree = DraftTree(tokens=torch.tensor([0, 5, 6, 7]), parents=torch.tensor([-1, 0, 1, 0]),
                     scores=torch.tensor([0.0, math.log(0.5), math.log(0.2), math.log(0.3)]))
    assert expected_kept(tree, [5, 6]) == pytest.approx(0.7)
    assert expected_kept(tree, [7]) == pytest.approx(0.3) and expected_kept(tree, []) == 0


def test_unfollowable_requests_get_no_drafts():
    model = tiny_target()
    drafter = tiny_drafter(model)
    a = list(range(1, 21))
    rows = Rows(model, drafter.config.target_layer_ids, {"a": a})
    proposer = _proposer(model, drafter)
    proposer.capture = SimpleNamespace(take=lambda: rows.step([("a", [4, 5], a[4:6])]))
    # rows start at position 4 but no context has seen positions 0..3 (a prefix cache hit)
    with pytest.warns(UserWarning, match="never seen"):
        assert proposer.propose([[a[6]]], np.array([7]), _table([a], [7]), None) == [[]]
    # rows whose ids are not the request's tokens: refused, not silently used
    proposer.capture = SimpleNamespace(take=lambda: rows.step([("a", [0, 1, 2], [a[0], 99, a[2]])]))
    assert proposer.propose([[a[3]]], np.array([4]), _table([a], [4]), None) == [[]]
    # a row count that does not match the step's requests
    proposer.capture = SimpleNamespace(take=lambda: rows.step([("a", [0, 1], a[:2])]))
    assert proposer.propose([[a[2]], [5]], np.array([3, 3]), _table([a, a], [3, 3]), None) == [[], []]
    assert proposer.stats.lost_contexts == 3


# ---------------------------------------------------------------------------------------- hands off
class VllmStyleLayer(torch.nn.Module):
    """Like vLLM's decoder layers: (positions, hidden, residual) -> (hidden, residual), with the
    residual add of the previous layer fused in."""

    def __init__(self, width):
        super().__init__()
        self.linear = torch.nn.Linear(width, width)

    def forward(self, positions, hidden, residual):
        residual = hidden if residual is None else hidden + residual
        return torch.tanh(self.linear(residual)), residual


class VllmStyleModel(torch.nn.Module):
    def __init__(self, vocab=16, width=8, layers=3):
        super().__init__()
        self.model = torch.nn.Module()
        self.model.embed_tokens = torch.nn.Embedding(vocab, width)
        self.model.layers = torch.nn.ModuleList(VllmStyleLayer(width) for _ in range(layers))

    def forward(self, ids, positions):
        hidden, residual = self.model.embed_tokens(ids), None
        for layer in self.model.layers:
            hidden, residual = layer(positions, hidden, residual)
        return hidden + residual


def test_capture_hooks_change_nothing_in_the_forward(monkeypatch):
    """The hooks record copies and return None: the model's output and its inputs are bit-identical
    with and without them, and the recorded features are each tapped layer's residual stream."""
    import hf_treegen.integrations.vllm as integration
    from hf_treegen.integrations.vllm import StepCapture

    monkeypatch.setattr(integration, "_query_starts", lambda: [0, 3, 5])  # two requests: 3 rows, 2 rows
    torch.manual_seed(0)
    model = VllmStyleModel()
    ids, positions = torch.tensor([1, 2, 3, 4, 5]), torch.tensor([0, 1, 2, 7, 8])
    reference = model(ids, positions)
    streams = []
    handles = [layer.register_forward_hook(lambda m, a, out: streams.append(out[0] + out[1]))
               for layer in model.model.layers]
    model(ids, positions)
    for handle in handles:
        handle.remove()
    capture = StepCapture(model, [0, 1])
    got = model(ids, positions)
    assert torch.equal(got, reference)
    assert torch.equal(ids, torch.tensor([1, 2, 3, 4, 5])) and torch.equal(positions, torch.tensor([0, 1, 2, 7, 8]))
    rows = capture.take()
    assert rows.query_starts == [0, 3, 5] and torch.equal(rows.positions, positions) and torch.equal(rows.input_ids, ids)
    torch.testing.assert_close(rows.features, torch.cat([streams[0], streams[1]], dim=-1), rtol=0, atol=0)
    assert capture.take() is None  # each forward's rows are taken once
    capture.remove()
    assert torch.equal(model(ids, positions), reference)


def test_loading_the_drafter_leaves_the_engine_random_stream_alone(tmp_path):
    """vLLM samples with the global RNG: building the drafter must not draw from it."""
    model = tiny_target()
    tiny_drafter(model).save_pretrained(tmp_path)
    proposer = TreegenProposer(vllm_config({"drafter": str(tmp_path)}, hf_config=model.config))
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    proposer.load_model(model)  # an HF Llama has the attribute names of vLLM's (model.layers, lm_head)
    assert torch.equal(torch.rand(3), expected)
    assert proposer.drafter is not None and proposer.capture is not None
    proposer.capture.remove()


# ---------------------------------------------------------------------------------------- lookup
def test_lookup_offers_the_requests_repeated_text_in_place_of_an_unsure_drafter():
    model = tiny_target()
    drafter = tiny_drafter(model)  # random weights: never sure of a token
    sequence = [3, 4, 5, 6, 7, 8, 9, 3, 4, 5, 6, 7, 8, 9, 3, 4, 5, 6]
    rows = Rows(model, drafter.config.target_layer_ids, {"a": sequence})
    plain = _first_step(_proposer(model, drafter, k=3), rows, "a", sequence, 15)
    with_lookup = _proposer(model, drafter, k=3, strategy="chain+lookup3")
    assert _first_step(with_lookup, rows, "a", sequence, 15) == [5, 6, 7]  # what followed 8 9 3 4 before
    assert plain != [5, 6, 7] and len(plain) == 3
    assert with_lookup.stats.drafted_tokens == 3 and with_lookup.stats.lookup_chains == 1


def test_lookup_searches_the_datastore_where_the_request_has_no_repeat(tmp_path):
    model = tiny_target()
    drafter = tiny_drafter(model)
    store = tmp_path / "store.safetensors"
    TokenDatastore.from_sequences([[20, 21, 22, 23, 24, 25]]).save(store)
    sequence = [9, 10, 11, 20, 21, 22]
    rows = Rows(model, drafter.config.target_layer_ids, {"a": sequence})
    proposer = _proposer(model, drafter, k=4, strategy="chain+lookup2", datastore=str(store))
    assert _first_step(proposer, rows, "a", sequence, 5) == [23, 24]  # lookup=2 caps the continuation
    assert proposer.stats.lookup_chains == 1
    missing = TreegenProposer(vllm_config({"drafter": "unused", "strategy": "chain+lookup2", "datastore": str(tmp_path / "none")},
                                          hf_config=model.config))
    with pytest.raises(FileNotFoundError, match="No datastore file"):
        missing.use_drafter(drafter)


def test_finished_requests_are_learned_and_offered_to_later_ones():
    model = tiny_target()
    drafter = tiny_drafter(model)  # random weights: never sure of a token, so lookup takes the slot
    rng = np.random.default_rng(3)
    a, c = rng.integers(1, 200, 16).tolist(), rng.integers(1, 200, 8).tolist()
    b = [250, 251, *a[5:8]]  # b's prompt ends with a's output a[5], a[6]; it emits a[7]
    rows = Rows(model, drafter.config.target_layer_ids, {"a": a, "b": b, "c": c})
    chains = {}
    for learn in (False, True):
        settings = {"strategy": "chain+lookup3"} | ({"learn": True} if learn else {})
        proposer = _proposer(model, drafter, k=3, **settings)
        _first_step(proposer, rows, "a", a, 5)  # a's prompt: 5 tokens
        for start in (5, 9):  # two steps whose 4 rows are all kept: a's context holds a[:13]
            proposer.capture = SimpleNamespace(
                take=lambda s=start: rows.step([("a", list(range(s, s + 4)), a[s:s + 4])]))
            tokens = a[: start + 5]
            proposer.propose([a[start + 1: start + 5]], np.array([len(tokens)]), _table([tokens], [len(tokens)]),
                             None)
        _first_step(proposer, rows, "c", c, 5)  # a step without a: a finished, and is learned
        chains[learn] = _first_step(proposer, rows, "b", b, 4)
        if learn:
            assert proposer.datastore.learned == 1 and len(proposer.datastore) == 8 + 1  # a[5:13] and an end
            assert proposer.datastore.index.tokens[:-1].tolist() == a[5:13]
    assert chains[True] == a[8:11]  # what followed a[5:8] in a's output
    assert chains[False] != a[8:11]


def test_learned_prompts_only_when_asked():
    model = tiny_target()
    drafter = tiny_drafter(model)
    proposer = _proposer(model, drafter, k=3, strategy="chain+lookup3", learn=64, learn_prompts=True)
    assert proposer.datastore.max_tokens == 64 and proposer.datastore.learn_prompts
