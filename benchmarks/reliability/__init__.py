"""Reliability runs (issue 8): the command line and results.json; the scenarios are in
tests/support/reliability.
"""
