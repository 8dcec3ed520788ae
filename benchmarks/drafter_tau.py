"""Tau of several drafters side by side, per prompt set: greedy tree decoding on the embedded SmolLM2.

    .venv/bin/python benchmarks/drafter_tau.py --drafters shipped,runs/domino-chat/drafter
    .venv/bin/python benchmarks/drafter_tau.py --drafters shipped --budgets 4,16 --num-prompts 4
    .venv/bin/python benchmarks/drafter_tau.py --drafters shipped,shipped@bf16   # the drafter computing in bf16
    .venv/bin/python benchmarks/drafter_tau.py --tree-temperatures 0.8,1,1.3     # tree scores at other temperatures
    .venv/bin/python benchmarks/drafter_tau.py --lookups 0,7                     # with lookup grafted on
    .venv/bin/python benchmarks/drafter_tau.py --lookups 7 --datastores own,none  # with and without the datastore
    .venv/bin/python benchmarks/drafter_tau.py --lookups 7 --lookup-paths 1,4     # 1 or 4 datastore continuations
    .venv/bin/python benchmarks/drafter_tau.py --lookups 7 --lookup-inside 0,3    # none inside the tree, or 3 tokens
    .venv/bin/python benchmarks/drafter_tau.py --lookups 7 --inside-gates 0.2,0.5 --inside-nodes 2,3  # which nodes

Tau (tokens per verify round, bonus included) and the share of rounds whose first drafted token was
accepted depend only on the tokens, not on timing, so this runs on a busy machine too. Every output is
checked against stock greedy generate() (one stock call per prompt, shared by all drafters).
"""

from __future__ import annotations

import argparse

import torch

from hf_treegen import LookupOptions
from hf_treegen import lookup as lookup_module
from hf_treegen.bench.prompt_files import render_chat
from hf_treegen.bench.prompts import BUILTIN_PROMPTS
from hf_treegen.drafters.auto import load_any_drafter
from hf_treegen.models import DEFAULT_DRAFTER_DIR, load_default_pair

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def rounds_of(model, drafter, ids, budget: int, max_new_tokens: int, tree_temperature: float = 1.0,
              lookup: int = 0, datastore: bool = True, paths: int = 1, inside: int | None = None):
    """(new token ids, tree stats) of one greedy conditional-tree call; ``datastore=False``: lookup
    copies from the context only, not from the drafter's datastore; ``paths``: datastore continuations a
    round; ``inside``: tokens copied under the likeliest drafted nodes (None: as many as ``lookup``)."""
    out = model.generate(ids, assistant_model=drafter, tree_strategy="conditional", tree_budget=budget,
                         tree_temperature=tree_temperature,
                         tree_lookup=LookupOptions(lookup, None if datastore else False,
                                                   paths if lookup and datastore else None,
                                                   inside if lookup else None), max_new_tokens=max_new_tokens,
                         do_sample=False, return_dict_in_generate=True)
    return out.sequences[0, ids.shape[1]:], out.tree_stats


