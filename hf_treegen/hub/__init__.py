"""A Hub-style ``custom_generate`` folder, for running tree decoding on an unmodified model:

    model.generate(ids, custom_generate=hf_treegen.hub.CUSTOM_GENERATE_DIR, trust_remote_code=True,
                   assistant_model=drafter, tree_strategy="marginal")

Copy ``custom_generate/`` into a model repo to ship the same on the Hub.
"""

from pathlib import Path

CUSTOM_GENERATE_DIR = str(Path(__file__).parent)
