"""Reliability runs (issue 8): provider faults, load, database outage; figures in results.json."""
