"""Packed linear layers (hf_treegen/target/packed.py): what they change, what they leave alone, and
that tree decoding on them still equals stock generate()."""

import pytest
import torch

import hf_treegen as htg
from hf_treegen.target import packed as packed_module
from hf_treegen.target.packed import ENV_SWITCH, MIN_PACKED_WEIGHT, packing_for, runs_packed, unsupported_reason
from tests.helpers import ARCHS, greedy_reference, random_prompts, tiny_domino, tiny_drafter, tiny_target

pytestmark = pytest.mark.skipif(unsupported_reason(tiny_target()) is not None,
                                reason="this PyTorch build has no oneDNN kernels to pack for")


def small_target(arch: str = "llama", **kw):
    """A tiny model whose larger layers (256 x 256 and up) are packed; its K/V projections are not."""
    return tiny_target(arch, hidden=256, vocab=512, std=0.1, **kw)


def linears(model):
    """The layers packing takes."""
    return [m for m in model.modules() if type(m) is torch.nn.Linear and m.weight.numel() >= MIN_PACKED_WEIGHT]


def own_forwards(model) -> int:
    """How many linear layers carry an instance-level forward (ours, while packing is on)."""
    return sum("forward" in vars(m) for m in linears(model))


@torch.no_grad()
def test_packed_forward_matches_the_default_path_and_is_undone_on_exit():
    model = small_target()
    ids = torch.tensor([[3, 1, 4, 1, 5, 9, 2, 6]])
    plain = model(ids).logits
    with htg.packed_linears(model):
        assert own_forwards(model) == len(linears(model)) == len(packing_for(model).layers)
        assert runs_packed(model.lm_head)  # so the verify's LM-head shortcut steps aside
        packed = model(ids).logits
    assert own_forwards(model) == 0 and not runs_packed(model.lm_head)
    torch.testing.assert_close(packed, plain, rtol=1e-4, atol=1e-4)
    assert torch.equal(model(ids).logits, plain)  # the default path is back, bit for bit


def test_nothing_changes_until_the_block_opens():
    model = small_target()
    pending = htg.packed_linears(model)  # made, not entered (e.g. chosen ahead of a `with`)
    assert own_forwards(model) == 0
    with pending:
        assert own_forwards(model) == len(linears(model))
    assert own_forwards(model) == 0


def test_autocast_inside_the_block_takes_the_default_path():
    """The packed kernel neither casts nor takes mixed dtypes (oneDNN rejects bf16 activations against a
    packed fp32 copy): under autocast each layer runs F.linear, so the block changes nothing there."""
    model = small_target()
    ids = torch.tensor([[3, 1, 4, 1, 5, 9, 2, 6]])
    activations = torch.randn(2, model.config.hidden_size).to(torch.bfloat16)  # what a bf16 op hands on
    with htg.packed_linears(model):  # packed outside autocast first; the copies are kept for later blocks
        model(ids)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        with htg.packed_linears(model):
            packed, packed_head = model(ids).logits, model.lm_head(activations)
        plain, plain_head = model(ids).logits, model.lm_head(activations)
    assert torch.equal(packed, plain) and torch.equal(packed_head, plain_head)


def test_small_layers_and_small_models_keep_the_default_path():
    model = small_target()
    packed = packing_for(model).layers
    kv = [m for name, m in model.named_modules() if name.endswith(("k_proj", "v_proj"))]
    assert kv and not any(m in packed for m in kv)  # 256 x 128: below the size that repays a oneDNN call
    assert packing_for(tiny_target()) is None  # hidden 64: nothing to pack, so no packing at all


def test_an_error_inside_the_block_restores_the_layers():
    model = small_target()
    with pytest.raises(RuntimeError, match="boom"):
        with htg.packed_linears(model):
            raise RuntimeError("boom")
    assert own_forwards(model) == 0


def test_blocks_nest_and_the_outermost_restores():
    model = small_target()
    with htg.packed_linears(model):
        with htg.packed_linears(model):  # a calibration inside a generation enters again
            pass
        assert own_forwards(model) == len(linears(model))  # still packed after the inner block
    assert own_forwards(model) == 0


