#!/usr/bin/env bash
# The choose-bench tables and plot in the README and the issue notes (SmolLM2-135M-Instruct, fp32, CPU).
# Run on a quiet machine; about 10 minutes on 2 cores.
set -euo pipefail
mkdir -p runs/choice
.venv/bin/hf-treegen choose-bench --k 5,10,20 --n 1,2,3,4 --num-prompts 8 \
    --engines serial,chunked,outlines,compiled,adaptive,unary --diagnostics \
    --json runs/choice/choose_bench.json --plot runs/choice/choose_bench.png | tee runs/choice/choose_bench.txt