def load_drafter(name: str, model, shipped):
    """``folder`` or ``folder@dtype`` ('shipped' for the packaged drafter) -> the drafter, in that dtype
    (without a suffix: hf_treegen.default_draft_dtype, bf16 on a CPU with native bf16 matmuls)."""
    folder, _, dtype = name.partition("@")
    if dtype and dtype not in DTYPES:
        raise SystemExit(f"--drafters: unknown dtype suffix @{dtype} in {name!r}; use @fp32 or @bf16")
    if folder == "shipped" and not dtype:
        return shipped
    path = DEFAULT_DRAFTER_DIR if folder == "shipped" else folder
    return load_any_drafter(path, target=model, dtype=DTYPES.get(dtype)).eval()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--drafters", default="shipped",
                        help="comma-separated drafter folders; 'shipped' is the drafter inside the package; a suffix "
                             "@bf16 or @fp32 runs that drafter in that dtype (the target stays fp32)")
    parser.add_argument("--sets", default="code,explain,chat", help="built-in prompt sets")
    parser.add_argument("--num-prompts", type=int, default=8, help="prompts per set (the first N)")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--budgets", default="8,16", help="comma-separated tree budgets (conditional@B)")
    parser.add_argument("--tree-temperatures", default="1",
                        help="comma-separated temperatures of the tree's scores (greedy decoding ignores them "
                             "otherwise: they only change which nodes a tree keeps)")
    parser.add_argument("--lookups", default="0",
                        help="comma-separated tree_lookup values: tokens copied from earlier context grafted onto "
                             "each tree (0: none)")
    parser.add_argument("--datastores", default="own",
                        help="comma-separated: own (lookup also copies from the drafter's datastore, when it has one) "
                             "and/or none (from the context only)")
    parser.add_argument("--lookup-paths", default="1",
                        help="comma-separated LookupOptions.paths values: datastore continuations grafted per round")
    parser.add_argument("--lookup-inside", default="default",
                        help="comma-separated LookupOptions.inside values: tokens copied under each of the likeliest "
                             "drafted nodes (default: the library's, as many as lookup copies)")
    parser.add_argument("--inside-gates", default=None,
                        help="comma-separated path probabilities below which a drafted node gets no lookup inside the "
                             "tree (rows run once per gate; default: the library's INSIDE_LOOKUP_FROM only)")
    parser.add_argument("--inside-nodes", default=None,
                        help="comma-separated counts of the likeliest drafted nodes looked up under (default: the "
                             "library's INSIDE_LOOKUP_NODES only)")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    sets = [s.strip() for s in args.sets.split(",") if s.strip()]
    unknown = [s for s in sets if s not in BUILTIN_PROMPTS]
    if unknown:
        parser.error(f"--sets: unknown {', '.join(unknown)}; choose from {', '.join(BUILTIN_PROMPTS)}")
    budgets = [int(b) for b in args.budgets.split(",")]
    temperatures = [float(t) for t in args.tree_temperatures.split(",")]
    if not all(t > 0 for t in temperatures):
        parser.error(f"--tree-temperatures: each must be > 0, got {args.tree_temperatures}")
    lookups = [int(n) for n in args.lookups.split(",") if n.strip().isdigit()]
    if len(lookups) != len(args.lookups.split(",")):
        parser.error(f"--lookups: comma-separated ints >= 0 (e.g. 0,7), got {args.lookups}")

    paths_list = [int(n) for n in args.lookup_paths.split(",") if n.strip().isdigit() and int(n) >= 1]
    if len(paths_list) != len(args.lookup_paths.split(",")):
        parser.error(f"--lookup-paths: comma-separated ints >= 1 (e.g. 1,4), got {args.lookup_paths}")
    insides = [None if n.strip() == "default" else int(n) for n in args.lookup_inside.split(",")
               if n.strip() == "default" or n.strip().isdigit()]
    if len(insides) != len(args.lookup_inside.split(",")):
        parser.error(f"--lookup-inside: comma-separated ints >= 0 and/or 'default' (e.g. 0,3), "
                     f"got {args.lookup_inside}")
    bad_gates = f"--inside-gates: comma-separated numbers in [0, 1] (e.g. 0.2,0.5), got {args.inside_gates}"
    try:
        gates = [lookup_module.INSIDE_LOOKUP_FROM] if args.inside_gates is None else \
            [float(g) for g in args.inside_gates.split(",")]
    except ValueError:
        parser.error(bad_gates)
    if not all(0.0 <= g <= 1.0 for g in gates):
        parser.error(bad_gates)
    node_counts = [lookup_module.INSIDE_LOOKUP_NODES] if args.inside_nodes is None else \
        [int(n) for n in args.inside_nodes.split(",") if n.strip().isdigit() and int(n) >= 1]
    if args.inside_nodes is not None and len(node_counts) != len(args.inside_nodes.split(",")):
        parser.error(f"--inside-nodes: comma-separated ints >= 1 (e.g. 2,3), got {args.inside_nodes}")
    stores = [s.strip() for s in args.datastores.split(",")]
    if not stores or any(s not in ("own", "none") for s in stores):
        parser.error(f"--datastores: comma-separated own and/or none, got {args.datastores}")

    model, tokenizer, shipped = load_default_pair()
    names = [d.strip() for d in args.drafters.split(",") if d.strip()]
    drafters = {name: load_drafter(name, model, shipped) for name in names}
    prompts = {s: [render_chat(tokenizer, text) for text in BUILTIN_PROMPTS[s][: args.num_prompts]] for s in sets}
    stock = {s: [model.generate(ids, max_new_tokens=args.max_new_tokens, do_sample=False)[0, ids.shape[1]:]
                 for ids in prompts[s]] for s in sets}

    print(f"greedy conditional trees, SmolLM2-135M-Instruct fp32, {args.num_prompts} prompts per set, "
          f"{args.max_new_tokens} new tokens; tau = tokens per round over all rounds, d1 = share of rounds accepting a drafted token, "
          f"rows = verified rows per round (root included), lookup = share of accepted drafted tokens that came from lookup "
          f"(context, and the drafter's datastore where store says own)")
    labels = {name: f"{name} (vocab {'full' if d.draft_vocab is None else len(d.draft_vocab)}, "
                    f"{str(d.dtype).removeprefix('torch.')})" for name, d in drafters.items()}
    width = max(len(label) for label in labels.values())
    header = (f"{'drafter':<{width}} {'budget':>6} {'temp':>5} {'lookup':>6} {'paths':>5} {'inside':>6} {'gate':>4} "
              f"{'nodes':>5} {'store':>5} "
              + " ".join(f"{s:>8}" for s in sets) + f" {'all':>8} {'d1':>6} {'rows':>6} {'lookup':>6} {'same':>6}")
    print(header)
    for name, drafter in drafters.items():
        # without lookup from the datastore the paths count changes nothing, without lookup the inside count,
        # and without lookup inside the tree its gate and node count: one row for each
        for budget, temperature, lookup, paths, inside, gate, nodes, store in [
                (b, t, n, p, i, g, k, d) for b in budgets for t in temperatures for n in lookups for p in paths_list
                for i in insides for g in gates for k in node_counts for d in stores
                if ((n and d == "own") or p == paths_list[0]) and (n or i == insides[0])
                and ((n and i != 0) or (g == gates[0] and k == node_counts[0]))]:
            # what inside_continuations reads at call time
            lookup_module.INSIDE_LOOKUP_FROM, lookup_module.INSIDE_LOOKUP_NODES = gate, nodes
            per_set, lengths, same, total, rows, from_lookup = {}, [], 0, 0, 0, 0
            for s in sets:
                set_lengths = []
                for ids, reference in zip(prompts[s], stock[s]):
                    tokens, stats = rounds_of(model, drafter, ids, budget, args.max_new_tokens, temperature, lookup,
                                              datastore=store == "own", paths=paths, inside=inside)
                    set_lengths += stats.accepted_lengths
                    rows += sum(stats.tree_sizes) + stats.rounds
                    from_lookup += stats.lookup_tokens
                    same += int(torch.equal(tokens, reference))
                    total += 1
                per_set[s] = sum(set_lengths) / len(set_lengths)
                lengths += set_lengths
            first = sum(n >= 2 for n in lengths) / len(lengths)
            drafted_accepted = sum(lengths) - len(lengths)
            inside_tokens = lookup if inside is None else inside if lookup else 0
            print(f"{labels[name]:<{width}} {budget:>6} {temperature:5.2f} {lookup:>6} {paths:>5} {inside_tokens:>6} "
                  f"{gate:4.2f} {nodes:>5} {store:>5} "
                  + " ".join(f"{per_set[s]:8.2f}" for s in sets)
                  + f" {sum(lengths) / len(lengths):8.2f} {first:6.2f} {rows / len(lengths):6.1f}"
                  + f" {from_lookup / max(drafted_accepted, 1):6.2f} {same:>3}/{total:<2}", flush=True)


if __name__ == "__main__":
    main()