@torch.no_grad()
def test_a_changed_weight_is_packed_again():
    model = small_target()
    ids = torch.tensor([[7, 8, 9]])
    first = packing_for(model)
    assert packing_for(model) is first  # kept between calls
    model.lm_head.weight.mul_(2.0)  # in place: the packed copy is stale now
    second = packing_for(model)
    assert second is not first
    with htg.packed_linears(model):
        packed = model(ids).logits
    torch.testing.assert_close(packed, model(ids).logits, rtol=1e-4, atol=1e-4)
    htg.clear_packed_linears()
    assert packing_for(model) is not second


def test_several_modules_and_none_in_one_block():
    model = small_target()
    drafter = tiny_drafter(model)
    with htg.packed_linears(model, None, drafter):
        assert own_forwards(model) == len(linears(model)) and own_forwards(drafter) == len(linears(drafter))
    assert own_forwards(model) == own_forwards(drafter) == 0


@torch.no_grad()
def test_a_drafter_with_a_draft_vocabulary_scores_through_a_packed_head():
    model = small_target()
    drafter = tiny_drafter(model).set_draft_vocab(torch.arange(0, 512, 2))  # 256 rows x 256: packed
    rows = torch.randn(8, model.config.hidden_size)
    packed = drafter.draft_logits(rows)
    assert drafter._gathered_head()[3] is not None
    weight, bias = drafter.draft_head()
    torch.testing.assert_close(packed, torch.nn.functional.linear(rows, weight, bias), rtol=1e-4, atol=1e-4)


def test_where_packing_does_not_apply(monkeypatch):
    assert "dtype" in unsupported_reason(small_target(dtype=torch.float64))
    assert packing_for(small_target(dtype=torch.float64)) is None
    model = small_target()
    monkeypatch.setenv(ENV_SWITCH, "0")
    assert packing_for(model) is None
    with htg.packed_linears(model):  # a no-op context, not an error
        assert own_forwards(model) == 0


def test_a_layer_someone_else_wrapped_is_left_alone():
    model = small_target()
    wrapped = model.lm_head
    original = wrapped.forward
    wrapped.forward = lambda x: original(x)  # as accelerate's hooks replace forward
    with htg.packed_linears(model):
        assert wrapped not in packing_for(model).layers and own_forwards(model) == len(linears(model))
    assert "forward" in vars(wrapped)  # still the other party's


def test_a_misbehaving_kernel_falls_back_to_the_default_path(monkeypatch):
    model = small_target(seed=3)
    htg.clear_packed_linears()
    monkeypatch.setattr(packed_module, "_packed_forward", lambda packed, bias: (lambda x: torch.zeros(1)))
    assert packing_for(model) is None


def test_a_build_without_the_kernels_falls_back_to_the_default_path(monkeypatch):
    model = small_target(seed=3)
    htg.clear_packed_linears()

    def missing(weight):
        raise AttributeError("'_OpNamespace' 'mkldnn' object has no attribute '_reorder_linear_weight'")

    monkeypatch.setattr(packed_module, "_pack", missing)
    assert packing_for(model) is None and packed_module.packed_matmul(torch.randn(512, 256)) is None
    with htg.packed_linears(model):  # decoding goes on with the default kernels
        assert own_forwards(model) == 0


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("strategy", ["chain", "conditional", "auto"])
def test_tree_decoding_runs_packed_and_equals_stock(arch, strategy):
    model = small_target(arch, seed=5)
    drafter = tiny_domino(model) if strategy != "chain" else tiny_drafter(model)
    htg.clear_packed_linears()
    for ids in random_prompts(3, model.config.vocab_size, seed=11):
        out = model.generate(ids, assistant_model=drafter, tree_strategy=strategy, max_new_tokens=24,
                             do_sample=False)
        assert torch.equal(out, greedy_reference(model, ids, 24))
    assert packing_for(model) is not None and model in packed_module._PACKED  # it ran on packed weights
    assert own_forwards(model) == 0  # and gave the layers back


def test_stock_generate_on_packed_kernels_equals_stock():
    model = small_target("qwen3", seed=2)
    for ids in random_prompts(3, model.config.vocab_size, seed=4):
        with htg.packed_linears(model):
            packed = model.generate(ids, max_new_tokens=24, do_sample=False)
        assert torch.equal(packed, greedy_reference(model, ids, 24))


