"""The one name that differs across the supported transformers releases.

transformers 5.24 renamed the KV cache from ``past_key_values`` to ``cache``: the forward argument,
the generate() kwarg and the output field (the old spelling is deprecated there). Everything here
passes and reads the cache through these helpers, so one package runs on 5.19 through the newest.
"""

from __future__ import annotations

from transformers.generation.utils import GenerateDecoderOnlyOutput

# feature detection rather than a version number: the output dataclass names the field either way
CACHE_NAME = "cache" if "cache" in GenerateDecoderOnlyOutput.__dataclass_fields__ else "past_key_values"


def with_cache(cache) -> dict:
    """``model(..., **with_cache(cache))``: the cache under the name this transformers takes."""
    return {CACHE_NAME: cache}


def cache_of(output):
    """The cache a model forward, or generate() with ``return_dict_in_generate``, returned."""
    return getattr(output, CACHE_NAME)


def cache_in(model_kwargs: dict):
    """The cache generate() prepared for a ``custom_generate`` callable (None when there is none)."""
    return model_kwargs.get(CACHE_NAME)
