"""Entry point transformers loads for ``generate(custom_generate=<this repo>, trust_remote_code=True)``.

transformers passes every generate() argument, the unknown ones (``tree_strategy`` ...) included; this
function hands them to hf_treegen, which runs stock generate() when no ``tree_strategy`` is given.
"""

from transformers import GenerationMixin


def generate(model, inputs=None, **kwargs):
    from hf_treegen.generation.mixin import tree_generate

    def stock_generate(**arguments):
        return GenerationMixin.generate(model, **arguments)

    return tree_generate(model, stock_generate, inputs=inputs, **kwargs)
