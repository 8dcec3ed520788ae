"""Integrations with serving engines. Each submodule imports its engine only when used, so
``import hf_treegen`` never needs one installed.

* :mod:`hf_treegen.integrations.vllm`: a vLLM speculative proposer that drafts with our DFlash and
  Domino drafters and tree builders (vLLM verifies one chain per request).
"""
