"""Reduced draft vocabularies: choosing one, validating it, storing it with the drafter, drafting over it,
and builders that turn its columns back into target token ids."""

import json

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

import hf_treegen as htg
from hf_treegen.builders import BUILDERS, BuildSettings, MarginalBuilder
from hf_treegen.drafters.dflash import DraftBlock
from hf_treegen.drafters.domino import DominoBlock
from hf_treegen.drafters.vocab import choose_draft_vocab, draft_vocab_index, token_counts
from tests.drafters.test_dflash import write_released_checkpoint
from tests.helpers import tiny_domino, tiny_drafter, tiny_target
from tests.vocab_helpers import sparse_vocab

VOCAB = 256


def drafted_block(drafter, anchor=7, start=10, seed=0):
    session = drafter.new_session()
    feats = torch.randn(start, drafter.config.feature_size, generator=torch.Generator().manual_seed(seed))
    session.extend(feats.to(drafter.fc.weight.dtype), torch.arange(start))
    return session.draft(anchor, start)


# ------------------------------------------------------------------------------------ choosing
def test_choose_draft_vocab_ranks_by_frequency_ties_by_id():
    tokens = torch.tensor([5, 5, 5, 9, 9, 9, 2, 2, 7, 7, 3, 40])  # 5 and 9: 3 each; 2 and 7: 2 each
    assert choose_draft_vocab(tokens, 2).tolist() == [5, 9]
    assert choose_draft_vocab(tokens, 3).tolist() == [2, 5, 9]  # 2 beats 7 on the tie (smaller id)
    assert choose_draft_vocab(tokens, 4).tolist() == [2, 5, 7, 9]
    # `always` ids come on top of the size, the result is sorted int64
    out = choose_draft_vocab(tokens, 2, always=[0, 9])
    assert out.tolist() == [0, 5, 9] and out.dtype == torch.long
    # counts as a mapping, or sequences of ids (e.g. the response parts of a corpus): the same ranking
    assert choose_draft_vocab({5: 3, 9: 3, 2: 2, 7: 2, 3: 1}, 3).tolist() == [2, 5, 9]
    assert choose_draft_vocab([tokens[:6], tokens[6:].tolist()], 3).tolist() == [2, 5, 9]
    # only ids that occur are ranked: a small corpus gives fewer than `size`
    assert choose_draft_vocab(tokens, 100).tolist() == sorted(set(tokens.tolist()))
    assert token_counts(tokens)[5] == 3
    with pytest.raises(ValueError, match="size must be a positive int"):
        choose_draft_vocab(tokens, 0)


def test_draft_vocab_index_maps_ids_to_columns():
    index = draft_vocab_index(torch.tensor([1, 4, 6]), 8)
    assert index.tolist() == [-1, 0, -1, -1, 1, -1, 2, -1]


# ------------------------------------------------------------------------------------ validating
@pytest.mark.parametrize("ids, message", [
    ([3, 300, 999, -2], r"outside the target vocabulary \(size 256\): \[300, 999, -2\]"),
    ([[1, 2], [3, 4]], "must be 1-D"),
    ([1.0, 2.0], "integer token ids"),
    ([], "cannot be empty"),
    ([4, 1, 4, 9], r"more than once: \[4\]"),
])
def test_bad_draft_vocabularies_are_clear_value_errors(ids, message):
    drafter = tiny_drafter(tiny_target("llama"))
    with pytest.raises(ValueError, match=message):
        drafter.set_draft_vocab(torch.tensor(ids) if ids else torch.zeros(0, dtype=torch.long))
    assert drafter.draft_vocab is None and drafter.config.draft_vocab_size is None  # unchanged


