"""A proposer that is always wrong: it knows the reference greedy continuations (from
$WRONG_PROPOSER_REFERENCES, a JSON list of full token sequences) and drafts, at every depth, a token
other than the reference's next one, through the real proposer's hooks and contexts."""

from __future__ import annotations

import json
import os

from hf_treegen.integrations.vllm import TreegenProposer


class AlwaysWrongProposer(TreegenProposer):
    def __init__(self, vllm_config):
        super().__init__(vllm_config)
        self.references = [list(r) for r in json.loads(os.environ["WRONG_PROPOSER_REFERENCES"])]
        self.vocab = vllm_config.model_config.hf_config.vocab_size

    def _chain(self, ctx, tree, tokens, room, min_score):
        chain = super()._chain(ctx, tree, tokens, room, min_score)
        seq = [int(t) for t in tokens]
        reference = next((r for r in self.references if r[: len(seq)] == seq), None)
        if reference is None:
            return []
        return [(reference[len(seq) + d] + 1) % self.vocab if len(seq) + d < len(reference) else 0
                for d in range(len(chain))]
