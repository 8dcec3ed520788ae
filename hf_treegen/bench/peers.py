"""The other loops that run a DFlash drafter, as bench rows beside ours: transformers' own DFlash route
(``generate(speculation_type="dflash")``) and z-lab's reference loop (``dflash.model.dflash_generate``,
the PyPI package ``dflash``). Both draft chains with a plain DFlash drafter; each returns the output ids
and the tokens emitted per round, so tau is counted the same way as for our strategies."""

from __future__ import annotations

import tempfile
import time

import torch

from ..integrations.transformers_dflash import TransformersDFlashAssistant

PEERS = ("hf_dflash", "dflash_ref")


class _RoundCounter(TransformersDFlashAssistant):
    """Records the tokens each call brings as context: the previous round's emitted tokens."""

    def __init__(self, drafter):
        super().__init__(drafter)
        self.context_rows: list[int] = []

    def forward(self, noise_embeds, context_hidden_states, *args, **kwargs):
        self.context_rows.append(context_hidden_states.shape[1])
        return super().forward(noise_embeds, context_hidden_states, *args, **kwargs)


def hf_dflash_generate(model, drafter, ids: torch.Tensor, **generate_kwargs) -> tuple[torch.Tensor, list[int]]:
    """transformers' DFlash route with ``drafter``: (output ids (1, T), tokens emitted per drafted round)."""
    assistant = _RoundCounter(drafter)
    out = model.generate(ids, assistant_model=assistant, speculation_type="dflash", **generate_kwargs)
    return out, assistant.context_rows[1:]  # call r + 1 brings round r's tokens


class ReferenceLoop:
    """z-lab's reference loop over a copy of ``drafter`` that its own class loaded from our z-lab layout."""

    def __init__(self, drafter):
        try:
            from dflash import model as reference
        except ImportError as err:
            raise ValueError("the dflash_ref row needs z-lab's reference package: pip install --no-deps "
                             "dflash==0.1.0") from err
        TransformersDFlashAssistant(drafter)  # the same drafters fit: refused here with the same reason
        self.reference = reference
        if not torch.cuda.is_available():  # its statistics time themselves with torch.cuda.synchronize
            reference._cuda_time = time.perf_counter
        with tempfile.TemporaryDirectory() as folder:
            drafter.save_pretrained(folder)
            cls = reference.DFlash2DraftModel if drafter.config.family == "dflash2" else reference.DFlashDraftModel
            self.model = cls.from_pretrained(folder, dtype=drafter.dtype).to(drafter.fc.weight.device).eval()

    def generate(self, model, ids: torch.Tensor, max_new_tokens: int, eos_token_ids: list[int],
                 temperature: float = 0.0) -> tuple[torch.Tensor, list[int]]:
        stats = self.reference.dflash_generate(self.model, model, ids, max_new_tokens, eos_token_ids or None,
                                               temperature=temperature, return_stats=True)
        return stats.output_ids, list(stats.acceptance_lengths)
