#!/usr/bin/env bash
# The README's headline table (docs/results/headline.txt): the shipped SmolLM2 Domino drafter against
# stock generate(), stock on the packed kernels tree decoding runs, and transformers' prompt lookup on
# those kernels (the strongest plain decoding a user has), greedy and T = 1, interleaved prompt by
# prompt. Run it on a quiet machine: about 25 minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-runs/headline}
mkdir -p "$out"
ht=.venv/bin/hf-treegen
# the cost profile auto uses, measured now (on this quiet machine) rather than read from an older cache
$ht calibrate --remeasure > "$out/profile.txt"
$ht bench --prompts builtin:code,explain,chat --num-prompts 12 --max-new-tokens 128 --temperatures 0,1 --no-lean \
  --strategies ar,ar_packed,prompt_lookup_packed,chain,conditional@4,auto \
  --json "$out/headline.json" | tee "$out/headline.txt"
