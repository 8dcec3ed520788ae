"""Tiny random targets and drafters for the tests (the middle tier of docs/design.md, "Conventions").

tiny_target and tiny_drafter live in the package (hf_treegen.bench.tiny_models, which benchmarks use too)
and are named here for the tests; the scripted drafters, the other random drafters and the tokenizers are
the tests' own."""

from __future__ import annotations

import dataclasses

import torch

import hf_treegen as htg
from hf_treegen.bench.tiny_models import ARCHS, tiny_drafter, tiny_target  # noqa: F401  (the tests' names)
from hf_treegen.drafters.dflash import DraftBlock
from hf_treegen.drafters.dflash2 import SelectorBlock
from hf_treegen.drafters.dspark import MarkovBlock
from hf_treegen.drafters.domino import DominoBlock

# The cost profile every test runs `auto` with (tests/conftest.py pins it): verifying costs the same
# at any size and building is free, so the cost-aware cut keeps every node with mass and no shape
# ever depends on how busy the machine is.
# flat up to a 64-node tree (any drafted mass pays), then rising (choice probes of hundreds of rows cost more)
FLAT_COSTS = htg.CostProfile.from_verify_seconds({1: 0.010, 65: 0.010, 1024: 0.100}, draft_s=0.001)
# A CPU-like profile: one row 60 ms, 17 rows 1.8 steps; drafting 5 ms, building 0.1 ms a node.
CPU_LIKE = htg.CostProfile.from_verify_seconds({1: 0.060, 5: 0.070, 9: 0.080, 17: 0.110, 33: 0.160, 65: 0.300},
                                              draft_s=0.005, build_s_per_node=0.0001)


class ScriptedSession:
    """Draft logits from a known continuation ``reference`` (token at absolute position i = reference[i]).

    ``noise`` demotes the right token to rank 2 at some depths (seeded), so chains break early while
    trees still catch it; ``adversarial`` never ranks the right token first or second.
    """

    def __init__(self, drafter, reference: list[int], noise: float, adversarial: bool, seed: int):
        self.drafter, self.reference = drafter, reference
        self.noise, self.adversarial = noise, adversarial
        self.generator = torch.Generator().manual_seed(seed)  # drafting randomness only

    def extend(self, features, positions) -> None:
        pass

    def draft(self, anchor_token: int, start: int) -> DraftBlock:
        cfg = self.drafter.config
        vocab, depth = cfg.vocab_size, cfg.num_draft_positions
        logits = torch.randn(depth, vocab, generator=self.generator)
        for d in range(1, depth + 1):
            pos = start + d
            right = self.reference[pos] if pos < len(self.reference) else None
            if right is None:
                continue
            decoy = (right + 1 + d) % vocab
            if self.adversarial:
                logits[d - 1, right] = -20.0
                continue
            logits[d - 1, right] = 10.0
            if torch.rand((), generator=self.generator) < self.noise:
                logits[d - 1, decoy] = 12.0  # the right token drops to rank 2
        if cfg.has_sequential_head:  # scripted base logits; the (random) head still reorders them
            hidden = torch.randn(depth, cfg.hidden_size, generator=self.generator).to(self.drafter.fc.weight.dtype)
            block = {"domino": DominoBlock, "dflash2": SelectorBlock, "dspark": MarkovBlock}[cfg.family]
            return block(logits=logits, hidden=hidden, anchor_token=anchor_token, drafter=self.drafter)
        return DraftBlock(logits=logits, hidden=torch.zeros(depth, cfg.hidden_size))


class ScriptedDrafter(htg.DFlashDrafter):
    """A drafter that proposes a known continuation (the oracle) or avoids it (the adversary)."""

    def __init__(self, model, reference: torch.Tensor, block_size=8, noise=0.0, adversarial=False, seed=0):
        cfg = htg.DrafterConfig.for_target(model.config, num_hidden_layers=1, block_size=block_size)
        super().__init__(cfg, target=model)
        self.reference = reference.reshape(-1).tolist()
        self.noise, self.adversarial, self.seed = noise, adversarial, seed

    def new_session(self):
        return ScriptedSession(self, self.reference, self.noise, self.adversarial, self.seed)


def tiny_domino_config(model, block_size: int = 8, emb_dim: int = 16, gru_hidden_dim: int = 24):
    return htg.DrafterConfig.for_target(model.config, num_hidden_layers=1, block_size=block_size,
                                        projector_type="domino", emb_dim=emb_dim, gru_hidden_dim=gru_hidden_dim)


def tiny_domino(model, block_size: int = 8, seed: int = 1, std: float = 0.2):
    torch.manual_seed(seed)
    drafter = htg.DominoDrafter(tiny_domino_config(model, block_size), target=model).eval()
    with torch.no_grad():
        for p in drafter.parameters():
            p.normal_(0, std)
    return drafter.to(model.dtype)


def tiny_dflash2_config(model, block_size: int = 8, top_k: int = 8):
    cfg = htg.DrafterConfig.for_target(model.config, num_hidden_layers=1, block_size=block_size)
    return dataclasses.replace(cfg, architecture="DFlash2DraftModel", conv_kernel_size=3,
                               conv_group_size=cfg.hidden_size // 4, selector_rank=8,
                               selector_top_k=min(top_k, cfg.vocab_size))


