"""What the several-process runs (tests/train/distributed_runs.py) and their one-process references in
tests/train/test_processes.py share: tiny targets, corpora and settings, rebuilt the same in every process."""

from __future__ import annotations

import torch

from hf_treegen.train.trainer import TrainConfig
from tests.helpers import byte_tokenizer, tiny_domino_config, tiny_target

VOCAB = 256


def train_target():
    return tiny_target("llama", vocab=VOCAB, layers=2, hidden=64)


def train_drafter_config(model):
    return tiny_domino_config(model, block_size=4)


def train_config() -> TrainConfig:
    """A global batch of 4 sequences a step: 2 per process with 2 processes."""
    return TrainConfig(steps=30, sequences_per_step=4, anchors_per_sequence=8, lr=3e-3, warmup_steps=5,
                       eval_every=10, checkpoint_every=10, val_fraction=0.15, val_blocks=128, autocast="none",
                       patience=None, lam_decay_fraction=0.5)


def gradient(drafter) -> list[float]:
    """Every trainable parameter's gradient, flattened (what a step applied, after clipping; zeros where
    the step reached none)."""
    return torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1)
                      for p in drafter.parameters() if p.requires_grad]).tolist()


def pattern_corpus(count: int = 32, walk_length: int = 24) -> list[tuple[torch.Tensor, int]]:
    """``count`` random prompts (tokens 64..255) followed by responses that walk a fixed random cycle over
    tokens 1..63: x_{t+1} = succ(x_t). The pattern is shared by all sequences, so held-out text is
    predictable; a response's tokens never appear in prompts, chance accuracy is about 1/190."""
    g = torch.Generator().manual_seed(0)
    succ = torch.arange(VOCAB)
    cycle = torch.randperm(63, generator=g) + 1
    succ[cycle] = cycle.roll(-1)
    corpus = []
    for _ in range(count):
        prompt = torch.randint(64, VOCAB, (int(torch.randint(4, 9, (1,), generator=g)),), generator=g)
        walk = [int(torch.randint(1, 64, (1,), generator=g))]
        for _ in range(walk_length - 1):
            walk.append(int(succ[walk[-1]]))
        corpus.append((torch.cat([prompt, torch.tensor(walk)]), len(prompt)))
    return corpus


def data_target():
    """(target, byte tokenizer with a chat template, 11 prompts) for generate-data and teacher-forced runs."""
    model = tiny_target("llama", vocab=272, layers=2, hidden=64)
    prompts = [f"Question {i}: explain item {i}" + " more" * (i % 5) for i in range(11)]
    return model, byte_tokenizer(), prompts


def teacher_forced_texts() -> list[tuple[str, str]]:
    code = "".join(f"def helper_{i}(x):\n    return x * {i} + {i % 3}\n\n" for i in range(8))
    prose = "".join(f"Line {i}: the quick brown fox jumps over {i} lazy dogs.\n" for i in range(6))
    return [("py:pkg.helpers", code), ("notes/prose.txt", prose), ("doc:library/thing", "A short page.\n" * 5)]
