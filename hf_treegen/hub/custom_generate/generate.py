"""Entry point transformers loads for ``generate(custom_generate=<this repo>, trust_remote_code=True)``.

transformers passes every generate() argument, the unknown ones (``tree_strategy`` ...) included; this
function hands them to hf_treegen, which runs stock generate() when no ``tree_strategy`` is given.

transformers passes the model by keyword in both of its routes: ``generate(model=model, inputs=...,
...)`` for a per-call ``custom_generate=``, and ``functools.partial(generate, model=model)`` when a model
repo ships this folder and is loaded with ``trust_remote_code=True`` (then ``model.generate(input_ids)``
arrives with the prompt as the first positional argument). So the model is keyword-only here.
"""

from transformers import GenerationMixin


def generate(inputs=None, *, model, **kwargs):
    from hf_treegen.generation.mixin import tree_generate

    def stock_generate(**arguments):
        return GenerationMixin.generate(model, **arguments)

    return tree_generate(model, stock_generate, inputs=inputs, **kwargs)
