"""Batched tree decoding: each row of a left-padded batch is decided exactly as that prompt alone."""

import pytest
import torch
from transformers import DynamicCache, GenerationConfig, TextStreamer
from transformers.generation.logits_process import LogitsProcessorList
from transformers.generation.stopping_criteria import MaxLengthCriteria, StoppingCriteriaList

from hf_treegen.calibration import BATCH_ROWS, calibration_dir
from hf_treegen.calibration import calibrate as real_calibrate  # imported before conftest pins it
from hf_treegen.drafters.dflash import DraftSession
from hf_treegen.generation import TreeOptions, plan_tree_call
from hf_treegen.generation.batch import BatchTreeDecoder
from hf_treegen.generation.loop import prompt_mask_and_positions
from hf_treegen.target import with_cache
from tests.generation.test_sampling_lossless import (PROMPT, SAMPLES, chi_square_pvalue, exact_ar_law,
                                                     sampling_model, warpers)
from tests.helpers import (ScriptedDrafter, ScriptedSession, tiny_dflash2, tiny_domino, tiny_drafter, tiny_dspark,
                           tiny_target)

NEW = 24
LENGTHS = (5, 11, 2, 8)
DRAFTERS = {"dflash": tiny_drafter, "domino": tiny_domino, "dflash2": tiny_dflash2, "dspark": tiny_dspark}


class PerRowScripted(ScriptedDrafter):
    """Sessions made in order script row i's continuation ``references[i]``; rows in ``adversarial``
    get a session that never ranks the right token first or second."""

    def __init__(self, model, references: list[torch.Tensor], adversarial=(), noise=0.2):
        super().__init__(model, references[0], block_size=6, noise=noise)
        self.references, self.adversarial_rows, self.made = [r.reshape(-1).tolist() for r in references], adversarial, 0

    def new_session(self):
        row, self.made = self.made % len(self.references), self.made + 1
        return ScriptedSession(self, self.references[row], self.noise, row in self.adversarial_rows, seed=row)


def left_padded(prompts: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, P) ids with each prompt at the right end, and its attention mask."""
    width = max(p.numel() for p in prompts)
    ids = torch.zeros(len(prompts), width, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for b, p in enumerate(prompts):
        ids[b, width - p.numel():], mask[b, width - p.numel():] = p.reshape(-1), 1
    return ids, mask


def prompts_of(lengths, vocab=256, seed=0) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(3, vocab, (n,), generator=g) for n in lengths]


def alone(model, prompt: torch.Tensor, **kwargs) -> list[int]:
    """Stock greedy generate() on ``prompt`` by itself: its new tokens."""
    out = model.generate(prompt[None], max_new_tokens=NEW, do_sample=False, **kwargs)
    return out[0, prompt.numel():].tolist()


def rows_of(out: torch.Tensor, width: int, pad: int) -> list[list[int]]:
    """Each row's new tokens, right padding removed."""
    rows = []
    for row in out[:, width:].tolist():
        while row and row[-1] == pad:
            row.pop()
        rows.append(row)
    return rows


@pytest.mark.parametrize("arch", ["qwen3", "llama"])
@pytest.mark.parametrize("attn", ["sdpa", "eager"])
@pytest.mark.parametrize("family, strategies", [("dflash", ("chain", "marginal", "adaptive", "auto")),
                                                ("domino", ("conditional", "static_corrected", "auto"))])
def test_each_row_equals_stock_on_its_prompt_alone(arch, attn, family, strategies):
    model = tiny_target(arch, torch.float64, attn=attn)
    check_rows(model, DRAFTERS[family](model), strategies)


@pytest.mark.parametrize("family", ["dflash2", "dspark"])
def test_the_new_heads_decode_batches_exactly_too(family):
    model = tiny_target("qwen3", torch.float64)
    check_rows(model, DRAFTERS[family](model), ("conditional", "cond_adaptive", "auto"))


def check_rows(model, drafter, strategies):
    """Every strategy's batched rows equal stock generate() on each prompt alone."""
    prompts = prompts_of(LENGTHS)
    ids, mask = left_padded(prompts)
    expected = [alone(model, p) for p in prompts]
    for strategy in strategies:
        out = model.generate(ids, attention_mask=mask, assistant_model=drafter, tree_strategy=strategy,
                             max_new_tokens=NEW, do_sample=False, tree_budget=6)
        assert out[:, ids.shape[1]:].tolist() == expected, strategy