def test_calibration_times_the_kernels_its_caller_runs(monkeypatch):
    from hf_treegen import calibration

    model = small_target()
    assert "packed" in calibration.profile_key(model)  # tree decoding's profile: packed kernels
    assert "packed" not in calibration.profile_key(model, packed=False)  # compiled choice's: default ones
    assert "packed" not in calibration.profile_key(small_target(dtype=torch.float64))
    seen = []
    real_timed_pass = calibration.VerifyTimer.timed_pass

    def spy(self, keep):
        seen.append(runs_packed(model.lm_head, rows=100))
        return real_timed_pass(self, keep)

    monkeypatch.setattr(calibration.VerifyTimer, "timed_pass", spy)
    calibration.measure_profile(model, max_rows=3, repeats=1, packed=False)
    assert seen == [False, False]  # warm-up and one timed pass, default kernels only
    seen.clear()
    profile = calibration.measure_profile(model, max_rows=3, repeats=1)
    # each pass times the packed kernels, then the default ones with the head shortcut and with the own head
    assert seen == [True, False, False, True, False, False]
    assert profile.packed_from_rows in (1, 2, 3, 4) and own_forwards(model) == 0


def test_the_packed_threshold_minimises_the_measured_total():
    from hf_treegen.calibration import packed_threshold

    default = {1: 30.0, 2: 39.0, 3: 38.0, 5: 48.0, 9: 56.0}  # ms as measured on one CPU: packed wins from 5 rows
    packed = {1: 40.0, 2: 40.0, 3: 41.0, 5: 42.0, 9: 49.0}
    assert packed_threshold(default, packed) == 5
    assert packed_threshold({r: s - 1 for r, s in packed.items()}, packed) == 10  # default wins everywhere
    assert packed_threshold({r: 2 * s for r, s in packed.items()}, packed) == 1
    assert packed_threshold(packed, packed) == 1  # a tie keeps packing


def test_the_kernel_plan_picks_the_cheaper_head_for_the_default_kernels():
    from hf_treegen.calibration import kernel_plan

    shortcut = {1: 30.0, 2: 42.0, 3: 41.0, 5: 52.0, 9: 58.0}  # ms as measured on one AMX CPU
    own_head = {1: 30.0, 2: 34.0, 3: 36.0, 5: 51.0, 9: 62.0}
    packed = {1: 48.0, 2: 47.0, 3: 47.0, 5: 47.0, 9: 53.0}
    assert kernel_plan({True: shortcut, False: own_head}, packed) == (5, False)
    assert kernel_plan({True: own_head, False: shortcut}, packed) == (5, True)
    assert kernel_plan({True: own_head, False: own_head}, packed) == (5, True)  # a tie keeps the shortcut
    assert kernel_plan({True: shortcut}, packed) == (5, True)  # no exact shortcut: one default set


@torch.no_grad()
def test_products_below_min_rows_take_the_default_kernels():
    model = small_target()
    layer = model.lm_head
    one, three = torch.randn(1, 256), torch.randn(3, 256)
    with htg.packed_linears(model, min_rows=3):
        assert not runs_packed(layer, rows=2) and runs_packed(layer, rows=3)
        assert torch.equal(layer(one), torch.nn.functional.linear(one, layer.weight))  # bit for bit: default
        with htg.target.default_linears(model):  # what calibration opens to time the default kernels
            assert not runs_packed(layer, rows=1000)
            assert torch.equal(layer(three), torch.nn.functional.linear(three, layer.weight))
        assert runs_packed(layer, rows=3)  # the outer threshold is back
    assert own_forwards(model) == 0
    with pytest.raises(ValueError, match="min_rows"):
        with htg.packed_linears(model, min_rows=0):
            pass


def test_tree_decoding_runs_the_head_its_profile_names(monkeypatch):
    """CostProfile.head_shortcut decides whether unpacked verify forwards apply the LM head themselves;
    either way the output equals stock generate()."""
    from hf_treegen.target import forward

    model, drafter = small_target(seed=3), tiny_domino(small_target(seed=3))
    shortcuts = []
    real_call = forward.HeadShortcut.__call__

    def spy(self, inputs, cache):
        shortcuts.append(inputs["input_ids"].shape[1])
        return real_call(self, inputs, cache)

    monkeypatch.setattr(forward.HeadShortcut, "__call__", spy)
    for ids in random_prompts(2, model.config.vocab_size, seed=6):
        reference = greedy_reference(model, ids, 20)
        for head_shortcut in (True, False):
            costs = htg.CostProfile.from_verify_seconds({1: 0.01, 2: 0.011, 3: 0.012, 17: 0.02}, draft_s=0.001,
                                                        packed_from_rows=100, head_shortcut=head_shortcut)
            shortcuts.clear()
            out = model.generate(ids, assistant_model=drafter, tree_strategy="conditional", tree_costs=costs,
                                 tree_budget=4, max_new_tokens=20, do_sample=False)
            assert torch.equal(out, reference)
            assert bool(shortcuts) == head_shortcut


