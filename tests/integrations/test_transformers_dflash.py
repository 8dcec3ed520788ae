"""Our DFlash drafter as the assistant of transformers' own DFlash route: exact, and the same rounds as
our ``chain`` strategy."""

import pytest
import torch
import transformers
from packaging.version import Version

import hf_treegen as htg
from hf_treegen.integrations.transformers_dflash import MIN_TRANSFORMERS, TransformersDFlashAssistant
from tests.fitting import fit_to_target
from tests.helpers import greedy_reference, random_prompts, tiny_domino, tiny_dspark, tiny_target

if Version(transformers.__version__) < MIN_TRANSFORMERS:
    pytest.skip(f"the adapter speaks the DFlash route of transformers >= {MIN_TRANSFORMERS}", allow_module_level=True)


class CountingAssistant(TransformersDFlashAssistant):
    """Records how many accepted tokens each call brings: the previous round's emitted tokens."""

    def __init__(self, drafter):
        super().__init__(drafter)
        self.context_rows = []

    def forward(self, noise_embeds, context_hidden_states, *args, **kwargs):
        self.context_rows.append(context_hidden_states.shape[1])
        return super().forward(noise_embeds, context_hidden_states, *args, **kwargs)


def test_the_route_drafts_our_drafter_exactly_and_accepts_as_chain_does():
    target = tiny_target("qwen3", dtype=torch.float64, layers=4, vocab=64, std=0.25)
    cfg = htg.DrafterConfig.for_target(target.config, num_hidden_layers=1, block_size=5, target_layer_ids=(1, 3))
    drafter = htg.DFlashDrafter(cfg, target=target).double()
    torch.manual_seed(0)
    with torch.no_grad():
        for p in drafter.parameters():
            p.normal_(0, 0.1)
    prompts = random_prompts(4, 60, seed=3, min_len=4, max_len=8)
    fit_to_target(drafter, target, prompts[:3])
    accepted = False
    for prompt in prompts:
        stock = greedy_reference(target, prompt, 40)
        assistant = CountingAssistant(drafter)
        out = target.generate(prompt, assistant_model=assistant, speculation_type="dflash", max_new_tokens=40,
                              do_sample=False)
        ours = target.generate(prompt, assistant_model=drafter, tree_strategy="chain", tree_budget=4,
                               max_new_tokens=40, do_sample=False, return_dict_in_generate=True)
        assert torch.equal(out, stock) and torch.equal(ours.sequences, stock)
        # call r + 1 receives the features of round r's emitted tokens; the route's last round may
        # end without a draft, so the rounds both loops drafted are compared
        emitted = assistant.context_rows[1:]
        assert emitted == ours.tree_stats.accepted_lengths[: len(emitted)]
        accepted |= max(emitted) > 1
    assert accepted


@pytest.mark.parametrize("maker", [tiny_domino, tiny_dspark])
def test_drafters_the_route_cannot_express_are_refused(maker):
    target = tiny_target("qwen3", layers=4)
    with pytest.raises(ValueError, match="transformers' DFlash route cannot run this drafter"):
        TransformersDFlashAssistant(maker(target))
