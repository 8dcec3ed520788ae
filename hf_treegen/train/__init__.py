"""Drafter distillation: training data from the target's own generations, and (later) the trainer.

* :mod:`hf_treegen.train.prompts` builds a deterministic, diverse list of instruction prompts from two
  offline corpora (the Python 3.11 documentation sources and the CPython standard library), with a
  fixed set of sources reserved for evaluation only.
* :mod:`hf_treegen.train.data` runs the target over those prompts (batched stock ``generate``) and
  stores prompt + response token ids in small, resumable, git-friendly shards; ``load_corpus`` reads
  them back for the trainer.
"""