def test_draft_vocab_is_read_only_and_sorted():
    drafter = tiny_drafter(tiny_target("llama"))
    assert drafter.draft_vocab is None
    drafter.set_draft_vocab([9, 3, 200])
    assert drafter.draft_vocab.tolist() == [3, 9, 200] and drafter.draft_vocab.dtype == torch.long
    assert drafter.config.draft_vocab_size == 3
    with pytest.raises(AttributeError, match="set_draft_vocab"):
        drafter.draft_vocab = torch.tensor([1, 2])
    drafter.set_draft_vocab(None)
    assert drafter.draft_vocab is None and drafter.config.draft_vocab_size is None
    assert "draft_vocab" not in drafter.state_dict()


# ------------------------------------------------------------------------------------ storing
@pytest.mark.parametrize("kind", ["dflash", "domino"])
@pytest.mark.parametrize("save_dtype", [None, torch.bfloat16])
def test_map_round_trips_through_save_and_load(tmp_path, kind, save_dtype):
    model = tiny_target("qwen3")
    drafter = (tiny_domino if kind == "domino" else tiny_drafter)(model)
    vocab = sparse_vocab(VOCAB, 4, always=[255])
    drafter.set_draft_vocab(vocab)
    drafter.save_pretrained(tmp_path / "d", dtype=save_dtype)
    config = json.loads((tmp_path / "d" / "config.json").read_text())
    assert config["dflash_config"]["draft_vocab_size"] == vocab.numel()
    with safe_open(str(tmp_path / "d" / "model.safetensors"), "pt") as f:
        stored = f.get_tensor("draft_vocab")
    assert stored.dtype == torch.int64 and torch.equal(stored, vocab)  # never cast with the float tensors
    loaded = type(drafter).from_pretrained(tmp_path / "d", target=model, dtype=torch.float32)
    assert loaded.draft_vocab.dtype == torch.int64 and torch.equal(loaded.draft_vocab, vocab)
    assert loaded.config == drafter.config
    if save_dtype is None:
        a, b = drafted_block(drafter), drafted_block(loaded)
        assert torch.equal(a.logits, b.logits) and torch.equal(b.token_ids, vocab)


def test_checkpoint_without_a_map_loads_as_full_vocabulary(tmp_path):
    model = tiny_target("llama")
    drafter = tiny_drafter(model)
    write_released_checkpoint(tmp_path / "released", drafter)  # the released layout: no map anywhere
    assert "draft_vocab_size" not in json.dumps(drafter.config.to_dict())
    loaded = htg.DFlashDrafter.from_pretrained(tmp_path / "released", target=model)
    assert loaded.draft_vocab is None and loaded.config.draft_vocab_size is None
    block = drafted_block(loaded)
    assert block.token_ids is None and block.logits.shape[1] == VOCAB


def test_map_and_config_must_agree(tmp_path):
    model = tiny_target("llama")
    drafter = tiny_drafter(model)
    drafter.set_draft_vocab(sparse_vocab(VOCAB))
    drafter.save_pretrained(tmp_path / "d")
    state = {k: v.contiguous() for k, v in drafter.state_dict().items()}
    config = json.loads((tmp_path / "d" / "config.json").read_text())
    # a map of another size than config.json records
    save_file({**state, "draft_vocab": state["draft_vocab"][:-1].clone()}, str(tmp_path / "d" / "model.safetensors"))
    with pytest.raises(ValueError, match="draft_vocab_size=86"):
        htg.DFlashDrafter.from_pretrained(tmp_path / "d", target=model)
    # config.json records a map the weights do not hold
    save_file({k: v for k, v in state.items() if k != "draft_vocab"}, str(tmp_path / "d" / "model.safetensors"))
    with pytest.raises(ValueError, match="no 'draft_vocab' tensor"):
        htg.DFlashDrafter.from_pretrained(tmp_path / "d", target=model)
    # a map the config does not mention
    save_file(state, str(tmp_path / "d" / "model.safetensors"))
    config["dflash_config"].pop("draft_vocab_size")
    (tmp_path / "d" / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="draft_vocab_size=None"):
        htg.DFlashDrafter.from_pretrained(tmp_path / "d", target=model)
    # a map naming ids outside the target vocabulary
    config["dflash_config"]["draft_vocab_size"] = 86
    (tmp_path / "d" / "config.json").write_text(json.dumps(config))
    bad = state["draft_vocab"].clone()
    bad[-1] = 4000
    save_file({**state, "draft_vocab": bad}, str(tmp_path / "d" / "model.safetensors"))
    with pytest.raises(ValueError, match=r"outside the target vocabulary \(size 256\): \[4000\]"):
        htg.DFlashDrafter.from_pretrained(tmp_path / "d", target=model)


