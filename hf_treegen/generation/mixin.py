"""TreeGenerationMixin and enable(): tree speculative decoding behind the public generate().

The mixin pops the tree kwargs and hands transformers a ``custom_generate`` callable, so transformers
still prepares the generation config, the cache, the logits processors and the stopping criteria.

Tree settings come from the call's kwargs, else from the generation config (``generation_config=``
or the model's own, where they are saved and loaded like any generation setting): a call kwarg wins,
as in stock generate(). A call with an hf_treegen drafter as ``assistant_model`` and no
``tree_strategy`` uses ``"auto"``. A call without a drafter and without ``tree_strategy`` goes to
stock generate() untouched.
"""

from __future__ import annotations

import functools


from transformers.generation.stopping_criteria import StoppingCriteriaList, StopStringCriteria

from ..acceptance import DepthCalibration
from ..costs import CostProfile
from ..drafters.dflash import DFlashDrafter
from .loop import check_batch, tree_decoding
from .options import TREE_KWARGS, TREE_STATE_KWARGS, TreeOptions, retired_kwargs


def _check_drafter(drafter, model) -> DFlashDrafter:
    if drafter is None:
        raise ValueError(
            "tree_strategy needs a drafter: pass assistant_model=hf_treegen.DFlashDrafter(...) "
            "(or DominoDrafter / DFlashDrafter.from_pretrained(path, target=model)). A tree_strategy saved in the "
            "model's generation_config applies to every call; set it to None there for stock decoding."
        )
    if not isinstance(drafter, DFlashDrafter):
        raise TypeError(
            f"tree_strategy needs an hf_treegen drafter as assistant_model, got {type(drafter).__name__}. "
            f"Stock assisted decoding with a small LM works without tree_strategy."
        )
    drafter.config.validate_against(model.config)
    if not drafter.is_attached_to(model):
        drafter.attach(model)
    return drafter


def _check_state(profile, drafter) -> None:
    if profile is not None and not isinstance(profile, CostProfile):
        raise TypeError(f"tree_costs must be an hf_treegen.CostProfile (from hf_treegen.calibrate(model, drafter) "
                        f"or CostProfile.load(path)), got {type(profile).__name__}.")
    calibration = drafter.depth_calibration
    if calibration is not None and not isinstance(calibration, DepthCalibration):
        raise TypeError(f"drafter.depth_calibration must be an hf_treegen.DepthCalibration (or None for a fresh one "
                        f"per call), got {type(calibration).__name__}.")


def _move_stop_strings(model, generation_config, kwargs, stopping_criteria):
    """transformers drops ``tokenizer`` for callable custom_generate, so stop strings would fail there;
    build their criterion here, where the tokenizer is still at hand."""
    config = generation_config if generation_config is not None else model.generation_config
    stop_strings = kwargs.get("stop_strings", getattr(config, "stop_strings", None))
    if stop_strings is None:
        return stopping_criteria
    tokenizer = kwargs.pop("tokenizer", None)
    if tokenizer is None:
        raise ValueError("stop_strings need the tokenizer: pass tokenizer=... to generate().")
    kwargs["stop_strings"] = None
    criteria = StoppingCriteriaList(stopping_criteria or [])
    criteria.append(StopStringCriteria(tokenizer=tokenizer, stop_strings=stop_strings))
    return criteria


DEFAULT_STRATEGY = "auto"  # what a call with an hf_treegen drafter and no tree_strategy runs


def tree_settings(model, generation_config, kwargs: dict, assistant_model) -> dict:
    """The tree kwargs of this call (popped from ``kwargs``) over the generation config's; the default
    strategy when an hf_treegen drafter came without one. Settings given in the call without any
    strategy are refused (settings saved in a config without one are simply unused)."""
    config = generation_config if generation_config is not None else model.generation_config
    retired_kwargs(kwargs)
    given = {name: kwargs.pop(name) for name in TREE_KWARGS if name in kwargs}
    settings = {name: getattr(config, name, None) for name in TREE_KWARGS}
    settings.update(given)
    if settings["tree_strategy"] is None and isinstance(assistant_model, DFlashDrafter):
        settings["tree_strategy"] = DEFAULT_STRATEGY
    if settings["tree_strategy"] is None:
        stray = sorted(name for name, value in given.items() if value is not None)
        if stray:
            raise ValueError(f"{', '.join(stray)} given without tree_strategy; add tree_strategy=... or drop them.")
        return {}
    return {name: value for name, value in settings.items() if value is not None}


