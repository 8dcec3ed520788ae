"""TokenDatastore: its suffix-array search against brute force, the continuation vote, and its file."""

import random

import pytest
import torch

from hf_treegen.datastore import LONGEST_MATCH, MAX_TOKEN_ID, TokenDatastore


def brute_force_follows(sequences: list[list[int]], ngram: list[int]) -> set[tuple[int, int]]:
    """(sequence, index after the match) of every occurrence of ``ngram`` inside one sequence."""
    n = len(ngram)
    return {(s, i + n) for s, seq in enumerate(sequences) for i in range(len(seq) - n + 1) if seq[i:i + n] == ngram}


def as_sequence_positions(store: TokenDatastore, sequences, follows: torch.Tensor) -> set[tuple[int, int]]:
    """Flat positions in the store -> (sequence, index) pairs (sequences are joined with one end marker each)."""
    starts, at = [], 0
    for seq in sequences:
        starts.append(at)
        at += len(seq) + 1
    out = set()
    for p in follows.tolist():
        s = max(i for i, start in enumerate(starts) if start <= p)
        out.add((s, p - starts[s]))
    return out


def test_occurrences_match_brute_force_and_never_cross_a_sequence_end():
    rng = random.Random(0)
    # a vocabulary of 3 with ids near the top of the range: many repeats, and the packing's high bits in use
    ids = [0, MAX_TOKEN_ID - 1, MAX_TOKEN_ID]
    sequences = [[rng.choice(ids) for _ in range(rng.randint(1, 30))] for _ in range(40)]
    store = TokenDatastore.from_sequences(sequences)
    for _ in range(300):
        seq = rng.choice(sequences)
        n = rng.randint(1, LONGEST_MATCH)
        start = rng.randint(0, max(0, len(seq) - 1))
        ngram = seq[start:start + n] if rng.random() < 0.8 else [rng.choice(ids) for _ in range(n)]
        if not ngram:
            continue
        found = as_sequence_positions(store, sequences, store.occurrences(ngram))
        assert found == brute_force_follows(sequences, ngram), ngram


def test_continuation_follows_the_majority_of_the_longest_match():
    sequences = [[1, 2, 3, 4, 5, 6]] * 3 + [[1, 2, 3, 4, 9, 9]] + [[7, 3, 4, 8, 8]] * 10
    store = TokenDatastore.from_sequences(sequences)
    # "2 3 4" occurs 4 times (3 times followed by 5 6), so the 10 "3 4 8" ones never vote
    assert store.continuation([0, 2, 3, 4], max_tokens=5) == [5, 6]  # then the sequence ends
    assert store.continuation([0, 2, 3, 4], max_tokens=1) == [5]
    assert store.continuation(torch.tensor([[0, 0, 3, 4]]), max_tokens=5) == [8, 8]  # tensors too, any shape
    assert store.continuation([0, 11, 12], max_tokens=5) == []  # nothing matched
    assert store.continuation([4], max_tokens=5) == []  # a single token is too short a match


def test_continuation_stops_where_the_voters_disagree():
    sequences = [[1, 2, 10, 20, 30], [1, 2, 10, 20, 31], [1, 2, 10, 21], [1, 2, 10, 22], [1, 2, 10, 24],
                 [1, 2, 11, 23]]
    store = TokenDatastore.from_sequences(sequences)
    # 5 of the 6 occurrences wrote 10, 2 of 6 wrote "10 20", 1 of 6 each "10 20 30" and "10 20 31"
    assert store.continuation([1, 2], max_tokens=4) == [10, 20]  # the default stops below 1/5 of them
    assert store.continuation([1, 2], max_tokens=4, min_share=0.5) == [10]
    assert store.continuation([1, 2], max_tokens=4, min_share=0.9) == []
    assert store.continuation([1, 2], max_tokens=4, min_share=0.0) == [10, 20, 30]  # ties go to the smaller id


def test_continuations_branch_where_a_runner_up_keeps_enough_voters():
    sequences = [[1, 2, 10, 20, 30]] * 4 + [[1, 2, 10, 21, 40]] * 3 + [[1, 2, 11, 50]] * 2 + [[1, 2, 12]]
    store = TokenDatastore.from_sequences(sequences)
    # 10 occurrences of "1 2": 7 wrote 10 (4 then "20 30", 3 then "21 40"), 2 wrote "11 50", 1 wrote 12
    assert store.continuations([1, 2], max_tokens=3, max_paths=1) == [store.continuation([1, 2], max_tokens=3)]
    assert store.continuations([1, 2], max_tokens=3, max_paths=5) == [[10, 20, 30], [10, 21, 40], [11, 50]]
    assert store.continuations([1, 2], max_tokens=3, max_paths=2) == [[10, 20, 30], [10, 21, 40]]
    assert store.continuations([1, 2], max_tokens=3, min_share=0.35, max_paths=5) == [[10, 20, 30]]
    assert store.continuations([1, 2], max_tokens=1, max_paths=5) == [[10], [11]]
    assert store.continuations([0, 11, 12], max_tokens=3, max_paths=5) == []


def test_continuations_agree_with_continuation_on_random_stores():
    rng = random.Random(1)
    sequences = [[rng.randrange(4) for _ in range(rng.randint(2, 20))] for _ in range(60)]
    store = TokenDatastore.from_sequences(sequences)
    for _ in range(100):
        context = [rng.randrange(4) for _ in range(rng.randint(1, 6))]
        paths = store.continuations(context, max_tokens=5, max_paths=4)  # its share of voters: 1 / 6
        assert (paths[0] if paths else []) == store.continuation(context, max_tokens=5, min_share=1 / 6)
        assert len(paths) <= 4 and len({tuple(p) for p in paths}) == len(paths)
        assert all(1 <= len(p) <= 5 for p in paths)


def test_save_and_load_round_trip(tmp_path):
    store = TokenDatastore.from_sequences([[5, 6, 7], [MAX_TOKEN_ID, 0]])
    path = tmp_path / "sub" / "store.safetensors"
    store.save(path)
    loaded = TokenDatastore.load(path)
    assert torch.equal(loaded.tokens, store.tokens) and loaded.max_token_id == MAX_TOKEN_ID
    assert loaded.continuation([5, 6], 3) == [7]
    assert not list(path.parent.glob("*.tmp"))  # nothing half-written left behind


def test_bad_inputs_are_clear_errors(tmp_path):
    with pytest.raises(ValueError, match="integer token ids"):
        TokenDatastore(torch.zeros(4))
    with pytest.raises(ValueError, match="integer token ids"):
        TokenDatastore(torch.zeros(2, 2, dtype=torch.long))
    with pytest.raises(ValueError, match=r"must lie in \[0, 65534\]"):
        TokenDatastore.from_sequences([[1, MAX_TOKEN_ID + 1]])
    with pytest.raises(FileNotFoundError, match="No datastore file"):
        TokenDatastore.load(tmp_path / "missing.safetensors")
    (tmp_path / "junk.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(ValueError, match="not a datastore"):
        TokenDatastore.load(tmp_path / "junk.safetensors")
    store = TokenDatastore.from_sequences([[1, 2, 3]])
    assert store.occurrences([1, MAX_TOKEN_ID + 5]).numel() == 0  # ids it cannot hold occur nowhere
    with pytest.raises(ValueError, match="n-gram of 1 to"):
        store.occurrences([1] * (LONGEST_MATCH + 1))


def test_an_empty_store_finds_nothing():
    store = TokenDatastore.from_sequences([])
    assert len(store) == 0 and store.continuation([1, 2, 3], 4) == []
