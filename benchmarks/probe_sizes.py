"""Full-probe sizes per (k, n) for labels [1]..[k] on the SmolLM2 tokenizer: decision rows and tokens.

    .venv/bin/python benchmarks/probe_sizes.py

The probe holds every output node below the first decision that still leads to a decision; rows are
its decision nodes (where the greedy choice is read), tokens everything the forward evaluates.
"""

from transformers import AutoTokenizer

from hf_treegen.choice import ChoiceGrammar
from hf_treegen.choice.probe import build_probe
from hf_treegen.models import smollm2_dir


def main() -> None:
    tokenizer = AutoTokenizer.from_pretrained(smollm2_dir())
    print(f"{'k':>3} {'n':>2} {'rows':>6} {'tokens':>7}")
    for k in (5, 10, 20):
        for n in (1, 2, 3, 4):
            grammar = ChoiceGrammar(tokenizer, [f"[{i + 1}]" for i in range(k)], n)
            state, path = grammar.initial, ()
            while len(grammar.allowed(state)) == 1:  # the forced start rides with the prefill
                path += grammar.allowed(state)
                state = grammar.advance(state, path[-1])
            first = grammar.allowed(state)[0]
            probe = build_probe(grammar, path + (first,), cached=len(path))
            rows, tokens = (0, 0) if probe is None else (probe.num_decisions, probe.num_tokens)
            print(f"{k:>3} {n:>2} {rows:>6} {tokens:>7}")


if __name__ == "__main__":
    main()