@pytest.mark.parametrize("strategy", ["chain", "marginal", "auto"])
def test_rows_that_stop_at_eos_inside_accepted_paths_stop_alone(strategy):
    """Oracle drafters accept long paths; an EOS chosen from row 1's answer stops it mid-path while the
    others run on (one row's drafter never matches). Every row equals stock alone with that EOS."""
    model = tiny_target("qwen3", torch.float64)
    prompts = prompts_of(LENGTHS, seed=3)
    free = [torch.cat([p, torch.tensor(alone(model, p))]) for p in prompts]
    eos = int(free[1][LENGTHS[1] + 9])  # row 1's tenth new token
    drafter = PerRowScripted(model, free, adversarial=(2,))
    ids, mask = left_padded(prompts)
    out = model.generate(ids, attention_mask=mask, assistant_model=drafter, tree_strategy=strategy, tree_budget=8,
                         max_new_tokens=NEW, do_sample=False, eos_token_id=eos, pad_token_id=0,
                         return_dict_in_generate=True)
    expected = [alone(model, p, eos_token_id=eos, pad_token_id=0) for p in prompts]
    got = out.sequences[:, ids.shape[1]:].tolist()
    for row, want in zip(got, expected):
        assert row[:len(want)] == want and set(row[len(want):]) <= {0}
    assert len(expected[1]) < NEW and out.tree_stats.tau > 1.5  # row 1 stopped early; paths were accepted
    assert out.sequences.shape[1] == ids.shape[1] + max(len(w) for w in expected)


class CheckedDecoder(BatchTreeDecoder):
    """After every round, each running row's cache (its valid slots) equals a plain forward's cache of
    that row's committed tokens, and its drafter context has as many positions."""

    def round(self):
        super().round()
        for b, sequence in enumerate(self.running):
            committed = sequence.committed[:-1]
            fresh = DynamicCache(config=self.model.config)
            self.model(input_ids=committed[None], **with_cache(fresh), use_cache=True)
            for ours, theirs in zip(self.cache.layers, fresh.layers):
                kept = ours.keys[b][:, self.valid[b]]  # (H, T, D)
                assert kept.shape == theirs.keys[0].shape
                torch.testing.assert_close(kept, theirs.keys[0], rtol=0, atol=1e-10)
                torch.testing.assert_close(ours.values[b][:, self.valid[b]], theirs.values[0], rtol=0, atol=1e-10)
            if isinstance(sequence.session, DraftSession):
                assert sequence.session.length == committed.numel()
        self.checked_rounds = getattr(self, "checked_rounds", 0) + 1


@pytest.mark.parametrize("scripted", [True, False])
def test_each_rows_cache_holds_its_committed_tokens_after_every_round(scripted):
    model = tiny_target("llama", torch.float64)
    prompts = prompts_of(LENGTHS, seed=5)
    free = [torch.cat([p, torch.tensor(alone(model, p))]) for p in prompts]
    drafter = PerRowScripted(model, free, adversarial=(0,)) if scripted else tiny_drafter(model)
    ids, mask = left_padded(prompts)
    config = GenerationConfig(do_sample=False, max_new_tokens=NEW)
    plan = plan_tree_call(model, drafter, TreeOptions("marginal", budget=8), config, batch_size=len(prompts))
    stop = StoppingCriteriaList([MaxLengthCriteria(ids.shape[1] + NEW)])
    decoder = CheckedDecoder(model, drafter, plan, LogitsProcessorList(), stop, config)
    out = decoder.run(ids, *prompt_mask_and_positions(ids, {"attention_mask": mask}), DynamicCache(config=model.config))
    assert out[:, ids.shape[1]:].tolist() == [f[p.numel():].tolist() for f, p in zip(free, prompts)]
    assert decoder.checked_rounds <= NEW
    if scripted:  # the rows with an oracle accepted drafted tokens (the adversary's row none)
        assert decoder.stats.tau > 1.5


