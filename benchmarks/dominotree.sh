#!/usr/bin/env bash
# The DominoTree tables of issue 3 (SmolLM2-135M-Instruct fp32, shipped Domino drafter, CPU, 2 threads):
# tree-build time per builder, the conditioning ladder, and cond_adaptive against fixed budgets with
# the per-depth calibration. Quiet machine; about 25 minutes on 2 cores.
set -euo pipefail
mkdir -p runs/dominotree
.venv/bin/python benchmarks/build_time.py --drafter shipped --rounds 300 | tee runs/dominotree/build_time_shipped.txt
.venv/bin/python benchmarks/build_time.py --drafter random --rounds 300 | tee runs/dominotree/build_time_random.txt
.venv/bin/python benchmarks/ladder.py --drafter hf_treegen/assets/smollm2-135m-domino --prompts 12 \
    --strategies chain,marginal,static_corrected,conditional | tee runs/dominotree/ladder.txt
.venv/bin/python benchmarks/budgets.py --prompts 12 --budgets 2,4,8,16,32 | tee runs/dominotree/budgets.txt
