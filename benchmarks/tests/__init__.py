"""The benchmarks' own tests: tiny runs of every benchmark through the same code."""
