"""Parity with the speculators package (the format vLLM and SGLang read), in its own virtualenv
(``make test-speculators``; skipped where speculators is not installed): folders its save_pretrained
writes load here and draft its logits, Markov biases and confidences; folders we write load in its
loader with the same tensors."""

import pytest
import torch

pytest.importorskip("speculators")

from speculators import SpeculatorModel  # noqa: E402
from speculators.config import SpeculatorsConfig, VerifierConfig  # noqa: E402
from speculators.models.dflash import DFlashDraftModel, DFlashSpeculatorConfig  # noqa: E402
from speculators.models.dflash2 import DFlash2DraftModel, DFlash2SpeculatorConfig  # noqa: E402
from speculators.models.dspark import DSparkDraftModel, DSparkSpeculatorConfig  # noqa: E402
from speculators.proposals.greedy import GreedyTokenProposalConfig  # noqa: E402
from transformers import Qwen3Config  # noqa: E402

import hf_treegen as htg  # noqa: E402
from hf_treegen.drafters.dspark import confidence_logits  # noqa: E402
from tests.helpers import tiny_dspark, tiny_drafter, tiny_target  # noqa: E402

KINDS = {"dflash": (DFlashSpeculatorConfig, DFlashDraftModel), "dspark": (DSparkSpeculatorConfig, DSparkDraftModel),
         "dflash2": (DFlash2SpeculatorConfig, DFlash2DraftModel)}
AUX = [1, 3]  # speculators ids: the inputs of target layers 1 and 3 (our taps 0 and 2)
BLOCK, ANCHOR_AT, LENGTH = 4, 9, 20


@pytest.fixture(scope="module")
def verifier(tmp_path_factory):
    """A tiny target saved where speculators' loader fetches the verifier's embedding and head."""
    target = tiny_target("qwen3", layers=4, vocab=256, hidden=64)
    folder = tmp_path_factory.mktemp("verifier")
    target.save_pretrained(folder)
    target.config._name_or_path = str(folder)
    return target, str(folder)