def test_batched_sampling_with_several_sequences_per_prompt_follows_the_autoregressive_law():
    """num_return_sequences samples of PROMPT, padded beside a longer prompt, have the exact AR law."""
    model = sampling_model()
    free = torch.cat([PROMPT[0], torch.tensor(alone(model, PROMPT[0])[:10])])
    drafter = PerRowScripted(model, [free], noise=0.3)
    ids, mask = left_padded([PROMPT[0], torch.tensor([5, 1, 4, 1, 5, 9, 2, 6])])
    law = exact_ar_law(model, warpers(1.0, None, None), 3)
    torch.manual_seed(1234)
    per_call = 50
    samples = []
    for _ in range(SAMPLES // per_call):
        out = model.generate(ids, attention_mask=mask, assistant_model=drafter, tree_strategy="marginal",
                             tree_budget=6, max_new_tokens=3, do_sample=True, temperature=1.0, top_k=0, top_p=1.0,
                             num_return_sequences=per_call)
        assert out.shape[0] == 2 * per_call
        samples += [tuple(row) for row in out[:per_call, ids.shape[1]:].tolist()]  # PROMPT's rows come first
    assert chi_square_pvalue(samples, law) > 1e-3


def test_batch_mistakes_say_what_to_change():
    model = tiny_target("qwen3", torch.float32)
    drafter = tiny_drafter(model)
    ids, mask = left_padded(prompts_of((3, 5)))
    common = dict(assistant_model=drafter, tree_strategy="chain", max_new_tokens=4)
    with pytest.raises(ValueError, match="needs left padding; set tokenizer.padding_side = 'left'"):
        model.generate(ids, attention_mask=mask.flip(1), **common)
    with pytest.raises(ValueError, match="attention_mask has shape"):
        model.generate(ids, attention_mask=mask[:, 1:], **common)
    with pytest.raises(ValueError, match="A streamer takes one sequence"):
        model.generate(ids, attention_mask=mask, streamer=TextStreamer(None), **common)
    with pytest.raises(ValueError, match="output_scores and output_logits"):
        model.generate(ids, attention_mask=mask, return_dict_in_generate=True, output_scores=True, **common)
    with pytest.raises(ValueError, match="num_return_sequences"):
        model.generate(ids, attention_mask=mask, num_return_sequences=2, **common)


def test_a_sequence_of_a_batch_pays_its_share_of_each_forward():
    from hf_treegen.costs import CostProfile

    profile = CostProfile.from_verify_seconds({1: 0.02, 8: 0.03, 32: 0.08}, draft_s=0.01)
    assert profile.per_sequence(1) is profile
    share = profile.per_sequence(4)
    for rows in (1, 2, 5, 8, 20):
        assert share.verify.seconds_for(rows) == pytest.approx(profile.verify.seconds_for(4 * rows) / 4)
    assert share.draft_s == pytest.approx(0.0025)
    assert share.step_seconds() == pytest.approx(profile.verify.seconds_for(4) / 4)  # one row each, four at once


def test_auto_copies_in_a_batch_only_where_the_call_asks():
    model = tiny_target("qwen3", torch.float32)
    drafter = tiny_drafter(model)
    config = GenerationConfig(do_sample=False)
    assert plan_tree_call(model, drafter, TreeOptions("auto"), config).lookup > 0
    assert plan_tree_call(model, drafter, TreeOptions("auto"), config, batch_size=4).lookup == 0
    assert plan_tree_call(model, drafter, TreeOptions("auto", lookup=6), config, batch_size=4).lookup == 6


def test_a_batch_size_is_measured_once_and_cached_beside_the_one_sequence_profile(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_TREEGEN_CACHE", str(tmp_path))
    monkeypatch.setattr("hf_treegen.calibration.calibrate", real_calibrate)  # the one-sequence profile, measured
    model = tiny_target("qwen3", torch.float32)
    drafter = tiny_drafter(model)
    profile = real_calibrate(model, drafter, quick=True, batch_size=3, progress=False)
    assert profile.verify.rows == BATCH_ROWS and profile.draft_s > 0
    assert list(profile.verify.seconds) == sorted(profile.verify.seconds)  # a non-decreasing curve
    files = {p.name for p in calibration_dir().glob("*.json")}
    single = [name for name in files if "batch" not in name]
    assert len(files) == 2 and files == {single[0], single[0].replace(".json", "-batch3.json")}
    monkeypatch.setattr("hf_treegen.calibration.measure_batch_profile", lambda *a, **k: pytest.fail("measured again"))
    assert real_calibrate(model, drafter, quick=True, batch_size=3, progress=False) == profile


def test_flex_attention_batches_are_refused():
    model = tiny_target("qwen3", torch.float32, "flex_attention")
    ids, mask = left_padded(prompts_of((6, 4), seed=21))
    with pytest.raises(ValueError, match="Batched tree decoding runs with sdpa or eager attention"):
        model.generate(ids, attention_mask=mask, assistant_model=tiny_drafter(model), tree_strategy="marginal",
                       max_new_tokens=4)