def test_a_drafter_built_from_a_mapped_config_needs_its_map():
    model = tiny_target("llama")
    config = htg.DrafterConfig.for_target(model.config, draft_vocab_size=10)
    drafter = htg.DFlashDrafter(config, target=model)
    session = drafter.new_session()
    session.extend(torch.randn(4, config.feature_size), torch.arange(4))
    with pytest.raises(ValueError, match="never filled in"):
        session.draft(1, 4)
    with pytest.raises(ValueError, match="draft_vocab_size"):
        htg.DrafterConfig.for_target(model.config, draft_vocab_size=VOCAB + 1)


# ------------------------------------------------------------------------------------ drafting
@pytest.mark.parametrize("kind", ["dflash", "domino"])
def test_mapped_logits_are_the_full_logits_of_the_map_columns(kind):
    model = tiny_target("qwen3", torch.float64)
    drafter = (tiny_domino if kind == "domino" else tiny_drafter)(model)
    full = drafted_block(drafter)
    vocab = sparse_vocab(VOCAB, 3)
    drafter.set_draft_vocab(vocab)
    block = drafted_block(drafter)
    assert block.logits.shape == (full.logits.shape[0], vocab.numel()) and torch.equal(block.token_ids, vocab)
    assert torch.allclose(block.logits, full.logits[:, vocab], atol=1e-10)
    assert torch.equal(block.target_ids(torch.tensor([0, 2])), vocab[[0, 2]])
    # the gathered head rows follow an in-place update of the target's lm_head
    with torch.no_grad():
        model.get_output_embeddings().weight.mul_(2.0)
    assert torch.allclose(drafted_block(drafter).logits, 2 * block.logits, atol=1e-10)


def test_session_context_grows_past_its_capacity_unchanged():
    """Context keys/values live in buffers that double; the drafts equal a one-shot context."""
    model = tiny_target("llama", torch.float64)
    drafter = tiny_drafter(model)
    feats = torch.randn(300, drafter.config.feature_size, dtype=torch.float64)
    once, pieces = drafter.new_session(), drafter.new_session()
    once.extend(feats, torch.arange(300))
    pieces.extend(feats[:5], torch.arange(5))
    lo = 5
    while lo < 300:
        hi = min(300, lo + 1 + lo % 7)
        pieces.draft(3, lo)  # a block written after the context must not leak into it
        pieces.extend(feats[lo:hi], torch.arange(lo, hi))
        lo = hi
    assert torch.allclose(once.draft(3, 300).logits, pieces.draft(3, 300).logits, atol=1e-12)


# ------------------------------------------------------------------------------------ building
def mapped_domino_block(drafter, vocab, seed, scale=3.0):
    """A random Domino block over ``vocab`` and the same block over the full vocabulary, with the
    columns outside ``vocab`` at -inf (the law a mapped drafter drafts from)."""
    g = torch.Generator().manual_seed(seed)
    cfg = drafter.config
    depth = cfg.num_draft_positions
    full = torch.randn(depth, cfg.vocab_size, generator=g) * scale
    hidden = torch.randn(depth, cfg.hidden_size, generator=g)
    anchor = int(torch.randint(0, cfg.vocab_size, (1,), generator=g))
    masked = torch.full_like(full, float("-inf"))
    masked[:, vocab] = full[:, vocab]
    return (DominoBlock(logits=full[:, vocab].contiguous(), hidden=hidden, token_ids=vocab, anchor_token=anchor,
                        drafter=drafter),
            DominoBlock(logits=masked, hidden=hidden, anchor_token=anchor, drafter=drafter))


