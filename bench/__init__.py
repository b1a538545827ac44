"""Benchmark suite: `python -m bench` regenerates BENCHMARKS.md (see __main__)."""