def test_tree_decoding_packs_the_target_from_its_profiles_threshold(monkeypatch):
    """With a pinned profile (auto's, or one handed to a fixed strategy), a threshold of 3 rows runs one-
    and two-row verify forwards on the default kernels and wider ones packed; outputs equal stock
    generate() whatever the threshold."""
    from hf_treegen.target import forward

    model, drafter = small_target(seed=3), tiny_domino(small_target(seed=3))
    seen = []
    real_call = forward.TreeVerifier.__call__

    def spy(self, tree, past, cache):
        seen.append((tree.num_nodes, runs_packed(model.model.layers[0].mlp.down_proj, tree.num_nodes)))
        return real_call(self, tree, past, cache)

    monkeypatch.setattr(forward.TreeVerifier, "__call__", spy)
    widths = set()
    for ids in random_prompts(2, model.config.vocab_size, seed=5):
        reference = greedy_reference(model, ids, 20)
        for strategy, threshold in (("auto", 1), ("auto", 3), ("conditional", 3)):
            costs = htg.CostProfile.from_verify_seconds({1: 0.01, 2: 0.011, 3: 0.012, 17: 0.02}, draft_s=0.001,
                                                        packed_from_rows=threshold)
            seen.clear()
            out = model.generate(ids, assistant_model=drafter, tree_strategy=strategy, tree_costs=costs,
                                 tree_budget=4, max_new_tokens=20, do_sample=False)
            assert torch.equal(out, reference)
            assert seen and all(packed == (rows >= threshold) for rows, packed in seen)
            widths |= {rows for rows, _ in seen}
    assert min(widths) < 3 <= max(widths)  # both kernel sets ran


def test_tree_decoding_prefills_on_the_default_kernels(monkeypatch):
    """The prompt is one product of many rows, where the default kernels are at their best: the prefill
    leaves the packed block, the verify forwards after it run packed, and outputs equal stock generate()."""
    from hf_treegen.generation import loop

    model, drafter = small_target(seed=3), tiny_domino(small_target(seed=3))
    layer = model.model.layers[0].mlp.down_proj
    packed_during = []
    real_prefill = loop.decode_prefill

    def spy(model_, ids, *args, **kwargs):
        packed_during.append(runs_packed(layer, ids.shape[1]))
        return real_prefill(model_, ids, *args, **kwargs)

    monkeypatch.setattr(loop, "decode_prefill", spy)
    costs = htg.CostProfile.from_verify_seconds({1: 0.01, 17: 0.02}, draft_s=0.001, packed_from_rows=1)
    ids = random_prompts(1, model.config.vocab_size, seed=7)[0]
    with htg.packed_linears(model):  # a user's own block too
        assert runs_packed(layer, ids.shape[1])
        out = model.generate(ids, assistant_model=drafter, tree_strategy="auto", tree_costs=costs,
                             max_new_tokens=12, do_sample=False)
    assert packed_during == [False]
    assert torch.equal(out, greedy_reference(model, ids, 12))


def test_a_narrow_forward_runs_the_layers_own_forward_and_the_packed_ones_come_back():
    """linears_for_rows: below the open block's min_rows the layers lose our forward for that forward
    (no per-product check), at or above it they keep it; nested blocks restore what was there."""
    from hf_treegen.target.packed import default_linears, linears_for_rows

    model = small_target()
    everything = len(linears(model))
    with linears_for_rows(model, 1):  # no block open: nothing to do
        assert own_forwards(model) == 0
    with htg.packed_linears(model, min_rows=3):
        with linears_for_rows(model, 2):
            assert own_forwards(model) == 0 and not runs_packed(model.lm_head, 2)
            with linears_for_rows(model, 5):  # the narrow block decides: still the layers' own
                assert own_forwards(model) == 0
        assert own_forwards(model) == everything
        with linears_for_rows(model, 3):
            assert own_forwards(model) == everything and runs_packed(model.lm_head, 3)
        with default_linears(model):
            assert own_forwards(model) == 0
            with htg.packed_linears(model):  # a packed block inside a default one packs again
                assert own_forwards(model) == everything
            assert own_forwards(model) == 0
        assert own_forwards(model) == everything
    assert own_forwards(model) == 0
