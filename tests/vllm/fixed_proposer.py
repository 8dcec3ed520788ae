"""A proposer with no model: it drafts token 7 at every position for every request (used to measure
how vLLM's verifier treats proposals, independently of any drafter)."""

from __future__ import annotations

from types import SimpleNamespace


class FixedProposer:
    def __init__(self, vllm_config):
        self.k = vllm_config.speculative_config.num_speculative_tokens
        self.stats = SimpleNamespace(rounds=0, round_tokens=0, lost_contexts=0, lookup_chains=0, steps=0,
                                     propose_seconds=0.0, undrafted_steps=0)  # what engine_run reads

    def load_model(self, target_model) -> None:
        pass

    def propose(self, sampled_token_ids, num_tokens_no_spec, token_ids_cpu, slot_mappings=None):
        return [[7] * self.k if sampled else [] for sampled in sampled_token_ids]
