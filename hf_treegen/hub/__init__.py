"""A Hub-style ``custom_generate`` folder, for running tree decoding on an unmodified model:

    model.generate(ids, custom_generate=hf_treegen.hub.CUSTOM_GENERATE_DIR, trust_remote_code=True,
                   assistant_model=drafter, tree_strategy="marginal")

This folder is a complete Hub repo (``README.md`` with the model-card metadata, ``custom_generate/``);
its README says how to upload it.
"""

from pathlib import Path

CUSTOM_GENERATE_DIR = str(Path(__file__).parent)
