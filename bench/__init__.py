"""Benchmarks: figures, not assertions. Run with `python -m bench`."""