def _check_token_inputs(inputs, kwargs) -> None:
    if kwargs.get("inputs_embeds") is not None:
        raise ValueError("Tree speculative decoding needs input_ids (the drafter drafts tokens and the tree is "
                         "verified as tokens); pass input_ids instead of inputs_embeds, or drop tree_strategy "
                         "and the drafter for stock decoding from embeddings.")
    if inputs is None and kwargs.get("input_ids") is None:
        raise ValueError("Tree speculative decoding needs the prompt as input_ids (1, prompt_length).")


def tree_generate(model, stock_generate, inputs=None, generation_config=None, logits_processor=None,
                  stopping_criteria=None, assistant_model=None, streamer=None, custom_generate=None, **kwargs):
    """Route a generate() call: stock when no tree strategy applies, the tree loop otherwise.

    Everything is forwarded to ``stock_generate`` by keyword, so positional order never matters.
    """
    tree_kwargs = tree_settings(model, generation_config, kwargs, assistant_model)
    state = {name: kwargs.pop(name) for name in TREE_STATE_KWARGS if name in kwargs}  # caller-owned objects
    common = dict(inputs=inputs, generation_config=generation_config, logits_processor=logits_processor)
    if tree_kwargs.get("tree_strategy") is None:
        given = sorted(k for k, v in state.items() if v is not None)
        if given:
            raise ValueError(f"{', '.join(given)} given without tree_strategy; add tree_strategy=... or drop them.")
        return stock_generate(**common, stopping_criteria=stopping_criteria, assistant_model=assistant_model,
                              streamer=streamer, custom_generate=custom_generate, **kwargs)
    if custom_generate is not None:
        raise ValueError("tree_strategy runs its own decoding loop; do not pass custom_generate with it.")
    if kwargs.get("prompt_lookup_num_tokens") is not None:
        raise ValueError(f"prompt_lookup_num_tokens is transformers' own lookup decoding; tree decoding grafts its "
                         f"lookup onto each tree instead: pass tree_lookup={kwargs['prompt_lookup_num_tokens']} (tokens "
                         f"per copy) and drop prompt_lookup_num_tokens.")
    _check_token_inputs(inputs, kwargs)
    if streamer is not None:  # before stock generate() streams the prompt
        check_batch(generation_config or model.generation_config, streamer,
                    inputs if inputs is not None else kwargs["input_ids"])
    options = TreeOptions.from_kwargs(**tree_kwargs)
    drafter = _check_drafter(assistant_model, model)
    profile = state.get("tree_costs")
    _check_state(profile, drafter)
    stopping_criteria = _move_stop_strings(model, generation_config, kwargs, stopping_criteria)
    loop = functools.partial(tree_decoding, drafter=drafter, options=options, streamer=streamer, profile=profile)
    # The streamer also goes to transformers, which streams the prompt; the loop streams the rest.
    return stock_generate(**common, stopping_criteria=stopping_criteria, streamer=streamer,
                          custom_generate=loop, **kwargs)


class TreeGenerationMixin:
    """Put in front of a transformers causal LM class: adds the tree kwargs to generate()."""

    def generate(self, inputs=None, generation_config=None, logits_processor=None, stopping_criteria=None,
                 prefix_allowed_tokens_fn=None, synced_gpus=None, assistant_model=None, streamer=None, **kwargs):
        return tree_generate(self, super().generate, inputs=inputs, generation_config=generation_config,
                             logits_processor=logits_processor, stopping_criteria=stopping_criteria,
                             prefix_allowed_tokens_fn=prefix_allowed_tokens_fn, synced_gpus=synced_gpus,
                             assistant_model=assistant_model, streamer=streamer, **kwargs)


@functools.cache
def _tree_class(cls: type) -> type:
    # Same class name, so save_pretrained still records the original architecture.
    return type(cls.__name__, (TreeGenerationMixin, cls), {"__module__": __name__, "_tree_base": cls})


def enable(model):
    """Give ``model`` the tree-aware generate() (class-level: transformers dispatches on type(model))."""
    if isinstance(model, TreeGenerationMixin):
        return model
    if not hasattr(model, "generate") or not hasattr(model, "config"):
        raise TypeError(f"enable() needs a transformers generative model, got {type(model).__name__}.")
    model.__class__ = _tree_class(type(model))
    return model


def disable(model):
    """Undo enable(): the model's class is its original transformers class again."""
    if isinstance(model, TreeGenerationMixin):
        model.__class__ = type(model)._tree_base
    return model
