"""The drafter's own dtype: which one a loaded drafter computes in, the draft head following it, and
output that does not depend on it (the target checks every token)."""

import pytest
import torch

import hf_treegen as htg
from hf_treegen.builders import DFLASH_STRATEGIES, STRATEGIES
from hf_treegen.calibration import profile_key
from hf_treegen.cli import main
from hf_treegen.drafters import loading
from tests.helpers import greedy_reference, random_prompts, tiny_domino, tiny_drafter, tiny_target
from tests.vocab_helpers import sparse_vocab


@pytest.fixture
def native_bf16(monkeypatch):
    """Answer 'does this CPU have native bf16 matmuls?' with the given value (tests/conftest.py says no)."""
    def pin(value: bool):
        monkeypatch.setattr(loading, "native_bf16_matmuls", lambda device="cpu": value)
    return pin


@pytest.mark.parametrize("target_dtype, native, expected", [
    (torch.float32, True, torch.bfloat16),  # the case the rule exists for
    (torch.float32, False, torch.float32),  # emulated bf16 would draft slower than fp32
    (torch.float64, True, torch.float64),  # an fp64 target asks for precision: keep it
    (torch.bfloat16, True, torch.bfloat16),
    (torch.bfloat16, False, torch.bfloat16),
])
def test_default_draft_dtype(native_bf16, target_dtype, native, expected):
    native_bf16(native)
    assert htg.default_draft_dtype(tiny_target("llama", target_dtype)) == expected


def test_from_pretrained_follows_the_rule_and_an_explicit_dtype_wins(native_bf16, tmp_path):
    model = tiny_target("llama", torch.float32)
    tiny_domino(model).save_pretrained(tmp_path / "d")
    native_bf16(True)
    assert htg.DominoDrafter.from_pretrained(tmp_path / "d", target=model).dtype == torch.bfloat16
    assert htg.DominoDrafter.from_pretrained(tmp_path / "d", target=model, dtype=torch.float32).dtype == torch.float32
    native_bf16(False)
    assert htg.DominoDrafter.from_pretrained(tmp_path / "d", target=model).dtype == torch.float32


def test_the_gathered_draft_head_follows_the_drafters_dtype():
    model = tiny_target("llama", torch.float32)
    drafter = tiny_drafter(model).set_draft_vocab(sparse_vocab(model.config.vocab_size, keep_every=3))
    rows = drafter.draft_head()[0]
    assert rows.dtype == torch.float32
    drafter.to(torch.bfloat16)
    rows_bf16 = drafter.draft_head()[0]  # gathered again: the drafter's dtype changed
    assert rows_bf16.dtype == torch.bfloat16
    assert torch.equal(rows_bf16, rows.to(torch.bfloat16))  # the same lm_head rows, rounded once
    assert model.lm_head.weight.dtype == torch.float32  # the target's own head is untouched


@pytest.mark.parametrize("draft_vocab", [False, True], ids=["full_vocab", "draft_vocab"])
def test_a_bf16_drafter_beside_an_fp32_target_matches_stock(draft_vocab):
    model = tiny_target("qwen3", torch.float32)
    vocab = sparse_vocab(model.config.vocab_size, keep_every=3) if draft_vocab else None
    runs = [(tiny_drafter(model), DFLASH_STRATEGIES), (tiny_domino(model), STRATEGIES)]
    for drafter, strategies in runs:
        drafter.set_draft_vocab(vocab).to(torch.bfloat16)
        for prompt in random_prompts(4, model.config.vocab_size, seed=11):
            reference = greedy_reference(model, prompt, 16)
            for strategy in strategies:
                out = model.generate(prompt, assistant_model=drafter, tree_strategy=strategy, max_new_tokens=16,
                                     do_sample=False)
                assert torch.equal(out, reference), f"{strategy} diverged on prompt {prompt.tolist()}"


def test_cost_profiles_are_kept_per_drafter_dtype():
    """A bf16 drafter drafts in other times than an fp32 one, so it gets its own cached profile."""
    model = tiny_target("llama", torch.float32)
    drafter = tiny_domino(model)
    fp32_key = profile_key(model, drafter)
    assert profile_key(model, drafter.to(torch.bfloat16)) != fp32_key


@pytest.fixture(scope="module")
def saved_pair(tmp_path_factory):
    from tests.helpers import byte_tokenizer

    root = tmp_path_factory.mktemp("pair")
    model = tiny_target("llama", torch.float32, vocab=272)
    model.save_pretrained(root / "model")
    byte_tokenizer().save_pretrained(root / "model")
    tiny_domino(model).save_pretrained(root / "drafter")
    return root


@pytest.mark.parametrize("flag, native, shown", [
    ("auto", True, "drafting in bf16"),
    ("auto", False, "drafting in fp32"),
    ("bf16", False, "drafting in bf16"),
    ("fp32", True, "drafting in fp32"),
])
def test_cli_drafter_dtype(native_bf16, saved_pair, capsys, flag, native, shown):
    native_bf16(native)
    rc = main(["generate", "hello", "--model", str(saved_pair / "model"), "--drafter", str(saved_pair / "drafter"),
               "--drafter-dtype", flag, "--max-new-tokens", "4", "--strategy", "conditional"])
    assert rc == 0
    assert shown in capsys.readouterr().err


def test_rope_angles_come_from_float32_frequencies_in_any_drafter_dtype():
    """Qwen3's own rotary embedding gives the fp32 table; a bf16 drafter gets that table rounded once,
    not angles from rounded frequencies (off by p times the rounding at position p)."""
    from transformers.models.qwen3.modeling_qwen3 import Qwen3RotaryEmbedding

    model = tiny_target("llama", torch.float32)
    drafter = tiny_drafter(model)
    positions = torch.tensor([0, 1, 7, 300, 2000])
    reference = Qwen3RotaryEmbedding(drafter.backbone_config)
    cos_ref, sin_ref = (t[0] for t in reference(torch.zeros(1, 1), positions[None]))
    cos, sin = drafter.rope(positions)
    assert torch.allclose(cos, cos_ref, atol=1e-6) and torch.allclose(sin, sin_ref, atol=1e-6)
    drafter.to(torch.bfloat16)
    cos16, sin16 = drafter.rope(positions)
    assert cos16.dtype == torch.bfloat16
    assert torch.equal(cos16, cos_ref.to(torch.bfloat16)) and torch.equal(sin16, sin_ref.to(torch.bfloat16))
