"""Entry point transformers loads for ``generate(custom_generate=<this repo>, trust_remote_code=True)``.

transformers passes every generate() argument, the unknown ones (``tree_strategy`` ...) included; this
function hands them to hf_treegen, which runs stock generate() when no ``tree_strategy`` is given.

transformers calls it two ways: ``generate(model=model, inputs=..., ...)`` for a per-call
``custom_generate=``, and, when a model repo ships this folder and is loaded with
``trust_remote_code=True``, as ``functools.partial(generate, model=model)``, so that
``model.generate(input_ids, ...)`` arrives with the prompt as the first positional argument.
"""

from transformers import GenerationMixin


def generate(*args, **kwargs):
    from hf_treegen.generation.mixin import tree_generate

    if "model" in kwargs:
        model = kwargs.pop("model")
    elif args:
        model, *args = args
    else:
        raise TypeError("generate() needs the model (transformers passes it as model=...).")
    if len(args) > 1:
        raise TypeError(f"generate() takes the prompt as its only positional argument, got {len(args)} of them.")
    inputs = args[0] if args else kwargs.pop("inputs", None)

    def stock_generate(**arguments):
        return GenerationMixin.generate(model, **arguments)

    return tree_generate(model, stock_generate, inputs=inputs, **kwargs)
