#!/usr/bin/env bash
# Every loop that runs a plain DFlash drafter, on the same drafter and prompts, interleaved
# (docs/results/peers_plain_dflash.txt): stock generate(), transformers' own DFlash route (hf_dflash),
# z-lab's reference loop (dflash_ref) and our strategies. The shipped drafter is a Domino one, which
# neither peer runs, so this takes a plain DFlash drafter for the embedded SmolLM2 (DRAFTER), trained by
#   data=data/drafter/smollm2-exercises,data/drafter/smollm2-questions
#   hf-treegen train-drafter --data $data --out runs/dflash-plain --projector none --block-size 8 \
#     --target-layers 2,10,18,26 --time-budget-min 25          # most of it caches the target's features
#   hf-treegen train-drafter --data $data --out runs/dflash-plain2 --init runs/dflash-plain/drafter \
#     --time-budget-min 28                                      # then trains on them
# Needs the reference package in the venv (make install does it). Quiet machine; about 15 minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
drafter=${DRAFTER:-runs/dflash-plain2/drafter}
out=${OUT:-runs/peers}
mkdir -p "$out"
.venv/bin/hf-treegen bench --drafter "$drafter" --drafter-dtype fp32 --prompts builtin:code,explain,chat \
  --num-prompts 12 --max-new-tokens 96 --temperatures 0 --no-lean \
  --strategies ar,ar_packed,prompt_lookup_packed,hf_dflash,dflash_ref,chain,marginal,auto \
  --json "$out/peers.json" | tee "$out/peers_plain_dflash.txt"
