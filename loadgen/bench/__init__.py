"""Benchmark suite: `python -m loadgen.bench` regenerates BENCHMARKS.md (see __main__)."""
