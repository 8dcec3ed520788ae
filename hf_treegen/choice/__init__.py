"""Compiled finite-choice control: choose b of k labels with one prefill and one tree-causal probe."""

from .engines import ChoiceResult, chunked_select, compiled_select, serial_select
from .grammar import ChoiceGrammar
from .processors import CompiledChoiceProcessor
from .serial import SerialChoiceProcessor

__all__ = ["ChoiceGrammar", "ChoiceResult", "CompiledChoiceProcessor", "SerialChoiceProcessor",
           "chunked_select", "compiled_select", "serial_select"]
