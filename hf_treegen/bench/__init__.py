"""Benchmark harness: strategies run interleaved on the same prompts, tables of medians."""

from .harness import StrategyResult, format_table, run_strategies

__all__ = ["StrategyResult", "format_table", "run_strategies"]
