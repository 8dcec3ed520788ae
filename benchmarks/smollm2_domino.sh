#!/usr/bin/env bash
# The tree-decoding tables in the README and the model card: the shipped SmolLM2 Domino drafter, fp32,
# budget 16, 12 built-in prompts (4 each of code / explain / chat), 64 new tokens. Quiet machine, ~17 min on 2 cores.
set -euo pipefail
mkdir -p runs/bench
.venv/bin/hf-treegen bench --prompts builtin:code,explain,chat --num-prompts 12 --max-new-tokens 64 --temperatures 0 \
  --strategies ar,prompt_lookup,chain,marginal,adaptive,static_corrected,conditional,cond_adaptive --budget 16 \
  --json runs/bench/t0.json --plot runs/bench/t0.png | tee runs/bench/t0.txt
.venv/bin/hf-treegen bench --prompts builtin:code,explain,chat --num-prompts 12 --max-new-tokens 64 --temperatures 0.5,1.0 \
  --strategies ar,chain,marginal,static_corrected,conditional --budget 16 \
  --json runs/bench/t05_10.json --plot runs/bench/t05_10.png | tee runs/bench/t05_10.txt
.venv/bin/hf-treegen bench --prompts builtin:code,explain,chat --num-prompts 12 --max-new-tokens 64 --temperatures 0.5,1.0 \
  --strategies ar,prompt_lookup,adaptive,cond_adaptive --budget 16 \
  --json runs/bench/t05_10_rest.json | tee runs/bench/t05_10_rest.txt