def their_drafter(kind, verifier_dir, vocab, draft_vocab=None, **extra):
    """A random speculators drafter of ``kind`` with its own constructor, mappings and verifier weights."""
    config_cls, model_cls = KINDS[kind]
    layer = Qwen3Config(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                        num_attention_heads=4, num_key_value_heads=2, head_dim=16, rms_norm_eps=1e-6,
                        attn_implementation="eager")
    drafted = BLOCK if extra.get("sample_from_anchor") else BLOCK - 1
    spec = SpeculatorsConfig(algorithm=kind, default_proposal_method="greedy",
                             proposal_methods=[GreedyTokenProposalConfig(speculative_tokens=drafted)],
                             verifier=VerifierConfig(name_or_path=verifier_dir, architectures=["Qwen3ForCausalLM"]))
    config = config_cls(transformer_layer_config=layer, draft_vocab_size=draft_vocab or vocab, block_size=BLOCK,
                        aux_hidden_state_layer_ids=AUX, mask_token_id=vocab - 1, speculators_config=spec, **extra)
    torch.manual_seed(0)
    model = model_cls(config)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if not name.startswith(("embed_tokens", "lm_head", "verifier_")):
                p.normal_(0, 0.2)
    if draft_vocab:
        ids = torch.arange(0, vocab, vocab // draft_vocab)[:draft_vocab]
        t2d = torch.zeros(vocab, dtype=torch.bool)
        t2d[ids] = True
        model.load_vocab_mappings(t2d, ids - torch.arange(draft_vocab))
    model.load_verifier_weights()
    return model.eval()


def features_and_ids(target, aux=AUX):
    """Random ids (1, T) and the target's features at speculators' aux ids (1, T, k*H)."""
    ids = torch.randint(1, 250, (1, LENGTH), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        out = target(ids, output_hidden_states=True)
    return torch.cat([out.hidden_states[i] for i in aux], dim=-1), ids


def their_block(model, features, ids):
    """The block anchored at ANCHOR_AT through speculators' own (training) forward: hidden, logits."""
    loss_mask = torch.zeros(1, LENGTH, dtype=torch.long)
    loss_mask[0, ANCHOR_AT] = 1
    with torch.no_grad():
        hidden, logits, _, _, index = model._backbone_forward(
            features, ids, loss_mask, torch.zeros(1, LENGTH, 64), torch.zeros(1, LENGTH, dtype=torch.long),
            max_anchors=1)
    assert index.view(-1)[0] == ANCHOR_AT
    return hidden[0], logits[0]  # (B, H), (B, Vd)


def our_block(drafter, features, ids):
    session = drafter.new_session()
    session.extend(features[0, :ANCHOR_AT], torch.arange(ANCHOR_AT))
    return session.draft(int(ids[0, ANCHOR_AT]), ANCHOR_AT)


CASES = [("dflash", None, {}), ("dflash", 64, {}), ("dspark", 64, {"markov_rank": 8}),
         ("dspark", None, {"markov_rank": 8, "markov_head_type": "gated"}),
         ("dspark", 64, {"markov_rank": 8, "sample_from_anchor": False}),
         ("dflash2", None, {"conv_kernel_size": 3, "conv_group_size": 16, "selector_rank": 8, "selector_top_k": 6})]


@pytest.mark.parametrize("kind, draft_vocab, extra", CASES, ids=[f"{k}-{v}-{len(e)}" for k, v, e in CASES])
def test_their_folders_draft_their_logits_here(tmp_path, verifier, kind, draft_vocab, extra):
    target, verifier_dir = verifier
    theirs = their_drafter(kind, verifier_dir, target.config.vocab_size, draft_vocab, **extra)
    theirs.save_pretrained(tmp_path)
    ours = htg.load_drafter(tmp_path, target=target)
    assert ours.config.family == kind
    features, ids = features_and_ids(target)
    hidden, logits = their_block(theirs, features, ids)
    block = our_block(ours, features, ids)
    rows = slice(0, BLOCK) if theirs.config.sample_from_anchor else slice(1, BLOCK)
    torch.testing.assert_close(block.hidden, hidden[rows], rtol=0, atol=1e-5)
    torch.testing.assert_close(block.logits, logits[rows], rtol=0, atol=1e-5)
    if kind == "dspark":
        path = ours.released_greedy_chain(block)
        previous = torch.tensor([[int(ids[0, ANCHOR_AT]), *path[:-1]]])
        with torch.no_grad():
            bias = theirs.markov_head.block_bias(prev_token_ids=previous, hidden_states=hidden[rows][None])[0]
            mine = ours.markov_head.markov_w2(ours.markov_head.codes(block.hidden, previous[0]))
            torch.testing.assert_close(mine, bias, rtol=0, atol=1e-5)
            # their greedy pick at each row given the path so far is the path we drafted
            picks = (logits[rows] + bias).argmax(-1)
            assert block.target_ids(picks).tolist() == path
            prev_codes = theirs.markov_head.prev_embeddings(previous)
            conf = theirs.confidence_head(torch.cat([hidden[rows][None], prev_codes], dim=-1))
            torch.testing.assert_close(confidence_logits(block, path), conf.reshape(-1), rtol=0, atol=1e-5)


@pytest.mark.parametrize("maker", [tiny_drafter, tiny_dspark], ids=["dflash", "dspark"])
@pytest.mark.parametrize("draft_vocab", [False, True], ids=["full_vocab", "draft_vocab"])
def test_our_folders_load_in_their_loader(tmp_path, verifier, maker, draft_vocab):
    target, _ = verifier
    ours = maker(target, block_size=BLOCK)
    if draft_vocab:
        ours.set_draft_vocab(torch.arange(0, 256, 4))
    ours.save_pretrained(tmp_path, format="speculators")
    theirs = SpeculatorModel.from_pretrained(str(tmp_path)).eval()
    assert type(theirs).__name__ == {"dflash": "DFlashDraftModel", "dspark": "DSparkDraftModel"}[ours.config.family]
    features, ids = features_and_ids(target, [i + 1 for i in ours.config.target_layer_ids])
    hidden, logits = their_block(theirs, features, ids)
    block = our_block(ours, features, ids)
    rows = slice(0, BLOCK) if ours.config.shift_label else slice(1, BLOCK)
    torch.testing.assert_close(block.logits, logits[rows], rtol=0, atol=1e-5)
