#!/usr/bin/env bash
# The choose-bench tables in the README and the issue notes (SmolLM2-135M-Instruct, fp32, CPU, 2 threads).
# Run on a quiet machine; about 16 minutes on 2 cores.
set -euo pipefail
mkdir -p runs/choice
# Cost curves are measured once and kept on disk; one measured while the machine was busy would mislead
# the adaptive planner, so this run measures them afresh (the bench does so before timing anything).
.venv/bin/hf-treegen calibrate --clear >/dev/null  # measure the cost curves afresh
# n = 1..3: every engine, plus certified MAP sets and interaction mass where enumeration is exact
.venv/bin/hf-treegen choose-bench --k 5,10,20 --n 1,2,3 --num-prompts 8 \
    --engines serial,chunked,outlines,compiled,adaptive,unary --diagnostics \
    --json runs/choice/choose_bench.json --plot runs/choice/choose_bench.png | tee runs/choice/choose_bench.txt
# n = 4: the full probe at k = 20 has 2,877 rows (seconds per forward on a CPU), so only the adaptive width runs
# (it plans per prompt; misses seen on earlier prompts correct its estimates)
.venv/bin/hf-treegen choose-bench --k 5,10,20 --n 4 --num-prompts 6 --engines serial,chunked,adaptive,unary \
    --json runs/choice/choose_bench_n4.json | tee runs/choice/choose_bench_n4.txt
# probe sizes (pure computation, no model): decision rows and tokens of the full probe per (k, n)
.venv/bin/python benchmarks/probe_sizes.py | tee runs/choice/probe_sizes.txt