@pytest.mark.parametrize("arch", ["llama", "qwen3"])
def test_m_equal_draft_vocab_and_k_one_reproduces_the_mapped_released_chain(arch):
    model = tiny_target(arch, torch.float32)
    drafter = tiny_domino(model, std=0.3)
    vocab = sparse_vocab(VOCAB, 3)
    settings_ = BuildSettings(budget=7, topk=1, top_m=vocab.numel(), temperature=1.0, max_depth=7)
    for seed in range(10):
        block, _ = mapped_domino_block(drafter, vocab, seed, scale=1.0)
        chain = drafter.released_greedy_chain(block, length=7)
        assert set(chain) <= set(vocab.tolist())
        for strategy in ("conditional", "static_corrected", "chain"):
            tree = BUILDERS[strategy](settings_)(block, block.anchor_token)
            assert tree.tokens[1:].tolist() == chain, strategy
    # and the mapped chain is the full-vocabulary chain restricted to the map (outside columns at -inf)
    drafter.set_draft_vocab(vocab)
    block = drafted_block(drafter)
    restricted = DominoBlock(logits=torch.full((block.logits.shape[0], VOCAB), float("-inf")), hidden=block.hidden,
                             anchor_token=block.anchor_token, drafter=drafter)
    restricted.logits[:, vocab] = block.logits
    full_chain = []
    state = drafter.gru_step(drafter.zero_state(), torch.tensor([block.anchor_token]))
    for row in range(block.logits.shape[0]):
        logits = restricted.logits[row]
        if row >= drafter.correction_start:
            logits = logits + drafter.correction(block.hidden[row : row + 1], state)[0]
        full_chain.append(int(logits.argmax()))
        state = drafter.gru_step(state, torch.tensor(full_chain[-1:]))
    assert drafter.released_greedy_chain(block) == full_chain


@pytest.mark.parametrize("strategy", ["marginal", "conditional", "static_corrected", "chain"])
def test_builders_on_a_mapped_block_equal_the_full_block_with_the_rest_masked(strategy):
    """A mapped block (Vd columns + id map) builds the tree the full-width block builds when the
    tokens outside the map have -inf logits: same target tokens, same parents, same scores."""
    model = tiny_target("llama", torch.float32)
    drafter = tiny_domino(model)
    vocab = sparse_vocab(VOCAB, 3)
    for seed in range(5):
        mapped, masked = mapped_domino_block(drafter, vocab, seed)
        for top_m in (16, vocab.numel()):
            s = BuildSettings(budget=16, topk=8, top_m=top_m, temperature=1.0, max_depth=7)
            a, b = BUILDERS[strategy](s)(mapped, 3), BUILDERS[strategy](s)(masked, 3)
            assert a.tokens.tolist() == b.tokens.tolist() and a.parents.tolist() == b.parents.tolist()
            assert torch.allclose(a.scores, b.scores, atol=1e-5)
            assert set(a.tokens[1:].tolist()) <= set(vocab.tolist())


def test_dflash_builders_map_columns_to_target_ids():
    vocab = torch.tensor([2, 11, 40, 41, 97])
    logits = torch.tensor([[0.0, 5.0, 1.0, -1.0, 2.0], [3.0, 0.0, 0.0, 4.0, 1.0]])
    block = DraftBlock(logits=logits, hidden=torch.zeros(2, 1), token_ids=vocab)
    s = BuildSettings(budget=4, topk=4, top_m=5, temperature=1.0, max_depth=2)
    assert BUILDERS["chain"](s)(block, 1).tokens.tolist() == [1, 11, 41]
    marginal = MarginalBuilder(s)(block, 1)
    assert marginal.tokens.tolist()[:3] == [1, 11, 41]
    assert set(marginal.tokens[1:].tolist()) <= set(vocab.tolist())


