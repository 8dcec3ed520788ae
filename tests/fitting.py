"""Tiny drafters fitted to a tiny target, so that loops compared round by round have something to accept."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from hf_treegen.target.hooks import FeatureTap
from hf_treegen.train.blocks import block_labels, forward_blocks, prediction_rows
from tests.helpers import greedy_reference


def fit_to_target(drafter, target, prompts: list[torch.Tensor], new_tokens: int = 40, steps: int = 30,
                  lr: float = 3e-3) -> None:
    """Train ``drafter`` in place for ``steps`` Adam steps on the target's own greedy continuations of
    ``prompts`` (every position an anchor), so that it drafts tokens the target accepts."""
    target.requires_grad_(False)
    sequences = [greedy_reference(target, p, new_tokens)[0] for p in prompts]
    with FeatureTap(target, drafter.config.target_layer_ids) as tap, torch.no_grad():
        features = []
        for seq in sequences:
            target(seq[None])
            features.append(tap.take())  # (T, k*H)
    optimizer = torch.optim.Adam(drafter.parameters(), lr=lr)
    depths = drafter.config.num_draft_positions
    for _ in range(steps):
        optimizer.zero_grad()
        loss = 0.0
        for seq, feats in zip(sequences, features):
            anchors = torch.arange(1, seq.numel() - 1)
            rows = prediction_rows(drafter, forward_blocks(drafter, seq, feats, anchors))  # (A, L, H)
            logits = drafter.draft_logits(rows.reshape(-1, rows.shape[-1]))  # (A*L, V)
            labels = block_labels(seq, anchors, depths).reshape(-1)
            loss = loss + F.cross_entropy(logits, labels, ignore_index=-100)
        loss.backward()
        optimizer.step()
    drafter.eval()
