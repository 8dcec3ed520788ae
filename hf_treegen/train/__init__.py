"""Drafter distillation against any HF causal LM, on CPU or GPU.

* :mod:`hf_treegen.train.prompts` builds a deterministic, diverse list of instruction prompts from two
  offline corpora (the Python 3.11 documentation sources and the CPython standard library), with a
  fixed set of sources reserved for evaluation only; :mod:`hf_treegen.train.chat_prompts` writes
  everyday chat prompts from hand-written templates and topic lists, and
  :mod:`hf_treegen.train.exercise_prompts` short programming requests (functions to write, concepts,
  chores) and :mod:`hf_treegen.train.question_prompts` short questions about computing and everyday
  life, both as request families (:mod:`hf_treegen.train.families`) that stay clear of the built-in
  evaluation prompts.
* :mod:`hf_treegen.train.data` runs the target over those prompts (batched stock ``generate``) and
  stores prompt + response token ids in small, resumable, git-friendly shards; ``load_corpus`` reads
  them back.
* :mod:`hf_treegen.train.teacher_forced` labels existing text (stdlib, Python docs, any folder) with
  the target's argmax at every position, in the same shard format plus a ``labels`` array: 3-6x
  cheaper per label than generating answers.
* :mod:`hf_treegen.train.features` extracts the tapped target layers once into an fp16 disk cache.
* :mod:`hf_treegen.train.blocks` builds DFlash training blocks (anchors, block-sparse mask, labels).
* :mod:`hf_treegen.train.losses` has the position-weighted losses (Domino: dual loss with the
  base-anchored curriculum) and the held-out chain metrics.
* :mod:`hf_treegen.train.sequences` loads a run's sequences, splits off the held-out ones by content
  hash and weighs each sequence's draws (per-corpus shares).
* :mod:`hf_treegen.train.drafter_setup` makes the drafter a run starts from: random, grown by
  ``grow_drafter`` for a deeper continuation, or copied from a target layer.
* :mod:`hf_treegen.train.config` holds a run's settings (``TrainConfig``) and
  :mod:`hf_treegen.train.checkpoints` its resumable checkpoints.
* :mod:`hf_treegen.train.processes` lets one run use several processes (``accelerate launch`` or
  ``torchrun``): shares, rounds of batches, the collectives; :mod:`hf_treegen.train.sharded_target`
  shares the target's layers among them (FSDP) when it does not fit one device.
* :mod:`hf_treegen.train.trainer` is the loop (``train``): one step, held-out evaluation, early
  stopping, a progress bar and the run's summary; :mod:`hf_treegen.train.cli` is
  ``hf-treegen train-drafter``.
"""