# ------------------------------------------------------------------------------------ the command
def write_corpus(folder, sequences):
    """A load_corpus folder: ``sequences`` is a list of (ids, response_start)."""
    import numpy as np
    from safetensors.numpy import save_file

    folder.mkdir(parents=True)
    seqs = [np.asarray(ids, dtype=np.uint16) for ids, _ in sequences]
    save_file({"tokens": np.concatenate(seqs), "offsets": np.concatenate([[0], np.cumsum([len(s) for s in seqs])]),
               "response_start": np.array([r for _, r in sequences], dtype=np.int32),
               "sampled": np.zeros(len(seqs), dtype=np.uint8), "finished": np.zeros(len(seqs), dtype=np.uint8)},
              str(folder / "shard-00000.safetensors"),
              metadata={"format": "1", "prompt_ids": json.dumps([f"p{i}" for i in range(len(seqs))]), "settings": "{}"})


def test_draft_vocab_command_attaches_a_map(tmp_path, capsys):
    from hf_treegen.cli import main

    model = tiny_target("llama")
    model.generation_config.eos_token_id = 250
    model.save_pretrained(tmp_path / "target")
    drafter = tiny_domino(model)
    drafter.save_pretrained(tmp_path / "drafter", dtype=torch.bfloat16)
    # responses: 10 x token 5, 6 x token 9, 3 x token 17, 1 x token 33; the prompt tokens (100+) do not count
    write_corpus(tmp_path / "corpus", [([100, 101, 5, 5, 5, 5, 5, 9, 9, 9, 17], 2),
                                       ([102, 5, 5, 5, 5, 5, 9, 9, 9, 17, 17, 33], 1)])
    argv = ["draft-vocab", "--drafter", str(tmp_path / "drafter"), "--data", str(tmp_path / "corpus"),
            "--size", "3", "--out", str(tmp_path / "mapped"), "--model", str(tmp_path / "target")]
    assert main(argv) == 0
    assert "covers 95.0% of the 20 response tokens" in capsys.readouterr().out
    loaded = htg.DominoDrafter.from_pretrained(tmp_path / "mapped", target=model)
    assert loaded.draft_vocab.tolist() == [5, 9, 17, 250]  # the EOS id always comes along
    original = htg.DominoDrafter.from_pretrained(tmp_path / "drafter", target=model)
    with safe_open(str(tmp_path / "mapped" / "model.safetensors"), "pt") as f:
        assert f.get_tensor("fc.weight").dtype == torch.bfloat16  # the weights keep their stored dtype
    for name, tensor in original.state_dict().items():
        assert torch.equal(loaded.state_dict()[name], tensor), name


@pytest.mark.parametrize("change, message", [
    ({"--data": "nowhere"}, "no such corpus folder"),
    ({"--drafter": "FILE"}, "is a file"),
    ({"--model": "nowhere"}, "draft-vocab: "),
])
def test_draft_vocab_command_user_errors_are_one_line(tmp_path, capsys, change, message):
    from hf_treegen.cli import main

    model = tiny_target("llama")
    model.save_pretrained(tmp_path / "target")
    tiny_drafter(model).save_pretrained(tmp_path / "drafter")
    write_corpus(tmp_path / "corpus", [([1, 2, 3, 4], 1)])
    (tmp_path / "FILE").write_text("x")
    args = {"--drafter": str(tmp_path / "drafter"), "--data": str(tmp_path / "corpus"), "--size": "2",
            "--out": str(tmp_path / "out"), "--model": str(tmp_path / "target")}
    args.update({k: (str(tmp_path / v) if v in ("FILE", "nowhere") else v) for k, v in change.items()})
    capsys.readouterr()  # setup output (save_pretrained progress bars)
    assert main(["draft-vocab", *[x for kv in args.items() for x in kv]]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1 and "Traceback" not in err
