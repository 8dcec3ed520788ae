#!/usr/bin/env bash
# The speed tables (README, model card, docs/results/speed_*): the shipped SmolLM2 Domino drafter with its
# draft vocabulary, strategies interleaved with stock generate() prompt by prompt. Run it on a quiet
# machine (nothing else running): about 30 minutes on 2 cores.
#   1. T = 0, fp32: 24 built-in prompts (8 code, 8 explain, 8 chat) x 128 new tokens, per-category speedups;
#   2. auto at T = 0.5 and 1.0 against stock sampling (6 prompts, 2 of each set, 64 new tokens);
#   3. bf16 weights against stock bf16 generate(): speed and the new tokens shared with stock (6 prompts).
# ar_packed is stock generate() on the packed CPU kernels tree decoding runs (hf_treegen.packed_linears):
# how much of each speedup the kernels alone give. conditional@4/8/16 are fixed trees (@16 for tau at the
# default budget, @8 for the round overhead at budget 8); auto picks its own. "+lookup8" grafts up to 8 tokens
# of lookup onto each tree: copied from earlier context and from the drafter's datastore ("+nostore": context
# only); auto grafts 8 by default, auto+lookup0 shows it without any lookup.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-runs/speed}
mkdir -p "$out"
ht=.venv/bin/hf-treegen
sets=builtin:code,explain,chat
# the cost profiles auto uses, measured now (on this quiet machine) rather than read from an older cache
$ht calibrate --remeasure | tee "$out/profile.txt"
$ht calibrate --remeasure --dtype bf16 | tee "$out/profile_bf16.txt"
$ht bench --prompts $sets --num-prompts 24 --max-new-tokens 128 --temperatures 0 --no-lean \
  --strategies ar,ar_packed,conditional@4,conditional@4+lookup8+nostore,conditional@4+lookup8,conditional@8+lookup8,conditional@16+lookup8,auto+lookup0,auto+nostore,auto \
  --json "$out/speed_t0.json" --plot "$out/speed_t0.png" | tee "$out/speed_t0.txt"
$ht bench --prompts $sets --num-prompts 6 --max-new-tokens 64 --temperatures 0.5,1.0 --no-lean \
  --strategies ar,ar_packed,auto+lookup0,auto+nostore,auto --json "$out/speed_sampling.json" | tee "$out/speed_sampling.txt"
$ht bench --dtype bf16 --prompts $sets --num-prompts 6 --max-new-tokens 64 --temperatures 0 --no-lean \
  --strategies ar,ar_packed,conditional@4,auto --json "$out/speed_bf16.json" | tee "$out/speed_bf16.txt"
