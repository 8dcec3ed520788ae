"""LearningDatastore: it learns what generate() wrote, stays within its memory bound by evicting the
oldest sequences, answers before its base at equal match length, saves and loads, and never changes
what generate() emits."""

import pytest
import torch

from hf_treegen import LearningDatastore, LookupOptions, TokenDatastore
from hf_treegen.datastore import MAX_TOKEN_ID
from hf_treegen.generation.options import TreeOptions
from tests.helpers import ScriptedDrafter, greedy_reference, random_prompts, tiny_domino, tiny_target

NEW_TOKENS = 32


def test_learned_sequences_are_searched():
    store = LearningDatastore()
    assert store.continuation([5, 6, 7], 4) == []
    store.learn(list(range(1, 21)))
    assert store.continuation([9, 5, 6, 7], 4) == [8, 9, 10, 11]
    assert store.learned == 1 and len(store) == 21 and store.max_token_id == 20


def test_the_oldest_sequences_are_evicted_past_the_bound():
    store = LearningDatastore(max_tokens=32)
    first, second, third = list(range(100, 114)), list(range(200, 214)), list(range(300, 314))  # 15 tokens each held
    store.learn(first)
    store.learn(second)
    assert len(store) == 30 and store.evicted == 0
    store.learn(third)
    assert len(store) == 30 and store.evicted == 1 and store.learned == 3
    assert store.continuation([101, 102], 3) == []  # evicted
    assert store.continuation([201, 202], 3) == [203, 204, 205]
    assert store.continuation([301, 302], 3) == [303, 304, 305]
    store.learn(list(range(400, 500)))  # longer than the bound: its last 31 tokens, everything else evicted
    assert len(store) == 32 and store.continuation([469, 470], 2) == [471, 472]
    assert store.continuation([301, 302], 3) == []


def test_learned_and_base_occurrences_vote_together_and_the_longer_match_wins():
    base = TokenDatastore.from_sequences([[1, 2, 3, 50, 51], [7, 8, 9, 4, 1, 2, 60]])
    store = LearningDatastore(base=base)
    store.learn([1, 2, 3, 70, 71])
    assert store.continuation([1, 2, 3], 2) == [50, 51]  # one vote each: the tie goes to the smaller id
    store.learn([5, 1, 2, 3, 70, 72])
    assert store.continuation([1, 2, 3], 2) == [70, 71]  # two of three votes for 70; then a tie, the smaller id
    assert store.continuation([4, 1, 2], 1) == [60]  # only the base holds all three tokens
    assert store.max_token_id == 72


def test_a_learned_repeat_of_the_context_answers_alone():
    from hf_treegen.defaults import LEARNED_REPEAT_TOKENS as REPEAT

    shared = list(range(100, 100 + REPEAT)) + [1, 2, 3]
    base = TokenDatastore.from_sequences([shared[-6:] + [50, 51]] * 5)  # five votes for 50 after the last 6
    store = LearningDatastore(base=base)
    store.learn(shared + [70, 71])
    assert store.continuation(shared, 2) == [70, 71]  # the same text again: the learned one answers
    assert store.continuation([5] * REPEAT + shared[-6:], 2) == [50, 51]  # only the last 6 shared: 5 votes to 1
    assert store.continuation(shared[-(REPEAT - 1):], 2) == [50, 51]  # a context shorter than a repeat


def test_save_and_load_round_trip(tmp_path):
    store = LearningDatastore(max_tokens=64)
    sequences = [list(range(10 * i, 10 * i + 8)) for i in range(1, 6)]
    for sequence in sequences:
        store.learn(sequence)
    store.save(tmp_path / "served.safetensors")
    again = LearningDatastore.load(tmp_path / "served.safetensors", max_tokens=64)
    assert len(again) == len(store)
    for sequence in sequences:
        assert again.continuation(sequence[:3], 5) == store.continuation(sequence[:3], 5) == sequence[3:]
    assert len(TokenDatastore.load(tmp_path / "served.safetensors")) == len(store)  # the shipped format


