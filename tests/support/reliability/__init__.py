"""The reliability harness (issue 8): a world of fakes, faults, load and a database outage.

The suite runs short versions; `python -m benchmarks.reliability` runs the long ones.
"""
