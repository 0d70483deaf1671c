"""Benchmarks for context-window: one command runs them all (``python -m benchmarks``)."""
