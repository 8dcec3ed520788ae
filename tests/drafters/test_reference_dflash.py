"""Parity with z-lab's reference package (``dflash``): drafters it saves load here and draft the same
logits round after round; drafters we save load there; its chain loop and our ``chain`` strategy accept
the same tokens in every round."""

import pytest
import torch

import hf_treegen as htg
from tests.drafters.reference import (ReferenceRounds, fit_to_target, reference, reference_config,
                                      reference_drafter, reference_generate)
from tests.helpers import greedy_reference, random_prompts, tiny_target

# (fp64: hidden rows to 1e-9; fp32: hidden rows and logits to 1e-5). Our draft logits are float32 in
# every dtype, so in fp64 they are compared at float32 precision.
TOLERANCE = {torch.float64: 1e-9, torch.float32: 1e-5}
CONFIGS = {
    "dflash": {},
    "dflash-scaled": {"input_embedding_scale": 1.5, "output_multiplier": 0.7, "final_logit_softcapping": 4.0,
                      "attention_bias": True},
    "dflash2": {"dflash2": True},
    "dflash2-scaled": {"dflash2": True, "input_embedding_scale": 0.8, "output_multiplier": 1.3,
                       "final_logit_softcapping": 6.0},
}


def saved_by_reference(tmp_path, target, dtype, name, **shape):
    """A random reference drafter saved with its own save_pretrained, and loaded back here."""
    ref = reference_drafter(reference_config(target, **CONFIGS[name], **shape))
    ref.save_pretrained(tmp_path / name)
    ours = htg.load_drafter(tmp_path / name, target=target, dtype=dtype)
    return ref.to(dtype), ours


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("name", list(CONFIGS))
def test_drafts_equal_the_reference_round_after_round(tmp_path, dtype, name):
    target = tiny_target("qwen3", dtype=dtype, layers=4)
    ref, ours = saved_by_reference(tmp_path, target, dtype, name)
    assert type(ours) is (htg.DFlash2Drafter if "dflash2" in name else htg.DFlashDrafter)
    rounds, session = ReferenceRounds(ref, target), ours.new_session()
    generator = torch.Generator().manual_seed(1)
    for new_rows in (7, 3, 1, 5):  # the context grows by the rows each round committed
        features = torch.randn(new_rows, ours.config.feature_size, generator=generator, dtype=dtype)
        anchor = int(torch.randint(0, target.config.vocab_size - 1, (), generator=generator))
        start = session.length
        session.extend(features, torch.arange(start, start + new_rows))
        block = session.draft(anchor, start + new_rows)
        hidden, logits = rounds.draft(features, anchor)
        torch.testing.assert_close(block.hidden, hidden, rtol=0, atol=TOLERANCE[dtype])
        torch.testing.assert_close(block.logits, logits.float(), rtol=0, atol=1e-5)
        if "dflash2" in name:
            assert ours.released_greedy_chain(block) == rounds.selector_path(hidden, anchor)


@pytest.mark.parametrize("name", ["dflash", "dflash2"])
def test_a_draft_vocabulary_keeps_the_references_logits_of_its_columns(tmp_path, name):
    target = tiny_target("qwen3", dtype=torch.float32, layers=4)
    ref, ours = saved_by_reference(tmp_path, target, torch.float32, name)
    vocab = torch.randperm(target.config.vocab_size, generator=torch.Generator().manual_seed(2))[:64].sort().values
    ours.set_draft_vocab(vocab)
    rounds, session = ReferenceRounds(ref, target), ours.new_session()
    for new_rows, anchor in ((6, 11), (2, 40)):
        features = torch.randn(new_rows, ours.config.feature_size)
        session.extend(features, torch.arange(session.length, session.length + new_rows))
        block = session.draft(anchor, session.length)
        _, logits = rounds.draft(features, anchor)
        torch.testing.assert_close(block.logits, logits[:, vocab], rtol=0, atol=1e-5)


@pytest.mark.parametrize("layers, tapped", [(4, (0, 3)), (6, (2,))])
def test_taps_read_the_layers_the_reference_reads(layers, tapped):
    """The reference takes ``hidden_states[i + 1]`` for tapped layer i; our hooks read layer i's output."""
    from hf_treegen.target.hooks import FeatureTap

    target = tiny_target("qwen3", dtype=torch.float64, layers=layers)
    ids = torch.randint(1, 200, (1, 9))
    with FeatureTap(target, tapped) as tap, torch.no_grad():
        out = target(ids, output_hidden_states=True)
        ours = tap.take()
    torch.testing.assert_close(ours, reference.extract_context_feature(out.hidden_states, list(tapped))[0],
                               rtol=0, atol=0)


@pytest.mark.parametrize("family", ["dflash", "dflash2"])
def test_reference_loop_and_chain_accept_the_same_tokens_every_round(tmp_path, family):
    """Our drafter, fitted to the target and saved here, loads in the reference; its chain loop and ours
    then emit the same tokens in the same rounds (and both equal stock greedy decoding)."""
    target = tiny_target("qwen3", dtype=torch.float64, layers=4, vocab=64, std=0.25)
    cfg = htg.DrafterConfig.for_target(target.config, num_hidden_layers=1, block_size=5, target_layer_ids=(1, 3))
    if family == "dflash2":
        cfg = htg.DrafterConfig(**{**cfg.__dict__, "architecture": "DFlash2DraftModel",
                                   **{k: v for k, v in {"conv_kernel_size": 3, "conv_group_size": 16,
                                                        "selector_rank": 8, "selector_top_k": 6}.items()}})
    ours = (htg.DFlash2Drafter if family == "dflash2" else htg.DFlashDrafter)(cfg, target=target).double()
    torch.manual_seed(0)
    with torch.no_grad():
        for name, p in ours.named_parameters():
            p.normal_(0, 0.01 if "candidate_selector" in name or "conv" in name else 0.1)
    prompts = random_prompts(4, 60, seed=3, min_len=4, max_len=8)
    fit_to_target(ours, target, [p.clone() for p in prompts[:3]])
    ours.save_pretrained(tmp_path / "ours")
    cls = reference.DFlash2DraftModel if family == "dflash2" else reference.DFlashDraftModel
    ref = cls.from_pretrained(tmp_path / "ours")
    accepted_somewhere = False
    for prompt in prompts:
        ids = prompt.view(1, -1)
        stock = greedy_reference(target, ids, 40)
        ref_ids, ref_rounds = reference_generate(ref, target, ids, 40)
        out = target.generate(ids, assistant_model=ours, tree_strategy="chain", tree_budget=4, max_new_tokens=40,
                              do_sample=False, return_dict_in_generate=True)
        assert torch.equal(ref_ids, stock) and torch.equal(out.sequences, stock)
        assert out.tree_stats.accepted_lengths == ref_rounds
        accepted_somewhere |= max(ref_rounds) > 1
    assert accepted_somewhere  # the fitted drafter drafts tokens the target takes
