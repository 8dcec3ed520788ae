#!/usr/bin/env python
"""Build a teacher-forced drafter corpus: existing text labelled with SmolLM2-135M-Instruct's argmax.

Chunks of the CPython standard library (``stdlib``), the Python 3.11 documentation (``python-docs``,
Debian ``python3.11-doc``, fetched once) or any folder of text files become the assistant turn of a
chat; one batched forward per batch stores the target's argmax next token at every answer position
(:func:`hf_treegen.train.teacher_forced.build_teacher_forced_corpus`). Eval-reserved sources are
excluded. The run is resumable: re-running the same command skips every stored chunk, and
``--time-budget-min`` / ``--max-tokens`` make a sitting stop cleanly. Same arguments as
``hf-treegen teacher-forced-data``. Train on it next to the generated corpus with
``hf-treegen train-drafter --data data/drafter/smollm2,data/drafter/smollm2-tf ...``.

    .venv/bin/python scripts/build_teacher_forced_data.py --source stdlib --source python-docs \\
        --out data/drafter/smollm2-tf --threads 2 --max-tokens 2000000 --time-budget-min 60
"""

from __future__ import annotations

import os
import sys


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    for i, arg in enumerate(argv):  # threads must be set before torch is imported
        value = arg.split("=", 1)[1] if arg.startswith("--threads=") else (
            argv[i + 1] if arg == "--threads" and i + 1 < len(argv) else None)
        if value and value.isdigit():
            os.environ.setdefault("OMP_NUM_THREADS", value)
    from hf_treegen.train.teacher_forced import main as build_main

    return build_main(argv)


if __name__ == "__main__":
    sys.exit(main())
