"""z-lab's reference loop (``dflash.model.dflash_generate``) against our ``chain`` strategy, round by round,
on the embedded SmolLM2 with a plain DFlash drafter written by hf_treegen in the z-lab layout and loaded by
the reference's own class.

    .venv/bin/python benchmarks/reference_parity.py --drafter runs/dflash-plain/drafter --num-prompts 8

Per prompt: the tokens each round emitted (accepted drafts plus the bonus token) in both loops, whether
the two lists are equal, and whether both outputs equal stock greedy generate(). Counts only, no timing,
so it runs on a busy machine. The reference's last round drafts a shorter block when fewer new tokens are
left; ours drafts the full block and keeps what fits, so a difference confined to the last round is
reported apart.
"""

from __future__ import annotations

import argparse

import torch

import hf_treegen as htg
from hf_treegen.bench.peers import ReferenceLoop
from hf_treegen.bench.prompt_files import render_chat
from hf_treegen.bench.prompts import BUILTIN_PROMPTS
from hf_treegen.models import load_smollm2


def compare(model, loop: ReferenceLoop, drafter, ids: torch.Tensor, max_new_tokens: int, eos: list[int]) -> dict:
    stock = model.generate(ids, max_new_tokens=max_new_tokens, do_sample=False)
    ref_ids, ref_rounds = loop.generate(model, ids, max_new_tokens, eos)
    ours = model.generate(ids, assistant_model=drafter, tree_strategy="chain",
                          tree_budget=drafter.config.num_draft_positions, max_new_tokens=max_new_tokens,
                          do_sample=False, return_dict_in_generate=True)
    our_rounds = ours.tree_stats.accepted_lengths
    equal_rounds = sum(a == b for a, b in zip(ref_rounds, our_rounds))
    return {"rounds": (len(ref_rounds), len(our_rounds)), "equal_rounds": equal_rounds,
            "same": ref_rounds == our_rounds, "same_but_last": ref_rounds[:-1] == our_rounds[:-1],
            "tau": (sum(ref_rounds) / len(ref_rounds), ours.tree_stats.tau),
            "exact": (torch.equal(ref_ids, stock), torch.equal(ours.sequences, stock))}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--drafter", required=True, help="a plain DFlash drafter folder for SmolLM2 (z-lab layout)")
    parser.add_argument("--sets", default="code,explain,chat", help="built-in prompt sets")
    parser.add_argument("--num-prompts", type=int, default=8, help="prompts per set (the first N)")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    args = parser.parse_args(argv)
    model, tokenizer = load_smollm2(torch.float32)
    model = htg.enable(model)
    drafter = htg.load_drafter(args.drafter, target=model, dtype=torch.float32).eval()
    loop = ReferenceLoop(drafter)
    eos = model.generation_config.eos_token_id
    eos = [eos] if isinstance(eos, int) else list(eos or [])
    print(f"{drafter.config.describe()}; reference class {type(loop.model).__name__}; fp32 target and drafter, "
          f"greedy, {args.max_new_tokens} new tokens")
    print(f"{'prompt':<12} {'rounds ref/ours':>15} {'equal rounds':>12} {'tau ref/ours':>13} {'same':>5} "
          f"{'same but last':>13} {'exact ref/ours':>14}")
    totals = {"rounds": 0, "equal": 0, "same": 0, "same_but_last": 0, "prompts": 0, "exact": 0}
    for name in args.sets.split(","):
        for i, text in enumerate(BUILTIN_PROMPTS[name][: args.num_prompts]):
            row = compare(model, loop, drafter, render_chat(tokenizer, text), args.max_new_tokens, eos)
            print(f"{name}-{i:<7} {row['rounds'][0]:>7}/{row['rounds'][1]:<7} {row['equal_rounds']:>12} "
                  f"{row['tau'][0]:>6.2f}/{row['tau'][1]:<6.2f} {str(row['same']):>5} {str(row['same_but_last']):>13} "
                  f"{str(row['exact'][0]):>6}/{str(row['exact'][1]):<7}")
            totals["rounds"] += row["rounds"][0]
            totals["equal"] += row["equal_rounds"]
            totals["same"] += row["same"]
            totals["same_but_last"] += row["same_but_last"]
            totals["exact"] += all(row["exact"])
            totals["prompts"] += 1
    print(f"\n{totals['equal']}/{totals['rounds']} reference rounds emitted as many tokens as ours "
          f"({100 * totals['equal'] / max(totals['rounds'], 1):.1f}%); round lists identical on "
          f"{totals['same']}/{totals['prompts']} prompts, identical but for the last round on "
          f"{totals['same_but_last']}/{totals['prompts']}; both outputs equal stock on "
          f"{totals['exact']}/{totals['prompts']}")


if __name__ == "__main__":
    main()