def tiny_dflash2(model, block_size: int = 8, seed: int = 1, std: float = 0.2, top_k: int = 8):
    """A random DFlash2 drafter (convolutions and a candidate selector over its top ``top_k``)."""
    return randomized(htg.DFlash2Drafter(tiny_dflash2_config(model, block_size, top_k), target=model), model, seed,
                      std)


def tiny_dspark_config(model, block_size: int = 8, head: str = "vanilla"):
    cfg = htg.DrafterConfig.for_target(model.config, num_hidden_layers=1, block_size=block_size)
    return dataclasses.replace(cfg, architecture="DSparkDraftModel", shift_label=True, markov_rank=8,
                               markov_head_type=head, confidence_head=True, confidence_head_with_markov=True)


def tiny_dspark(model, block_size: int = 8, seed: int = 1, std: float = 0.2, head: str = "vanilla"):
    """A random DSpark drafter (every block row drafts; a rank-8 Markov head biases each by its parent)."""
    return randomized(htg.DSparkDrafter(tiny_dspark_config(model, block_size, head), target=model), model, seed, std)


def randomized(drafter, model, seed: int, std: float):
    """``drafter`` with seeded N(0, std) weights, in eval mode and the target's dtype."""
    torch.manual_seed(seed)
    with torch.no_grad():
        for p in drafter.parameters():
            p.normal_(0, std)
    return drafter.eval().to(model.dtype)


class ScriptedHead:
    """ScriptedDrafter's base logits under a drafter class's random head (which still reorders them):
    mixed in before a drafter class with a sequential head."""

    def script(self, model, reference: torch.Tensor, noise: float, seed: int, head_std: float) -> None:
        randomized(self, model, seed, head_std)
        self.reference = reference.reshape(-1).tolist()
        self.noise, self.seed = noise, seed

    def new_session(self):
        return ScriptedSession(self, self.reference, self.noise, False, self.seed)


class ScriptedDSpark(ScriptedHead, htg.DSparkDrafter):
    def __init__(self, model, reference: torch.Tensor, block_size=8, noise=0.0, seed=0, head_std=0.5):
        htg.DSparkDrafter.__init__(self, tiny_dspark_config(model, block_size), target=model)
        self.script(model, reference, noise, seed, head_std)


class ScriptedDFlash2(ScriptedHead, htg.DFlash2Drafter):
    def __init__(self, model, reference: torch.Tensor, block_size=8, noise=0.0, seed=0, head_std=0.3, top_k=8):
        htg.DFlash2Drafter.__init__(self, tiny_dflash2_config(model, block_size, top_k), target=model)
        self.script(model, reference, noise, seed, head_std)


class ScriptedDomino(ScriptedHead, htg.DominoDrafter):
    def __init__(self, model, reference: torch.Tensor, block_size=8, noise=0.0, seed=0, head_std=0.05):
        htg.DominoDrafter.__init__(self, tiny_domino_config(model, block_size), target=model)
        self.script(model, reference, noise, seed, head_std)


def greedy_reference(model, ids: torch.Tensor, max_new_tokens: int, **kw) -> torch.Tensor:
    return model.generate(ids, max_new_tokens=max_new_tokens, do_sample=False, **kw)


def random_prompts(count: int, vocab: int, seed: int = 0, min_len: int = 3, max_len: int = 12) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    prompts = []
    for _ in range(count):
        n = int(torch.randint(min_len, max_len + 1, (1,), generator=g))
        prompts.append(torch.randint(1, vocab, (1, n), generator=g))
    return prompts


CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
          "'<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")


def byte_tokenizer():
    """A byte-level tokenizer (259 ids: 256 bytes + ChatML specials) with a ChatML template, offline."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {ch: i for i, ch in enumerate(sorted(alphabet))}
    for special in ("<|im_start|>", "<|im_end|>", "<|pad|>"):
        vocab[special] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|im_start|>", eos_token="<|im_end|>",
                                   pad_token="<|pad|>")
    fast.add_special_tokens({"additional_special_tokens": ["<|im_start|>", "<|im_end|>", "<|pad|>"]})
    fast.chat_template = CHATML
    assert len(fast) == 259
    return fast


def bpe_tokenizer(vocab_size: int = 320):
    """A small byte-level BPE trained here on label-like text, so labels tokenize both as one token
    and as several (``[1]`` may be one token, ``[12]`` three), and ``"], "`` can merge like in real BPEs."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    words = ["alpha", "beta", "gamma", "al", "methods", "results", "intro", "data", "model"]
    lines = [f"[{i}], [{j}], {w}, {w}s\n" for i in range(1, 9) for j in range(1, 4) for w in words]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size - 3, special_tokens=["<|im_start|>", "<|im_end|>", "<|pad|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(lines * 4, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|im_start|>", eos_token="<|im_end|>",
                                   pad_token="<|pad|>")
    fast.chat_template = CHATML
    return fast
