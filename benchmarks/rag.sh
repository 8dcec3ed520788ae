#!/usr/bin/env bash
# rag-eval tables in the README and the issue notes: the offline Python-docs QASPER set, SmolLM2, CPU.
set -euo pipefail
mkdir -p runs/rag
# the interface table at two budgets (20 questions, all ten papers)
.venv/bin/hf-treegen rag-eval --data offline --interfaces compiled,serial,chunked,json,unary --baselines none \
    --k 6 --b 2 --budgets 1000,2000 --limit 20 --no-serial-check --json runs/rag/rag_k6b2.json --plot runs/rag/rag_k6b2.png
# ablation: a falsely nested hierarchy
.venv/bin/hf-treegen rag-eval --data offline --interfaces compiled,json,unary --baselines none --k 6 --b 2 --budgets 1000 \
    --limit 10 --corrupt-seed 0 --no-serial-check --json runs/rag/rag_corrupt.json
# the compiled walk against BM25, dense, DOS RAG and truncation at the same budgets (20 questions)
.venv/bin/hf-treegen rag-eval --data offline --interfaces compiled --baselines bm25,dense,dos,truncate --k 6 --b 2 \
    --budgets 1000,2000 --limit 20 --no-serial-check --json runs/rag/rag_baselines.json --plot runs/rag/rag_baselines.png
# the same run sharded over two processes gives the same records (tests/rag/test_retriever.py checks it)
# accelerate launch --cpu --num_processes 2 -m hf_treegen.cli rag-eval ...