def test_bad_inputs_are_clear_errors():
    with pytest.raises(ValueError, match="max_tokens must be an int >= 4"):
        LearningDatastore(max_tokens=2)
    with pytest.raises(ValueError, match="max_tokens"):
        LearningDatastore(max_tokens=True)
    with pytest.raises(ValueError, match="base must be a TokenDatastore"):
        LearningDatastore(base="store.safetensors")
    store = LearningDatastore()
    with pytest.raises(ValueError, match=f"token ids in \\[0, {MAX_TOKEN_ID}\\]"):
        store.learn([1, 2, MAX_TOKEN_ID + 1])
    assert len(store) == 0
    options = TreeOptions("auto", datastore=store)
    with pytest.raises(ValueError, match="vocabulary has 100000 ids"):
        options.lookup_datastore(drafter=None, vocab_size=100_000)


def test_generate_learns_its_output_and_drafts_from_it_next_time():
    model = tiny_target("llama", torch.float64)
    prompt = random_prompts(1, model.config.vocab_size, seed=41, min_len=5, max_len=6)[0]
    ref = greedy_reference(model, prompt, NEW_TOKENS)
    adversary = ScriptedDrafter(model, ref, block_size=8, adversarial=True)  # never drafts a right token
    store = LearningDatastore()
    runs = []
    for _ in range(2):
        out = model.generate(prompt, assistant_model=adversary, tree_strategy="marginal",
                             tree_lookup=LookupOptions(datastore=store), max_new_tokens=NEW_TOKENS, do_sample=False,
                             return_dict_in_generate=True)
        assert torch.equal(out.sequences, ref)
        runs.append(out.tree_stats)
    answer = ref.shape[1] - prompt.shape[1]
    assert store.learned == 2 and len(store) == 2 * (answer + 1)  # each call's new tokens (and an end), no prompt
    # the second call copied the first call's answer: nearly every round keeps several tokens
    assert runs[1].lookup_tokens > runs[0].lookup_tokens and runs[1].tau > 2.0


@pytest.mark.parametrize("learn_prompts", [False, True])
def test_a_batch_learns_each_rows_own_prompt_and_output(learn_prompts):
    model = tiny_target("qwen3", torch.float64)
    drafter = tiny_domino(model)
    prompts = random_prompts(2, model.config.vocab_size, seed=43, min_len=3, max_len=8)
    refs = [greedy_reference(model, p, NEW_TOKENS) for p in prompts]
    width = max(p.shape[1] for p in prompts)
    ids = torch.stack([torch.cat([torch.zeros(width - p.shape[1], dtype=torch.long), p[0]]) for p in prompts])
    mask = torch.stack([torch.cat([torch.zeros(width - p.shape[1], dtype=torch.long),
                                   torch.ones(p.shape[1], dtype=torch.long)]) for p in prompts])
    store = LearningDatastore(learn_prompts=learn_prompts)
    out = model.generate(ids, attention_mask=mask, assistant_model=drafter, tree_strategy="conditional",
                         tree_lookup=LookupOptions(datastore=store), max_new_tokens=NEW_TOKENS, do_sample=False)
    for row, (prompt, ref) in enumerate(zip(prompts, refs)):
        assert torch.equal(out[row, width:width + NEW_TOKENS], ref[0, prompt.shape[1]:])
    expected = [ref[0, p.shape[1]:] for p, ref in zip(prompts, refs)]
    if learn_prompts:
        expected = [x for p, answer in zip(prompts, expected) for x in (p[0], answer)]
    held = TokenDatastore.from_sequences(expected)
    assert torch.equal(store.index.tokens, held.tokens)


def test_memory_follows_the_tokens_held():
    store = LearningDatastore(max_tokens=1000)
    for start in range(0, 5000, 100):
        store.learn(list(range(start, start + 99)))
    store.continuation([1, 2], 1)  # builds the index
    assert len(store) <= 1000 and store.evicted == 40
    assert store.memory_bytes <= 48 * 1000 + 8 * 64  # 8 bytes per held token, 40 per indexed one, plus padding
