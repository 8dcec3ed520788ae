"""The tuned defaults of tree decoding and compiled choice, in one place.

Each value was chosen by a measurement; the documentation's "Tuned defaults" page names the
benchmark and the results file behind it. The modules that use a value import it from here, so a
caller (or a test) may still override it on that module.
"""

from __future__ import annotations

import torch

# ------------------------------------------------------------------ tree shapes
DEFAULT_BUDGET = {"marginal": 16, "static_corrected": 16, "conditional": 16, "adaptive": 64, "cond_adaptive": 64}
DEFAULT_TOP_M = 64  # base candidates a Domino correction rescores per depth (DominoTree's default)
DEFAULT_NODE_TOPK = 8  # children per node in conditional trees (DominoTree's default)

# ------------------------------------------------------------------ auto
CAP_COST_RATIO = 2.0  # grow trees while verifying them costs at most this many single steps
CANDIDATE_GROWTH = 2  # candidates built per round: at most this many times the last cut (plus MIN_CAP)
GRAFT_MEMORY = 0.1  # weight of the newest round in the running means of lookup's rows and tokens
# the plain-step fallback: decayed memory of draft rounds, the optimism of its two pretend rounds,
# and how many plain steps it waits before probing again (doubling per failed probe, up to the max)
FALLBACK_MEMORY = 0.95
FALLBACK_OPTIMISM = 1.25
FALLBACK_FIRST_WAIT = 4
FALLBACK_MAX_WAIT = 64

# ------------------------------------------------------------------ lookup
AUTO_LOOKUP = 8  # tokens each copy grafts for auto when tree_lookup does not say
SAMPLED_LOOKUP = 4  # ... when sampling: a sampled token follows a copy less often
LOOKUP_PATHS = 1  # datastore continuations per round: each further one costs verify rows
CONTEXT_LONGEST_MATCH = 4  # n-gram lengths context lookup tries, longest (most specific) first
CONTEXT_SHORTEST_MATCH = 2  # a single repeated token predicts what follows it too rarely to pay
# a chain-only engine (vLLM) verifies one guess: the drafter's path keeps it over a disagreeing lookup
# continuation when the drafter gives its first token at least this probability
DRAFTER_KEEPS_CHAIN_FROM = 0.5
# lookup inside the tree copies under at most this many drafted nodes, the likeliest ones with at
# least this path probability (under less likely nodes the walk seldom gets there)
INSIDE_LOOKUP_NODES = 2
INSIDE_LOOKUP_FROM = 0.3
# a datastore continuation stops where fewer than this share of the voting occurrences wrote all of it
DATASTORE_MIN_SHARE = 0.2
DATASTORE_MAX_VOTERS = 1024  # occurrences whose continuations vote; more only cost time
# tokens a LearningDatastore holds before it evicts its oldest sequences: about 2,000 answers of 128
# tokens, whose index rebuilds in tens of milliseconds after each call that learned
LEARNED_DATASTORE_TOKENS = 2 ** 18
# a learned sequence that matches the last this-many context tokens is text served before: its own
# continuation answers, instead of a vote with everything else that shares the last few tokens
LEARNED_REPEAT_TOKENS = 8

# ------------------------------------------------------------------ compiled choice
CANDIDATE_WIDTHS = (1, 2, 3, 4, 6, 8, 12, 16)  # probe widths the planner prices
# a probe plan must be expected to cost at most this fraction of the chunked engine's: its cost rests
# on estimated miss rates, chunked's does not
PROBE_MARGIN = 0.85
FUSE_MAX_ROWS = 256  # "auto" fusion only considers choice trees smaller than this
FIRST_USE_FUSE_ROWS = 16  # ... and, with no cost curve known yet, fuses trees of at most this many tokens
# logit gaps below these are float near-ties, re-decided the serial way (probe and serial rows differ
# by reduction order only: about 1e-13 in fp64, 1e-5 in fp32, 0.1 in bf16 logits)
DEFAULT_GUARD = {torch.float64: 1e-9, torch.float32: 1e-3, torch.bfloat16: 0.5, torch.float16: 0.1}

# ------------------------------------------------------------------ measuring the machine
FIRST_USE_SECONDS = 2.0  # what a quick calibration may spend: a first call must not be a wait
